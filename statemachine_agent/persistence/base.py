"""Where runs are checkpointed: the `Checkpointer` protocol and an in-memory store.

A checkpointer stores, per run, an append-only sequence of checkpoint bodies
(see `delta.py`) and hands them back in order. It knows nothing of the record's
shape, so a new store (SQLite, PostgreSQL, ...) is a few dozen lines.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from statemachine_agent.machine.run import RunRecord
from statemachine_agent.persistence.codec import record_from_plain
from statemachine_agent.persistence.delta import fold
from statemachine_agent.unicode import repair_text


@dataclass(frozen=True, slots=True)
class RunSummary:
    """A stored run, as listed by a checkpointer."""

    run_id: str
    state: str
    checkpoints: int
    bytes: int


class RunNotFoundError(KeyError):
    """No checkpoint exists for the run id."""


class Checkpointer(Protocol):
    def append(self, run_id: str, body: Mapping[str, Any]) -> None:
        """Store one checkpoint body after the run's earlier ones."""
        ...

    def bodies(self, run_id: str) -> Iterable[Mapping[str, Any]]:
        """Every checkpoint body of the run, oldest first."""
        ...

    def runs(self) -> list[RunSummary]: ...

    def close(self) -> None: ...


def encode(body: Mapping[str, Any]) -> str:
    """The stored text of a body; invalid Unicode is repaired rather than failing the write."""
    return repair_text(json.dumps(body, ensure_ascii=False, separators=(",", ":")))


def load_record(checkpointer: Checkpointer, run_id: str) -> RunRecord:
    """The run's record as of its last checkpoint."""
    plain = fold(checkpointer.bodies(run_id))
    if plain is None:
        raise RunNotFoundError(f"no checkpoints for run {run_id!r}")
    return record_from_plain(plain)


class MemoryCheckpointer:
    """Keeps checkpoints in this process: for tests, and as the shape of a store."""

    def __init__(self) -> None:
        self._runs: dict[str, list[str]] = {}
        self._states: dict[str, str] = {}
        self._lock = threading.Lock()

    def append(self, run_id: str, body: Mapping[str, Any]) -> None:
        with self._lock:
            self._runs.setdefault(run_id, []).append(encode(body))
            self._states[run_id] = str(body.get("state_name", ""))

    def bodies(self, run_id: str) -> list[Mapping[str, Any]]:
        with self._lock:
            return [json.loads(text) for text in self._runs.get(run_id, [])]

    def runs(self) -> list[RunSummary]:
        with self._lock:
            return [
                RunSummary(run_id, self._states[run_id], len(rows), sum(map(len, rows)))
                for run_id, rows in self._runs.items()
            ]

    def close(self) -> None:
        return None
