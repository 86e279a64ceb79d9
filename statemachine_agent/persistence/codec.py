"""The run record as plain JSON data, and back, without loss.

Encoding walks the record's dataclasses; decoding is driven by their type hints,
so the record's own declarations are the schema and nothing is written twice.
A value JSON cannot hold (a set, bytes, an object a tool put in its input) is
refused with its path in the record, never dropped or stringified quietly.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from statemachine_agent.errors import Error
from statemachine_agent.machine.run import RunRecord, checkpointing

Plain = Any
"""JSON-compatible data: None, bool, int, float, str, lists and str-keyed dicts."""


class SerializationError(Error, TypeError):
    """A value in the run record cannot be written as JSON; the message names where."""


_SCALARS = frozenset({type(None), bool, int, str})


class _NotPlainError(Exception):
    """The fast walk met something it cannot encode; the slow walk names where."""


def to_plain(value: Any, path: str = "record") -> Plain:
    """Encode a value as JSON-compatible data, naming the path of anything that is not.

    The common case takes a fast walk that builds no paths; only a value that
    cannot be encoded pays for a second walk that finds its path.
    """
    try:
        return _fast(value)
    except _NotPlainError:
        return _with_paths(value, path)


def _fast(value: Any) -> Plain:
    kind = type(value)
    if kind in _SCALARS:
        return value
    if kind is dict:
        out = {}
        for key, item in value.items():
            if type(key) is not str:
                raise _NotPlainError
            out[key] = _fast(item)
        return out
    if kind is list or kind is tuple:
        return [_fast(item) for item in value]
    if kind is float:
        if not math.isfinite(value):
            raise _NotPlainError
        return value
    names = _INIT_FIELDS.get(kind, _UNSEEN)
    if names is _UNSEEN:
        names = _init_fields(kind)
    if names is not None:
        return {name: _fast(getattr(value, name)) for name in names}
    if isinstance(value, Mapping):
        return _fast(dict(value))
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, bool | int | str):
        return value
    raise _NotPlainError


_INIT_FIELDS: dict[type[Any], tuple[str, ...] | None] = {}
"""The fields a dataclass type is built from, by type (None: not a dataclass). A
record is encoded at every checkpoint, and asking `dataclasses` for every value's
fields each time was most of the cost of encoding it."""
_UNSEEN: Any = object()


def _init_fields(kind: type[Any]) -> tuple[str, ...] | None:
    names = (
        tuple(f.name for f in dataclasses.fields(kind) if f.init)
        if dataclasses.is_dataclass(kind)
        else None
    )
    _INIT_FIELDS[kind] = names
    return names


def _with_paths(value: Any, path: str) -> Plain:
    """The slow walk: the same encoding, raising `SerializationError` with the path."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise SerializationError(f"{path}: {value!r} is not a finite number")
        return value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {
            f.name: _with_paths(getattr(value, f.name), f"{path}.{f.name}")
            for f in dataclasses.fields(value)
            if f.init
        }
    if isinstance(value, Mapping):
        return {_key(k, path): _with_paths(v, f"{path}.{k}") for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_with_paths(item, f"{path}[{i}]") for i, item in enumerate(value)]
    if isinstance(value, Path):
        return str(value)
    raise SerializationError(f"{path}: a {type(value).__name__} cannot be stored as JSON")


def _key(key: Any, path: str) -> str:
    if not isinstance(key, str):
        raise SerializationError(f"{path}: key {key!r} is not a string")
    return key


def from_plain(hint: Any, data: Plain, path: str = "record") -> Any:
    """Decode `data` as the type `hint` describes (the inverse of `to_plain`)."""
    origin = typing.get_origin(hint)
    if hint is Any or hint is object:
        return data
    if origin in (typing.Union, types.UnionType):
        return _from_union(typing.get_args(hint), data, path)
    if origin is typing.Literal:
        if data not in typing.get_args(hint):
            raise SerializationError(f"{path}: {data!r} is not one of {typing.get_args(hint)}")
        return data
    if dataclasses.is_dataclass(hint) and isinstance(hint, type):
        return _from_dataclass(hint, data, path)
    if origin in (list, typing.get_origin(typing.Sequence[int])):
        (item,) = typing.get_args(hint) or (Any,)
        return [from_plain(item, v, f"{path}[{i}]") for i, v in enumerate(_as_list(data, path))]
    if origin is tuple:
        args = typing.get_args(hint)
        items = _as_list(data, path)
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(from_plain(args[0], v, f"{path}[{i}]") for i, v in enumerate(items))
        pairs = enumerate(zip(args, items, strict=True))
        return tuple(from_plain(a, v, f"{path}[{i}]") for i, (a, v) in pairs)
    if origin in (dict, Mapping, typing.get_origin(typing.Mapping[str, int])):
        _, value_hint = typing.get_args(hint) or (str, Any)
        if not isinstance(data, dict):
            raise SerializationError(f"{path}: expected an object, got {type(data).__name__}")
        return {k: from_plain(value_hint, v, f"{path}.{k}") for k, v in data.items()}
    if hint is Path:
        return Path(data)
    if hint is float and isinstance(data, int) and not isinstance(data, bool):
        return float(data)
    if isinstance(hint, type) and isinstance(data, hint):
        return data
    raise SerializationError(f"{path}: expected {hint}, got {type(data).__name__}")


def _from_union(options: tuple[Any, ...], data: Plain, path: str) -> Any:
    if data is None and type(None) in options:
        return None
    errors: list[str] = []
    for option in options:
        if option is type(None):
            continue
        try:
            return from_plain(option, data, path)
        except SerializationError as exc:
            errors.append(str(exc))
    raise SerializationError("; ".join(errors) or f"{path}: no type of the union fits")


def _from_dataclass(cls: type[Any], data: Plain, path: str) -> Any:
    if not isinstance(data, dict):
        raise SerializationError(f"{path}: expected an object for {cls.__name__}")
    hints = _hints(cls)
    kwargs = {
        f.name: from_plain(hints[f.name], data[f.name], f"{path}.{f.name}")
        for f in dataclasses.fields(cls)
        if f.init and f.name in data
    }
    return cls(**kwargs)


def _as_list(data: Plain, path: str) -> list[Any]:
    if not isinstance(data, list):
        raise SerializationError(f"{path}: expected a list, got {type(data).__name__}")
    return data


_HINTS: dict[type[Any], dict[str, Any]] = {}


def _hints(cls: type[Any]) -> dict[str, Any]:
    """Type hints of a dataclass, resolved once (they never change at run time)."""
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]


def record_to_plain(record: RunRecord) -> dict[str, Plain]:
    """The record as its checkpoints store it (fields declared `not_stored` left out)."""
    plain = to_plain(record)
    assert isinstance(plain, dict)
    return {k: v for k, v in plain.items() if checkpointing(k) != "not_stored"}


def record_from_plain(data: Mapping[str, Plain]) -> RunRecord:
    record = from_plain(RunRecord, dict(data))
    assert isinstance(record, RunRecord)
    return record
