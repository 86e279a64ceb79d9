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

A task meant to serve later calls (an MCP toolset's session) is started with
`create_kept_task`: on a kept loop it and the tasks it starts are not cancelled
when a call returns, and its `close` is awaited when the loop is closed, before
anything left is cancelled. On any other loop it is an ordinary task.
`kept_loop_caller` lets another thread run a coroutine on such a loop even while
it is idle between its thread's calls (to close a session from a shutdown hook).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import os
import threading
import weakref
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

Result = TypeVar("Result")

Closer = Callable[[], Coroutine[Any, Any, None]]

_KEPT: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "statemachine_agent_kept", default=False
)
"""Set in the context of a kept task, so the tasks it starts (which copy it) are kept too."""


class _ThreadLoop:
    """A thread's kept event loop, and the worker used when that thread's own loop runs."""

    def __init__(self, inherited: _ThreadLoop | None = None) -> None:
        self.pid = os.getpid()
        """The process that made it: a child forked since makes a loop of its own."""
        self.inherited = inherited
        """In a forked child, the parent's loop, kept unused and never closed: its epoll
        instance and its clients' connections are shared with the parent, and closing
        them here (a TLS close_notify) would break the parent's."""
        if inherited is not None:
            inherited.finalizer.detach()
        self.runner = asyncio.Runner()
        self.worker: concurrent.futures.ThreadPoolExecutor | None = None
        self.workers: list[concurrent.futures.ThreadPoolExecutor] = []
        self.kept: weakref.WeakSet[asyncio.Task[Any]] = weakref.WeakSet()
        """Tasks that outlive the call that started them (see `create_kept_task`)."""
        self.closers: dict[asyncio.Task[Any], Closer] = {}
        """How to end each kept task started by `create_kept_task`, awaited at close."""
        self.busy = threading.Lock()
        """Held while a thread runs the loop: its owner for a call, or another thread
        that `kept_loop_caller` let run a coroutine on it while it was idle."""
        self._factory_set = False
        self.finalizer: weakref.finalize[Any, _ThreadLoop] = weakref.finalize(
            self, _close, self.runner, self.workers, self.closers
        )

    def run(self, coro: Coroutine[Any, Any, Result]) -> Result:
        if not self._factory_set:
            self.runner.get_loop().set_task_factory(_kept_task_factory(self.kept))
            self._factory_set = True
        with self.busy:
            try:
                # A copy of the caller's context, as `asyncio.run` gives: the runner's own
                # context would carry one call's context variables into the next.
                return self.runner.run(coro, context=contextvars.copy_context())
            finally:
                _cancel_leftovers(self.runner.get_loop(), self.kept)

    def owns(self, loop: asyncio.AbstractEventLoop) -> bool:
        """Whether `loop` is this kept loop."""
        return self._factory_set and self.runner.get_loop() is loop

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
    if holder is None or holder.pid != os.getpid():
        holder = _local.loop = _ThreadLoop(holder)
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        running = False
    else:
        running = True
    # Not run inside the `except` block: its RuntimeError would be the context of every
    # exception raised in the call, and one kept by a session (MCP) would keep this
    # frame, and so the holder and the thread's loop, alive after the thread ended.
    return holder.run_elsewhere(coro) if running else holder.run(coro)


def create_kept_task(
    coro: Coroutine[Any, Any, None], *, name: str, close: Closer
) -> asyncio.Task[None]:
    """Start `coro` as a task that may serve later sync calls on this loop.

    On a thread's kept loop, neither the task nor the tasks it starts are cancelled
    when the sync call that started it returns, and `close()` is awaited when the
    loop is closed (the thread ended, or at exit). On any other loop this is
    `create_task`: the task ends with its loop like any other.
    """
    context = contextvars.copy_context()
    context.run(_KEPT.set, True)
    loop = asyncio.get_running_loop()
    task = loop.create_task(coro, name=name, context=context)
    holder: _ThreadLoop | None = getattr(_local, "loop", None)
    if holder is not None and holder.owns(loop):
        closers = holder.closers  # not the holder: its finalizer must run when the thread ends
        closers[task] = close
        task.add_done_callback(lambda done: closers.pop(done, None))
    return task


Caller = Callable[[Callable[[], Coroutine[Any, Any, None]]], "concurrent.futures.Future[None]"]
"""Runs a coroutine (made by the function given) on a kept loop from another thread."""


def kept_loop_caller() -> Caller | None:
    """For code on this thread's kept loop: how other threads may run a coroutine on it.

    None on any other loop. The caller returns at once, with a future that is done
    when the coroutine has ended (or at once, when the loop has closed since; its
    kept tasks' closers ran then). While the loop runs (its thread is in a call), the
    coroutine is sent to it; while it is idle (its thread is between calls, in a pool
    or a shutdown), a helper thread runs the loop for it, holding `busy` so its own
    thread waits for that rather than run the loop at the same time. The caller holds
    the loop's holder weakly, so it never keeps a thread's loop open after the thread.
    """
    loop = asyncio.get_running_loop()
    holder: _ThreadLoop | None = getattr(_local, "loop", None)
    if holder is None or not holder.owns(loop):
        return None
    ref = weakref.ref(holder)

    def call(make: Callable[[], Coroutine[Any, Any, None]]) -> concurrent.futures.Future[None]:
        done: concurrent.futures.Future[None] = concurrent.futures.Future()

        def work() -> None:
            try:
                _call_on(ref, make)
            except BaseException as exc:  # handed to whoever waits
                done.set_exception(exc)
            else:
                done.set_result(None)

        threading.Thread(target=work, name="statemachine-agent-call", daemon=True).start()
        return done

    return call


def _call_on(
    ref: weakref.ReferenceType[_ThreadLoop], make: Callable[[], Coroutine[Any, Any, None]]
) -> None:
    """Run `make()` on the kept loop of `ref`, running or idle (see `kept_loop_caller`)."""
    holder = ref()
    if holder is None:
        return  # the thread ended: its loop closed, and its kept tasks' closers ran
    loop = holder.runner.get_loop()
    sent: concurrent.futures.Future[None] | None = None
    while not loop.is_closed():
        if holder.busy.acquire(timeout=0.02):
            try:
                if loop.is_closed():
                    return
                # Idle: run it here; or, if it was sent to a run that has since ended,
                # run the loop until what was sent is done.
                holder.runner.run(make() if sent is None else _until(sent))
            finally:
                holder.busy.release()
            return
        if sent is None and loop.is_running():
            sent = asyncio.run_coroutine_threadsafe(make(), loop)
        if sent is not None:
            with contextlib.suppress(concurrent.futures.TimeoutError):
                sent.result(timeout=0.02)
                return


async def _until(sent: concurrent.futures.Future[None]) -> None:
    await asyncio.wrap_future(sent)


def _kept_task_factory(kept: weakref.WeakSet[asyncio.Task[Any]]) -> Any:
    """A task factory noting the tasks made in (or from) a kept task's context."""

    def factory(
        loop: asyncio.AbstractEventLoop,
        coro: Coroutine[Any, Any, Any],
        context: contextvars.Context | None = None,
    ) -> asyncio.Task[Any]:
        task = asyncio.Task(coro, loop=loop, context=context)
        if context.get(_KEPT, False) if context is not None else _KEPT.get():
            kept.add(task)
        return task

    return factory


def serving_blocking_call() -> bool:
    """Whether the running loop is this thread's kept loop: a sync call (`Agent.run`) is
    being served, and its caller waits on it. A model may then make its HTTP call with
    the SDK's sync client on a worker thread (see `AnthropicModel.acomplete`)."""
    holder: _ThreadLoop | None = getattr(_local, "loop", None)
    return holder is not None and holder.owns(asyncio.get_running_loop())


def thread_loop() -> asyncio.AbstractEventLoop | None:
    """This thread's kept loop, if a sync call made one (for tests and diagnostics)."""
    holder: _ThreadLoop | None = getattr(_local, "loop", None)
    return None if holder is None else holder.runner.get_loop()


def _cancel_leftovers(
    loop: asyncio.AbstractEventLoop, kept: weakref.WeakSet[asyncio.Task[Any]]
) -> None:
    """Cancel the tasks a call left running and let them finish, as `asyncio.run` does
    (all but the kept ones)."""
    if loop.is_closed():
        return
    leftovers = [task for task in asyncio.all_tasks(loop) if not task.done() and task not in kept]
    if not leftovers:
        return
    for task in leftovers:
        task.cancel()
    loop.run_until_complete(asyncio.gather(*leftovers, return_exceptions=True))


def _close(
    runner: asyncio.Runner,
    workers: list[concurrent.futures.ThreadPoolExecutor],
    closers: dict[asyncio.Task[Any], Closer],
) -> None:
    """Close a kept loop (and its workers' loops): kept tasks, async generators, the loop."""
    for worker in workers:
        worker.shutdown(wait=True)

    def shut() -> None:
        if closers:
            runner.run(_end_kept(list(closers.values())))
        runner.close()

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        shut()
        return
    # Finalized from a thread whose own loop is running: close it from a helper thread.
    closer = threading.Thread(target=shut, name="statemachine-agent-close")
    closer.start()
    closer.join()


async def _end_kept(closers: list[Closer]) -> None:
    """Await each kept task's closer; one that fails does not keep the others open."""
    for close in closers:
        with contextlib.suppress(Exception):  # closing at exit: nothing is left to tell
            await close()
