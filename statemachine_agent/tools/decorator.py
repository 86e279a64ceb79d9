"""`@tool`: turn a typed, documented Python function into a `Tool`.

The function's signature is the single source of truth: its type hints become
the JSON Schema the model is shown (derived by pydantic, the way the Anthropic
SDK's own `beta_tool` does it), and its docstring becomes the description the
model reads. Anything that cannot be described faithfully fails at decoration
time, because a tool the model misunderstands fails silently at run time.
"""

from __future__ import annotations

import functools
import inspect
import re
import typing
import warnings
from collections.abc import Callable, Mapping
from typing import Any, TypedDict, cast, overload

import docstring_parser
import pydantic

from .base import DEFAULT_RETRY_ON, DEFAULT_TOOL_TIMEOUT, IDEMPOTENCY_PARAM, JSON, OnError, Tool
from .scope import context_parameter

__all__ = ["TOOL_NAME_PATTERN", "schema_from_function", "tool"]

TOOL_NAME_PATTERN = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
"""What the Messages API accepts as a tool name."""

_VALUE_KEYWORDS = frozenset({"default", "enum", "const", "examples"})
"""Schema keywords whose values are data, not subschemas: never rewrite inside them."""

_NAME_MAP_KEYWORDS = frozenset({"properties", "patternProperties", "$defs", "definitions"})
"""Schema keywords mapping user-chosen names to subschemas: the names are not keywords."""


class _Policy(TypedDict, total=False):
    """The `Tool` policy fields `@tool` passes through as they are."""

    on_error: OnError
    retries: int
    retry_backoff: float
    retry_on: tuple[type[BaseException], ...]
    side_effect: bool
    deferrable: bool
    requires_approval: bool
    untrusted: bool


@overload
def tool(func: Callable[..., Any], /) -> Tool: ...


@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    timeout: float | None = DEFAULT_TOOL_TIMEOUT,
    sequential: bool = False,
    ends_run: bool = False,
    on_error: OnError = "return",
    retries: int = 2,
    retry_backoff: float = 0.5,
    retry_on: tuple[type[BaseException], ...] = DEFAULT_RETRY_ON,
    side_effect: bool = False,
    deferrable: bool = False,
    requires_approval: bool = False,
    untrusted: bool = False,
) -> Callable[[Callable[..., Any]], Tool]: ...


def tool(
    func: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    timeout: float | None = DEFAULT_TOOL_TIMEOUT,
    sequential: bool = False,
    ends_run: bool = False,
    on_error: OnError = "return",
    retries: int = 2,
    retry_backoff: float = 0.5,
    retry_on: tuple[type[BaseException], ...] = DEFAULT_RETRY_ON,
    side_effect: bool = False,
    deferrable: bool = False,
    requires_approval: bool = False,
    untrusted: bool = False,
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Declare a tool from a sync or async function, bare (`@tool`) or with options.

    The returned `Tool` is still callable like the function. Its handler
    converts validated JSON input to the annotated types (an `Enum` member, a
    pydantic model instance, ...) before calling the function, so the function
    receives what its signature promises, not raw JSON.

    Raises `TypeError` when the signature cannot be expressed as a JSON object
    (`*args`, `**kwargs`, positional-only or unannotated parameters, types
    pydantic cannot describe) or when there is no description, and
    `ValueError` for an invalid name, timeout or error policy.

    The policy options (`on_error`, `retries`, `retry_backoff`, `retry_on`,
    `side_effect`, `deferrable`, `requires_approval`, `untrusted`) are passed to `Tool`
    unchanged; see its fields for what they mean.
    """
    policy = _Policy(
        on_error=on_error,
        retries=retries,
        retry_backoff=retry_backoff,
        retry_on=retry_on,
        side_effect=side_effect,
        deferrable=deferrable,
        requires_approval=requires_approval,
        untrusted=untrusted,
    )

    def decorate(fn: Callable[..., Any]) -> Tool:
        return _build_tool(
            fn,
            name=name,
            description=description,
            timeout=timeout,
            sequential=sequential,
            ends_run=ends_run,
            policy=policy,
        )

    if func is not None:
        return decorate(func)
    return decorate


def _build_tool(
    func: Callable[..., Any],
    *,
    name: str | None,
    description: str | None,
    timeout: float | None,
    sequential: bool,
    ends_run: bool,
    policy: _Policy,
) -> Tool:
    if isinstance(func, Tool):
        raise TypeError(f"{func.name!r} is already a Tool; apply @tool only once")
    if not callable(func):
        raise TypeError(f"@tool needs a function, got {type(func).__name__}")

    tool_name = name if name is not None else getattr(func, "__name__", "")
    if not TOOL_NAME_PATTERN.fullmatch(tool_name):
        raise ValueError(
            f"Invalid tool name {tool_name!r}: use 1-64 letters, digits, '_' or '-' "
            "(pass name=... to @tool)"
        )
    if timeout is not None and not timeout > 0:
        raise ValueError(f"Tool {tool_name!r}: timeout must be positive or None, got {timeout!r}")

    docstring = docstring_parser.parse(inspect.getdoc(func) or "")
    tool_description = description if description is not None else _describe(docstring)
    if not tool_description.strip():
        raise TypeError(
            f"Tool {tool_name!r} has no description: give the function a docstring "
            "or pass description=... to @tool (the model relies on it to choose the tool)"
        )

    schema = schema_from_function(func, tool_name=tool_name, docstring=docstring)
    _warn_undocumented(tool_name, docstring, schema)
    param = context_parameter(func)
    try:
        handler = pydantic.validate_call(func) if param is None else _with_context(func, param)
    except Exception as exc:  # pragma: no cover - schema generation already succeeded
        raise TypeError(f"Tool {tool_name!r}: cannot wrap {func!r}: {exc}") from exc

    return Tool(
        name=tool_name,
        description=tool_description,
        input_schema=schema,
        handler=handler,
        timeout=timeout,
        sequential=sequential,
        ends_run=ends_run,
        **policy,
    )


def _warn_undocumented(
    tool_name: str, docstring: docstring_parser.Docstring, schema: dict[str, Any]
) -> None:
    """A docstring that documents some arguments but not all has most likely forgotten
    one (or misspelled it): the model then sees that argument with no description.
    Warned, not refused, since a self-explanatory argument may be left out on purpose."""
    if not docstring.params:
        return
    properties = schema.get("properties", {})
    bare = [name for name, prop in properties.items()
            if isinstance(prop, dict) and "description" not in prop]  # fmt: skip
    if bare:
        warnings.warn(
            f"Tool {tool_name!r}: the docstring documents some arguments but not "
            f"{', '.join(repr(n) for n in bare)}; the model sees no description for "
            f"{'it' if len(bare) == 1 else 'them'} (add it to the Args section)",
            UserWarning,
            stacklevel=_caller_level(),
        )


def _caller_level() -> int:
    """The `stacklevel` of the first frame outside this module: the user's `@tool` line,
    however the decorator was applied (bare or with arguments)."""
    frame, level = inspect.currentframe(), 1
    while frame is not None and frame.f_globals.get("__name__") == __name__:
        frame, level = frame.f_back, level + 1
    return level - 1


def _describe(docstring: docstring_parser.Docstring) -> str:
    """Short plus long description: what the tool does and when to use it, not its params."""
    parts = [docstring.short_description, docstring.long_description]
    return "\n\n".join(part.strip() for part in parts if part and part.strip())


def schema_from_function(
    func: Callable[..., Any],
    *,
    tool_name: str | None = None,
    docstring: docstring_parser.Docstring | None = None,
) -> JSON:
    """The JSON Schema of `func`'s keyword arguments, as a tool's `input_schema`.

    Titles are dropped (they only repeat the names and cost tokens), objects
    with declared properties refuse unknown keys, and each parameter's
    docstring text becomes its `description` unless the type already has one.
    """
    label: str = tool_name or getattr(func, "__name__", None) or repr(func)
    _check_signature(func, label)
    skip = context_parameter(func)
    try:
        target = func if skip is None else _facade(func, skip)
        raw = pydantic.TypeAdapter(cast(Any, target)).json_schema()
    except Exception as exc:
        raise TypeError(f"Cannot derive an input schema for tool {label!r}: {exc}") from exc

    schema = _clean(raw)
    if not isinstance(schema, dict) or schema.get("type") != "object":  # pragma: no cover
        raise TypeError(f"Tool {label!r}: expected an object schema, got {raw!r}")

    if docstring is None:
        docstring = docstring_parser.parse(inspect.getdoc(func) or "")
    properties = schema.setdefault("properties", {})
    for param in docstring.params:
        prop = properties.get(param.arg_name)
        if isinstance(prop, dict) and param.description and "description" not in prop:
            prop["description"] = param.description.strip()
    properties.pop(IDEMPOTENCY_PARAM, None)
    if IDEMPOTENCY_PARAM in schema.get("required", []):
        schema["required"] = [r for r in schema["required"] if r != IDEMPOTENCY_PARAM]
        if not schema["required"]:
            del schema["required"]
    schema["additionalProperties"] = False
    return schema


def _facade(func: Callable[..., Any], skip: str) -> Callable[..., Any]:
    """`func`'s signature without the `RunContext` parameter, as a function returning
    its arguments: what pydantic describes and validates for the model's input.

    Its annotations are the resolved hints of `func` (string annotations are
    resolved in `func`'s own module, not in this one).
    """
    signature = inspect.signature(func)
    params = [p for p in signature.parameters.values() if p.name != skip]
    hints = typing.get_type_hints(func, include_extras=True)
    reduced = signature.replace(parameters=params, return_annotation=inspect.Signature.empty)

    def facade(*args: Any, **kwargs: Any) -> dict[str, Any]:
        return dict(reduced.bind(*args, **kwargs).arguments)

    facade.__signature__ = reduced  # type: ignore[attr-defined]
    facade.__annotations__ = {p.name: hints[p.name] for p in params if p.name in hints}
    for attr in ("__name__", "__qualname__", "__doc__", "__module__"):
        setattr(facade, attr, getattr(func, attr, None) or attr)
    return facade


def _with_context(func: Callable[..., Any], param: str) -> Callable[..., Any]:
    """A handler validating the model's input like `validate_call`, and passing the
    `RunContext` (given as keyword `param`) through untouched."""
    validated = pydantic.validate_call(_facade(func, param))
    signature = inspect.signature(func)

    def split(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        bound = dict(signature.bind_partial(*args, **kwargs).arguments)
        context = bound.pop(param, None)
        return {**validated(**bound), param: context}

    async def ahandler(*args: Any, **kwargs: Any) -> Any:
        return await func(**split(args, kwargs))

    def handler(*args: Any, **kwargs: Any) -> Any:
        return func(**split(args, kwargs))

    chosen = ahandler if inspect.iscoroutinefunction(func) else handler
    return functools.update_wrapper(chosen, func)


def _check_signature(func: Callable[..., Any], label: str) -> None:
    """Reject parameters a JSON object of named arguments cannot carry."""
    try:
        signature = inspect.signature(func)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"Tool {label!r}: cannot read the signature of {func!r}: {exc}") from exc
    for param in signature.parameters.values():
        if param.kind is inspect.Parameter.VAR_POSITIONAL:
            raise TypeError(
                f"Tool {label!r}: *{param.name} cannot be passed as JSON; "
                "declare each argument as a named parameter"
            )
        if param.kind is inspect.Parameter.VAR_KEYWORD:
            raise TypeError(
                f"Tool {label!r}: **{param.name} cannot be described to the model; "
                "declare each argument as a named parameter"
            )
        if param.kind is inspect.Parameter.POSITIONAL_ONLY:
            raise TypeError(
                f"Tool {label!r}: parameter {param.name!r} is positional-only, but tools "
                "are called with keyword arguments; remove the '/'"
            )
        if param.annotation is inspect.Parameter.empty:
            raise TypeError(
                f"Tool {label!r}: parameter {param.name!r} has no type hint; annotate it "
                "(use typing.Any to accept any JSON value)"
            )


def _clean(node: Any) -> Any:
    """Copy a pydantic schema without `title` keywords, closing objects with properties.

    Walks the schema structurally so that a property *named* `title`, or a
    default value containing a `title` key, survives.
    """
    if isinstance(node, list):
        return [_clean(item) for item in node]
    if not isinstance(node, Mapping):
        return node
    out: JSON = {}
    for key, value in node.items():
        if key == "title" and isinstance(value, str):
            continue
        if key in _VALUE_KEYWORDS:
            out[key] = value
        elif key in _NAME_MAP_KEYWORDS and isinstance(value, Mapping):
            out[key] = {sub: _clean(subschema) for sub, subschema in value.items()}
        else:
            out[key] = _clean(value)
    if "properties" in out and "additionalProperties" not in out:
        out["additionalProperties"] = False
    return out
