"""What a streaming model adapter tells while a reply is being written.

A streamed call still returns one whole `ModelReply` (the engine and the history
see the same reply either way); on the way it hands `ReplyDelta`s to whoever
listens in the run's task: `Agent.astream`, which turns them into its events. The
listener is a context variable, not a parameter of `Model.acomplete`, so every
effects engine (in-process, DBOS steps) passes it along without knowing of it,
and a model called where nobody listens does not stream unless asked to.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

DeltaKind = Literal["text", "thinking", "tool_use_started", "tool_use_complete", "restarted"]


@dataclass(frozen=True, slots=True)
class ReplyDelta:
    """One piece of a reply in the making.

    - `text` / `thinking`: `text` was added to block `index`;
    - `tool_use_started`: block `index` is a call of tool `name` with id `tool_use_id`;
    - `tool_use_complete`: its `input` is complete;
    - `restarted`: the stream died and the call is being made again: discard what this
      call streamed so far.
    """

    kind: DeltaKind
    index: int = 0
    text: str = ""
    tool_use_id: str = ""
    name: str = ""
    input: Any = None


Listener = Callable[[ReplyDelta], None]


@dataclass(slots=True)
class _Listening:
    listener: Listener
    partial: list[str] = field(default_factory=list)
    """The text the call in flight has streamed so far (kept if it is cancelled)."""


_LISTENING: contextvars.ContextVar[_Listening | None] = contextvars.ContextVar(
    "statemachine_agent_reply_listener", default=None
)


@contextlib.contextmanager
def listening(listener: Listener) -> Iterator[None]:
    """Deliver the deltas of the model calls made inside the block to `listener`."""
    token = _LISTENING.set(_Listening(listener))
    try:
        yield
    finally:
        _LISTENING.reset(token)


@contextlib.contextmanager
def muted() -> Iterator[None]:
    """Nobody listens to the calls made inside the block: a side call (a critic's, a
    summary's, a verifier's) is not the reply the watcher is reading."""
    token = _LISTENING.set(None)
    try:
        yield
    finally:
        _LISTENING.reset(token)


def listener() -> Listener | None:
    """Who listens to the current call's deltas (None: nobody; stream only if asked)."""
    current = _LISTENING.get()
    return current.listener if current is not None else None


def begin_reply() -> None:
    """A streamed call starts: what an earlier one streamed is no longer partial."""
    current = _LISTENING.get()
    if current is not None:
        current.partial.clear()


def partial_text() -> str:
    """The text streamed so far by the call in flight (or the last one, if it was cut)."""
    current = _LISTENING.get()
    return "".join(current.partial) if current is not None else ""


def deliver(delta: ReplyDelta) -> None:
    """Hand `delta` to the listener, if any, keeping the text of the reply so far."""
    current = _LISTENING.get()
    if current is None:
        return
    if delta.kind == "text":
        current.partial.append(delta.text)
    elif delta.kind == "restarted":
        current.partial.clear()
    current.listener(delta)
