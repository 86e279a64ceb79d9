"""The budget means what it says: no model call of any kind starts past a limit,
except the one salvage call, and that call's cost can be capped.

Every model call goes through `machine/calls.py`; the property drives runs whose
loop, critic and salvage calls all cost money, under iteration and cost limits,
and replays the audit events to check, at each `model.requested`, whether the run
was already past a limit.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from statemachine_agent import (
    Agent,
    Audit,
    Budget,
    MemorySink,
    ReflectionPolicy,
    ScriptedModel,
    calculate,
)
from statemachine_agent.models.base import Usage
from statemachine_agent.policy.pricing import DEFAULT_PRICES
from statemachine_agent.testing import replies
from statemachine_agent.testing.assertions import assert_end_state

MODEL = "claude-sonnet-5"


def costly(reply: dict[str, Any], tokens: int) -> dict[str, Any]:
    return {**reply, "model": MODEL, "usage": {"input_tokens": tokens, "output_tokens": tokens}}


def calls_past_a_limit(budget: Budget, events: list[dict[str, Any]]) -> list[str]:
    """The purpose of every model call that started with the run already past a limit."""
    iterations, cost, tokens = 0, 0.0, 0
    past: list[str] = []
    for event in events:
        if event["event"] == "model.requested":
            over = budget.exhausted(
                iterations=iterations, cost_usd=cost, total_tokens=tokens,
                elapsed_s=0.0, blocked_calls=0,
            )  # fmt: skip
            if over is not None:
                past.append(str(event.get("purpose", "loop")))
        elif event["event"] == "model.replied":
            cost += float(event["cost_usd"])
            tokens += Usage.from_dict(event["usage"]).total_tokens
            if "purpose" not in event:
                iterations += 1
    return past


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    steps=st.integers(1, 8),
    tokens=st.integers(100, 40_000),
    max_iterations=st.integers(1, 6),
    max_cost=st.sampled_from([None, 0.01, 0.05, 0.2]),
    interval=st.sampled_from([None, 1, 2]),
)
def test_no_model_call_starts_past_a_limit_but_the_salvage_call(
    steps: int, tokens: int, max_iterations: int, max_cost: float | None, interval: int | None
) -> None:
    """Loop calls, critic calls and the salvage call together overrun by at most one call."""
    script = [
        *(
            costly(replies.tool_use("calculate", {"expression": f"{i}+1"}), tokens)
            for i in range(steps)
        ),
        *(costly(replies.text("done"), tokens) for _ in range(3)),
    ]
    critic = ScriptedModel(
        [costly(replies.text("keep going"), tokens) for _ in range(10)], name=MODEL
    )
    sink = MemorySink()
    budget = Budget(max_iterations=max_iterations, max_cost_usd=max_cost)
    agent = Agent(
        ScriptedModel(script, name=MODEL, validate=False),
        tools=[calculate],
        budget=budget,
        stall=None,
        reflection=ReflectionPolicy(interval, critic=critic) if interval else None,
        audit=Audit(sinks=[sink]),
    )
    agent.run("go")
    past = calls_past_a_limit(budget, list(sink.events))
    assert past in ([], ["salvage"]), past


class TestSalvageCost:
    """`Budget.salvage_max_cost_usd` caps the one call made past a limit."""

    def run(self, cap: float | None) -> tuple[Any, ScriptedModel]:
        model = ScriptedModel(
            [replies.tool_use("calculate", {"expression": "1+1"}), replies.text("summary")],
            name=MODEL,
        )
        budget = Budget(max_iterations=1, salvage_max_cost_usd=cap, salvage_max_tokens=1024)
        return Agent(model, tools=[calculate], budget=budget).run("go"), model

    def test_without_a_cap_the_token_limit_applies(self) -> None:
        result, model = self.run(None)
        assert_end_state(result, "budget_exhausted")
        assert model.requests[-1].max_tokens == 1024

    def test_a_cap_lowers_the_output_limit_to_fit(self) -> None:
        price = DEFAULT_PRICES[MODEL]
        cap = 600 * price.output / 1_000_000 + 0.0005  # about 600 output tokens and the input
        result, model = self.run(cap)
        assert_end_state(result, "budget_exhausted")
        assert 64 <= model.requests[-1].max_tokens < 1024
        salvage = (result.details or {})["salvage"]
        assert salvage["cost_usd"] <= cap

    def test_a_cap_too_small_for_a_summary_skips_the_call(self) -> None:
        result, model = self.run(0.000001)
        assert_end_state(result, "budget_exhausted")
        assert len(model.requests) == 1  # the loop's call only
        assert "skipped" in (result.details or {})["salvage"]
