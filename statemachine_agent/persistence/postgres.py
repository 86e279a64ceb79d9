"""Checkpoints in PostgreSQL (`psycopg` 3), for runs shared by several machines.

The same tables and checks as SQLite (see `sql.py`); a write locks the run's
row (`SELECT ... FOR UPDATE`), so the lease check and the append it guards are
one step for every worker. Install with the `postgres` extra.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from statemachine_agent.persistence.base import DEFAULT_LEASE_SECONDS, CheckpointCorruptError
from statemachine_agent.persistence.crypto import EncryptionKey
from statemachine_agent.persistence.sql import SQLCheckpointer

SETUP_LOCK = 0x534D4131
"""Advisory lock id serializing table creation and migration among workers starting at once."""

_URL_PASSWORD = re.compile(r"(postgres(?:ql)?://[^:/@\s]*):([^@\s]*)@", re.IGNORECASE)
_KEY_PASSWORD = re.compile(r"(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)", re.IGNORECASE)


def masked(text: str, dsn: str = "") -> str:
    """`text` with every password it may hold replaced by `***`: a URL's userinfo, a
    `password=` option, and the password of `dsn` wherever it occurs (psycopg quotes
    a malformed connection string whole in its error). Errors are printed and
    logged; the password must never be."""
    found = _URL_PASSWORD.search(dsn) or _KEY_PASSWORD.search(dsn)
    secret = found.group(2).strip("'") if found else ""
    text = _KEY_PASSWORD.sub(r"\1***", _URL_PASSWORD.sub(r"\1:***@", text))
    return text.replace(secret, "***") if secret else text


class PostgresCheckpointer(SQLCheckpointer):
    """Append-only checkpoints in PostgreSQL tables (`sma_checkpoints`, `sma_runs`, `sma_meta`)."""

    def __init__(
        self,
        dsn: str,
        *,
        encryption_key: EncryptionKey | Sequence[EncryptionKey] | None = None,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
        compress: bool = True,
    ) -> None:
        """
        Args:
            dsn: a libpq connection string or URL.
            encryption_key: a key (`generate_key()`) or a list of keys to encrypt every
                payload with AES-GCM; the first writes, all read (rotation).
            lease_seconds: how long a driver's lease outlives its last heartbeat.
            compress: deflate each checkpoint body against a dictionary of the body
                format (about a quarter of its JSON size); False keeps every body as JSON
                text in `sma_checkpoints.body`, for querying with SQL. Encrypted bodies
                are never packed.
        """
        try:
            import psycopg
        except ImportError as exc:  # pragma: no cover - depends on the extra
            raise ImportError(
                "PostgresCheckpointer needs psycopg: pip install 'statemachine-agent[postgres]'"
            ) from exc
        refused: psycopg.Error | None = None
        try:
            self._db = psycopg.connect(dsn, autocommit=True)
        except psycopg.Error as exc:  # its text may quote the URL, password included
            refused = type(exc)(masked(str(exc), dsn).strip())
        if refused is not None:
            raise refused  # raised out here, so no chained error carries the original text
        info = self._db.info
        super().__init__(
            self._db.execute,
            self._db.close,
            self._db.transaction,
            name=f"PostgreSQL store {info.host}:{info.port}/{info.dbname}",
            mark="%s",
            real="DOUBLE PRECISION",
            blob="BYTEA",
            lock_rows=" FOR UPDATE",
            corrupt_errors=(psycopg.DataError, psycopg.ProgrammingError, psycopg.InternalError),
            legacy_table="sma_checkpoints_v1",
            encryption_key=encryption_key,
            lease_seconds=lease_seconds,
            compress=compress,
        )
        try:
            self._setup(self._has_table, first=[f"SELECT pg_advisory_xact_lock({SETUP_LOCK})"])
        except BaseException:
            self._db.close()
            raise

    def _has_table(self, name: str) -> bool:
        """Whether a schema-1 table is there (renamed first: schema 2 reuses its name)."""
        legacy = self._db.execute(
            "SELECT column_name FROM information_schema.columns "
            "WHERE table_name = 'sma_checkpoints' AND column_name = 'state'"
        ).fetchone()
        if legacy is not None:
            self._db.execute(f"ALTER TABLE sma_checkpoints RENAME TO {name}")
            self._db.execute(
                f"ALTER TABLE {name} RENAME CONSTRAINT sma_checkpoints_pkey TO {name}_pkey"
            )
            self._db.execute("ALTER INDEX IF EXISTS sma_checkpoints_run RENAME TO sma_v1_run")
            for statement in self._ddl:
                self._db.execute(statement)
        found: Any = self._db.execute("SELECT to_regclass(%s)", (name,)).fetchone()
        return found is not None and found[0] is not None

    def __repr__(self) -> str:
        return f"<PostgresCheckpointer {self.name}>"


__all__ = ["CheckpointCorruptError", "PostgresCheckpointer"]
