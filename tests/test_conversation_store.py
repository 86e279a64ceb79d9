"""Stored conversations: `Conversation(agent, conversation_id=...)` and `Conversation.open`.

Carried on across real processes (SQLite here; PostgreSQL in test_durability),
paused for approval in one process and resumed in another, and raced by a
hostile tool that takes a turn of the same conversation mid-turn.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from statemachine_agent import (
    Agent,
    Approve,
    Conversation,
    ConversationConflictError,
    ConversationEndedError,
    MemoryCheckpointer,
    RunSummary,
    ScriptedModel,
    SQLiteCheckpointer,
    end_chat,
    tool,
)
from statemachine_agent.cli import main
from statemachine_agent.testing import FakeAnthropicServer, replies

ROOT = Path(__file__).resolve().parent.parent


class Unleased:
    """A store of one's own with only the four methods of `Checkpointer` (no leases)."""

    def __init__(self) -> None:
        self._inner = MemoryCheckpointer()

    def append(self, run_id: str, body: Mapping[str, Any]) -> None:
        self._inner.append(run_id, body)

    def bodies(self, run_id: str) -> list[Mapping[str, Any]]:
        return self._inner.bodies(run_id)

    def runs(self) -> list[RunSummary]:
        return self._inner.runs()

    def close(self) -> None:
        self._inner.close()


TURN = """
import json, sys
from statemachine_agent import Agent, Conversation, ScriptedModel
from statemachine_agent.testing import replies
store, cid, text, answer = sys.argv[1:5]
model = ScriptedModel([replies.text(answer)])
chat = Conversation.open(Agent(model, checkpointer=store), cid)
result = chat.send(text)
print(json.dumps({"turns": chat.turns, "sent": model.requests[0].messages,
                  "answer": result.text}))
"""


def turn_in_a_process(store: Path, cid: str, text: str, answer: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-c", TURN, str(store), cid, text, answer],
        capture_output=True, text=True, timeout=120, check=False, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout))


class TestAcrossProcesses:
    def test_a_second_process_carries_on(self, tmp_path: Path) -> None:
        store = tmp_path / "chat.sqlite3"
        first = turn_in_a_process(store, "c1", "My name is Ada.", "Hello Ada.")
        second = turn_in_a_process(store, "c1", "What is my name?", "Ada.")
        assert (first["turns"], second["turns"]) == (1, 2)
        sent = second["sent"]
        assert [m["role"] for m in sent] == ["user", "assistant", "user"]
        assert sent[0]["content"] == "My name is Ada."
        assert sent[-1]["content"][0]["text"] == "What is my name?"  # (with its cache breakpoint)
        assert second["answer"] == "Ada."
        here = Conversation.open(Agent(ScriptedModel([]), checkpointer=store), "c1")
        assert here.turns == 2
        assert [m["role"] for m in here.history] == ["user", "assistant"] * 2
        assert here.history[-2] == {"role": "user", "content": "What is my name?"}
        turn_runs = [
            r.run_id for r in SQLiteCheckpointer(store).runs() if r.run_id.startswith("c1.")
        ]
        assert len(turn_runs) == 2  # each turn is a run of its own, resumable as any


RACER = """
import json, sys, time
from pathlib import Path
from statemachine_agent import Agent, Conversation, RunLockedError, ScriptedModel, tool
from statemachine_agent import SQLiteCheckpointer
from statemachine_agent.testing import replies

store, cid, text, signals, wait, holds, lease = sys.argv[1:8]


@tool
def hold() -> str:
    \"\"\"Waits, mid-turn, until the test lets the turn go on.\"\"\"
    (Path(signals) / "holding").touch()
    while not (Path(signals) / "release").exists():
        time.sleep(0.02)
    return "released"


script = [replies.tool_use("hold", {})] if holds == "1" else []
model = ScriptedModel([*script, replies.text(f"answered {text}")])
kept = SQLiteCheckpointer(store, lease_seconds=float(lease)) if lease != "-" else store
chat = Conversation.open(Agent(model, tools=[hold], checkpointer=kept), cid)
try:
    result = chat.send(text, wait=float(wait))
except RunLockedError as exc:
    print(json.dumps({"locked": str(exc)}))
    sys.exit(3)
print(json.dumps({"turns": chat.turns, "sent": model.requests[0].messages}))
"""


def racer(
    store: Path, signals: Path, text: str, *, wait: float, holds: bool, lease: float | None = None
) -> subprocess.Popen[str]:
    """A process taking one turn of conversation `race` (holding it mid-turn if `holds`;
    with `lease`, a store whose leases last that many seconds past the last heartbeat)."""
    return subprocess.Popen(
        [sys.executable, "-c", RACER, str(store), "race", text, str(signals), str(wait),
         "1" if holds else "0", "-" if lease is None else str(lease)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
    )  # fmt: skip


def mid_turn(process: subprocess.Popen[str], signals: Path) -> None:
    """Wait until `process` holds its turn (its tool has started)."""
    while not (signals / "holding").exists():
        assert process.poll() is None, process.communicate()
        time.sleep(0.02)


def finished(process: subprocess.Popen[str]) -> tuple[int, dict[str, Any]]:
    out, err = process.communicate(timeout=120)
    assert out, err
    return process.returncode, dict(json.loads(out))


class TestTwoProcessesRacing:
    def test_one_turn_at_a_time_the_other_refused_or_waiting(self, tmp_path: Path) -> None:
        """While one process is mid-turn, another is refused (wait=0) or waits (wait>0)
        and then takes its turn after it, with that turn in its history."""
        store, signals = tmp_path / "chat.sqlite3", tmp_path
        first = racer(store, signals, "first", wait=0, holds=True)
        mid_turn(first, signals)
        code, refused = finished(racer(store, signals, "second", wait=0, holds=False))
        assert code == 3
        assert "'conversation:race' is being driven by" in refused["locked"]
        waiting = racer(store, signals, "third", wait=120, holds=False)
        assert waiting.poll() is None  # it cannot finish while the first holds the lease
        (signals / "release").touch()
        code, done = finished(first)
        assert (code, done["turns"], len(done["sent"])) == (0, 1, 1)
        code, after = finished(waiting)
        assert code == 0
        assert after["turns"] == 2
        assert after["sent"][0] == {"role": "user", "content": "first"}
        assert after["sent"][-1]["content"][0]["text"] == "third"
        reopened = Conversation.open(Agent(ScriptedModel([]), checkpointer=store), "race")
        assert reopened.turns == 2
        assert reopened.history[0] == {"role": "user", "content": "first"}

    def test_a_turn_whose_process_died_frees_the_conversation_when_its_lease_expires(
        self, tmp_path: Path
    ) -> None:
        """Killed mid-turn: its turn is lost (not stored), and a waiting process takes over."""
        store, signals = tmp_path / "chat.sqlite3", tmp_path
        first = racer(store, signals, "first", wait=0, holds=True, lease=1)
        mid_turn(first, signals)
        first.kill()
        first.communicate()
        code, after = finished(racer(store, signals, "second", wait=120, holds=False, lease=1))
        assert code == 0
        assert after["turns"] == 1
        assert after["sent"][0]["content"][0]["text"] == "second"
        reopened = Conversation.open(Agent(ScriptedModel([]), checkpointer=store), "race")
        assert reopened.turns == 1


class TestChatCommand:
    def test_chat_conversation_carries_on_across_invocations(self, tmp_path: Path) -> None:
        """`chat --conversation ID` twice: the second session sends the first one's history."""
        store = tmp_path / "chats.sqlite3"
        with FakeAnthropicServer([replies.text("Hello Ada."), replies.text("Ada.")]) as server:
            env = {**os.environ, "ANTHROPIC_API_KEY": "sk-ant-test-0000000000",
                   "ANTHROPIC_BASE_URL": server.base_url}  # fmt: skip
            outs = []
            for line in ("I am Ada.", "Who am I?"):
                done = subprocess.run(
                    [sys.executable, "-m", "statemachine_agent.cli", "chat", "--audit-dir",
                     str(tmp_path / "audit"), "--conversation", "ada", "--store", str(store)],
                    input=f"{line}\n/exit\n", capture_output=True, text=True, env=env,
                    cwd=ROOT, timeout=120, check=False,
                )  # fmt: skip
                assert done.returncode == 0, done.stderr
                outs.append(done.stdout)
        assert "Conversation ada: 0 earlier turns." in outs[0]
        assert "Conversation ada: 1 earlier turns." in outs[1]
        assert "[turn 2," in outs[1]
        assert [m["role"] for m in server.requests[1]["messages"]] == ["user", "assistant", "user"]
        assert server.invalid_requests == []

    def test_the_conversation_demo_carries_the_history_to_a_fresh_agent(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """`demo --scenario conversation` opens the stored chat again for its second turn."""
        assert main(["demo", "--scenario", "conversation", "--audit-dir", str(tmp_path)]) == 0
        out = capsys.readouterr().out
        opened = [line for line in out.splitlines() if line.startswith("Opened:")]
        assert "0 earlier turn(s), 0 messages of history" in opened[0]
        assert "1 earlier turn(s), 2 messages of history" in opened[1]
        assert "Leave by 18:15" in out
        assert len(list(tmp_path.glob("demo.turn-*.jsonl"))) == 2

    def test_a_line_sent_while_another_process_holds_the_turn_is_refused(
        self, tmp_path: Path
    ) -> None:
        """The chat says the line was not sent and gives the prompt back; nothing is stored."""
        from statemachine_agent.cli.chat import repl

        store, signals = tmp_path / "chat.sqlite3", tmp_path
        holder = racer(store, signals, "first", wait=0, holds=True)
        mid_turn(holder, signals)
        lines = iter(["Hello?", "/exit"])
        out = io.StringIO()
        chat = Conversation.open(Agent(ScriptedModel([]), checkpointer=store), "race")
        assert repl(chat, lambda _prompt: next(lines), out) == 0
        assert "[not sent: run 'conversation:race' is being driven by" in out.getvalue()
        (signals / "release").touch()
        assert finished(holder)[0] == 0
        assert Conversation.open(Agent(ScriptedModel([]), checkpointer=store), "race").turns == 1

    def test_a_bad_conversation_id_is_a_usage_error(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
    ) -> None:
        monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-0000000000")
        code = main(["chat", "--audit-dir", str(tmp_path), "--conversation", "no/slash",
                     "--store", str(tmp_path / "s.sqlite3")])  # fmt: skip
        assert code == 2
        assert "statemachine-agent: error: conversation_id 'no/slash'" in capsys.readouterr().err


class TestStoredTurns:
    def test_pause_for_approval_resumed_by_another_opener(self, tmp_path: Path) -> None:
        store = str(tmp_path / "chat.sqlite3")

        @tool(requires_approval=True)
        def send(to: str) -> str:
            """Send a message."""
            return f"sent to {to}"

        ask = replies.tool_use("send", {"to": "ken"}, id="toolu_send")
        chat = Conversation(Agent(ScriptedModel([ask]), tools=[send], checkpointer=store),
                            conversation_id="c2")  # fmt: skip
        assert chat.send("Send it to Ken.").end_state == "awaiting_approval"
        later = Conversation.open(
            Agent(ScriptedModel([replies.text("Sent.")]), tools=[send], checkpointer=store), "c2"
        )
        with pytest.raises(ValueError, match="waits for approval"):
            later.send("And?")
        done = later.resume({"toolu_send": Approve()})
        assert done.end_state == "completed"
        assert later.turns == 1
        again = Conversation.open(Agent(ScriptedModel([]), checkpointer=store), "c2")
        assert again.history == later.history
        assert again.turns == 1

    def test_end_chat_is_stored(self) -> None:
        store = MemoryCheckpointer()
        model = ScriptedModel(
            [replies.tool_use("end_chat", {"reason": "bye"}), replies.text("Bye")]
        )
        chat = Conversation(
            Agent(model, tools=[end_chat], checkpointer=store), conversation_id="c3"
        )
        chat.send("Goodbye.")
        reopened = Conversation.open(Agent(ScriptedModel([]), checkpointer=store), "c3")
        assert reopened.ended
        with pytest.raises(ConversationEndedError):
            reopened.send("Hello again?")

    def test_an_opener_catches_up_before_its_turn(self) -> None:
        store = MemoryCheckpointer()
        a = Conversation.open(Agent(ScriptedModel([replies.text("one")]), checkpointer=store), "c4")
        b = Conversation.open(Agent(ScriptedModel([replies.text("two")]), checkpointer=store), "c4")
        a.send("first")
        b.send("second")
        assert b.turns == 2
        assert b.history[0]["content"] == "first"

    def test_a_turn_taken_meanwhile_finds_the_conversation_leased(self) -> None:
        """A tool tries to take a turn of the same conversation mid-turn: it is refused."""
        store = MemoryCheckpointer()
        other = Conversation.open(
            Agent(ScriptedModel([replies.text("x")]), checkpointer=store), "c5"
        )

        @tool
        def meddle() -> str:
            """Takes a turn of the same conversation from elsewhere."""
            other.send("meanwhile")
            return "done"

        model = ScriptedModel([replies.tool_use("meddle", {}), replies.text("ok")])
        chat = Conversation.open(Agent(model, tools=[meddle], checkpointer=store), "c5")
        result = chat.send("go")
        assert result.end_state == "completed"
        (refused,) = [
            block
            for message in result.messages
            if isinstance(message["content"], list)
            for block in message["content"]
            if block.get("type") == "tool_result"
        ]
        assert refused["is_error"] is True
        assert "RunLockedError" in refused["content"]
        assert "'conversation:c5' is being driven by" in refused["content"]
        reopened = Conversation.open(Agent(ScriptedModel([]), checkpointer=store), "c5")
        assert reopened.turns == 1
        assert reopened.history[0] == {"role": "user", "content": "go"}

    def test_a_store_without_leases_refuses_a_turn_taken_meanwhile(self) -> None:
        """With a store of one's own that cannot lease, the later turn is not stored."""
        store = Unleased()
        other = Conversation.open(
            Agent(ScriptedModel([replies.text("x")]), checkpointer=store), "c5"
        )

        @tool
        def meddle() -> str:
            """Takes a turn of the same conversation from elsewhere."""
            other.send("meanwhile")
            return "done"

        model = ScriptedModel([replies.tool_use("meddle", {}), replies.text("ok")])
        chat = Conversation.open(Agent(model, tools=[meddle], checkpointer=store), "c5")
        with pytest.raises(ConversationConflictError, match="carried on by another process"):
            chat.send("go")
        reopened = Conversation.open(Agent(ScriptedModel([]), checkpointer=store), "c5")
        assert reopened.turns == 1
        assert reopened.history[0] == {"role": "user", "content": "meanwhile"}

    def test_a_streamed_turn_is_stored_like_a_sent_one(self, tmp_path: Path) -> None:
        store = tmp_path / "chat.sqlite3"
        chat = Conversation(
            Agent(ScriptedModel([replies.text("Hi Aya.")]), checkpointer=store),
            conversation_id="streamed",
        )
        events = list(chat.stream("Hello, I am Aya."))
        assert events
        reopened = Conversation.open(Agent(ScriptedModel([]), checkpointer=store), "streamed")
        assert reopened.turns == 1
        assert reopened.history == chat.history
        assert reopened.history[-1]["content"][0]["text"] == "Hi Aya."

    def test_bad_ids_and_missing_store(self) -> None:
        agent = Agent(ScriptedModel([]), checkpointer=MemoryCheckpointer())
        with pytest.raises(ValueError, match="not 1-100 letters"):
            Conversation(agent, conversation_id="a/b")
        with pytest.raises(ValueError, match="needs the agent's store"):
            Conversation.open(Agent(ScriptedModel([])), "c6")
        Conversation(Agent(ScriptedModel([replies.text("hi")]), checkpointer=agent.checkpointer),
                     conversation_id="c6").send("hi")  # fmt: skip
        with pytest.raises(ValueError, match="already stored"):
            Conversation(agent, conversation_id="c6")


_MESSAGE = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "assistant"]), "content": st.text(max_size=5)}
)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.lists(_MESSAGE, max_size=6), min_size=1, max_size=6))
def test_the_log_rebuilds_any_history(histories: list[list[dict[str, Any]]]) -> None:
    """Whatever each turn did to the history (grow it, rewrite it), reloading gives the last."""
    from statemachine_agent.agent.conversation import _common_prefix, _Turn

    store = MemoryCheckpointer()
    before: list[dict[str, Any]] = []
    for number, after in enumerate(histories, start=1):
        keep = _common_prefix(before, after)
        turn = _Turn(number, f"r{number}", "completed", 1, keep, tuple(after[keep:]), False)
        store.append("conversation:p", turn.to_body())
        before = after
    reopened = Conversation.open(Agent(ScriptedModel([]), checkpointer=store), "p")
    assert reopened.history == histories[-1]
    assert reopened.turns == len(histories)
