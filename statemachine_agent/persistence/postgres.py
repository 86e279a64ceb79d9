"""Checkpoints in PostgreSQL (`psycopg` 3), for runs shared by several machines.

The same append-only layout as SQLite. Install with the `postgres` extra.
"""

from __future__ import annotations

from statemachine_agent.persistence.sql import SQLCheckpointer

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


class PostgresCheckpointer(SQLCheckpointer):
    """Append-only checkpoints in a PostgreSQL table (`sma_checkpoints`)."""

    def __init__(self, dsn: str) -> None:
        try:
            import psycopg
        except ImportError as exc:  # pragma: no cover - depends on the extra
            raise ImportError(
                "PostgresCheckpointer needs psycopg: pip install 'statemachine-agent[postgres]'"
            ) from exc
        self._db = psycopg.connect(dsn, autocommit=True)
        self._db.execute(SCHEMA)
        super().__init__(self._db.execute, self._db.close, table="sma_checkpoints", mark="%s")

    def __repr__(self) -> str:
        return "<PostgresCheckpointer>"
