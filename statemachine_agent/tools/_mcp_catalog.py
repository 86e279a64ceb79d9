"""What an MCP server's tool list becomes: the tools a model can be offered and call.

Pure decisions on the listed specs, apart from the session code in `mcp.py`:

- a tool that can only run as an MCP *task* (`execution.taskSupport == "required"`)
  is left out, since this client does not implement tasks and every call would fail;
- a name the model API refuses (it takes `^[a-zA-Z0-9_-]{1,64}$`, MCP allows dots,
  slashes and more) is mapped to one it takes (`files.read` -> `files_read`), unique
  within the listing, and calls go back under the server's own name;
- whether a call the server died in may be sent again: only for a tool the server
  marks read-only or idempotent, unless the host says otherwise.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import mcp_types as types

from .decorator import TOOL_NAME_PATTERN

__all__ = ["Listing", "catalog", "model_name", "needs_tasks", "safe_to_resend"]

_MAX_NAME = 64
_INVALID = re.compile(r"[^a-zA-Z0-9_-]")


@dataclass(frozen=True, slots=True)
class Listing:
    """One listing of a server's tools: what is offered, renamed and left out."""

    offered: tuple[tuple[str, types.Tool], ...]
    """(the name the model sees, the server's spec), in the server's order."""
    renamed: Mapping[str, str] = field(default_factory=dict)
    """The model's name -> the server's name, for names that had to be mapped."""
    left_out: Mapping[str, str] = field(default_factory=dict)
    """The server's name -> why it is not offered (other than the host's allow/deny)."""

    def notes(self) -> dict[str, Any]:
        """The `toolset.listed` event's fields; empty when the list is offered as listed."""
        notes: dict[str, Any] = {}
        if self.renamed:
            notes["renamed"] = dict(self.renamed)
        if self.left_out:
            notes["left_out"] = dict(self.left_out)
        return notes


TASKS_REQUIRED = (
    "needs MCP tasks (execution.taskSupport is 'required'), which this client does not support yet"
)


def needs_tasks(spec: types.Tool) -> bool:
    """Whether the tool can only be called as a task (read raw too: newer protocol
    revisions may leave `execution` out of the typed model)."""
    execution: Any = spec.execution
    if execution is None:
        execution = (spec.model_extra or {}).get("execution")
    if isinstance(execution, Mapping):
        support = execution.get("taskSupport", execution.get("task_support"))
    else:
        support = getattr(execution, "task_support", None)
    return bool(support == "required")


def safe_to_resend(spec: types.Tool, host: Mapping[str, bool]) -> bool:
    """Whether a call the server died in may be sent again to a new server.

    The host's word (`resend=` of the toolset, by the server's name) comes first;
    otherwise the server's annotations: read-only or idempotent tools may be sent
    again, since the first call, if it acted, did nothing a second one adds. Without
    annotations a tool is neither (the protocol's defaults), so it is not re-sent.
    """
    if spec.name in host:
        return bool(host[spec.name])
    hints = spec.annotations
    if hints is None:
        return False
    return bool(hints.read_only_hint) or bool(hints.idempotent_hint)


def model_name(remote: str, prefix: str, taken: Callable[[str], bool]) -> str:
    """A name the model API takes for the server's `remote`, with `prefix`, not `taken`.

    A valid name is kept as it is; an invalid one has each character the API refuses
    replaced by `_`; a taken one gets the first free `_2`, `_3`, ... suffix; all are
    cut to the API's 64 characters (the suffix kept).
    """
    base = f"{prefix}{_INVALID.sub('_', remote)}" or "tool"
    name = base[:_MAX_NAME]
    number = 1
    while taken(name):
        number += 1
        suffix = f"_{number}"
        name = base[: _MAX_NAME - len(suffix)] + suffix
    return name


def catalog(specs: Iterable[types.Tool], *, prefix: str, offered: Callable[[str], bool]) -> Listing:
    """The tools to offer of `specs`: filtered by the host (`offered`), task-only tools
    left out, names mapped where the model API needs it.

    Names that need no mapping are given out first, so a server's valid `files_read`
    keeps its name even when a `files.read` comes before it in the list.
    """
    kept: list[types.Tool] = []
    left_out: dict[str, str] = {}
    for spec in specs:
        if not offered(spec.name):
            continue
        if needs_tasks(spec):
            left_out[spec.name] = TASKS_REQUIRED
            continue
        kept.append(spec)
    names: dict[int, str] = {}
    used: set[str] = set()
    for index, spec in enumerate(kept):
        name = f"{prefix}{spec.name}"
        if TOOL_NAME_PATTERN.fullmatch(name) and name not in used:
            names[index] = name
            used.add(name)
    renamed: dict[str, str] = {}
    for index, spec in enumerate(kept):
        if index in names:
            continue
        name = model_name(spec.name, prefix, used.__contains__)
        names[index] = name
        used.add(name)
        renamed[name] = spec.name
    offered_tools = tuple((names[index], spec) for index, spec in enumerate(kept))
    return Listing(offered=offered_tools, renamed=renamed, left_out=left_out)
