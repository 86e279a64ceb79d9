"""`Toolset`: a source of tools known only at run time (an MCP server's).

A plain `Tool` is declared in code, so the registry checks it when the agent is
built. A toolset's tools are listed by a server, so the registry asks for them
when a run starts and again whenever the toolset says its list changed
(`stale`); the tools it gets are registered and executed like any other.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any

from statemachine_agent.errors import Error

from .base import Tool


class ToolsetError(Error):
    """A toolset could not list its tools (its server did not start or answer)."""


class Toolset(ABC):
    """Tools listed at run time; subclasses say how (see `MCPToolset`)."""

    name: str
    """A label for events and error messages."""

    @property
    @abstractmethod
    def stale(self) -> bool:
        """Whether the tools should be listed (again) before the next model call."""

    @property
    def may_require_approval(self) -> bool:
        """Whether some of its tools may need approval (so runs need a store to pause)."""
        return False

    @property
    def may_defer(self) -> bool:
        """Whether some of its tools may be deferrable, so the agent stages their calls
        and commits them (its tools are listed only when a run starts)."""
        return False

    @property
    def notes(self) -> Mapping[str, Any]:
        """What the last listing changed from the source's own list (names mapped, tools
        left out), for each run's `toolset.listed` event; empty when nothing changed."""
        return {}

    @abstractmethod
    async def list_tools(self) -> Sequence[Tool]:
        """The tools as of now; raises `ToolsetError` when they cannot be had."""

    async def aclose(self) -> None:  # noqa: B027 - a toolset without resources has nothing to close
        """Release what the toolset holds (a connection, a server process)."""
