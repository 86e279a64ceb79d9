"""What the SQL stores share: one append-only table and three queries.

SQLite and PostgreSQL differ only in how they connect, their DDL and their
parameter placeholder; the queries are written once here.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from statemachine_agent.persistence.base import RunSummary, encode

Execute = Callable[[str, Sequence[Any]], Any]
"""Runs one statement with parameters and returns a cursor (`fetchall()` works on it)."""


class SQLCheckpointer:
    """Append-only checkpoints in the table `table` of a SQL database."""

    def __init__(self, execute: Execute, close: Callable[[], None], *, table: str, mark: str):
        self._execute = execute
        self._close = close
        self._lock = threading.Lock()
        marks = ", ".join([mark] * 4)
        self._insert = f"INSERT INTO {table} (run_id, seq, state, body) VALUES ({marks})"
        self._select = f"SELECT body FROM {table} WHERE run_id = {mark} ORDER BY id"
        self._summary = (
            f"SELECT run_id, COUNT(*), SUM(LENGTH(body)), "
            f"(SELECT state FROM {table} c2 WHERE c2.run_id = c.run_id ORDER BY id DESC LIMIT 1) "
            f"FROM {table} c GROUP BY run_id ORDER BY MIN(id)"
        )

    def append(self, run_id: str, body: Mapping[str, Any]) -> None:
        row = (run_id, int(body.get("seq", 0)), str(body.get("state_name", "")), encode(body))
        with self._lock:
            self._execute(self._insert, row)

    def bodies(self, run_id: str) -> list[Mapping[str, Any]]:
        with self._lock:
            rows = self._execute(self._select, (run_id,)).fetchall()
        return [json.loads(row[0]) for row in rows]

    def runs(self) -> list[RunSummary]:
        with self._lock:
            rows = self._execute(self._summary, ()).fetchall()
        return [RunSummary(r[0], r[3], int(r[1]), int(r[2])) for r in rows]

    def close(self) -> None:
        with self._lock:
            self._close()
