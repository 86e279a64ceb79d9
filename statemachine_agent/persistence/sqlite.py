"""Checkpoints in an SQLite file (stdlib `sqlite3`), the default store.

WAL mode with `synchronous=NORMAL`: a commit costs tens of microseconds rather
than a disk sync, and what is committed survives the process being killed
(the crash tests prove it). Power-loss durability needs `synchronous="FULL"`.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Literal

from statemachine_agent.persistence.sql import SQLCheckpointer

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


class SQLiteCheckpointer(SQLCheckpointer):
    """Append-only checkpoints in one SQLite file, shared by any number of runs."""

    def __init__(
        self, path: str | Path, *, synchronous: Literal["NORMAL", "FULL"] = "NORMAL"
    ) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute(f"PRAGMA synchronous={synchronous}")
        self._db.execute("PRAGMA busy_timeout=5000")
        self._db.executescript(SCHEMA)
        super().__init__(self._db.execute, self._db.close, table="checkpoints", mark="?")

    def __repr__(self) -> str:
        return f"<SQLiteCheckpointer {self.path}>"
