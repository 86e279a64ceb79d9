"""A tool call's input is judged by a predicate compiled from the schema, and jsonschema
is asked only when that predicate does not vouch for the input.

The guarantee: the quick verdict never says "fits" where jsonschema finds an error, so a
call runs if and only if it ran before, with the same error text when it does not. On
plain JSON values (what a model's input decodes to) the two verdicts are the same.
"""

from __future__ import annotations

import math
from typing import Any

import jsonschema
from hypothesis import given, settings
from hypothesis import strategies as st

from statemachine_agent.tools import Tool, ToolCall, ToolRegistry
from statemachine_agent.tools._validation import input_problem, input_validator

NAMES = ["a", "b", "c"]
TYPES = ["null", "boolean", "integer", "number", "string", "array", "object"]


def tool_for(schema: dict[str, Any]) -> Tool:
    return Tool(name="t", description="test", input_schema=schema, handler=lambda **kw: "ok")


def _schemas(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    shaped = st.fixed_dictionaries(
        {},
        optional={
            "type": st.sampled_from(TYPES)
            | st.lists(st.sampled_from(TYPES), min_size=1, unique=True),
            "properties": st.dictionaries(st.sampled_from(NAMES), children, max_size=3),
            "required": st.lists(st.sampled_from(NAMES), max_size=3, unique=True),
            "additionalProperties": st.booleans() | children,
            "items": children,
            "anyOf": st.lists(children, min_size=1, max_size=3),
            "enum": st.lists(st.sampled_from(NAMES) | st.integers(0, 2), min_size=1, max_size=3),
            "description": st.just("d"),
            "format": st.just("date"),
            "minimum": st.integers(0, 2),  # not covered: jsonschema alone decides
        },
    )
    return st.booleans() | shaped


SCHEMAS = st.recursive(_schemas(st.just({})), _schemas, max_leaves=6)

VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-2, 3)
    | st.sampled_from([0.0, 1.0, 1.5, -2.5, math.inf])
    | st.sampled_from([*NAMES, "", "zz"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(NAMES), inner),
    max_leaves=8,
)


class TestQuickVerdict:
    @settings(max_examples=400, deadline=None)
    @given(SCHEMAS, VALUES)
    def test_the_quick_verdict_is_jsonschemas_on_json_values(self, schema: Any, value: Any) -> None:
        """Where the schema is covered, "fits" exactly when jsonschema finds no error."""
        validator = input_validator(tool_for({"type": "object", "properties": {"x": schema}}))
        given_input = {"x": value}
        valid = not list(
            jsonschema.Draft202012Validator({"properties": {"x": schema}}).iter_errors(given_input)
        )
        if validator.fits is not None:
            assert validator.fits(given_input) == valid
        found = tool_for({"type": "object", "properties": {"x": schema}})
        assert (input_problem(found, validator, given_input) is None) == valid

    @settings(max_examples=150, deadline=None)
    @given(SCHEMAS, VALUES)
    def test_a_quick_yes_is_never_a_jsonschema_no_for_subclassed_values(
        self, schema: Any, value: Any
    ) -> None:
        """Values of types jsonschema treats loosely (an int, dict or list subclass) are
        never vouched for by the quick check unless jsonschema accepts them too."""

        class Count(int):
            pass

        class Record(dict[str, Any]):
            pass

        class Items(list[Any]):
            pass

        odd = {"x": Count(1) if isinstance(value, int) and not isinstance(value, bool) else value}
        nested = {"x": Record(value) if isinstance(value, dict) else value}
        validator = input_validator(tool_for({"type": "object", "properties": {"x": schema}}))
        listed = {"x": Items(value) if isinstance(value, list) else value}
        for given_input in (odd, nested, listed):
            valid = not list(validator.full.iter_errors(given_input))
            if validator.fits is not None and validator.fits(given_input):
                assert valid

    def test_a_typical_tool_schema_is_covered(self) -> None:
        """The schema `@tool` makes for plain parameters (types, defaults, an enum, an
        optional list) gets the quick check; `$ref` or `minimum` do not."""
        covered = {
            "additionalProperties": False,
            "properties": {
                "a": {"type": "string"},
                "c": {"anyOf": [{"items": {"type": "string"}, "type": "array"}, {"type": "null"}]},
                "d": {"default": "x", "enum": ["x", "y"], "type": "string"},
                "e": {"default": 1.0, "type": "number"},
            },
            "required": ["a"],
            "type": "object",
        }
        assert input_validator(tool_for(covered)).fits is not None
        bounded = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 0}}}
        assert input_validator(tool_for(bounded)).fits is None

    def test_a_misfit_still_gets_jsonschemas_wording(self) -> None:
        """An input the quick check refuses is answered with the error list and the schema."""
        schema = {
            "type": "object",
            "properties": {"n": {"type": "integer"}},
            "required": ["n"],
            "additionalProperties": False,
        }
        registry = ToolRegistry([tool_for(schema)])
        refused = registry.check(ToolCall(id="c1", name="t", input={"n": "1", "m": 2}))
        assert refused is not None
        assert refused.is_error
        assert "Invalid input for tool 't' (2 errors)" in refused.content
        assert "- $.n: '1' is not of type 'integer'" in refused.content
        assert "Additional properties are not allowed ('m' was unexpected)" in refused.content
        assert registry.check(ToolCall(id="c2", name="t", input={"n": 2.0})) is None
        assert registry.check(ToolCall(id="c3", name="t", input={"n": True})) is not None
