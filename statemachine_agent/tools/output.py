"""Typed output: the run's answer must validate against a type.

With `Agent(output_type=T)` the model is given one more tool, `final_result`,
whose input schema is `T`'s. Calling it is how the model answers: a valid input
ends the run in `finished` with `result.output` an instance of `T`; an invalid
one goes back to the model with the validation errors, and after
`output_retries` such answers the run ends in `failed` naming them. The tool is
an ordinary run-ending tool (like `finish`), and what is checkpointed is the
plain JSON input: the typed value is built again from it on resume and replay.

A plain text answer is no answer then: the table's rows for an `end_turn` with
`output_expected` count it against `output_retries` and send the model
`TEXT_ANSWER` (or end in `failed` once the retries are used up), so a run with an
output type never ends `ok` without a validated value.

`T` may be a pydantic model, a dataclass, a `TypedDict` (anything pydantic's
`TypeAdapter` describes), or a JSON schema given as a dict (the output is then
the validated dict). A type whose schema is not an object is wrapped as
`{"response": ...}`, since tool inputs are objects.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import jsonschema
import pydantic

from statemachine_agent.errors import Error
from statemachine_agent.tools.base import Tool
from statemachine_agent.tools.registry import ToolError

OUTPUT_TOOL = "final_result"
"""The name of the tool through which the model gives a typed answer."""

TEXT_ANSWER = (
    f"That answer was plain text, but this task needs a structured answer: answer by "
    f"calling {OUTPUT_TOOL} with input that matches its schema."
)
"""What the model is told after a text answer where a typed one is expected (also
the answer's error, should the run end in `failed`)."""

_WRAP_KEY = "response"
DEFAULT_OUTPUT_RETRIES = 3
"""Invalid final answers a run tolerates before it ends in `failed`."""


class OutputTypeError(Error, TypeError):
    """The output type cannot be described as a JSON schema."""


@dataclass(frozen=True, slots=True)
class OutputSpec:
    """An output type with its schema, and how to validate and rebuild its values."""

    output_type: Any
    schema: Mapping[str, Any]
    """The final-answer tool's input schema (always an object)."""
    wrapped: bool
    """Whether the type's own schema was wrapped under `response`."""
    adapter: pydantic.TypeAdapter[Any] | None
    """Validates Python types; None for a JSON-schema dict."""

    def validate(self, data: Mapping[str, Any]) -> Any:
        """The typed value for the tool's input; raises `ToolError` listing the errors."""
        raw: Any = data.get(_WRAP_KEY) if self.wrapped else dict(data)
        if self.adapter is None:
            errors = sorted(
                jsonschema.Draft202012Validator(self.schema).iter_errors(raw),
                key=lambda e: list(e.path),
            )
            if errors:
                raise ToolError(_fix_message([_schema_error(e) for e in errors]))
            return raw
        try:
            return self.adapter.validate_python(raw)
        except pydantic.ValidationError as exc:
            raise ToolError(_fix_message([_pydantic_error(e) for e in exc.errors()])) from None

    def to_plain(self, value: Any) -> Any:
        """The JSON form of a typed value (what is checkpointed and audited)."""
        if self.adapter is None:
            return value
        return self.adapter.dump_python(value, mode="json")

    def rebuild(self, plain: Any) -> Any:
        """The typed value again, from its JSON form (after a resume or a replay)."""
        if self.adapter is None:
            return plain
        return self.adapter.validate_python(plain)

    def tool(self) -> Tool:
        """The `final_result` tool the model answers through."""
        spec = self

        def final_result(**answer: Any) -> dict[str, Any]:
            value = spec.validate(answer)
            return {"status": "completed", "summary": "", "result": spec.to_plain(value)}

        return Tool(
            name=OUTPUT_TOOL,
            description=(
                "Give the final answer of the task, in exactly the structure of this tool's "
                "input schema. This ends the run: call it once, when the answer is complete."
            ),
            input_schema=dict(self.schema),
            handler=final_result,
            ends_run=True,
            sequential=True,
            timeout=None,
        )


def output_spec(output_type: Any) -> OutputSpec:
    """Describe `output_type` (a type, or a JSON schema dict) for the final-answer tool."""
    if isinstance(output_type, Mapping):
        schema = dict(output_type)
        try:
            jsonschema.Draft202012Validator.check_schema(schema)
        except jsonschema.SchemaError as exc:
            raise OutputTypeError(
                f"output_type is not a valid JSON schema: {exc.message}"
            ) from None
        return _finish(output_type, schema, None)
    try:
        adapter: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(output_type)
        schema = adapter.json_schema()
    except (pydantic.PydanticSchemaGenerationError, pydantic.PydanticUserError) as exc:
        raise OutputTypeError(f"output_type {output_type!r} has no JSON schema: {exc}") from None
    return _finish(output_type, schema, adapter)


def _finish(
    output_type: Any, schema: dict[str, Any], adapter: pydantic.TypeAdapter[Any] | None
) -> OutputSpec:
    if schema.get("type") == "object":
        return OutputSpec(output_type, schema, wrapped=False, adapter=adapter)
    defs = schema.pop("$defs", None)
    wrapper: dict[str, Any] = {
        "type": "object",
        "properties": {_WRAP_KEY: schema},
        "required": [_WRAP_KEY],
    }
    if defs is not None:
        wrapper["$defs"] = defs
    return OutputSpec(output_type, wrapper, wrapped=True, adapter=adapter)


def _fix_message(errors: list[str]) -> str:
    listed = "; ".join(errors)
    return (
        f"The final answer does not match the required structure: {listed}. "
        f"Call {OUTPUT_TOOL} again with corrected input."
    )


def _pydantic_error(error: Any) -> str:
    where = ".".join(str(p) for p in error.get("loc", ())) or "(the answer)"
    return f"{where}: {error.get('msg')}"


def _schema_error(error: jsonschema.ValidationError) -> str:
    where = ".".join(str(p) for p in error.path) or "(the answer)"
    return f"{where}: {error.message}"
