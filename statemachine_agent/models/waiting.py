"""How long a model call may wait before retrying: `retry-after`, capped and budgeted.

The SDK honours an API's `retry-after` header however long it is (a 120 s header
held a run for 240 s over two retries). Waiting is time the run spends, so it is
capped per wait (`max_retry_wait`, 60 s by default) and limited by what the run
has left: `call_model` sets the limit from `Budget.max_seconds` for the duration
of one call, and a wait that would pass it fails the call at once, by name,
instead of sleeping. (`deadline=` needs no limit here: a cancel abandons the call,
sleep included.)
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar

DEFAULT_MAX_RETRY_WAIT = 60.0
"""Seconds one wait before a retry may last, whatever `retry-after` asks."""

_LIMIT: ContextVar[float | None] = ContextVar("statemachine_agent_retry_wait_limit", default=None)


class RetryWaitExceededError(Exception):
    """The API asked for a wait before retrying that the run has no time for."""

    def __init__(self, wait: float, limit: float) -> None:
        self.wait, self.limit = wait, limit
        super().__init__(
            f"the API asked to wait {wait:.1f} s before retrying, more than the "
            f"{max(limit, 0.0):.1f} s the run has left"
        )


@contextlib.contextmanager
def wait_limit(seconds: float | None) -> Iterator[None]:
    """Within this block, no retry wait may exceed `seconds` (None: no limit)."""
    token = _LIMIT.set(seconds)
    try:
        yield
    finally:
        _LIMIT.reset(token)


def wait_limited() -> float | None:
    """The limit `wait_limit` set for the current call (None: none is set)."""
    return _LIMIT.get()


def capped_wait(asked: float, cap: float) -> float:
    """The wait to make for `asked` seconds: at most `cap`, and raising
    `RetryWaitExceededError` when it would pass the current call's limit."""
    wait = min(asked, cap)
    limit = _LIMIT.get()
    if limit is not None and wait > limit:
        raise RetryWaitExceededError(wait, limit)
    return wait
