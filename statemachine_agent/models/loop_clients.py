"""One async SDK client per event loop.

Each `Agent.run` runs in an event loop of its own, and an SDK client's pooled
keep-alive connections cannot outlive the loop that opened them ("Event loop is
closed" on the next run). So a model keeps one async client per running loop
and closes it when that loop shuts down (`asyncio.run` finalizes open async
generators then), leaving nothing for the garbage collector.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Generic, TypeVar

Client = TypeVar("Client")


class LoopClients(Generic[Client]):
    """Makes, hands out and closes one client per event loop."""

    def __init__(
        self, make: Callable[[], Client], close: Callable[[Client], Awaitable[None]]
    ) -> None:
        self._make = make
        self._close = close
        self._clients: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, tuple[Client, AsyncIterator[None]]
        ] = weakref.WeakKeyDictionary()

    def __len__(self) -> int:
        """How many loops have a live client (0 once every loop has shut down)."""
        return len(self._clients)

    def current(self) -> Client | None:
        """The running loop's client, if it has one already (no await needed)."""
        entry = self._clients.get(asyncio.get_running_loop())
        return None if entry is None else entry[0]

    async def get(self) -> Client:
        """The running loop's client, made (and its closing arranged) on first use."""
        loop = asyncio.get_running_loop()
        entry = self._clients.get(loop)
        if entry is None:
            client = self._make()
            closer = self._close_when_loop_ends(loop, client)
            await anext(closer)
            entry = self._clients[loop] = (client, closer)
        return entry[0]

    async def _close_when_loop_ends(
        self, loop: asyncio.AbstractEventLoop, client: Client
    ) -> AsyncIterator[None]:
        """Parked at its `yield` until the loop shuts down its async generators; then
        forgets the client (which would otherwise keep the closed loop alive) and closes it."""
        try:
            yield
        finally:
            self._clients.pop(loop, None)
            await self._close(client)
