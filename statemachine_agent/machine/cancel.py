"""`CancelToken`: how a host asks a run to stop, from any thread.

A leaf module (standard library only): the engine, the stream, the agent and the
sub-agent feature all take a token, and none of them need import the engine,
with its phases, to get one.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class CancelToken:
    """Asks a run to stop at its next transition boundary, from any thread.

    A model call in flight is cancelled at once (its reply would be discarded
    anyway); tools in flight are left to finish so every tool_use gets its result,
    except past a deadline (`cancel_after`): a deadline is a promise about time,
    so its tools are cancelled and abandoned, each answered as "abandoned after
    N s; it may still be running".
    """

    def __init__(self) -> None:
        self._cancelled = False
        self._deadline = False
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []

    @property
    def cancelled(self) -> bool:
        return self._cancelled

    def interrupts(self, phase: object) -> bool:
        """Whether this token's cancellation abandons the work of an interruptible phase: a
        deadline always does; a plain cancel not for a phase marked `deadline_only` (act:
        after `cancel()` the tools in flight are left to finish)."""
        return self._deadline or not getattr(phase, "deadline_only", False)

    def cancel_after(self, seconds: float) -> None:
        """Cancel once `seconds` have passed (a deadline for the run: tools are abandoned)."""
        self._deadline = True
        timer = threading.Timer(seconds, self.cancel)
        timer.daemon = True
        timer.start()

    def cancel(self) -> None:
        self._cancelled = True
        waiters, self._waiters = self._waiters, []
        for loop, future in waiters:
            loop.call_soon_threadsafe(_resolve, future)

    async def race(self, work: Coroutine[Any, Any, T]) -> tuple[bool, T | None]:
        """Await `work` unless cancellation comes first: `(True, result)`, or `(False, None)`
        with the work cancelled. It knows nothing of states; the phase decides what an
        abandoned piece of work means."""
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[None] = loop.create_future()
        self._waiters.append((loop, waiter))
        if self._cancelled:
            _resolve(waiter)
        task: asyncio.Task[T] = asyncio.ensure_future(work)
        try:
            pending: set[asyncio.Future[Any]] = {task, waiter}
            await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
        finally:
            if (loop, waiter) in self._waiters:
                self._waiters.remove((loop, waiter))
        if task.done():
            return True, task.result()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        return False, None


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
