"""Run a run and hand out its events as they happen: `RunStream` (async) and `iter_sync`.

The run is the ordinary run (`_driving.drive`), its table unchanged; the stream
only listens, in two places: the model adapter's deltas (a `listening` context
around the run's task) and the run's audit events (`StreamTap` is one more audit
sink). Leaving the stream early cancels the run through its `CancelToken`, so it
ends in `cancelled` by the table's rows, with what it had streamed kept.
"""

from __future__ import annotations

import asyncio
import dataclasses
import queue
import threading
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator, Mapping
from types import TracebackType
from typing import Any, Generic, NoReturn, Self, TypeVar, cast

from statemachine_agent.machine.calls import STREAMED
from statemachine_agent.machine.cancel import CancelToken
from statemachine_agent.machine.result import OutputT, RunResult
from statemachine_agent.machine.resume import RunAlreadyEndedError
from statemachine_agent.models.streaming import ReplyDelta, listening
from statemachine_agent.stream.events import (
    CallGated,
    ReplyRestarted,
    ReplyStarted,
    RunEnded,
    RunTainted,
    StreamEvent,
    TextDelta,
    ThinkingDelta,
    ToolCallStarted,
    ToolInputComplete,
    ToolResult,
    Transition,
)

Start = Callable[["StreamTap", CancelToken], Coroutine[Any, Any, RunResult[OutputT]]]
"""Drives the run with the tap as an extra audit sink and the token as its cancel."""

Steer = Callable[[str, "str | None"], int]
"""Queues a message (text, sender) for the streamed run; returns its number."""


class StreamTap:
    """An audit sink and a reply listener in one: turns both into stream events.

    It never raises (a raising sink would end the run in `failed`): it only
    builds a frozen event and hands it to `put`.
    """

    def __init__(
        self,
        run_id: str,
        put: Callable[[StreamEvent], None],
        redact: Callable[[Any], Any] = lambda value: value,
    ) -> None:
        """`redact` masks what the audit masks: the audit events the tap hears are
        redacted already, the model's deltas are not (they come from the adapter)."""
        self.run_id = run_id
        self._put = put
        self._redact = redact
        self.iteration = 0
        """The iteration of the streamed model call in flight (or the last one)."""
        self.purpose = "loop"
        """Its purpose: with `iteration`, it names the call (a salvage call carries the
        number of the last loop call, so the number alone does not)."""

    def write(self, record: Mapping[str, Any]) -> None:
        if record.get("run_id", self.run_id) != self.run_id:
            return  # a sub-agent's event: its run is not the one streamed
        event = record.get("event")
        if event == "model.requested" and record.get("purpose", "loop") in STREAMED:
            self.iteration = int(record.get("iteration") or 0)
            self.purpose = str(record.get("purpose", "loop"))
            self._put(ReplyStarted(self.run_id, self.iteration, self.purpose))
        elif event == "transition.fired":
            self._put(Transition(self.run_id, int(record["seq"]), str(record["source"]),
                                 str(record["trigger"]), str(record["dest"]),
                                 dict(record.get("guards") or {}),
                                 int(record.get("iteration") or 0)))  # fmt: skip
        elif event in ("tool.finished", "tool.failed"):
            self._put(ToolResult(self.run_id, int(record.get("iteration") or 0),
                                 str(record["tool_use_id"]), str(record["tool"]),
                                 str(record.get("content", "")), event == "tool.failed",
                                 record.get("error_kind")))  # fmt: skip
        elif event == "tool.skipped":
            self._not_run(record)
        elif event == "taint.entered":
            self._put(RunTainted(self.run_id, int(record.get("iteration") or 0),
                                 str(record["tool"]), str(record["tool_use_id"]),
                                 str(record.get("excerpt", ""))))  # fmt: skip
        elif event == "taint.gated":
            self._put(CallGated(self.run_id, int(record.get("iteration") or 0),
                                str(record["tool"]), str(record["tool_use_id"]),
                                str(record.get("action", ""))))  # fmt: skip

    def _not_run(self, record: Mapping[str, Any]) -> None:
        """A started call that will never run is answered on the stream as in the history
        (a salvage reply's calls: the run had stopped), so nobody waits for its result."""
        purpose = str(record.get("purpose", "loop"))
        if purpose not in STREAMED:
            return  # its calls were never shown started
        iteration, content = int(record.get("iteration") or 0), str(record.get("content", ""))
        for call in record.get("calls") or ():
            self._put(ToolResult(self.run_id, iteration, str(call["tool_use_id"]),
                                 str(call["tool"]), content, True, "not_run",
                                 purpose))  # fmt: skip

    def close(self) -> None:
        """Nothing to close: the stream ends with the run."""

    def on_delta(self, delta: ReplyDelta) -> None:
        run, step, why, redact = self.run_id, self.iteration, self.purpose, self._redact
        if delta.kind == "text":
            self._put(TextDelta(run, step, delta.index, redact(delta.text), why))
        elif delta.kind == "thinking":
            self._put(ThinkingDelta(run, step, delta.index, redact(delta.text), why))
        elif delta.kind == "tool_use_started":
            self._put(ToolCallStarted(run, step, delta.tool_use_id, redact(delta.name), why))
        elif delta.kind == "tool_use_complete":
            self._put(ToolInputComplete(run, step, delta.tool_use_id, redact(delta.name),
                                        redact(delta.input), why))  # fmt: skip
        else:
            self._put(ReplyRestarted(run, step, why))


_DONE = object()

T = TypeVar("T")


def _redacted(result: RunResult[OutputT], redact: Callable[[Any], Any]) -> RunResult[OutputT]:
    """The result as a `run_ended` event carries it: its texts and values masked as the
    audit masks them (the caller's own `RunResult`, `stream.result`, stays whole)."""
    return dataclasses.replace(
        result,
        text=redact(result.text),
        reason=redact(result.reason),
        messages=redact(result.messages),
        data=redact(result.data),
        details=redact(result.details),
        output=redact(result.output),
    )


class RunStream(Generic[OutputT]):
    """`agent.astream(...)`: an async iterator of a run's events, `RunEnded` last.

    Generic in the agent's output type, which its `RunEnded` and `result` carry.

    The run starts at the first `__anext__`. Leaving early (`break`, an exception,
    `aclose()`, leaving `async with`) cancels it: it ends in `cancelled`, the text
    streamed so far kept in its result and audit trail; `aclose()` waits for that
    end and `result` then holds it.
    """

    def __init__(
        self,
        run_id: str,
        start: Start[OutputT],
        cancel: CancelToken,
        redact: Callable[[Any], Any] = lambda value: value,
        steer: Steer | None = None,
    ) -> None:
        """`redact` is the agent's audit redactor: every event handed out goes through it,
        so a stream (sent to a browser, say) shows no more than the audit file does.
        `steer` queues a message for the run (see `RunStream.steer`)."""
        self.run_id = run_id
        self._start = start
        self._token = cancel
        self._redact = redact
        self._steer = steer
        self._queue: asyncio.Queue[Any] = asyncio.Queue()
        self._task: asyncio.Task[RunResult[OutputT]] | None = None
        self._ended = False
        self.result: RunResult[OutputT] | None = None
        """The run's result, once it ended."""

    def __aiter__(self) -> Self:
        return self

    def __iter__(self) -> NoReturn:
        """A plain `for` over the stream is a mistake with one of two fixes: say both."""
        raise TypeError(
            "a RunStream is asynchronous: iterate it with `async for event in "
            "agent.astream(...)`, or use `for event in agent.stream(...)` in synchronous code"
        )

    async def __anext__(self) -> StreamEvent[OutputT]:
        if self._ended:
            raise StopAsyncIteration
        if self._task is None:
            self._task = asyncio.ensure_future(self._run())
        item = await self._queue.get()
        if item is not _DONE:
            return item  # type: ignore[no-any-return]
        self._ended = True
        self.result = await self._task
        return RunEnded(self.run_id, _redacted(self.result, self._redact))

    async def _run(self) -> RunResult[OutputT]:
        tap = StreamTap(self.run_id, self._queue.put_nowait, self._redact)
        try:
            with listening(tap.on_delta):
                return await self._start(tap, self._token)
        finally:
            self._queue.put_nowait(_DONE)

    def steer(self, text: str, *, by: str | None = None) -> int:
        """Add a user message to the streamed run, as `Agent.steer` does: delivered at its
        next `perceive` (whose `steering_waiting` transition shows on this stream).
        Before the first event it goes in with the prompt. Returns its number in the
        run's queue; once the run has ended, raises `RunAlreadyEndedError`."""
        if self.result is not None or (self._task is not None and self._task.done()):
            raise RunAlreadyEndedError(
                f"run {self.run_id!r} has ended: a steered message would never be read"
            )
        if self._steer is None:
            raise TypeError("this RunStream was made without a way to steer its run")
        return self._steer(text, by)

    async def asteer(self, text: str, *, by: str | None = None) -> int:
        """`steer` from async code (the store is written on a worker thread)."""
        return await asyncio.to_thread(self.steer, text, by=by)

    async def aclose(self) -> None:
        """Stop listening; a run still going is cancelled, and its end awaited."""
        self._ended = True
        if self._task is None:
            return
        if not self._task.done():
            self._token.cancel()
        # Shielded: a caller being cancelled itself (a server whose client hung up)
        # must not cancel the run's task mid-step; the token ends the run in order.
        self.result = await asyncio.shield(self._task)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    def __del__(self) -> None:
        """Dropped mid-run (a `break` without `aclose`): the run is cancelled all the same."""
        task = self._task
        if task is not None and not task.done():
            self._token.cancel()


def iter_sync(
    make: Callable[[], AsyncIterator[StreamEvent[T]]], cancel: CancelToken
) -> Iterator[StreamEvent[T]]:
    """`agent.stream(...)`: the events of a run driven on a worker thread's event loop.

    `make` builds the async stream, whose run `cancel` cancels. Leaving the loop
    early (`break`, closing the generator) cancels the run and waits for its end,
    so no run outlives its stream.
    """
    events: queue.Queue[Any] = queue.Queue()
    stop = threading.Event()

    async def pump() -> None:
        stream = make()
        try:
            async for event in stream:
                events.put(event)
                if stop.is_set():
                    break
        finally:
            await cast(Any, stream).aclose()
            events.put(_DONE)

    def work() -> None:
        try:
            asyncio.run(pump())
        except BaseException as exc:  # handed to the consumer, not lost in the thread
            events.put(exc)
            events.put(_DONE)

    thread = threading.Thread(target=work, name="statemachine-agent-stream", daemon=True)
    thread.start()
    try:
        while True:
            item = events.get()
            if item is _DONE:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        if thread.is_alive():
            stop.set()
            cancel.cancel()
            thread.join()
