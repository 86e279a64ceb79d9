"""The order a reply's tool calls run in, kept identical on every engine.

`ToolRegistry.execute_all` runs consecutive ordinary calls concurrently and a
`sequential` tool's call alone, after the batch before it. An engine runs each
call as its own step or activity but must keep that order, and must start the
calls of a batch in the same order every time: DBOS numbers steps as they
start and Temporal matches commands to history by order, so a replay that
started them differently would not find its record.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence

from statemachine_agent.tools.base import ToolCall, ToolOutcome
from statemachine_agent.tools.registry import ToolRegistry

StartCall = Callable[[ToolCall], Awaitable[ToolOutcome]]
"""Starts one call; called synchronously, in the calls' order, before anything is awaited."""


async def run_in_batches(
    registry: ToolRegistry,
    calls: Sequence[ToolCall],
    start: StartCall,
    on_outcome: Callable[[ToolCall, ToolOutcome], None] | None = None,
) -> list[ToolOutcome]:
    """Answer every call in `execute_all`'s order, reporting each outcome as it arrives."""
    outcomes: list[ToolOutcome | None] = [None] * len(calls)
    batch: list[int] = []

    async def one(index: int, pending: Awaitable[ToolOutcome]) -> None:
        outcome = await pending
        outcomes[index] = outcome
        if on_outcome is not None:
            on_outcome(calls[index], outcome)

    async def flush() -> None:
        started = [one(i, start(calls[i])) for i in batch]
        batch.clear()
        await asyncio.gather(*started)

    for index, call in enumerate(calls):
        known = registry.get(call.name)
        if known is not None and known.sequential:
            await flush()
            await one(index, start(call))
        else:
            batch.append(index)
    await flush()
    return [outcome for outcome in outcomes if outcome is not None]
