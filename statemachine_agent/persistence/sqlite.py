"""Checkpoints in an SQLite file (stdlib `sqlite3`), the default store.

WAL mode with `synchronous=NORMAL`: a commit costs tens of microseconds rather
than a disk sync, and what is committed survives the process being killed
(the crash tests prove it). Power-loss durability needs `synchronous="FULL"`.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from statemachine_agent.persistence.base import RunSummary, encode

SCHEMA = """
CREATE TABLE IF NOT EXISTS checkpoints (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    state TEXT NOT NULL,
    body TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS checkpoints_run ON checkpoints (run_id, id);
"""


class SQLiteCheckpointer:
    """Append-only checkpoints in one SQLite file, shared by any number of runs."""

    def __init__(
        self, path: str | Path, *, synchronous: Literal["NORMAL", "FULL"] = "NORMAL"
    ) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute(f"PRAGMA synchronous={synchronous}")
        self._db.execute("PRAGMA busy_timeout=5000")
        self._db.executescript(SCHEMA)

    def __repr__(self) -> str:
        return f"<SQLiteCheckpointer {self.path}>"

    def append(self, run_id: str, body: Mapping[str, Any]) -> None:
        with self._lock:
            self._db.execute(
                "INSERT INTO checkpoints (run_id, seq, state, body) VALUES (?, ?, ?, ?)",
                (run_id, int(body.get("seq", 0)), str(body.get("state_name", "")), encode(body)),
            )

    def bodies(self, run_id: str) -> list[Mapping[str, Any]]:
        with self._lock:
            rows = self._db.execute(
                "SELECT body FROM checkpoints WHERE run_id = ? ORDER BY id", (run_id,)
            ).fetchall()
        return [json.loads(row[0]) for row in rows]

    def runs(self) -> list[RunSummary]:
        with self._lock:
            rows = self._db.execute(
                "SELECT run_id, COUNT(*), SUM(LENGTH(body)), "
                "(SELECT state FROM checkpoints c2 WHERE c2.run_id = c.run_id "
                " ORDER BY id DESC LIMIT 1) "
                "FROM checkpoints c GROUP BY run_id ORDER BY MIN(id)"
            ).fetchall()
        return [RunSummary(r[0], r[3], int(r[1]), int(r[2])) for r in rows]

    def close(self) -> None:
        with self._lock:
            self._db.close()
