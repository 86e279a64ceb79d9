"""Where runs are checkpointed: the `Checkpointer` protocol and an in-memory store.

A checkpointer stores, per run, an append-only sequence of checkpoint bodies
(see `delta.py`) and hands them back in order. It knows nothing of the record's
shape, so a new store (SQLite, PostgreSQL, ...) is a few dozen lines. It also
holds the run's lease: only the worker holding it drives the run (see `lease.py`).
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol, runtime_checkable

from statemachine_agent.errors import Error
from statemachine_agent.machine.run import RunRecord
from statemachine_agent.persistence.codec import SerializationError, record_from_plain
from statemachine_agent.persistence.delta import counters, fold, stamped_metadata
from statemachine_agent.persistence.lease import Holder, Lease, LeaseBook
from statemachine_agent.persistence.steering import LocalMailbox, SteerMessage
from statemachine_agent.unicode import repair_text

DEFAULT_LEASE_SECONDS = 30.0
"""How long a lease outlives its holder's last heartbeat (heartbeats come every third of it)."""


@dataclass(frozen=True, slots=True)
class RunSummary:
    """A stored run, as listed by a checkpointer (and `statemachine-agent runs`)."""

    run_id: str
    state: str
    checkpoints: int
    bytes: int
    iterations: int = 0
    cost_usd: float = 0.0
    updated_at: float = 0.0
    """Unix time of the run's last checkpoint."""
    lease_owner: str | None = None
    """Who is driving the run now (a live lease), if anyone."""
    metadata: Mapping[str, Any] | None = None
    """The host's `metadata=` of the run (`agent.run(metadata=...)`), as last stamped;
    None when the store does not know it (a run stored before schema 4)."""


def metadata_matches(metadata: Mapping[str, Any] | None, wanted: Mapping[str, Any]) -> bool:
    """Whether a run's metadata has every key of `wanted` with that value. A value given
    as text also matches the same value stored as JSON (`user=42` matches 42)."""
    if not wanted:
        return True
    if metadata is None:
        return False
    for key, value in wanted.items():
        if key not in metadata:
            return False
        stored = metadata[key]
        if stored != value and not (
            isinstance(value, str) and json.dumps(stored, ensure_ascii=False) == value
        ):
            return False
    return True


class RunNotFoundError(Error, KeyError):
    """No checkpoint exists for the run id."""


class UnsafeStoreError(Error, PermissionError):
    """An existing store file (or its WAL/SHM file) belongs to another user or is
    writable by group or others, so someone else could rewrite the runs this process
    resumes; the message names the file, its owner and mode, and the fix (`chmod 600`).

    A `PermissionError`, so code that already turns a store's `OSError` into a clear
    message (the CLI does) keeps doing so. `allow_unsafe_permissions=True` on the
    store uses such a file anyway, with a `UserWarning`.
    """


class CheckpointCorruptError(Error):
    """A store cannot be read as it was written: named by store, run and checkpoint number.

    Raised for a corrupted or foreign file, a missing, reordered, altered or
    truncated row, a wrong encryption key, and a store or row written by a newer
    version; never a raw driver or JSON error.
    """

    def __init__(
        self, message: str, *, store: str, run_id: str | None = None, seq: int | None = None
    ) -> None:
        self.store, self.run_id, self.seq, self.problem = store, run_id, seq, message
        where = [store]
        if run_id is not None:
            where.append(f"run {run_id!r}")
        if seq is not None:
            where.append(f"checkpoint {seq}")
        super().__init__(f"{', '.join(where)}: {message}")


class Checkpointer(Protocol):
    def append(self, run_id: str, body: Mapping[str, Any]) -> None:
        """Store one checkpoint body after the run's earlier ones."""
        ...

    def bodies(self, run_id: str) -> Iterable[Mapping[str, Any]]:
        """Every checkpoint body of the run, oldest first, verified (`CheckpointCorruptError`)."""
        ...

    def runs(self) -> list[RunSummary]: ...

    def close(self) -> None: ...


@runtime_checkable
class LeasingCheckpointer(Checkpointer, Protocol):
    """A store that can also lease runs to one driver and prune old ones (the SQL and
    memory stores). A store of your own without these methods works unleased."""

    def acquire(self, run_id: str) -> Lease:
        """Take the run's lease now, or raise `RunLockedError` naming its live holder."""
        ...

    def release(self, lease: Lease) -> None:
        """Give the lease back (a no-op if it was taken over meanwhile)."""
        ...

    def prune(
        self, *, older_than: timedelta | float, states: Iterable[str] | None = None
    ) -> list[str]:
        """Delete runs last checkpointed longer ago than `older_than` (in `states`, if given).

        Runs whose lease is live are kept. Returns the deleted run ids.
        """
        ...


_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))
"""Made once: `json.dumps` with options other than its defaults builds an encoder per
call. Immutable after construction, so sharing it across threads is safe; its text is
`json.dumps(body, ensure_ascii=False, separators=(",", ":"))` to the byte (pinned by a
property in tests/test_packing.py)."""


def encode(body: Mapping[str, Any]) -> str:
    """The stored text of a body; invalid Unicode is repaired rather than failing the write."""
    return repair_text(_ENCODER.encode(body))


def seconds(value: timedelta | float) -> float:
    return value.total_seconds() if isinstance(value, timedelta) else float(value)


def load_record(checkpointer: Checkpointer, run_id: str) -> RunRecord:
    """The run's record as of its last checkpoint.

    Checkpoints that verify but do not fold into a record (a body of the wrong
    shape) raise `CheckpointCorruptError` too, never a raw `KeyError`/`TypeError`.
    """
    bodies = list(checkpointer.bodies(run_id))
    if not bodies:
        raise RunNotFoundError(f"no checkpoints for run {run_id!r}")
    try:
        plain = fold(bodies)
        assert plain is not None
        return record_from_plain(plain)
    except (SerializationError, KeyError, TypeError, ValueError, IndexError) as exc:
        raise CheckpointCorruptError(
            f"the checkpoints do not make a run record ({type(exc).__name__}: {exc})",
            store=repr(checkpointer),
            run_id=run_id,
        ) from None


def stamp(when: float) -> str:
    """A Unix time as the UTC ISO time shown in listings and errors."""
    return datetime.fromtimestamp(when, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


class MemoryCheckpointer:
    """Keeps checkpoints in this process: for tests, and as the shape of a store."""

    def __init__(self) -> None:
        self._runs: dict[str, list[str]] = {}
        self._summaries: dict[str, RunSummary] = {}
        self._holders: dict[str, Holder] = {}
        self._lock = threading.Lock()
        self.leases = LeaseBook(math.inf)
        """Leases last while they are held: this store lives and dies with its process."""
        self._mailbox = LocalMailbox()

    def __repr__(self) -> str:
        return "<MemoryCheckpointer>"

    def append(self, run_id: str, body: Mapping[str, Any]) -> None:
        with self._lock:
            self.leases.check_writer(run_id, self._holders.get(run_id), time.time())
            text = encode(body)
            rows = self._runs.setdefault(run_id, [])
            rows.append(text)
            old = self._summaries.get(run_id)
            iterations, cost = counters(body)
            stamped = stamped_metadata(body)
            self._summaries[run_id] = RunSummary(
                run_id,
                str(body.get("state_name", "")),
                len(rows),
                (old.bytes if old else 0) + len(text),
                iterations if iterations is not None else (old.iterations if old else 0),
                cost if cost is not None else (old.cost_usd if old else 0.0),
                time.time(),
                metadata=stamped if stamped is not None else (old.metadata if old else {}),
            )

    def bodies(self, run_id: str) -> list[Mapping[str, Any]]:
        with self._lock:
            return [json.loads(text) for text in self._runs.get(run_id, [])]

    def runs(self, *, metadata: Mapping[str, Any] | None = None) -> list[RunSummary]:
        """The stored runs; with `metadata`, only those whose metadata has those values."""
        with self._lock:
            now = time.time()
            return [
                _with_owner(summary, self._holders.get(run_id), now)
                for run_id, summary in self._summaries.items()
                if metadata_matches(summary.metadata, metadata or {})
            ]

    def steer(self, run_id: str, text: str, *, by: str | None = None) -> int:
        """Queue a steering message for the run (see `steering.py`)."""
        return self._mailbox.steer(run_id, text, by=by)

    def steered(self, run_id: str, after: int = 0) -> list[SteerMessage]:
        return self._mailbox.steered(run_id, after)

    def acquire(self, run_id: str) -> Lease:
        with self._lock:
            lease = self.leases.take(run_id, self._holders.get(run_id), time.time())
            self._holders[run_id] = (lease.owner, lease.expires_at)
            return lease

    def release(self, lease: Lease) -> None:
        with self._lock:
            if self.leases.give_back(lease):
                self._holders.pop(lease.run_id, None)

    def prune(
        self, *, older_than: timedelta | float, states: Iterable[str] | None = None
    ) -> list[str]:
        cutoff = time.time() - seconds(older_than)
        wanted = None if states is None else set(states)
        with self._lock:
            now = time.time()
            gone = [
                s.run_id
                for s in self._summaries.values()
                if s.updated_at < cutoff
                and (wanted is None or s.state in wanted)
                and not self.leases.live(self._holders.get(s.run_id), now)
            ]
            for run_id in gone:
                del self._runs[run_id], self._summaries[run_id]
        return gone

    def close(self) -> None:
        self.leases.stop()


def _with_owner(summary: RunSummary, holder: Holder | None, now: float) -> RunSummary:
    if holder is None or holder[1] <= now:
        return summary
    return RunSummary(**{**_fields(summary), "lease_owner": holder[0]})


def _fields(summary: RunSummary) -> dict[str, Any]:
    return {name: getattr(summary, name) for name in RunSummary.__slots__}
