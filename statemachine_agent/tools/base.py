"""The records that cross the boundary between the engine and tools.

A tool never raises into the loop: whatever happens, its call ends as a
`ToolOutcome`, and whether it failed is said by `is_error` (and why, by
`error_kind`), never guessed from the text.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

JSON = dict[str, Any]

ErrorKind = Literal["unknown_tool", "invalid_input", "raised", "timeout", "limit", "not_run"]

DEFAULT_TOOL_TIMEOUT = 30.0
"""Seconds a tool may run before its call is answered with a timeout error."""


@dataclass(frozen=True, slots=True)
class Tool:
    """What the model is shown and what runs, declared in one place."""

    name: str
    description: str
    input_schema: Mapping[str, Any]
    handler: Callable[..., Any]
    """Called with the validated input as keyword arguments; may be sync or async."""
    timeout: float | None = DEFAULT_TOOL_TIMEOUT
    sequential: bool = False
    """Run alone, after the concurrent calls of the same reply (e.g. a DB write)."""
    ends_run: bool = False
    """A successful call ends the run in `finished` (the `finish` tool)."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the handler directly, as the plain function it wraps."""
        return self.handler(*args, **kwargs)

    def to_api(self) -> JSON:
        """The tool definition as the Messages API expects it."""
        return {
            "name": self.name,
            "description": self.description,
            "input_schema": dict(self.input_schema),
        }


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One `tool_use` block the model asked for."""

    id: str
    name: str
    input: Any
    """Usually a dict; anything else is rejected by validation, not by a crash."""

    @classmethod
    def from_block(cls, block: Mapping[str, Any]) -> ToolCall:
        return cls(
            id=str(block.get("id", "")), name=str(block.get("name", "")), input=block.get("input")
        )


@dataclass(frozen=True, slots=True)
class ToolOutcome:
    """The answer to one call, ready to become a `tool_result` block."""

    tool_use_id: str
    name: str
    content: str
    is_error: bool = False
    error_kind: ErrorKind | None = None
    duration_s: float = 0.0
    data: Any = None
    """The handler's raw return value when it was not a string (e.g. `finish`'s input)."""
    extra: JSON = field(default_factory=dict)

    def to_block(self) -> JSON:
        block: JSON = {
            "type": "tool_result",
            "tool_use_id": self.tool_use_id,
            "content": self.content,
        }
        if self.is_error:
            block["is_error"] = True
        return block
