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
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from statemachine_agent.machine.run import TransitionRecord
from statemachine_agent.machine.table import Row

if TYPE_CHECKING:
    from statemachine_agent.machine.settings import RunSettings
    from statemachine_agent.tools.base import Tool

TransitionObserver = Callable[[str, Row, TransitionRecord], None]
"""Called after a row fired, with the run's id, the row and the transition the trail recorded."""

RunObserver = Callable[[str, "RunSettings", "Iterable[Tool]"], None]
"""Called as a run is driven (started or resumed), with its id, settings and the tools
it offers: what coverage needs to know which rows the agents that ran can reach."""

_observers: tuple[TransitionObserver, ...] = ()
_run_observers: tuple[RunObserver, ...] = ()
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


def watching_runs() -> bool:
    """Whether any run observer is registered (checked each time a run is driven)."""
    return bool(_run_observers)


@contextmanager
def watch_runs(observer: RunObserver) -> Iterator[None]:
    """Call `observer` for every run driven in this process until the block ends (a
    sub-agent's runs included); one that raises is logged, the run goes on."""
    global _run_observers
    with _lock:
        _run_observers = (*_run_observers, observer)
    try:
        yield
    finally:
        with _lock:
            remaining = list(_run_observers)
            remaining.remove(observer)
            _run_observers = tuple(remaining)


def notify_run(run_id: str, settings: RunSettings, tools: Iterable[Tool]) -> None:
    """Tell every run observer that run `run_id` is being driven with these settings."""
    offered = tuple(tools)
    for observer in _run_observers:
        try:
            observer(run_id, settings, offered)
        except Exception:
            _log.exception("run observer %r failed on %s", observer, run_id)
