"""The outer loop (Conversation, chat REPL) and replaying recorded runs."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from statemachine_agent import (
    Agent,
    Approve,
    Budget,
    Conversation,
    ReflectionPolicy,
    ReplayModel,
    ScriptedModel,
    SQLiteCheckpointer,
    calculate,
    end_chat,
    tool,
)
from statemachine_agent.agent.conversation import ConversationEndedError
from statemachine_agent.cli.chat import repl
from statemachine_agent.cli.demos import SCENARIOS
from statemachine_agent.models.base import ModelRequest
from statemachine_agent.models.replay import ReplayDivergenceError
from statemachine_agent.replay import replay
from statemachine_agent.testing import replies
from statemachine_agent.testing.validator import validate_request


class TestConversation:
    def test_turns_and_iterations_are_counted_apart(self) -> None:
        """Two turns of two and one model calls: 2 turns, 3 iterations, one shared history."""
        model = ScriptedModel(
            [
                replies.tool_use("calculate", {"expression": "2+2"}),
                replies.text("4"),
                replies.text("You are welcome."),
            ]
        )
        chat = Conversation(Agent(model, tools=[calculate]))
        first = chat.send("2+2?")
        second = chat.send("thanks")
        assert (chat.turns, chat.iterations) == (2, 3)
        assert (first.turn, second.turn) == (1, 2)
        assert [t.turn for t in second.trail] == [2] * len(second.trail)
        assert [m["role"] for m in chat.history] == ["user", "assistant"] * 3
        assert chat.history[-2] == {"role": "user", "content": "thanks"}
        assert all(validate_request(r.to_api()) == [] for r in model.requests)

    def test_end_chat_ends_the_conversation(self) -> None:
        """end_chat is carried in the result, and the conversation refuses more turns."""
        model = ScriptedModel(
            [replies.tool_use("end_chat", {"reason": "done"}), replies.text("Bye")]
        )
        chat = Conversation(Agent(model, tools=[end_chat]))
        result = chat.send("that is all")
        assert result.chat_ended
        assert chat.ended
        with pytest.raises(ConversationEndedError):
            chat.send("one more thing")

    def test_a_paused_turn_resumes_with_approval(self, tmp_path: Path) -> None:
        """A turn that waits for approval is finished by resume, then the chat goes on."""

        @tool(requires_approval=True)
        def delete_file(path: str) -> str:
            """Delete a file."""
            return f"deleted {path}"

        model = ScriptedModel(
            [
                replies.tool_use("delete_file", {"path": "x"}, id="toolu_del"),
                replies.text("Deleted."),
                replies.text("Anything else?"),
            ]
        )
        agent = Agent(model, tools=[delete_file], checkpointer=SQLiteCheckpointer(tmp_path / "db"))
        chat = Conversation(agent)
        assert chat.send("delete x").end_state == "awaiting_approval"
        with pytest.raises(ValueError, match="waits for approval"):
            chat.send("hello?")
        assert chat.resume({"toolu_del": Approve()}).text == "Deleted."
        assert chat.send("thanks").text == "Anything else?"
        assert chat.turns == 2


class TestChatRepl:
    def test_lines_become_turns_until_exit(self) -> None:
        """Each line is a turn; /exit leaves; the output shows answers and counters."""
        model = ScriptedModel([replies.text("Hello!"), replies.text("Fine.")])
        lines = iter(["hi", "", "how are you?", "/exit", "never read"])
        out = io.StringIO()
        assert repl(Conversation(Agent(model)), lambda _prompt: next(lines), out) == 0
        text = out.getvalue()
        assert "assistant> Hello!" in text
        assert "assistant> Fine." in text
        assert "[turn 2, 1 model calls" in text
        assert model.remaining == 0

    def test_end_of_input_leaves(self) -> None:
        """Ctrl-D (EOF) at the prompt ends the session quietly."""

        def read(_prompt: str) -> str:
            raise EOFError

        assert repl(Conversation(Agent(ScriptedModel([]))), read, io.StringIO()) == 0

    def test_interrupt_cancels_the_turn_not_the_session(self) -> None:
        """SIGINT during a turn cancels that turn; the next line is answered normally."""
        import os
        import signal

        class InterruptingModel:
            name = "claude-sonnet-5"
            calls = 0

            async def acomplete(self, request: ModelRequest) -> Any:
                import asyncio

                from statemachine_agent import ModelReply

                self.calls += 1
                if self.calls == 1:
                    os.kill(os.getpid(), signal.SIGINT)
                    await asyncio.sleep(5)
                return ModelReply.from_api(replies.text("Still here."))

        lines = iter(["slow question", "are you there?", "/exit"])
        out = io.StringIO()
        repl(Conversation(Agent(InterruptingModel())), lambda _p: next(lines), out)
        text = out.getvalue()
        assert "[cancelled: cancelled by the host" in text
        assert "assistant> Still here." in text


@pytest.fixture
def recorded(tmp_path: Path) -> Path:
    """An audit file of the stall demo (stall, intervention, answer)."""
    scenario = SCENARIOS["stall"]
    agent = Agent(scenario.model(), tools=scenario.tools(), system=scenario.system,
                  audit=tmp_path, **scenario.options())  # fmt: skip
    result = agent.run(scenario.prompt)
    assert result.audit_path is not None
    return result.audit_path


class TestReplay:
    @pytest.mark.parametrize("name", sorted(SCENARIOS))
    def test_every_demo_replays_identically(self, name: str, tmp_path: Path) -> None:
        """Each demo's audit file replays to the same transitions and guard verdicts."""
        scenario = SCENARIOS[name]
        agent = Agent(scenario.model(), tools=scenario.tools(), system=scenario.system,
                      audit=tmp_path, **scenario.options())  # fmt: skip
        original = agent.run(scenario.prompt)
        assert original.audit_path is not None
        report = replay(original.audit_path)
        assert report.matched, report.difference
        assert report.result.end_state == original.end_state
        assert report.result.messages == original.messages
        assert report.result.cost_usd == original.cost_usd

    def test_verifier_and_limits_replay(self, tmp_path: Path) -> None:
        """Recorded verdicts and per-tool limits drive the replay the same way."""
        from statemachine_agent.policy.verify import Verdict

        script = [
            replies.text("guess"),
            *[replies.tool_use("calculate", {"expression": f"{i}+1"}) for i in range(3)],
            replies.text("42"),
        ]
        agent = Agent(ScriptedModel(script), tools=[calculate], audit=tmp_path,
                      verify=lambda c: Verdict("42" in c.text, "need 42"),
                      budget=Budget(max_calls_per_tool=2),
                      reflection=ReflectionPolicy(2))  # fmt: skip
        original = agent.run("q")
        assert original.audit_path is not None
        report = replay(original.audit_path)
        assert report.matched, report.difference
        assert report.result.end_state == original.end_state == "completed"

    def test_divergence_names_the_first_differing_step(self, recorded: Path) -> None:
        """A record whose replies no longer fit the requests is reported at the first step."""
        lines = recorded.read_text().splitlines()
        events = [json.loads(line) for line in lines]
        for event in events:
            if event["event"] == "model.requested" and event.get("iteration") == 2:
                event["message_count"] = 99
        recorded.write_text("\n".join(json.dumps(e) for e in events) + "\n")
        report = replay(recorded)
        assert not report.matched
        assert report.difference is not None
        assert report.difference.startswith("call 2: the engine sent 3 messages")

    def test_replay_model_refuses_extra_calls(self, recorded: Path) -> None:
        """Asking more than the record holds is a divergence, not an invented answer."""
        import asyncio

        model = ReplayModel(recorded)
        model._next = len(model._calls)
        request = ModelRequest(model="m", max_tokens=1, messages=[])
        with pytest.raises(ReplayDivergenceError, match="the record has only"):
            asyncio.run(model.acomplete(request))


class TestConversationAfterCancel:
    def test_next_turn_after_a_turn_cancelled_during_tools(self) -> None:
        """A turn cancelled after its tool results leaves a user message last; the next
        prompt joins it, so the request stays valid."""
        from statemachine_agent import CancelToken

        token = CancelToken()

        @tool
        def step() -> str:
            """A step during which the host cancels."""
            token.cancel()
            return "done"

        model = ScriptedModel([replies.tool_use("step"), replies.text("Carrying on.")])
        chat = Conversation(Agent(model, tools=[step]))
        assert chat.send("start", cancel=token).end_state == "cancelled"
        assert chat.send("go on").text == "Carrying on."
        last = model.requests[-1].messages[-1]
        assert last["role"] == "user"
        assert [b["type"] for b in last["content"]] == ["tool_result", "text"]
        assert all(validate_request(r.to_api()) == [] for r in model.requests)
