"""A tool schema's regular expressions cannot freeze the process.

Schemas come from tool authors and MCP servers, inputs from the model: a pattern
with nested quantifiers against a short input would make Python's backtracking
`re` run for minutes on the event loop, stopping every run of the process. The
registry matches schema patterns with a linear-time engine, so such a call ends
with an `is_error` result at once while other work goes on.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from statemachine_agent.tools import Tool, ToolCall, ToolRegistry

CATASTROPHIC = [
    ("^(a+)+$", "a", "!"),
    ("^(a|a)*$", "a", "!"),
    ("^(a|aa)+$", "a", "!"),
    ("^(.*a){20}$", "a", "!"),
    ("^(x+x+)+y$", "x", "z"),
    ("^(\\w+\\s?)*$", "word ", "!"),
    ("^([a-z]+)*[0-9]$", "abc", "!"),
]
"""Patterns that backtrack exponentially in `re`, with the text that makes them."""


def schema_tool(schema: dict[str, Any], name: str = "lookup") -> Tool:
    return Tool(name=name, description="test", input_schema=schema, handler=lambda **kw: "ok")


def string_with(pattern: str) -> dict[str, Any]:
    return {"type": "object", "properties": {"s": {"type": "string", "pattern": pattern}}}


class TestLinearPatterns:
    @pytest.mark.timeout(60)
    def test_other_work_keeps_going_during_a_pathological_call(self) -> None:
        """While the model's input meets a catastrophic pattern, a ticker on the loop runs on,
        and the call ends as an invalid-input error."""

        async def other_run(ticks: list[int]) -> str:
            for _ in range(200):
                ticks.append(len(ticks))
                await asyncio.sleep(0)
            return "done"

        registry = ToolRegistry([schema_tool(string_with("^(a+)+$"))])
        bad = ToolCall(id="c1", name="lookup", input={"s": "a" * 35 + "!"})

        async def scenario() -> tuple[list[int], list[Any]]:
            ticks: list[int] = []
            ticker = asyncio.ensure_future(other_run(ticks))
            outcomes = []
            while not ticker.done():  # the call, again and again, while the ticker runs
                outcomes.append(await registry.execute(bad))
                await asyncio.sleep(0)
            assert ticker.result() == "done"
            return ticks, outcomes

        ticks, outcomes = asyncio.run(scenario())
        assert len(ticks) == 200
        assert len(outcomes) >= 100  # the calls went on between the ticker's steps
        assert all(o.is_error and o.error_kind == "invalid_input" for o in outcomes)
        assert "does not match '^(a+)+$'" in outcomes[0].content

    @pytest.mark.timeout(120)
    @settings(max_examples=60, deadline=None)
    @given(st.sampled_from(CATASTROPHIC), st.integers(min_value=30, max_value=20_000))
    def test_catastrophic_patterns_answer_at_once(
        self, case: tuple[str, str, str], repeat: int
    ) -> None:
        """Every pattern of the corpus, on inputs up to tens of thousands of characters, is an
        `is_error` answer, not a hang."""
        pattern, unit, spoiler = case
        text = (unit * repeat)[:repeat] + spoiler
        keys = {
            "type": "object",
            "patternProperties": {pattern: {"type": "integer"}},
            "additionalProperties": False,
        }
        for schema, given_input in ((string_with(pattern), {"s": text}), (keys, {text: "no"})):
            registry = ToolRegistry([schema_tool(schema)])
            outcome = asyncio.run(registry.execute(ToolCall("c1", "lookup", given_input)))
            assert outcome.is_error
            assert outcome.error_kind == "invalid_input"

    def test_matching_is_unchanged_for_ordinary_patterns(self) -> None:
        """pattern, patternProperties and additionalProperties keep their meaning."""
        schema = {
            "type": "object",
            "properties": {"id": {"type": "string", "pattern": "^[A-Z]{3}-\\d+$"}},
            "patternProperties": {"^x_": {"type": "integer"}},
            "additionalProperties": False,
        }
        registry = ToolRegistry([schema_tool(schema)])

        def answer(given_input: dict[str, Any]) -> Any:
            return asyncio.run(registry.execute(ToolCall("c1", "lookup", given_input)))

        assert not answer({"id": "ABC-12", "x_a": 1}).is_error
        assert "does not match" in answer({"id": "abc-12"}).content
        assert "is not of type 'integer'" in answer({"x_a": "one"}).content
        assert "'y' does not match any of the regexes: '^x_'" in answer({"y": 1}).content
        del schema["patternProperties"]
        registry = ToolRegistry([schema_tool(schema)])
        assert "('y' was unexpected)" in answer({"y": 1}).content


class TestUnsupportedPatterns:
    @pytest.mark.parametrize(
        "pattern", ["(a)\\1", "(?=a)b", "(?<=a)b", "(?!a)b", "a(?<!b)", "(?P<q>a)(?P=q)"]
    )
    def test_refused_when_registered(self, pattern: str) -> None:
        """A pattern the linear engine cannot compile (backreference, lookaround) refuses the
        tool when it is registered, naming the pattern."""
        with pytest.raises(ValueError, match="is not supported") as caught:
            ToolRegistry([schema_tool(string_with(pattern))])
        assert repr(pattern) in str(caught.value)

    def test_refused_in_pattern_properties_too(self) -> None:
        """Property-name patterns are held to the same rule."""
        schema = {"type": "object", "patternProperties": {"(?=x)y": {}}}
        with pytest.raises(ValueError, match="is not supported"):
            ToolRegistry([schema_tool(schema)])

    def test_unevaluated_beside_pattern_properties_refused(self) -> None:
        """jsonschema matches `unevaluatedProperties` against `patternProperties` with `re`
        itself, so the two together are refused rather than matched by backtracking."""
        schema = {
            "type": "object",
            "patternProperties": {"^(a+)+$": {}},
            "unevaluatedProperties": False,
        }
        with pytest.raises(ValueError, match="unevaluatedProperties"):
            ToolRegistry([schema_tool(schema)])

    def test_a_pattern_in_data_is_not_a_schema(self) -> None:
        """A "pattern" key inside `const` or `enum` is data, not a regular expression."""
        schema = {"type": "object", "properties": {"m": {"const": {"pattern": "(a)\\1"}}}}
        ToolRegistry([schema_tool(schema)])
