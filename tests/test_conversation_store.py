"""Stored conversations: `Conversation(agent, conversation_id=...)` and `Conversation.open`.

Carried on across real processes (SQLite here; PostgreSQL in test_durability),
paused for approval in one process and resumed in another, and raced by a
hostile tool that takes a turn of the same conversation mid-turn.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
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
    ScriptedModel,
    SQLiteCheckpointer,
    end_chat,
    tool,
)
from statemachine_agent.cli import main
from statemachine_agent.testing import FakeAnthropicServer, replies

ROOT = Path(__file__).resolve().parent.parent

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

    def test_a_turn_taken_meanwhile_is_a_conflict(self) -> None:
        """A hostile tool takes a turn of the same conversation mid-turn: the turn is refused."""
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
    from statemachine_agent.conversation import _common_prefix, _Turn

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
