"""Checking what a caller passed: one sentence naming the parameter, what it got and
what it takes.

A wrong argument should fail where it is passed, not three calls later as an
`AttributeError` inside a run: every public constructor and entry point checks its
arguments with these, so the messages read alike (`budget must be a Budget, got
dict {'max_iterations': 5}`). A leaf (stdlib only), so any module can use it.
"""

from __future__ import annotations

from typing import Any

_SHOWN = 60
"""How much of a wrong value's repr a message quotes."""


def described(value: object) -> str:
    """`value` as a message shows it: its type and (the start of) its repr."""
    text = repr(value)
    if len(text) > _SHOWN:
        text = text[: _SHOWN - 3] + "..."
    return f"{type(value).__name__} {text}"


def check_type(
    param: str, value: object, types: type | tuple[type, ...], takes: str, *, optional: bool = False
) -> None:
    """Raise `TypeError` unless `value` is one of `types` (or None, when `optional`)."""
    if value is None and optional:
        return
    if not isinstance(value, types) or (isinstance(value, bool) and bool not in _flat(types)):
        raise TypeError(f"{param} must be {takes}, got {described(value)}")


def check_int(
    param: str, value: object, *, at_least: int | None = None, optional: bool = False
) -> None:
    """An `int` (never a bool), `at_least` or more; `TypeError`/`ValueError` naming `param`."""
    or_none = " or None" if optional else ""
    check_type(param, value, int, f"an int{or_none}", optional=optional)
    if value is not None and at_least is not None and value < at_least:  # type: ignore[operator]
        raise ValueError(f"{param} must be at least {at_least}{or_none}, got {value!r}")


def check_number(
    param: str, value: object, *, positive: bool = False, optional: bool = False
) -> None:
    """An `int` or `float` (never a bool, never NaN), above zero when `positive`.

    NaN passes every `<= 0` check and fails every comparison a limit is read with, so a
    NaN limit would never trip: refused here, naming the parameter."""
    or_none = " or None" if optional else ""
    check_type(param, value, (int, float), f"a number{or_none}", optional=optional)
    if isinstance(value, float) and value != value:
        raise ValueError(f"{param} must be a number{or_none}, got {value!r}")
    if value is not None and positive and not value > 0:  # type: ignore[operator]
        raise ValueError(f"{param} must be positive{or_none}, got {value!r}")


def check_bool(param: str, value: object) -> None:
    check_type(param, value, bool, "True or False")


def _flat(types: type | tuple[type, ...]) -> tuple[Any, ...]:
    return types if isinstance(types, tuple) else (types,)
