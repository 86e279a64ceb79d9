"""The sync API's event loops: one per thread, kept between calls.

`Agent.run` used to start a new event loop per call (`asyncio.run`), so a model
made a new async SDK client for every run (a new TLS context, ~20 ms of CPU,
and new connections: against the real API a new handshake per run). Now each
thread keeps one loop for its sync calls, so a model's per-loop client
(`models/loop_clients.py`) and its keep-alive connections serve run after run.

What `asyncio.run` guaranteed is kept: tasks a run left behind are cancelled
when its call returns (a later call never runs them), and nothing is left open
at exit. A thread's loop is closed -- its async generators shut down, which
closes the clients parked on them -- when the thread ends (its thread-local
holder is dropped) or at interpreter exit (`weakref.finalize` runs at exit).

Called where an event loop is already running (a notebook, a framework
callback), the call runs on a worker thread kept for the calling thread, with
that worker's own kept loop; nested calls from inside such a run get their own
worker, so they never wait on a busy one.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import threading
import weakref
from collections.abc import Coroutine
from typing import Any, TypeVar

Result = TypeVar("Result")


class _ThreadLoop:
    """A thread's kept event loop, and the worker used when that thread's own loop runs."""

    def __init__(self) -> None:
        self.runner = asyncio.Runner()
        self.worker: concurrent.futures.ThreadPoolExecutor | None = None
        self.workers: list[concurrent.futures.ThreadPoolExecutor] = []
        weakref.finalize(self, _close, self.runner, self.workers)

    def run(self, coro: Coroutine[Any, Any, Result]) -> Result:
        try:
            # A copy of the caller's context, as `asyncio.run` gives: the runner's own
            # context would carry one call's context variables into the next.
            return self.runner.run(coro, context=contextvars.copy_context())
        finally:
            _cancel_leftovers(self.runner.get_loop())

    def run_elsewhere(self, coro: Coroutine[Any, Any, Result]) -> Result:
        if self.worker is None:
            self.worker = concurrent.futures.ThreadPoolExecutor(
                max_workers=1, thread_name_prefix="statemachine-agent-sync"
            )
            self.workers.append(self.worker)
        # The caller's context variables go along, as they do on the caller's own thread.
        context = contextvars.copy_context()
        return self.worker.submit(context.run, run_blocking, coro).result()


_local = threading.local()


def run_blocking(coro: Coroutine[Any, Any, Result]) -> Result:
    """Run `coro` to its end on this thread's kept loop (see the module docstring)."""
    holder: _ThreadLoop | None = getattr(_local, "loop", None)
    if holder is None:
        holder = _local.loop = _ThreadLoop()
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return holder.run(coro)
    return holder.run_elsewhere(coro)


def thread_loop() -> asyncio.AbstractEventLoop | None:
    """This thread's kept loop, if a sync call made one (for tests and diagnostics)."""
    holder: _ThreadLoop | None = getattr(_local, "loop", None)
    return None if holder is None else holder.runner.get_loop()


def _cancel_leftovers(loop: asyncio.AbstractEventLoop) -> None:
    """Cancel the tasks a call left running and let them finish, as `asyncio.run` does."""
    if loop.is_closed():
        return
    leftovers = [task for task in asyncio.all_tasks(loop) if not task.done()]
    if not leftovers:
        return
    for task in leftovers:
        task.cancel()
    loop.run_until_complete(asyncio.gather(*leftovers, return_exceptions=True))


def _close(runner: asyncio.Runner, workers: list[concurrent.futures.ThreadPoolExecutor]) -> None:
    """Close a kept loop (and its workers' loops): async generators, then the loop."""
    for worker in workers:
        worker.shutdown(wait=True)
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        runner.close()
        return
    # Finalized from a thread whose own loop is running: close it from a helper thread.
    closer = threading.Thread(target=runner.close, name="statemachine-agent-close")
    closer.start()
    closer.join()
