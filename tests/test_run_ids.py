"""Run ids cannot leave the audit folder, nor take over a stored conversation.

A run id names `<audit dir>/<run_id>.jsonl` and a key in the checkpoint store; these
tests try ids that climb out of the folder, name absolute paths, carry newlines or
use the store's reserved `conversation:` prefix, at every entry that takes one.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from statemachine_agent import Agent, Audit, ScriptedModel
from statemachine_agent.agent.conversation import Conversation
from statemachine_agent.machine.ids import RUN_ID, check_conversation_id, check_run_id
from statemachine_agent.persistence.sqlite import SQLiteCheckpointer
from statemachine_agent.testing import replies

HOSTILE = [
    "../x",
    "a/../../x",
    "/tmp/x",
    "..",
    ".",
    "a\nb",
    "a\\..\\x",
    "run\x00id",
    "",
    "x" * 201,
    "conversation:c9",
    "café",
    "a b",
    "C:x",
]


def agent(tmp_path: Path, *, store: bool = False) -> Agent:
    return Agent(
        ScriptedModel([replies.text("Done.")] * 3),
        audit=Audit(dir=tmp_path / "a" / "b" / "audit"),
        checkpointer=tmp_path / "runs.sqlite3" if store else None,
    )


def files_outside(tmp_path: Path) -> list[str]:
    """Every file under tmp_path that is not in the audit folder nor the store."""
    audit = tmp_path / "a" / "b" / "audit"
    found = []
    for folder, _dirs, names in os.walk(tmp_path):
        for name in names:
            path = Path(folder, name)
            if audit not in path.parents and not name.startswith("runs.sqlite3"):
                found.append(str(path))
    return found


class TestCheckRunId:
    @pytest.mark.parametrize("run_id", HOSTILE)
    def test_hostile_ids_are_refused_naming_the_rule(self, run_id: str) -> None:
        """Each hostile id is a ValueError that says what a run id may be."""
        with pytest.raises(ValueError, match="run_id") as caught:
            check_run_id(run_id)
        assert "reserved" in str(caught.value) or "letters, digits" in str(caught.value)

    def test_reserved_prefix_is_named(self) -> None:
        """`conversation:c9` is refused as the store's reserved prefix."""
        with pytest.raises(ValueError, match="reserved"):
            check_run_id("conversation:c9")

    @pytest.mark.parametrize("run_id", ["run_0123456789abcdef", "c9.turn-2-abcd1234", "r.toolu_1"])
    def test_ids_the_library_makes_are_accepted(self, run_id: str) -> None:
        """Generated ids, conversation turns and sub-agent runs fit the rule."""
        assert check_run_id(run_id) == run_id

    @given(st.text(max_size=250))
    def test_no_accepted_id_leaves_the_folder(self, run_id: str) -> None:
        """Whatever the text, an accepted id names one file directly in the audit folder."""
        folder = Path("/srv/audit")
        try:
            checked = check_run_id(run_id)
        except ValueError:
            return
        path = Audit(dir=folder).run_file(checked)
        assert path is not None
        assert Path(os.path.normpath(path)).parent == folder
        assert "\n" not in path.name
        assert "/" not in checked

    @given(st.from_regex(RUN_ID, fullmatch=True))
    def test_every_id_of_the_character_set_but_dots_is_accepted(self, run_id: str) -> None:
        """The documented rule is the whole rule: no hidden extra refusals."""
        if run_id in (".", ".."):
            return
        assert check_run_id(run_id) == run_id

    def test_conversation_ids_share_the_module(self) -> None:
        """Conversation ids are checked by the same module, with their own rule."""
        with pytest.raises(ValueError, match="conversation_id"):
            check_conversation_id("a.b")


class TestAtTheEntries:
    @pytest.mark.parametrize("run_id", ["../x", "a/../../x", "../../../x", "/tmp/escaped", "a\nb"])
    def test_run_refuses_before_writing(self, tmp_path: Path, run_id: str) -> None:
        """`Agent.run(run_id=...)` raises and writes no file anywhere."""
        with pytest.raises(ValueError, match="run_id"):
            agent(tmp_path).run("Hi", run_id=run_id)
        assert files_outside(tmp_path) == []
        assert not Path("/tmp/escaped.jsonl").exists()

    def test_run_id_cannot_take_over_a_conversation(self, tmp_path: Path) -> None:
        """A run named `conversation:c9` is refused, and conversation c9 stays intact."""
        shared = agent(tmp_path, store=True)
        Conversation(shared, conversation_id="c9").send("Hello")
        with pytest.raises(ValueError, match="reserved"):
            shared.run("Hi", run_id="conversation:c9")
        assert Conversation.open(shared, "c9").turns == 1

    def test_resume_refuses_a_hostile_id(self, tmp_path: Path) -> None:
        """`Agent.resume` of a path-like id raises the same ValueError."""
        with pytest.raises(ValueError, match="run_id"):
            agent(tmp_path, store=True).resume("../../etc/x", decisions={})

    def test_audit_run_file_checks_too(self, tmp_path: Path) -> None:
        """`Audit.run_file` refuses a hostile id itself, whoever calls it."""
        with pytest.raises(ValueError, match="run_id"):
            Audit(dir=tmp_path).run_file("../x")

    def test_a_store_is_still_usable(self, tmp_path: Path) -> None:
        """A valid id runs as before."""
        result = agent(tmp_path, store=True).run("Hi", run_id="run_ok")
        assert result.end_state == "completed"
        assert (tmp_path / "a" / "b" / "audit" / "run_ok.jsonl").is_file()
        SQLiteCheckpointer(tmp_path / "runs.sqlite3").close()
