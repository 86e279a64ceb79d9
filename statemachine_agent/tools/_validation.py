"""Checking a tool and its calls: its name and input schema when it is registered,
and each call's input against that schema, a misfit worded for the model (what was
wrong, and the schema to fix it by).

Regular expressions in a schema (`pattern`, `patternProperties`) are matched with
RE2, whose matching time is linear in the input, never Python's backtracking `re`:
schemas come from MCP servers and inputs from the model, and `^(a+)+$` against 35
characters would hold the event loop, so every run of the process, for minutes.
A pattern RE2 cannot compile (backreferences, lookaround) rejects the tool when it
is registered (`ValueError` naming the pattern; a toolset's tool is left out, said
so), as does `unevaluatedProperties` beside `patternProperties`, whose matching
jsonschema does with `re` itself. `format` is an annotation only: no format,
`regex` included, is checked.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator, Mapping
from typing import Any

import jsonschema
import jsonschema.validators
import re2  # type: ignore[import-untyped]

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
    problem = _pattern_problem(schema)
    if problem is not None:
        raise ValueError(f"Tool {tool.name!r} has an unsupported input_schema: {problem}")
    return _LinearValidator(schema)


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


def _regex(pattern: str) -> Any:
    """The pattern compiled by RE2 (`re2.error` if it cannot be), kept for the next call."""
    return _compile(pattern)


@functools.lru_cache(maxsize=1024)
def _compile(pattern: str) -> Any:
    options = re2.Options()
    options.log_errors = False  # a refused pattern is our ValueError, not a line on stderr
    return re2.compile(pattern, options)


def _pattern(
    validator: Any, patrn: str, instance: Any, schema: Mapping[str, Any]
) -> Iterator[jsonschema.ValidationError]:
    if validator.is_type(instance, "string") and _regex(patrn).search(instance) is None:
        yield jsonschema.ValidationError(f"{instance!r} does not match {patrn!r}")


def _pattern_properties(
    validator: Any, patterns: Mapping[str, Any], instance: Any, schema: Mapping[str, Any]
) -> Iterator[jsonschema.ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    for patrn, subschema in patterns.items():
        for key, value in instance.items():
            if _regex(patrn).search(key) is not None:
                yield from validator.descend(value, subschema, path=key, schema_path=patrn)


def _additional_properties(
    validator: Any, allowed: Any, instance: Any, schema: Mapping[str, Any]
) -> Iterator[jsonschema.ValidationError]:
    """jsonschema's `additionalProperties`, with `patternProperties` matched by RE2."""
    if not validator.is_type(instance, "object"):
        return
    known = schema.get("properties", {})
    patterns = [_regex(p) for p in schema.get("patternProperties", {})]
    extras = [
        key
        for key in instance
        if key not in known and not any(p.search(key) is not None for p in patterns)
    ]
    if validator.is_type(allowed, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], allowed, path=extra)
    elif not allowed and extras:  # jsonschema's own wording
        names = ", ".join(repr(each) for each in sorted(extras, key=str))
        if "patternProperties" in schema:
            verb = "does" if len(extras) == 1 else "do"
            regexes = ", ".join(repr(each) for each in sorted(schema["patternProperties"]))
            yield jsonschema.ValidationError(
                f"{names} {verb} not match any of the regexes: {regexes}"
            )
        else:
            verb = "was" if len(extras) == 1 else "were"
            yield jsonschema.ValidationError(
                f"Additional properties are not allowed ({names} {verb} unexpected)"
            )


_LinearValidator: type[jsonschema.Draft202012Validator] = jsonschema.validators.extend(  # type: ignore[no-untyped-call]
    jsonschema.Draft202012Validator,
    {
        "pattern": _pattern,
        "patternProperties": _pattern_properties,
        "additionalProperties": _additional_properties,
    },
)
"""Draft 2020-12 with every regular expression matched in linear time (RE2)."""

_NOT_SCHEMAS = frozenset({"const", "enum", "default", "examples"})
"""Keywords whose values are data, not schemas: a "pattern" inside them is not one."""


def _pattern_problem(schema: Any) -> str | None:
    """Why the schema's regular expressions cannot be matched in linear time, if they cannot."""
    found: list[str] = []
    mixes = [False, False]  # unevaluatedProperties seen, patternProperties seen

    def walk(node: Any) -> None:
        if isinstance(node, list):
            for item in node:
                walk(item)
            return
        if not isinstance(node, Mapping):
            return
        for key, value in node.items():
            if key in _NOT_SCHEMAS:
                continue
            if key == "pattern" and isinstance(value, str):
                found.append(value)
            elif key == "patternProperties" and isinstance(value, Mapping):
                found.extend(str(p) for p in value)
                mixes[1] = True
            if key == "unevaluatedProperties":
                mixes[0] = True
            walk(value)

    walk(schema)
    for patrn in found:
        try:
            _regex(patrn)
        except re2.error as exc:
            why = exc.args[0].decode() if exc.args and isinstance(exc.args[0], bytes) else exc
            return (
                f"pattern {patrn!r} is not supported ({why}): patterns are matched in "
                "linear time, without backreferences or lookaround"
            )
    if all(mixes):
        return "unevaluatedProperties beside patternProperties is not supported"
    return None


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
