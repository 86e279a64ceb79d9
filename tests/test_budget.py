"""Budget limits, pricing and the salvage summary."""

from __future__ import annotations

from typing import Any

import pytest

from statemachine_agent import Agent, Budget, ModelError, ScriptedModel, calculate, tool
from statemachine_agent.models.base import Usage
from statemachine_agent.policy.pricing import (
    DEFAULT_PRICE_TABLE,
    Price,
    PriceTable,
    UnknownModelPriceError,
)
from statemachine_agent.testing import replies
from statemachine_agent.testing.assertions import assert_end_state, assert_fired
from statemachine_agent.testing.validator import validate_request


def step_usage(cached: bool, first: bool) -> dict[str, int]:
    """Seed 001, exercise 4: 12,000 input tokens of which 6,000 fixed, 800 output."""
    if not cached:
        return {"input_tokens": 12_000, "output_tokens": 800}
    if first:
        return {"input_tokens": 6_000, "cache_creation_input_tokens": 6_000, "output_tokens": 800}
    return {"input_tokens": 6_000, "cache_read_input_tokens": 6_000, "output_tokens": 800}


class TestPricing:
    def test_seed_exercise_without_cache(self) -> None:
        """30 steps at $3/$15 per MTok cost $1.44 without caching."""
        price = DEFAULT_PRICE_TABLE.require("claude-sonnet-5")
        total = sum(price.cost(Usage.from_api(step_usage(False, i == 0))) for i in range(30))
        assert round(total, 2) == 1.44

    def test_seed_exercise_with_cache(self) -> None:
        """Caching the fixed 6,000 tokens (one 1.25x write, then 0.1x reads) costs $0.97."""
        price = DEFAULT_PRICE_TABLE.require("claude-sonnet-5")
        total = sum(price.cost(Usage.from_api(step_usage(True, i == 0))) for i in range(30))
        assert round(total, 2) == 0.97

    def test_engine_charges_the_same(self) -> None:
        """A scripted run with the exercise's usage reports the same cost."""
        script: list[Any] = [
            replies.tool_use("calculate", {"expression": "1"}, usage=step_usage(True, i == 0))
            for i in range(29)
        ]
        script.append(replies.text("done", usage=step_usage(True, False)))
        result = Agent(
            ScriptedModel(script), tools=[calculate], budget=Budget(max_iterations=30), stall=None
        ).run("q")
        assert result.iterations == 30
        assert round(result.cost_usd, 2) == 0.97

    def test_one_hour_cache_writes_cost_double(self) -> None:
        """1-hour cache writes are split out of the total and priced at 2x input."""
        usage = Usage.from_api(
            {
                "input_tokens": 0,
                "output_tokens": 0,
                "cache_creation_input_tokens": 3_000,
                "cache_creation": {
                    "ephemeral_5m_input_tokens": 1_000,
                    "ephemeral_1h_input_tokens": 2_000,
                },
            }
        )
        assert usage.cache_write_5m_tokens == 1_000
        assert usage.cache_write_1h_tokens == 2_000
        cost = Price(input=3.0, output=15.0).cost(usage)
        assert cost == pytest.approx((1_000 * 3 * 1.25 + 2_000 * 3 * 2.0) / 1e6)

    def test_dated_model_ids_find_their_price(self) -> None:
        """claude-haiku-4-5-20251001 is priced as claude-haiku-4-5."""
        assert DEFAULT_PRICE_TABLE.require("claude-haiku-4-5-20251001") == Price(1.0, 5.0)

    def test_unknown_model_with_cost_limit_fails_at_construction(self) -> None:
        """A cost limit on a model without a price is refused up front, not counted as zero."""
        with pytest.raises(UnknownModelPriceError, match="mystery-model"):
            Agent(ScriptedModel([], name="mystery-model"), budget=Budget(max_cost_usd=1.0))

    def test_own_prices_are_accepted(self) -> None:
        """Passing a price for an unknown model makes the cost limit work."""
        agent = Agent(
            ScriptedModel([replies.text("x", model="mystery-model")], name="mystery-model"),
            budget=Budget(max_cost_usd=1.0),
            prices={"mystery-model": Price(input=1.0, output=1.0)},
        )
        assert agent.run("q").cost_usd == pytest.approx(15 / 1e6)

    def test_price_table_lookup(self) -> None:
        """A table answers None for unknown models and cost 0 for them."""
        table = PriceTable({"a": Price(1, 1)})
        assert table.get("b") is None
        assert table.cost("b", Usage(input_tokens=10)) == 0.0


def looping_script(n: int, usage: dict[str, int] | None = None) -> list[Any]:
    return [replies.tool_use("calculate", {"expression": f"{i}+1"}, usage=usage) for i in range(n)]


class TestLimits:
    def test_cost_limit_names_the_figures(self) -> None:
        """The run stops before the call that would go past the cost limit."""
        usage = {"input_tokens": 100_000, "output_tokens": 10_000}  # $0.45 a call
        script = [*looping_script(10, usage), replies.text("summary")]
        result = Agent(
            ScriptedModel(script), tools=[calculate], budget=Budget(max_cost_usd=1.0)
        ).run("q")
        assert_end_state(result, "budget_exhausted")
        assert "cost $1.35 >= $1.00 after 3 iterations" in result.reason
        assert result.iterations == 3

    def test_token_limit(self) -> None:
        """Total tokens (cached ones included) count towards max_total_tokens."""
        script = [*looping_script(10), replies.text("summary")]
        result = Agent(
            ScriptedModel(script), tools=[calculate], budget=Budget(max_total_tokens=40)
        ).run("q")
        assert "tokens 45 >= 40 after 3 iterations" in result.reason

    def test_wall_time_limit(self) -> None:
        """Slow tools use up the wall-time limit."""
        import time

        @tool
        def slow(expression: str) -> str:
            """Sleeps a little."""
            time.sleep(0.05)
            return "ok"

        script = [
            *[replies.tool_use("slow", {"expression": str(i)}) for i in range(10)],
            replies.text("s"),
        ]
        result = Agent(ScriptedModel(script), tools=[slow], budget=Budget(max_seconds=0.1)).run("q")
        assert_end_state(result, "budget_exhausted")
        assert "wall time" in result.reason

    def test_per_tool_limit_blocks_calls_then_ends(self) -> None:
        """Calls past a tool's limit are answered with the limit; repeated refusals end the run."""
        script = [*looping_script(4), replies.text("summary")]  # the 5th call: the salvage
        result = Agent(
            ScriptedModel(script),
            tools=[calculate],
            budget=Budget(max_calls_per_tool={"calculate": 2}, end_after_blocked_calls=2),
            stall=None,
        ).run("q")
        results = [
            b
            for m in result.messages
            if m["role"] == "user" and isinstance(m["content"], list)
            for b in m["content"]
            if b.get("type") == "tool_result"
        ]
        assert [b.get("is_error", False) for b in results] == [False, False, True, True]
        assert "limit of 2 calls" in results[2]["content"]
        assert_end_state(result, "budget_exhausted")
        assert "2 calls refused by per-tool limits" in result.reason
        assert result.text == "summary"

    def test_budget_validation(self) -> None:
        """Nonsense limits are refused at construction."""
        with pytest.raises(ValueError, match="max_iterations"):
            Budget(max_iterations=0)
        with pytest.raises(ValueError, match="max_cost_usd"):
            Budget(max_cost_usd=-1)
        with pytest.raises(ValueError, match="max_calls_per_tool"):
            Budget(max_calls_per_tool={"x": 0})


class TestSalvage:
    def test_salvage_call_keeps_tools_and_forbids_them(self) -> None:
        """The salvage request sends tools with tool_choice none and the same system prompt."""
        script = [*looping_script(2), replies.text("Found 1+1=2; left: the rest.")]
        model = ScriptedModel(script)
        result = Agent(
            model, tools=[calculate], system="Be exact.", budget=Budget(max_iterations=2)
        ).run("q")
        assert_fired(result, "perceive", "prepared", "budget_exhausted")
        assert result.text == "Found 1+1=2; left: the rest."
        salvage = model.requests[-1]
        assert salvage.tool_choice == {"type": "none"}
        assert [t["name"] for t in salvage.tools] == ["calculate"]
        assert salvage.system[0]["text"] == "Be exact."
        assert salvage.max_tokens == 1024
        notice = salvage.messages[-1]["content"][-1]
        assert notice["type"] == "text"
        assert "Do not call any tools" in notice["text"]
        assert salvage.messages[-1]["content"][0]["type"] == "tool_result"
        assert validate_request(salvage.to_api()) == []
        assert result.details is not None
        assert result.details["salvage"]["usage"]["input_tokens"] == 10
        assert result.iterations == 2
        assert result.usage.input_tokens == 30

    def test_salvage_can_be_switched_off(self) -> None:
        """With salvage off, no further model call is made."""
        model = ScriptedModel(looping_script(3))
        result = Agent(
            model, tools=[calculate], budget=Budget(max_iterations=2, salvage=False)
        ).run("q")
        assert len(model.requests) == 2
        assert result.details is None

    def test_salvage_failure_still_ends_by_name(self) -> None:
        """A salvage call that fails leaves the run in budget_exhausted with the error noted."""
        script: list[Any] = [*looping_script(1), ModelError("overloaded", status=529)]
        result = Agent(
            ScriptedModel(script), tools=[calculate], budget=Budget(max_iterations=1)
        ).run("q")
        assert_end_state(result, "budget_exhausted")
        assert result.details is not None
        assert "overloaded" in result.details["salvage"]["error"]
