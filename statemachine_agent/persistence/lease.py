"""Run leases: one driver per run, however many workers share the store.

A lease is a row in the store naming its holder (`owner`, one id per store
object: host, process and a random part) and an expiry. Whoever drives a run
holds its lease; a heartbeat thread pushes the expiry forward while it does, and
checkpoints are only accepted from the holder, so a worker that lost its lease
(paused past the expiry, then woken) cannot write over the one that took over.
A holder that died stops heartbeating; once its lease expires another worker
may take it over, and says so in its audit trail (`lease.taken_over`).

This module holds the decisions, the same for every store; the stores hold the rows.
"""

from __future__ import annotations

import asyncio
import math
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Protocol

from statemachine_agent.errors import Error


@dataclass(frozen=True, slots=True)
class Lease:
    """The right to drive one run, until `expires_at` (Unix time) unless renewed."""

    run_id: str
    owner: str
    expires_at: float
    taken_over_from: str | None = None
    """The holder whose lease had expired when this one was taken, if any."""
    expired_at: float | None = None
    """When that holder's lease expired."""


def _when(at: float | None) -> str:
    if at is None or math.isinf(at):
        return "while its holder runs"
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


class RunLockedError(Error, RuntimeError):
    """Another driver holds the run's lease: named with its owner id and the lease's expiry."""

    def __init__(self, run_id: str, owner: str, expires_at: float | None) -> None:
        self.run_id, self.owner, self.expires_at = run_id, owner, expires_at
        super().__init__(
            f"run {run_id!r} is being driven by {owner} (lease expires {_when(expires_at)}); "
            "wait for it (wait=SECONDS) or try later"
        )


class LeaseLostError(RunLockedError):
    """This worker's lease was taken over: its checkpoints are refused from now on."""


Holder = tuple[str, float]
"""A lease row: (owner, expires_at)."""


def new_owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class LeaseBook:
    """The leases one store object holds, the rules for taking them, and their heartbeat."""

    def __init__(self, seconds: float) -> None:
        if not seconds > 0:
            raise ValueError(f"lease_seconds must be more than 0, not {seconds}")
        self.seconds = float(seconds)
        self.owner = new_owner()
        self.held: dict[str, Lease] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @staticmethod
    def live(holder: Holder | None, now: float) -> bool:
        return holder is not None and holder[1] > now

    def take(self, run_id: str, holder: Holder | None, now: float) -> Lease:
        """The lease to write for `run_id`, given its current row; or `RunLockedError`."""
        with self._lock:
            mine = self.held.get(run_id)
            if mine is not None:  # another drive of the same run in this process
                raise RunLockedError(run_id, self.owner, mine.expires_at)
            if holder is not None and holder[0] != self.owner and self.live(holder, now):
                raise RunLockedError(run_id, holder[0], holder[1])
            dead = holder is not None and holder[0] != self.owner
            lease = Lease(
                run_id,
                self.owner,
                now + self.seconds,
                taken_over_from=holder[0] if dead and holder else None,
                expired_at=holder[1] if dead and holder else None,
            )
            self.held[run_id] = lease
            return lease

    def check_writer(self, run_id: str, holder: Holder | None, now: float) -> None:
        """Refuse a checkpoint from anyone but the run's live lease holder."""
        if run_id in self.held:
            if holder is None or holder[0] != self.owner:
                raise LeaseLostError(run_id, holder[0] if holder else "nobody", None)
        elif holder is not None and holder[0] != self.owner and self.live(holder, now):
            raise RunLockedError(run_id, holder[0], holder[1])

    def give_back(self, lease: Lease) -> bool:
        """Forget a lease; True if this book held it (the row should be cleared)."""
        with self._lock:
            return self.held.pop(lease.run_id, None) is not None

    def heartbeat(self, renew: Callable[[str, float], None]) -> None:
        """Renew every held lease each third of the lease time, while any is held.

        `renew(owner, expires_at)` moves the expiry of the rows this owner still
        holds (a row taken over meanwhile is not this owner's any more).
        """
        with self._lock:
            if self._thread is not None or self._stop.is_set():
                return
            self._thread = threading.Thread(
                target=self._beat, args=(renew,), name="sma-lease-heartbeat", daemon=True
            )
            self._thread.start()

    def _beat(self, renew: Callable[[str, float], None]) -> None:
        while not self._stop.wait(self.seconds / 3):
            with self._lock:
                if not self.held:
                    self._thread = None
                    return
            try:
                renew(self.owner, time.time() + self.seconds)
            except Exception:  # the store is closing or down: the next beat tries again
                continue

    def stop(self) -> None:
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5)


class Leasing(Protocol):
    def acquire(self, run_id: str) -> Lease: ...


async def take_lease(store: Leasing, run_id: str, wait: float = 0.0) -> Lease:
    """The run's lease, waiting up to `wait` seconds for a live holder to finish or expire."""
    deadline = time.monotonic() + max(0.0, wait)
    while True:
        try:
            return store.acquire(run_id)
        except RunLockedError as exc:
            left = deadline - time.monotonic()
            if left <= 0:
                raise
            until_expiry = (exc.expires_at or 0) - time.time()
            await asyncio.sleep(max(0.02, min(left, 0.25, until_expiry + 0.01)))
