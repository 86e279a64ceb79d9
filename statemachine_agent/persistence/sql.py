"""What the SQL stores share: the tables, the queries, leases, verification, migration.

SQLite and PostgreSQL differ only in how they connect, how a transaction locks,
their float type and their parameter placeholder; everything else is written
once here.

Tables (schema version 5):

- `sma_checkpoints`: one row per checkpoint, numbered 1, 2, 3... per run, each
  with a digest chained over the run's rows so far; its body is JSON text
  (`body`), or packed (`packed`, see `packing.py`, with `body` empty);
- `sma_runs`: one row per run: its lease, how many checkpoints it has and the
  last digest (so a deleted last row shows too), and what `runs` lists;
- `sma_meta`: the schema version, so a store written by a newer version is
  refused by name and an older one migrated forward;
- `sma_steering`: the messages steered into each run, numbered per run
  (`steering.py`); created on open like the others (no version change: a store of
  an older version simply has no queue yet), sealed when the store is encrypted.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from datetime import timedelta
from typing import Any

from statemachine_agent.persistence.base import (
    DEFAULT_LEASE_SECONDS,
    CheckpointCorruptError,
    RunSummary,
    encode,
    metadata_matches,
    seconds,
)
from statemachine_agent.persistence.crypto import (
    Cipher,
    EncryptionKey,
    KeyMismatchError,
    cipher_for,
    open_payload,
)
from statemachine_agent.persistence.delta import counters, stamped_metadata
from statemachine_agent.persistence.lease import Holder, Lease, LeaseBook
from statemachine_agent.persistence.packing import UnpackError, pack, unpack
from statemachine_agent.persistence.steering import SteerMessage

SCHEMA_VERSION = 5
"""The layout this version writes; stores at a lower version are migrated on open.

2: numbered, chained rows and the `sma_runs` table. 3: rows store the compact
delta (`delta.py`: outcome and call references, compact trail records); rows of
2 still fold. 4: `sma_runs.metadata`, the host's `metadata=` of each run.
5: `sma_checkpoints.packed`, bodies deflated against a dictionary; rows of 2-4
keep their text and still read."""

UPGRADES: Mapping[int, Sequence[str]] = {
    3: (),
    4: ("ALTER TABLE sma_runs ADD COLUMN metadata TEXT",),
    5: ("ALTER TABLE sma_checkpoints ADD COLUMN packed {blob}",),
}
"""The statements that bring a store of the version before up to each version."""

DDL = """
CREATE TABLE IF NOT EXISTS sma_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS sma_runs (
    run_id TEXT PRIMARY KEY,
    state TEXT NOT NULL DEFAULT '',
    checkpoints INTEGER NOT NULL DEFAULT 0,
    digest TEXT NOT NULL DEFAULT '',
    bytes BIGINT NOT NULL DEFAULT 0,
    iterations INTEGER NOT NULL DEFAULT 0,
    cost_usd {real} NOT NULL DEFAULT 0,
    created_at {real} NOT NULL,
    updated_at {real} NOT NULL,
    lease_owner TEXT,
    lease_expires {real},
    metadata TEXT
);
CREATE TABLE IF NOT EXISTS sma_checkpoints (
    run_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    version INTEGER NOT NULL,
    body TEXT NOT NULL,
    digest TEXT NOT NULL,
    packed {blob},
    PRIMARY KEY (run_id, seq)
);
CREATE TABLE IF NOT EXISTS sma_steering (
    run_id TEXT NOT NULL,
    number INTEGER NOT NULL,
    body TEXT NOT NULL,
    sent_at {real} NOT NULL,
    PRIMARY KEY (run_id, number)
);
CREATE INDEX IF NOT EXISTS sma_runs_updated ON sma_runs (updated_at)
"""

Execute = Callable[[str, Sequence[Any]], Any]
"""Runs one statement with parameters and returns a cursor (`fetchone`/`fetchall` work on it)."""


def link(previous: str, stored: str | bytes) -> str:
    """The digest of a row: chained over the previous one, so no row can go or move unseen.

    Over the row as stored: its text, or its packed bytes."""
    data = stored.encode() if isinstance(stored, str) else stored
    return hashlib.sha256(previous.encode() + b"\n" + data).hexdigest()[:32]


class SQLCheckpointer:
    """Append-only, verified, optionally encrypted checkpoints in a SQL database."""

    def __init__(
        self,
        execute: Execute,
        close: Callable[[], None],
        transaction: Callable[[], AbstractContextManager[Any]],
        *,
        name: str,
        mark: str,
        real: str,
        blob: str,
        lock_rows: str,
        corrupt_errors: tuple[type[Exception], ...],
        legacy_table: str,
        encryption_key: EncryptionKey | Sequence[EncryptionKey] | None,
        lease_seconds: float,
        compress: bool,
    ) -> None:
        self.name = name
        self._execute = execute
        self._close = close
        self._transaction = transaction
        self._corrupt_errors = corrupt_errors
        self._lock = threading.RLock()
        self._closed = False
        self._cipher = cipher_for(encryption_key)
        self._pack = compress and self._cipher is None  # sealed rows are never packed
        self.leases = LeaseBook(lease_seconds)
        m = mark
        self._types = {"real": real, "blob": blob}
        self._ddl = [s.strip() for s in DDL.format(**self._types).split(";") if s.strip()]
        head = (
            "SELECT checkpoints, digest, lease_owner, lease_expires FROM sma_runs "
            f"WHERE run_id = {m}"
        )
        self._q = {
            "ensure": "INSERT INTO sma_runs (run_id, created_at, updated_at) "
            f"VALUES ({m}, {m}, {m}) ON CONFLICT (run_id) DO NOTHING",
            "head": head + lock_rows,
            "peek": head,
            "insert": "INSERT INTO sma_checkpoints (run_id, seq, version, body, digest, packed) "
            f"VALUES ({m}, {m}, {m}, {m}, {m}, {m})",
            "advance": f"UPDATE sma_runs SET state = {m}, checkpoints = {m}, digest = {m}, "
            f"bytes = bytes + {m}, iterations = COALESCE({m}, iterations), "
            f"cost_usd = COALESCE({m}, cost_usd), updated_at = {m}, "
            f"metadata = COALESCE({m}, metadata) WHERE run_id = {m}",
            "rows": "SELECT seq, version, body, digest, packed FROM sma_checkpoints "
            f"WHERE run_id = {m} ORDER BY seq",
            "list": "SELECT run_id, state, checkpoints, bytes, iterations, cost_usd, updated_at, "
            "lease_owner, lease_expires, metadata FROM sma_runs WHERE checkpoints > 0 "
            "ORDER BY created_at, run_id",
            "take": f"UPDATE sma_runs SET lease_owner = {m}, lease_expires = {m} "
            f"WHERE run_id = {m}",
            "renew": f"UPDATE sma_runs SET lease_expires = {m} WHERE lease_owner = {m}",
            "free": "UPDATE sma_runs SET lease_owner = NULL, lease_expires = NULL "
            f"WHERE run_id = {m} AND lease_owner = {m}",
            "forget": f"DELETE FROM sma_runs WHERE run_id = {m} AND checkpoints = 0 "
            "AND lease_owner IS NULL",
            "old": "SELECT run_id, state, lease_owner, lease_expires FROM sma_runs "
            f"WHERE updated_at < {m} AND checkpoints > 0",
            "drop_rows": f"DELETE FROM sma_checkpoints WHERE run_id = {m}",
            "drop_run": f"DELETE FROM sma_runs WHERE run_id = {m}",
            "drop_steering": f"DELETE FROM sma_steering WHERE run_id = {m}",
            "last_steer": f"SELECT COALESCE(MAX(number), 0) FROM sma_steering WHERE run_id = {m}",
            "steer": "INSERT INTO sma_steering (run_id, number, body, sent_at) "
            f"VALUES ({m}, {m}, {m}, {m})",
            "steered": "SELECT number, body, sent_at FROM sma_steering "
            f"WHERE run_id = {m} AND number > {m} ORDER BY number",
            "version": "SELECT value FROM sma_meta WHERE key = 'schema_version'",
            "set_version": f"INSERT INTO sma_meta (key, value) VALUES ('schema_version', {m}) "
            "ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
            "legacy": f"SELECT run_id, body FROM {legacy_table} ORDER BY id",
            "drop_legacy": f"DROP TABLE {legacy_table}",
        }
        self._legacy_table = legacy_table

    @property
    def cipher(self) -> Cipher | None:
        """How payloads are sealed (None: in clear); the agent seals its audit files with it."""
        return self._cipher

    # -- setup --------------------------------------------------------------------

    def _setup(self, has_table: Callable[[str], bool], first: Sequence[str] = ()) -> None:
        """Create the tables, check the schema version, migrate an older store forward."""
        with self._reading(None), self._transaction():
            for statement in [*first, *self._ddl]:
                self._execute(statement, ())
            found = self._execute(self._q["version"], ()).fetchone()
            if found is None:
                if has_table(self._legacy_table):
                    self._migrate_v1()
                self._execute(self._q["set_version"], (str(SCHEMA_VERSION),))
                return
            try:
                version = int(found[0])
            except (TypeError, ValueError):
                raise self._corrupt(f"the schema version {found[0]!r} is not a number") from None
            if version > SCHEMA_VERSION:
                raise self._corrupt(
                    f"written by a newer version of statemachine-agent (schema {version}; "
                    f"this one reads up to {SCHEMA_VERSION}): upgrade statemachine-agent"
                )
            if version < SCHEMA_VERSION:
                for step in range(max(version, 2) + 1, SCHEMA_VERSION + 1):
                    for statement in UPGRADES.get(step, ()):
                        self._execute(statement.format(**self._types), ())
                self._execute(self._q["set_version"], (str(SCHEMA_VERSION),))

    def _migrate_v1(self) -> None:
        """Schema 1 had one table without numbering or digests: rewrite its rows into 2."""
        for number, (run_id, text) in enumerate(self._execute(self._q["legacy"], ()).fetchall()):
            try:
                body = json.loads(text)
            except (TypeError, ValueError):
                raise self._corrupt(
                    f"row {number + 1} of the schema-1 table is not JSON", run_id=run_id
                ) from None
            self._write(run_id, body, time.time(), migrating=True)
        self._execute(self._q["drop_legacy"], ())

    # -- writing ------------------------------------------------------------------

    def append(self, run_id: str, body: Mapping[str, Any]) -> None:
        with self._lock, self._transaction():
            self._write(run_id, body, time.time())

    def _write(
        self, run_id: str, body: Mapping[str, Any], now: float, *, migrating: bool = False
    ) -> None:
        """Append inside the caller's transaction, which locks the run's row (created by
        the run's first append: later ones read and lock it in one statement)."""
        head = self._execute(self._q["head"], (run_id,)).fetchone()
        if head is None:
            self._execute(self._q["ensure"], (run_id, now, now))
            head = self._execute(self._q["head"], (run_id,)).fetchone()
        count, digest, owner, expires = head
        if not migrating:
            self.leases.check_writer(run_id, _holder(owner, expires), now)
        seq = int(count) + 1
        text = encode(body)
        packed = pack(text) if self._pack else None
        stored = self._cipher.seal(text, _context(run_id, seq)) if self._cipher else text
        if packed is not None:
            stored = ""
        chained = link(digest, stored if packed is None else packed)
        self._execute(self._q["insert"], (run_id, seq, SCHEMA_VERSION, stored, chained, packed))
        iterations, cost = counters(body)
        state = str(body.get("state_name", ""))
        stamped = stamped_metadata(body)
        meta = None if stamped is None else self._seal_metadata(run_id, stamped)
        size = len(stored.encode()) if packed is None else len(packed)
        row = (state, seq, chained, size, iterations, cost, now, meta, run_id)
        self._execute(self._q["advance"], row)

    def _seal_metadata(self, run_id: str, metadata: Mapping[str, Any]) -> str:
        """The run's metadata as stored in its `sma_runs` row: JSON, sealed when encrypted."""
        text = encode(metadata)
        return self._cipher.seal(text, _metadata_context(run_id)) if self._cipher else text

    def _open_metadata(self, run_id: str, stored: str | None) -> Mapping[str, Any] | None:
        if stored is None:
            return None
        try:
            value = json.loads(open_payload(self._cipher, stored, _metadata_context(run_id)))
        except KeyMismatchError as exc:
            raise self._corrupt(f"its metadata: {exc}", run_id=run_id) from None
        except ValueError as exc:
            raise self._corrupt(f"its metadata is not JSON ({exc})", run_id=run_id) from None
        return value if isinstance(value, dict) else None

    # -- reading ------------------------------------------------------------------

    def bodies(self, run_id: str) -> list[Mapping[str, Any]]:
        """The run's bodies, each verified: numbering, digest chain, version, key, JSON."""
        with self._lock, self._reading(run_id):
            head = self._execute(self._q["peek"], (run_id,)).fetchone()
            rows = self._execute(self._q["rows"], (run_id,)).fetchall()
        try:
            return self._verified(run_id, head, rows)
        except (TypeError, ValueError, AttributeError) as exc:
            raise self._corrupt(f"a row has the wrong shape ({exc})", run_id=run_id) from None

    def _verified(self, run_id: str, head: Any, rows: list[Any]) -> list[Mapping[str, Any]]:
        bodies: list[Mapping[str, Any]] = []
        digest = ""
        for expected, (seq, version, stored, row_digest, packed) in enumerate(rows, start=1):
            if int(seq) != expected:
                raise self._corrupt(
                    f"checkpoint {expected} is missing (the next one stored is {seq})",
                    run_id=run_id,
                    seq=expected,
                )
            if int(version) > SCHEMA_VERSION:
                raise self._corrupt(
                    f"written by a newer version of statemachine-agent (row format {version}; "
                    f"this one reads up to {SCHEMA_VERSION})",
                    run_id=run_id,
                    seq=expected,
                )
            digest = link(digest, stored if packed is None else bytes(packed))
            if row_digest != digest:
                raise self._corrupt(
                    "the row does not match its digest: it was altered, truncated or reordered",
                    run_id=run_id,
                    seq=expected,
                )
            bodies.append(self._decode(run_id, expected, stored, packed))
        if head is None:
            return bodies
        count, last = int(head[0]), head[1]
        if count != len(rows):
            raise self._corrupt(
                f"the store lists {count} checkpoints for the run but holds {len(rows)} "
                "(the last ones are gone)",
                run_id=run_id,
                seq=len(rows) + 1,
            )
        if last != digest:
            raise self._corrupt(
                "the last checkpoint does not match the run's digest",
                run_id=run_id,
                seq=len(rows),
            )
        return bodies

    def _decode(
        self, run_id: str, seq: int, stored: str, packed: bytes | None
    ) -> Mapping[str, Any]:
        try:
            if packed is not None:
                text = unpack(bytes(packed))
            else:
                text = open_payload(self._cipher, stored, _context(run_id, seq))
        except (KeyMismatchError, UnpackError) as exc:
            raise self._corrupt(str(exc), run_id=run_id, seq=seq) from None
        try:
            body = json.loads(text)
        except ValueError as exc:
            raise self._corrupt(f"not JSON ({exc})", run_id=run_id, seq=seq) from None
        if not isinstance(body, dict) or "seq" not in body or "state_name" not in body:
            raise self._corrupt("not a checkpoint body", run_id=run_id, seq=seq)
        return body

    def runs(self, *, metadata: Mapping[str, Any] | None = None) -> list[RunSummary]:
        """The stored runs; with `metadata`, only those whose metadata has those values.

        An encrypted store's metadata is sealed too: listing it needs the key (a run
        whose metadata cannot be opened is a `CheckpointCorruptError` naming it)."""
        with self._lock, self._reading(None):
            rows = self._execute(self._q["list"], ()).fetchall()
        now = time.time()
        found = [
            RunSummary(
                run_id=r[0],
                state=r[1],
                checkpoints=int(r[2]),
                bytes=int(r[3]),
                iterations=int(r[4]),
                cost_usd=float(r[5]),
                updated_at=float(r[6]),
                lease_owner=r[7] if LeaseBook.live(_holder(r[7], r[8]), now) else None,
                metadata=self._open_metadata(r[0], r[9]),
            )
            for r in rows
        ]
        return [s for s in found if metadata_matches(s.metadata, metadata or {})]

    # -- steering -----------------------------------------------------------------

    def steer(self, run_id: str, text: str, *, by: str | None = None) -> int:
        """Queue a message for the run (see `steering.py`); returns its number.

        Numbered inside the write transaction, so two processes steering at once get
        consecutive numbers; its text and sender are sealed like a checkpoint's body."""
        with self._lock, self._transaction():
            now = time.time()
            self._execute(self._q["ensure"], (run_id, now, now))
            self._execute(self._q["head"], (run_id,))  # locks the run's row (PostgreSQL)
            number = int(self._execute(self._q["last_steer"], (run_id,)).fetchone()[0]) + 1
            body = encode({"text": text, "by": by})
            if self._cipher is not None:
                body = self._cipher.seal(body, _steering_context(run_id, number))
            self._execute(self._q["steer"], (run_id, number, body, now))
        return number

    def steered(self, run_id: str, after: int = 0) -> list[SteerMessage]:
        """The run's queued messages numbered above `after`, in order, opened."""
        with self._lock, self._reading(run_id):
            rows = self._execute(self._q["steered"], (run_id, after)).fetchall()
        found: list[SteerMessage] = []
        for number, body, sent_at in rows:
            try:
                plain = json.loads(
                    open_payload(self._cipher, body, _steering_context(run_id, int(number)))
                )
            except (KeyMismatchError, ValueError) as exc:
                raise self._corrupt(f"steering message {number}: {exc}", run_id=run_id) from None
            found.append(SteerMessage(int(number), str(plain["text"]), plain.get("by"),
                                      float(sent_at)))  # fmt: skip
        return found

    # -- leases -------------------------------------------------------------------

    def acquire(self, run_id: str) -> Lease:
        now = time.time()
        with self._lock, self._transaction():
            self._execute(self._q["ensure"], (run_id, now, now))
            _, _, owner, expires = self._execute(self._q["head"], (run_id,)).fetchone()
            lease = self.leases.take(run_id, _holder(owner, expires), now)
            try:
                self._execute(self._q["take"], (lease.owner, lease.expires_at, run_id))
            except BaseException:
                self.leases.give_back(lease)
                raise
        self.leases.heartbeat(self._renew)
        return lease

    def _renew(self, owner: str, expires_at: float) -> None:
        with self._lock:
            if not self._closed:
                self._execute(self._q["renew"], (expires_at, owner))

    def release(self, lease: Lease) -> None:
        if not self.leases.give_back(lease):
            return
        with self._lock:
            if not self._closed:
                self._execute(self._q["free"], (lease.run_id, lease.owner))
                self._execute(self._q["forget"], (lease.run_id,))

    # -- retention ----------------------------------------------------------------

    def prune(
        self, *, older_than: timedelta | float, states: Iterable[str] | None = None
    ) -> list[str]:
        now = time.time()
        wanted = None if states is None else set(states)
        with self._lock, self._transaction():
            old = self._execute(self._q["old"], (now - seconds(older_than),)).fetchall()
            gone = [
                run_id
                for run_id, state, owner, expires in old
                if (wanted is None or state in wanted)
                and not LeaseBook.live(_holder(owner, expires), now)
            ]
            for run_id in gone:
                self._execute(self._q["drop_rows"], (run_id,))
                self._execute(self._q["drop_run"], (run_id,))
                self._execute(self._q["drop_steering"], (run_id,))
        if gone:
            self._compact()
        return gone

    def _compact(self) -> None:
        """Give pruned space back, where the database can (SQLite does)."""

    def close(self) -> None:
        self.leases.stop()
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._close()

    def __enter__(self) -> SQLCheckpointer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- errors -------------------------------------------------------------------

    def _corrupt(
        self, message: str, *, run_id: str | None = None, seq: int | None = None
    ) -> CheckpointCorruptError:
        return CheckpointCorruptError(message, store=self.name, run_id=run_id, seq=seq)

    @contextmanager
    def _reading(self, run_id: str | None) -> Iterator[None]:
        """Driver errors while reading mean the store is not what it should be: say so by name."""
        try:
            yield
        except self._corrupt_errors as exc:
            if _transient(exc):
                raise
            raise self._corrupt(f"cannot be read ({exc})", run_id=run_id) from None


def _holder(owner: str | None, expires: float | None) -> Holder | None:
    return None if owner is None else (owner, float(expires or 0.0))


def _context(run_id: str, seq: int) -> bytes:
    return f"{run_id}\0{seq}".encode()


def _steering_context(run_id: str, number: int) -> bytes:
    return f"{run_id}\0steering\0{number}".encode()


def _metadata_context(run_id: str) -> bytes:
    return f"{run_id}\0metadata".encode()


def _transient(exc: Exception) -> bool:
    """A busy or unreachable database is not a corrupt one."""
    text = str(exc).lower()
    return any(word in text for word in ("locked", "busy", "connection", "timeout"))


__all__ = ["DEFAULT_LEASE_SECONDS", "SCHEMA_VERSION", "SQLCheckpointer", "link"]
