"""Running one tool handler: as a task of its own under the tool's timeout, a sync
handler on a daemon worker thread, and its return value made into the text the model
reads. The registry (`registry.py`) decides what becomes of a failure; this module only
says how the handler ended.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import copy
import dataclasses
import enum
import inspect
import json
import time
from collections.abc import Callable, Mapping
from datetime import date, datetime
from datetime import time as dt_time
from typing import Any

import pydantic

from .base import Tool, ToolCall
from .threads import DaemonWorkers

EMPTY_RESULT = "(empty result)"
"""Said instead of nothing, so the model knows the tool ran and found nothing."""

_ATOMIC = frozenset({str, int, float, bool, type(None)})
"""Values that cannot change: an input made of only these needs no deep copy."""

_CANCEL_GRACE_S = 1.0
"""How long a timed-out async handler gets to honour its cancellation (at most its
own timeout) before its task is abandoned."""


class HandlerTimeoutError(Exception):
    """Our deadline passed; distinct from a `TimeoutError` the handler raised itself.

    A handler of ours with a deadline of its own (an MCP call, whose deadline progress
    renews) raises it too, with the text the model should read.
    """


class AbandonedError(Exception):
    """The handler outlived its timeout and ignored cancellation; we stopped waiting."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"abandoned after {seconds:.1f} s")
        self.seconds = seconds


class EscapedError(Exception):
    """A handler raised a `BaseException` (`SystemExit`, ...): carried as an ordinary error."""

    def __init__(self, original: BaseException) -> None:
        super().__init__(describe_exc(original))
        self.original = original


async def run_handler(
    found: Tool, call: ToolCall, extras: Mapping[str, Any], workers: DaemonWorkers
) -> Any:
    """The handler's return value, run as a task of its own under the tool's timeout.

    The handler gets a deep copy of the input: a handler that keeps what it was
    given and changes it later must not change the call the history, the
    checkpoint and the audit trail recorded. Its own task is what lets a
    handler that ignores cancellation be abandoned instead of holding the run.
    """
    kwargs = dict(call.input)
    if not all(type(value) in _ATOMIC for value in kwargs.values()):
        kwargs = copy.deepcopy(kwargs)  # a shallow copy is already a deep one otherwise
    kwargs.update(extras)
    task = asyncio.ensure_future(_guarded(found.handler, kwargs, workers))
    task.add_done_callback(_retrieve)
    started = time.perf_counter()
    try:
        done, _ = await asyncio.wait({task}, timeout=found.timeout)
    except asyncio.CancelledError:
        # Our own cancellation: tell the handler, give it the grace period to stop,
        # then abandon it; the cancellation goes on either way.
        task.cancel()
        try:
            await asyncio.wait({task}, timeout=_grace(found))
        finally:
            _abandon(task)
        raise
    if done:
        return task.result()
    task.cancel()
    try:
        await asyncio.wait({task}, timeout=_grace(found))
    finally:
        abandoned = not task.done()
        _abandon(task)
    if abandoned:
        raise AbandonedError(time.perf_counter() - started)
    raise HandlerTimeoutError


def _grace(found: Tool) -> float:
    """How long a cancelled handler may take to stop: at most as long as it could run."""
    return min(_CANCEL_GRACE_S, float(found.timeout or _CANCEL_GRACE_S))


async def _guarded(
    handler: Callable[..., Any], kwargs: dict[str, Any], workers: DaemonWorkers
) -> Any:
    """Await the handler; a `BaseException` it raises becomes `EscapedError`.

    asyncio re-raises a task's `SystemExit` or `KeyboardInterrupt` out of the
    event loop itself, so the conversion has to happen inside the task. Sync
    handlers get the same conversion on their thread: one raise, one outcome.
    """
    try:
        if inspect.iscoroutinefunction(handler):
            result = await handler(**kwargs)
        else:
            result = await _run_in_thread(workers, handler, kwargs)
        if inspect.isawaitable(result):
            # A sync callable that returned a coroutine (e.g. a wrapped async function).
            result = await result
    except (Exception, asyncio.CancelledError):
        raise
    except BaseException as exc:
        raise EscapedError(exc) from None
    return result


def _abandon(task: asyncio.Future[Any]) -> None:
    """Stop awaiting a task that ignored its cancellation, and close its coroutine.

    Closing throws `GeneratorExit` where it waits, which ends a handler that only
    swallows `CancelledError`; otherwise the loop's own shutdown, which waits
    for every task, would hang on it. A handler that swallows even that, or
    work it handed to threads, may run on: the outcome says so.
    """
    if task.done():
        return
    coro = task.get_coro() if isinstance(task, asyncio.Task) else None
    if coro is not None and inspect.iscoroutine(coro):
        # It may answer with "coroutine ignored GeneratorExit", or with the error
        # `_guarded` makes of it: either way we are done with it.
        with contextlib.suppress(Exception):
            coro.close()
    # Wake the task (its timer may have gone with the coroutine) so it ends too.
    task.cancel()


def _retrieve(task: asyncio.Future[Any]) -> None:
    """Mark a finished handler task's exception as seen (its outcome says what happened)."""
    if not task.cancelled():
        task.exception()


async def _run_in_thread(
    workers: DaemonWorkers, fn: Callable[..., Any], kwargs: dict[str, Any]
) -> Any:
    """Run a sync handler on a daemon worker thread and await its result.

    A thread nobody waits for any more just finishes, or dies with the process
    (see `threads.py`). It cannot be killed earlier: Python has no way to stop
    a thread.
    """
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Any] = loop.create_future()
    context = contextvars.copy_context()  # keep e.g. structlog's bound context

    def settle(error: BaseException | None, value: Any) -> None:
        if future.done():  # cancelled: the call timed out or the run was cancelled
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(value)

    def work() -> None:
        error: BaseException | None = None
        value: Any = None
        try:
            value = context.run(fn, **kwargs)
        except Exception as exc:
            error = exc
        except BaseException as exc:  # SystemExit etc. must not escape into the loop
            error = EscapedError(exc)
        with contextlib.suppress(RuntimeError):  # the loop closed: nobody is waiting
            loop.call_soon_threadsafe(settle, error, value)

    workers.submit(work)
    return await future


def cancel_requested() -> bool:
    task = asyncio.current_task()
    return task is None or task.cancelling() > 0


def render(value: Any) -> tuple[str, Any]:
    """The text the model reads, and the raw value kept for the engine (None for text)."""
    if value is None:
        return EMPTY_RESULT, None
    if isinstance(value, str):
        return (value if value.strip() else EMPTY_RESULT), None
    try:
        text = json.dumps(value, ensure_ascii=False, default=_json_default)
    except (TypeError, ValueError):  # e.g. non-string keys or a reference cycle
        text = str(value)
    return (text if text.strip() else EMPTY_RESULT), value


def _json_default(value: Any) -> Any:
    """Readable JSON for common non-JSON values; `str()` for the rest."""
    if isinstance(value, pydantic.BaseModel):
        return value.model_dump(mode="json")
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, datetime | date | dt_time):
        return value.isoformat()
    if isinstance(value, set | frozenset | tuple):
        return list(value)
    return str(value)


def describe_exc(exc: BaseException) -> str:
    message = str(exc).strip()
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__
