"""Watching every transition of every run in the process: the seam test tools hook into.

Transition coverage has to see runs wherever they happen: on the caller's event
loop, on the worker thread `Agent.run` uses under a running loop, on a durable
engine's workers. A context variable would not follow a run onto those threads,
so observers are registered process-wide, for the extent of a `with` block
(`watch_transitions`). The engine asks `watching()` before building anything, so
a process that registers nothing pays one truthiness check per transition.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from statemachine_agent.machine.run import TransitionRecord
from statemachine_agent.machine.table import Row

TransitionObserver = Callable[[str, Row, TransitionRecord], None]
"""Called after a row fired, with the run's id, the row and the transition the trail recorded."""

_observers: tuple[TransitionObserver, ...] = ()
_lock = threading.Lock()
_log = logging.getLogger("statemachine_agent")


def watching() -> bool:
    """Whether any observer is registered (checked by the engine on every transition)."""
    return bool(_observers)


@contextmanager
def watch_transitions(observer: TransitionObserver) -> Iterator[None]:
    """Call `observer` for every transition fired in this process until the block ends.

    An observer runs on whatever thread the run does; one that raises is logged
    and does not change the run (a coverage tool must never fail what it measures).
    """
    global _observers
    with _lock:
        _observers = (*_observers, observer)
    try:
        yield
    finally:
        with _lock:
            remaining = list(_observers)
            remaining.remove(observer)
            _observers = tuple(remaining)


def notify(run_id: str, row: Row, record: TransitionRecord) -> None:
    """Tell every registered observer that `row` fired in run `run_id`."""
    for observer in _observers:
        try:
            observer(run_id, row, record)
        except Exception:
            _log.exception("transition observer %r failed on %s", observer, row.key)
