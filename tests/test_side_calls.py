"""Side calls (salvage, critic, summary) never leave a history the API would reject.

A real server taught us this: llama.cpp's Messages endpoint ignores
`tool_choice: none`, so a salvage reply can call a tool anyway. Such a call is
never run; it is closed with an `is_error` result, reported in
`details["salvage"]` and as a `tool.skipped` event, and `result.messages` stays
a history the strict validator accepts when a new user turn follows.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from statemachine_agent import (
    Agent,
    AnthropicModel,
    Audit,
    Budget,
    Conversation,
    MemorySink,
    ReflectionPolicy,
    RunResult,
    ScriptedModel,
    StallPolicy,
    calculate,
)
from statemachine_agent.agent._records import with_prompt
from statemachine_agent.machine.salvage import SIDE_CALL_TOOLS_NOT_RUN
from statemachine_agent.testing import FakeAnthropicServer, replies
from statemachine_agent.testing.assertions import assert_end_state
from statemachine_agent.testing.validator import validate_request

API_KEY = "sk-ant-api03-TESTSECRET-abcdefghijklmnop"


def continued_problems(result: RunResult) -> list[str]:
    """What the strict validator says of `result.messages` followed by a new user turn."""
    messages = with_prompt(result.messages, "And now?")
    body = {"model": "claude-sonnet-5", "max_tokens": 100, "messages": messages}
    body["tools"] = [{"name": "calculate", "input_schema": {"type": "object"}}]
    return validate_request(body)


def looping(n: int) -> list[Any]:
    return [replies.tool_use("calculate", {"expression": f"{i}+1"}) for i in range(n)]


def stalling(n: int) -> list[Any]:
    return [replies.tool_use("calculate", {"expression": "1+1"}) for _ in range(n)]


BUDGET_END = {"budget": Budget(max_iterations=2)}
STALL_END = {"stall": StallPolicy(threshold=2, max_interventions=1)}
ENDINGS = pytest.mark.parametrize(
    ("script", "settings", "end"),
    [
        (looping(2), BUDGET_END, "budget_exhausted"),
        (stalling(3), STALL_END, "stalled"),
    ],
)
"""The two endings that make a salvage call, each scripted to reach it."""


class TestSalvageThatCallsATool:
    @ENDINGS
    def test_the_call_is_closed_and_reported(
        self, script: list[Any], settings: dict[str, Any], end: str
    ) -> None:
        salvage = replies.tool_use("calculate", {"expression": "9*9"}, id="toolu_salv", text="So:")
        sink = MemorySink()
        agent = Agent(
            ScriptedModel([*script, salvage]), tools=[calculate], audit=Audit(sinks=[sink]),
            **settings,
        )  # fmt: skip
        result = agent.run("q")
        assert_end_state(result, end)
        assert result.text == "So:"
        assert result.details is not None
        assert result.details["salvage"]["tool_calls_not_run"] == [
            {"tool_use_id": "toolu_salv", "tool": "calculate"}
        ]
        closing = result.messages[-1]
        assert closing["role"] == "user"
        assert closing["content"] == [
            {
                "type": "tool_result",
                "tool_use_id": "toolu_salv",
                "content": f"Not run: {SIDE_CALL_TOOLS_NOT_RUN}.",
                "is_error": True,
            }
        ]
        skipped = [e for e in sink.events if e["event"] == "tool.skipped"]
        assert skipped[-1]["purpose"] == "salvage"
        assert skipped[-1]["calls"] == [{"tool_use_id": "toolu_salv", "tool": "calculate"}]
        assert not [e for e in sink.events if e["event"] == "tool.called"
                    and e.get("tool_use_id") == "toolu_salv"]  # fmt: skip
        assert continued_problems(result) == []

    def test_a_text_salvage_adds_nothing(self) -> None:
        result = Agent(
            ScriptedModel([*looping(2), replies.text("Found some.")]),
            tools=[calculate],
            budget=Budget(max_iterations=2),
        ).run("q")
        assert result.details is not None
        assert "tool_calls_not_run" not in result.details["salvage"]
        assert result.messages[-1]["role"] == "assistant"
        assert continued_problems(result) == []


@pytest.fixture
def server() -> Iterator[FakeAnthropicServer]:
    with FakeAnthropicServer() as fake:
        yield fake


def model_for(server: FakeAnthropicServer) -> AnthropicModel:
    return AnthropicModel(api_key=API_KEY, base_url=server.base_url)


def ignoring_tool_choice() -> dict[str, Any]:
    """What llama.cpp answered to a salvage request: a tool call despite `tool_choice: none`."""
    return replies.tool_use("calculate", {"expression": "2+2"}, text="Left: the rest.")


class TestThroughTheSdk:
    """The strict server validates every request, the continuation's included."""

    @ENDINGS
    def test_a_run_continues_from_the_history(
        self,
        server: FakeAnthropicServer,
        script: list[Any],
        settings: dict[str, Any],
        end: str,
    ) -> None:
        agent = Agent(model_for(server), tools=[calculate], **settings)
        server.add(*script, ignoring_tool_choice())
        first = agent.run("q")
        assert_end_state(first, end)
        assert server.requests[-1]["tool_choice"] == {"type": "none"}
        server.add(replies.text("Fine."))
        second = Agent(model_for(server), tools=[calculate]).run("go on", history=first.messages)
        assert_end_state(second, "completed")
        assert server.invalid_requests == []

    @ENDINGS
    def test_a_conversation_takes_its_next_turn(
        self,
        server: FakeAnthropicServer,
        script: list[Any],
        settings: dict[str, Any],
        end: str,
    ) -> None:
        chat = Conversation(Agent(model_for(server), tools=[calculate], **settings))
        server.add(*script, ignoring_tool_choice())
        assert_end_state(chat.send("q"), end)
        server.add(replies.text("Fine."))
        assert_end_state(chat.send("go on"), "completed")
        assert server.invalid_requests == []


SIDE_REPLIES = st.lists(
    st.one_of(
        st.builds(
            lambda t: replies.text_block(t),
            st.text("abc xyz.", min_size=1, max_size=8).filter(str.strip),
        ),
        st.builds(
            lambda n: replies.tool_use_block("calculate", {"expression": f"{n}+1"}),
            st.integers(0, 9),
        ),
    ),
    min_size=1,
    max_size=4,
)


def side_reply(blocks: list[Any]) -> dict[str, Any]:
    calls = any(b["type"] == "tool_use" for b in blocks)
    return replies.reply(*blocks, stop_reason="tool_use" if calls else "end_turn")


class TestProperty:
    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(
        salvage=SIDE_REPLIES,
        critique=SIDE_REPLIES,
        loops=st.integers(1, 5),
        end=st.sampled_from(["budget", "stall", "answer"]),
    )
    def test_no_end_state_leaves_an_invalid_history(
        self, salvage: list[Any], critique: list[Any], loops: int, end: str
    ) -> None:
        """Side calls answering with any mix of text and tool_use blocks (a critic every
        second call, a salvage reply wherever the run stops) leave, whatever end state
        the run reaches, a history that can be continued."""
        script: list[Any] = stalling(loops) if end == "stall" else looping(loops)
        script += [side_reply(salvage), replies.text("42")]
        critic = ScriptedModel([side_reply(critique) for _ in range(loops + 2)])
        agent = Agent(
            ScriptedModel(script),
            tools=[calculate],
            budget=Budget(max_iterations=loops if end == "budget" else 20),
            stall=StallPolicy(threshold=2, max_interventions=0) if end == "stall" else None,
            reflection=ReflectionPolicy(interval=2, critic=critic),
        )
        result = agent.run("q")
        assert continued_problems(result) == [], result.end_state
