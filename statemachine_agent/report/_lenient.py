"""Forgiving lookups of an event's values: a missing or oddly typed value gives an
empty one (`""`, `0`, `{}`), never a traceback, so any audit file can be reported."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any


def as_str(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, default=str)


def as_int(value: Any) -> int:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value)
    return 0


def as_float(value: Any) -> float:
    if isinstance(value, bool):
        return float(value)
    return float(value) if isinstance(value, int | float) else 0.0


def as_mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}
