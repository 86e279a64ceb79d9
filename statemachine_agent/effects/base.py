"""The one door through which a run touches the world.

Model calls, tool calls and clock readings all go through an `Effects` object.
The machine and its guards never do I/O, so a durable engine (DBOS, Temporal)
can run the same machine by supplying its own `Effects`, recording each call as
a step it can replay. `InProcessEffects` is the default: call things directly.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, Protocol

from statemachine_agent.models.base import Model, ModelReply, ModelRequest
from statemachine_agent.tools.base import ToolCall, ToolOutcome
from statemachine_agent.tools.registry import ToolRegistry


class Effects(Protocol):
    async def call_model(self, model: Model, request: ModelRequest) -> ModelReply: ...

    async def run_tools(
        self,
        registry: ToolRegistry,
        calls: Sequence[ToolCall],
        on_outcome: Callable[[ToolCall, ToolOutcome], None] | None = None,
    ) -> list[ToolOutcome]: ...

    def monotonic(self) -> float: ...


class InProcessEffects:
    """Runs every effect in this process, right away."""

    def call_model(self, model: Model, request: ModelRequest) -> Coroutine[Any, Any, ModelReply]:
        """The model's own call, handed back to be awaited: no frame of this method
        stays in the chain that every wait inside the call resumes."""
        return model.acomplete(request)

    async def run_tools(
        self,
        registry: ToolRegistry,
        calls: Sequence[ToolCall],
        on_outcome: Callable[[ToolCall, ToolOutcome], None] | None = None,
    ) -> list[ToolOutcome]:
        return await registry.execute_all(calls, on_outcome)

    def monotonic(self) -> float:
        return time.monotonic()
