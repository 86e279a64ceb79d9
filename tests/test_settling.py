"""Settling tool results: `act` applies what a result settles with its run (a charge in
tokens and money, an answer) for any tool, without knowing which feature it is from.

Sub-agents are the feature that uses the seam (tests/test_subagents.py); here a tool of
the test's own settles, through the real `anthropic` SDK against the local strict
server, and a property checks the charge is applied exactly, once per call.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from statemachine_agent import Agent, ScriptedModel, Tool
from statemachine_agent.machine.phase_env import PhaseEnv
from statemachine_agent.models.base import Usage
from statemachine_agent.testing import FakeAnthropicServer, replies
from statemachine_agent.testing.assertions import assert_end_state
from statemachine_agent.tools.base import ToolCall, ToolOutcome
from statemachine_agent.tools.settling import Settlement, Settling

SCHEMA = {"type": "object", "properties": {}, "additionalProperties": False}


@dataclass(frozen=True)
class Spent(Settling):
    """A result that spent `usage` and `cost` for its run, answered `text`."""

    usage: Usage
    cost: float
    text: str

    def settle(self, env: PhaseEnv, call: ToolCall) -> Settlement:
        answer = ToolOutcome(tool_use_id=call.id, name=call.name, content=self.text)
        return Settlement(answer, charge=self.usage, cost_usd=self.cost)


class LooksSettling:
    """A host's own value that happens to have a `settle` method: not a `Settling`."""

    def settle(self, *args: Any) -> Any:
        raise AssertionError("act called the settle method of a host's own value")

    def __str__(self) -> str:
        return "a plain host value"


def returning(value: Any) -> Tool:
    return Tool(name="work", description="Do the work.", input_schema=SCHEMA,
                handler=lambda: value)  # fmt: skip


class TestSettlingThroughTheSDK:
    def test_the_charge_and_answer_of_a_settling_result_are_applied(self) -> None:
        """The run is charged what the result spent, and the model reads its answer."""
        spent = Spent(Usage(input_tokens=700, output_tokens=300), 0.25, "worked hard")
        with FakeAnthropicServer() as server:
            server.add(replies.tool_use("work"), replies.text("Done."))
            charged = Agent(server.model(), tools=[returning(spent)]).run("Work.")
            server.add(replies.tool_use("work"), replies.text("Done."))
            plain = Agent(server.model(), tools=[returning("worked hard")]).run("Work.")
            sent = server.requests[1]["messages"][-1]["content"][0]
        assert_end_state(charged, "completed")
        assert charged.usage == plain.usage + spent.usage
        assert charged.cost_usd == pytest.approx(plain.cost_usd + 0.25)
        assert sent["type"] == "tool_result"
        assert sent["content"] in ("worked hard", [{"type": "text", "text": "worked hard"}])

    def test_a_value_that_only_looks_settling_is_an_ordinary_result(self) -> None:
        """`act` settles nominal `Settling` results only; a look-alike is text for the model."""
        with FakeAnthropicServer() as server:
            server.add(replies.tool_use("work"), replies.text("Done."))
            result = Agent(server.model(), tools=[returning(LooksSettling())]).run("Work.")
            sent = server.requests[1]["messages"][-1]["content"][0]
        assert_end_state(result, "completed")
        assert "a plain host value" in str(sent["content"])


_usages = st.builds(
    Usage,
    st.integers(0, 10**6),
    st.integers(0, 10**6),
    st.integers(0, 10**5),
    st.integers(0, 10**5),
    st.integers(0, 10**5),
)


class TestSettlingProperty:
    @settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(st.lists(st.tuples(_usages, st.floats(0, 5, allow_nan=False)), max_size=4))
    def test_each_call_is_charged_once_and_exactly(
        self, charges: list[tuple[Usage, float]]
    ) -> None:
        """Over any calls, the run's usage and cost are the model's plus every charge, once."""
        results = iter([Spent(u, c, f"call {i}") for i, (u, c) in enumerate(charges)])
        work = Tool(name="work", description="Do the work.", input_schema=SCHEMA,
                    handler=lambda: next(results))  # fmt: skip
        script = [replies.tool_use("work") for _ in charges] + [replies.text("Done.")]
        result = Agent(ScriptedModel(script), tools=[work]).run("Work.")
        baseline = Agent(
            ScriptedModel(script),
            tools=[
                Tool(
                    name="work",
                    description="Do the work.",
                    input_schema=SCHEMA,
                    handler=lambda: "x",
                )
            ],
        ).run("Work.")
        assert_end_state(result, "completed")
        total = baseline.usage
        for usage, _ in charges:
            total = total + usage
        assert result.usage == total
        assert result.cost_usd == pytest.approx(baseline.cost_usd + sum(c for _, c in charges))
