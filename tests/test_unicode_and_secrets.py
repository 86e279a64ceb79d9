"""Invalid Unicode and secrets at the boundaries: nothing breaks a write, nothing leaks.

Text with lone surrogates (from a tool, the model or the model's arguments) is
repaired before any store, audit file or request sees it; a checkpoint that
cannot be written leaves a store that says the run failed, never one a resume
would run again from mid-`act`. The API key and configured secrets appear in no
written file, wherever a tool or the model put them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from statemachine_agent import Agent, Audit, ScriptedModel, report, tool
from statemachine_agent.audit.redact import REDACTED, Redactor
from statemachine_agent.audit.sink import read_events
from statemachine_agent.machine.resume import RunAlreadyEndedError
from statemachine_agent.models.anthropic import AnthropicModel
from statemachine_agent.persistence.base import MemoryCheckpointer, load_record
from statemachine_agent.persistence.sqlite import SQLiteCheckpointer
from statemachine_agent.testing import replies
from statemachine_agent.testing.server import FakeAnthropicServer
from statemachine_agent.unicode import REPLACEMENT, repair, repair_text

LONE = "caf\udce9"  # what surrogateescape leaves of Latin-1 bytes read as UTF-8
KEY = "sk-ant-api03-TopSecretKeyValue0123456789"
CONFIGURED = "hunter2-db-password"


class TestRepair:
    def test_lone_surrogates_become_the_replacement_character(self) -> None:
        assert repair_text(LONE) == "caf" + REPLACEMENT
        assert repair_text("\ud83d\ude00") == "\U0001f600"  # a split pair is joined
        assert repair_text("plain é") == "plain é"

    def test_nested_values_are_repaired_and_untouched_ones_kept(self) -> None:
        value = {"k\udc80": [LONE, {"ok": "fine"}], "n": 1}
        fixed = repair(value)
        assert fixed == {"k" + REPLACEMENT: ["caf" + REPLACEMENT, {"ok": "fine"}], "n": 1}
        clean = {"a": ["b", {"c": "d"}]}
        assert repair(clean) is clean


class TestInvalidUnicodeInARun:
    def test_tool_output_and_arguments_reach_store_and_audit_repaired(self, tmp_path: Path) -> None:
        seen: list[str] = []

        @tool(side_effect=True)
        def read_name(path: str) -> str:
            """Read a file name (with the bytes a broken filesystem gives)."""
            seen.append(path)
            return f"name: {LONE}"

        store = SQLiteCheckpointer(tmp_path / "runs.sqlite3")
        model = ScriptedModel([replies.tool_use("read_name", {"path": "dir/\udcff"}),
                               replies.text(f"It is {LONE}.")])  # fmt: skip
        agent = Agent(model, tools=[read_name], checkpointer=store, audit=tmp_path)
        result = agent.run("What is the name?")
        assert result.end_state == "completed", result.reason
        assert seen == ["dir/" + REPLACEMENT]
        assert result.text == "It is caf" + REPLACEMENT + "."
        stored = load_record(store, result.run_id)
        assert stored.state == "completed"
        assert result.audit_path is not None
        result.audit_path.read_bytes().decode("utf-8")  # valid UTF-8 throughout
        for request in model.requests:
            json.dumps(request.to_api(), ensure_ascii=False).encode("utf-8")

    def test_real_sdk_sends_repaired_text(self, tmp_path: Path) -> None:
        """Through the SDK: the model's lone surrogate goes back to the API repaired."""
        with FakeAnthropicServer([replies.tool_use("echo", {"text": "x\ud800"}),
                                  replies.text("done \udfff")]) as server:  # fmt: skip

            @tool
            def echo(text: str) -> str:
                """Echo the text."""
                return text + "\udc00"

            model = AnthropicModel(api_key="k-test", base_url=server.base_url, max_retries=0)
            result = Agent(model, tools=[echo], audit=tmp_path).run("Echo.")
            assert result.end_state == "completed", result.reason
            second = server.requests[1]
            assert "x" + REPLACEMENT + REPLACEMENT in json.dumps(second, ensure_ascii=False)


class ValueFailingStore(MemoryCheckpointer):
    """A store that cannot hold one value (as a column type or an encoding might refuse)."""

    def append(self, run_id: str, body: Any) -> None:
        if "UNSTORABLE" in json.dumps(body):
            raise ValueError("value refused by the store")
        super().append(run_id, body)


class TestFailedCheckpointLeavesNoResumableLie:
    def test_the_store_says_failed_and_resume_runs_nothing_again(self) -> None:
        payments: list[int] = []

        @tool(side_effect=True)
        def pay(amount: int) -> str:
            """Send a payment."""
            payments.append(amount)
            return f"paid {amount}: UNSTORABLE receipt"

        store = ValueFailingStore()
        model = ScriptedModel([replies.tool_use("pay", {"amount": 3}), replies.text("ok")])
        agent = Agent(model, tools=[pay], checkpointer=store)
        result = agent.run("Pay 3.")
        assert result.end_state == "failed"
        assert "value refused" in result.reason
        stored = load_record(store, result.run_id)
        assert stored.state == "failed"
        with pytest.raises(RunAlreadyEndedError):
            agent.resume(result.run_id)
        assert payments == [3]


def written_files(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file()]


def leaks(text: str) -> list[str]:
    """Where the key (or the configured secret) still shows, in any letter case."""
    lowered = text.lower()
    return [s for s in (KEY, CONFIGURED) if s.lower() in lowered]


class HiddenKeyError(Exception):
    pass


class TestSecretsInWrittenFiles:
    def test_redactor_masks_keys_names_depth_and_non_json(self) -> None:
        redactor = Redactor(secrets=[KEY])
        value = {
            KEY: "as a property name",
            "deep": [[{"x": f"prefix {KEY.upper()} suffix"}]],
            "a_set": {KEY},
            "raw": KEY.encode(),
            "error": HiddenKeyError(f"bad key {KEY}"),
            "token": "t-123",
            "Cookie": "c=1",
        }
        text = json.dumps(redactor.redact(value), default=str)
        assert leaks(text) == []
        assert "t-123" not in text
        assert "c=1" not in text
        assert REDACTED in text

    @settings(max_examples=200, deadline=None)
    @given(data=st.data())
    def test_no_secret_survives_anywhere_in_any_case(self, data: st.DataObject) -> None:
        """A secret hidden at any depth, inside any text, as a name, in any letter case,
        never reaches the output; and a redactor that has seen many events (its memory of
        property names warm) masks exactly as a new one does."""
        secret = data.draw(st.sampled_from([KEY, CONFIGURED]))
        cased = data.draw(st.sampled_from([secret, secret.upper(), secret.swapcase()]))
        text = st.text(max_size=12)
        hidden = st.builds(lambda a, b: f"{a}{cased}{b}", text, text)
        leaf = st.one_of(text, st.integers(), st.booleans(), st.none(), hidden)
        names = st.one_of(text, hidden, st.sampled_from(["token", "Api-Key", "note"]))
        tree = st.recursive(
            leaf,
            lambda inner: st.one_of(
                st.lists(inner, max_size=4), st.dictionaries(names, inner, max_size=4)
            ),
            max_leaves=20,
        )
        value = {"event": "tool.finished", "content": data.draw(tree), "hidden": data.draw(hidden)}
        warm = Redactor(secrets=[CONFIGURED])
        for _ in range(2):
            first = warm.redact(value)
        out = json.dumps(first, default=str)
        assert cased.lower() not in out.lower()
        assert first == Redactor(secrets=[CONFIGURED]).redact(value)

    def test_default_sensitive_keys(self) -> None:
        masked = Redactor().redact(
            dict.fromkeys(
                ("token", "secret", "password", "api_key", "Authorization", "COOKIE"), "v"
            )
        )
        assert set(masked.values()) == {REDACTED}

    def test_no_file_a_run_writes_holds_the_key(self, tmp_path: Path) -> None:
        @tool(ends_run=True)
        def finish_with(summary: str) -> Any:
            """Finish, returning data that hides the key in every way."""
            return {
                KEY: {"nested": [KEY.lower(), {KEY}]},
                "bytes": KEY.encode(),
                "error": HiddenKeyError(KEY),
                "password": CONFIGURED,
                "summary": summary,
            }

        with FakeAnthropicServer(
            [replies.tool_use("finish_with", {"summary": f"key {KEY}"})]
        ) as server:
            model = AnthropicModel(api_key=KEY, base_url=server.base_url, max_retries=0)
            audit = Audit(dir=tmp_path / "audit", secrets=[CONFIGURED])
            agent = Agent(model, tools=[finish_with], audit=audit)
            result = agent.run(f"Use {CONFIGURED} and report.")
        assert result.audit_path is not None
        events = read_events(result.audit_path)
        (tmp_path / "report.html").write_text(report.html(events), encoding="utf-8")
        assert len(written_files(tmp_path)) == 2
        for path in written_files(tmp_path):
            assert leaks(path.read_text(encoding="utf-8", errors="replace")) == [], path

    def test_cli_output_holds_no_key(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """`statemachine-agent run`: stdout, stderr, the audit file and its report."""
        from statemachine_agent.cli import main

        with FakeAnthropicServer([replies.text(f"Your key is {KEY} ({KEY.upper()}).")]) as server:
            monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
            monkeypatch.setenv("ANTHROPIC_BASE_URL", server.base_url)
            assert main(["run", f"Repeat my key {KEY}", "--audit-dir", str(tmp_path)]) == 0
        (audit_file,) = tmp_path.glob("*.jsonl")
        assert main(["report", str(audit_file), "-o", str(tmp_path / "r.html")]) == 0
        captured = capsys.readouterr()
        assert leaks(captured.out + captured.err) == []
        assert REDACTED in captured.out
        for path in written_files(tmp_path):
            assert leaks(path.read_text(encoding="utf-8", errors="replace")) == [], path
