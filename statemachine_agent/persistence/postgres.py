"""Checkpoints in PostgreSQL (`psycopg` 3), for runs shared by several machines.

The same append-only layout as SQLite. Install with the `postgres` extra.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from typing import Any

from statemachine_agent.persistence.base import RunSummary, encode

SCHEMA = """
CREATE TABLE IF NOT EXISTS sma_checkpoints (
    id BIGSERIAL PRIMARY KEY,
    run_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    state TEXT NOT NULL,
    body TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS sma_checkpoints_run ON sma_checkpoints (run_id, id);
"""


class PostgresCheckpointer:
    """Append-only checkpoints in a PostgreSQL table (`sma_checkpoints`)."""

    def __init__(self, dsn: str) -> None:
        try:
            import psycopg
        except ImportError as exc:  # pragma: no cover - depends on the extra
            raise ImportError(
                "PostgresCheckpointer needs psycopg: pip install 'statemachine-agent[postgres]'"
            ) from exc
        self._lock = threading.Lock()
        self._db = psycopg.connect(dsn, autocommit=True)
        with self._lock:
            self._db.execute(SCHEMA)

    def append(self, run_id: str, body: Mapping[str, Any]) -> None:
        with self._lock:
            self._db.execute(
                "INSERT INTO sma_checkpoints (run_id, seq, state, body) VALUES (%s, %s, %s, %s)",
                (run_id, int(body.get("seq", 0)), str(body.get("state_name", "")), encode(body)),
            )

    def bodies(self, run_id: str) -> list[Mapping[str, Any]]:
        with self._lock:
            rows = self._db.execute(
                "SELECT body FROM sma_checkpoints WHERE run_id = %s ORDER BY id", (run_id,)
            ).fetchall()
        return [json.loads(row[0]) for row in rows]

    def runs(self) -> list[RunSummary]:
        with self._lock:
            rows = self._db.execute(
                "SELECT run_id, COUNT(*), SUM(LENGTH(body)), "
                "(SELECT state FROM sma_checkpoints c2 WHERE c2.run_id = c.run_id "
                " ORDER BY id DESC LIMIT 1) "
                "FROM sma_checkpoints c GROUP BY run_id ORDER BY MIN(id)"
            ).fetchall()
        return [RunSummary(r[0], r[3], int(r[1]), int(r[2])) for r in rows]

    def close(self) -> None:
        with self._lock:
            self._db.close()
