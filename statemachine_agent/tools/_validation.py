"""Checking a tool and its calls: its name and input schema when it is registered,
and each call's input against that schema, a misfit worded for the model (what was
wrong, and the schema to fix it by)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import jsonschema

from .base import Tool
from .decorator import TOOL_NAME_PATTERN

_MAX_ERROR_DETAIL_CHARS = 300
"""One validation error may quote a huge input; keep each short so the schema stays visible."""


def input_validator(tool: Tool) -> jsonschema.Draft202012Validator:
    """The validator of a tool's input, once its name and schema are checked: a bad
    name or a broken schema fails here (`ValueError`), not mid-run."""
    if not TOOL_NAME_PATTERN.fullmatch(tool.name):
        raise ValueError(f"Invalid tool name {tool.name!r}: use 1-64 letters, digits, '_' or '-'")
    schema = dict(tool.input_schema)
    try:
        jsonschema.Draft202012Validator.check_schema(schema)
    except jsonschema.SchemaError as exc:
        raise ValueError(f"Tool {tool.name!r} has an invalid input_schema: {exc.message}") from exc
    return jsonschema.Draft202012Validator(schema)


def input_problem(
    found: Tool, validator: jsonschema.Draft202012Validator, given: Any
) -> str | None:
    """Why the input does not fit the schema, worded for the model; None if it fits."""
    if not isinstance(given, Mapping):
        schema_text = json.dumps(dict(found.input_schema), ensure_ascii=False)
        return (
            f"Invalid input for tool {found.name!r}: expected a JSON object of arguments, "
            f"got {_json_type(given)}.\nExpected input schema: {schema_text}"
        )
    errors = sorted(
        validator.iter_errors(dict(given)),
        key=lambda err: (list(map(str, err.absolute_path)), err.message),
    )
    if not errors:
        return None
    schema_text = json.dumps(dict(found.input_schema), ensure_ascii=False)
    lines = [f"- {err.json_path}: {_clip(err.message)}" for err in errors]
    return (
        f"Invalid input for tool {found.name!r} ({len(errors)} "
        f"{'error' if len(errors) == 1 else 'errors'}):\n"
        + "\n".join(lines)
        + f"\nFix the input to match the expected input schema: {schema_text}"
    )


def _clip(text: str) -> str:
    if len(text) <= _MAX_ERROR_DETAIL_CHARS:
        return text
    return text[:_MAX_ERROR_DETAIL_CHARS] + "..."


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list | tuple):
        return "an array"
    return type(value).__name__
