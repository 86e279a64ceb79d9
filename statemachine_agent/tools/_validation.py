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
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import jsonschema
import jsonschema.validators
import re2  # type: ignore[import-untyped]

from .base import Tool
from .decorator import TOOL_NAME_PATTERN

_MAX_ERROR_DETAIL_CHARS = 300
"""One validation error may quote a huge input; keep each short so the schema stays visible."""


@dataclass(frozen=True)
class InputValidator:
    """A tool's input validator: jsonschema's, and a quick verdict compiled from the schema.

    jsonschema walks the schema keyword by keyword (~70 function calls for a one-property
    schema), on every call of the tool. Most tool schemas use a handful of keywords, so
    they are compiled once into a predicate (`_compile`) that says "fits" only where
    jsonschema would find no error; an input it does not vouch for, and a schema it does
    not cover, go to jsonschema, which words the errors.
    """

    full: jsonschema.Draft202012Validator
    fits: Callable[[Any], bool] | None
    """True only for an input jsonschema accepts; None when the schema is not covered."""


def input_validator(tool: Tool) -> InputValidator:
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
    return InputValidator(_LinearValidator(schema), _compile_schema(schema))


def input_problem(found: Tool, validator: InputValidator, given: Any) -> str | None:
    """Why the input does not fit the schema, worded for the model; None if it fits."""
    if validator.fits is not None and type(given) is dict and validator.fits(given):
        return None
    if not isinstance(given, Mapping):
        schema_text = json.dumps(dict(found.input_schema), ensure_ascii=False)
        return (
            f"Invalid input for tool {found.name!r}: expected a JSON object of arguments, "
            f"got {_json_type(given)}.\nExpected input schema: {schema_text}"
        )
    errors = sorted(
        validator.full.iter_errors(dict(given)),
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

_ANNOTATIONS = frozenset(
    {"title", "description", "default", "examples", "$comment", "deprecated", "readOnly",
     "writeOnly", "format"}
)  # fmt: skip
"""Keywords that never fail an input (`format` is an annotation here: see the module)."""

_COVERED = _ANNOTATIONS | {
    "type", "properties", "required", "additionalProperties", "items", "anyOf", "enum"
}  # fmt: skip
"""The keywords `_compile_schema` covers."""

_TYPES: Mapping[str, tuple[type, ...]] = {
    "null": (type(None),),
    "boolean": (bool,),
    "integer": (int,),
    "number": (int, float),
    "string": (str,),
    "array": (list,),
    "object": (dict,),
}
"""The exact Python types the quick check accepts for a JSON type. Narrower than
jsonschema's (an `int` subclass, a `Decimal`): what it does not accept goes to jsonschema."""


def _compile_schema(schema: Any) -> Callable[[Any], bool] | None:
    """A predicate true only for inputs the schema accepts, or None if the schema uses
    more than `type`, `properties`, `required`, `additionalProperties`, `items`, `anyOf`,
    an `enum` of strings and annotations (then jsonschema alone decides)."""
    if schema is True or schema == {}:
        return _anything
    if not isinstance(schema, dict):
        return None
    if not schema.keys() <= _COVERED:
        return None
    named = schema.get("type")
    names = [named] if isinstance(named, str) else named
    if names is not None and (
        not isinstance(names, list) or not all(isinstance(n, str) and n in _TYPES for n in names)
    ):
        return None
    exact = None if names is None else frozenset(t for n in names for t in _TYPES[n])
    integral = names is not None and "integer" in names and "number" not in names
    parts: list[Callable[[Any], bool]] = []
    if "enum" in schema:
        enum = schema["enum"]
        if not isinstance(enum, list) or not all(isinstance(each, str) for each in enum):
            return None
        choices = frozenset(enum)
        parts.append(lambda value: type(value) is str and value in choices)
    if "anyOf" in schema:
        branches = [_compile_schema(branch) for branch in schema["anyOf"]]
        if not branches or any(branch is None for branch in branches):
            return None
        options = [branch for branch in branches if branch is not None]
        parts.append(lambda value: any(branch(value) for branch in options))
    if "items" in schema:
        item = _compile_schema(schema["items"])
        if item is None:
            return None
        parts.append(
            lambda value: (
                not isinstance(value, list) or (type(value) is list and all(map(item, value)))
            )
        )
    shaped = _object_check(schema)
    if shaped is None:
        return None
    if shaped is not _anything:
        parts.append(shaped)

    def fits(value: Any) -> bool:
        kind = type(value)
        # jsonschema's integer also takes a float with no fractional part
        if (
            exact is not None
            and kind not in exact
            and not (integral and kind is float and value.is_integer())
        ):
            return False
        return all(part(value) for part in parts)

    return fits


def _object_check(schema: Mapping[str, Any]) -> Callable[[Any], bool] | None:
    """The object keywords' predicate (what is not a dict passes them, as in jsonschema)."""
    properties = schema.get("properties", {})
    required = schema.get("required", [])
    extra = schema.get("additionalProperties", True)
    if not properties and not required and extra is True:
        return _anything
    if not isinstance(properties, dict) or not isinstance(required, list):
        return None
    checks: dict[str, Callable[[Any], bool]] = {}
    for name, subschema in properties.items():
        check = _compile_schema(subschema)
        if check is None:
            return None
        checks[name] = check
    other = None if extra is False else _compile_schema(extra)
    if extra is not False and other is None:
        return None
    needed = tuple(required)

    def shaped(value: Any) -> bool:
        if not isinstance(value, dict):
            return True
        if type(value) is not dict:
            return False  # a subclass may read differently: jsonschema decides
        for key in needed:
            if key not in value:
                return False
        for key, item in value.items():
            check = checks.get(key, other)
            if check is None or not check(item):
                return False
        return True

    return shaped


def _anything(value: Any) -> bool:
    return True


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
