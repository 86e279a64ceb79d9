"""Checkpoints in an SQLite file (stdlib `sqlite3`), the default store.

WAL mode with `synchronous=NORMAL`: a commit costs tens of microseconds rather
than a disk sync, and what is committed survives the process being killed
(the crash tests prove it). Power-loss durability needs `synchronous="FULL"`.

The files stay small: the WAL is checkpointed every ~1 MB and truncated back
to at most 1 MB (`journal_size_limit`), and emptied when the store closes;
pruned runs give their pages back (`auto_vacuum=INCREMENTAL` on new files).
Every write takes the file's write lock (`BEGIN IMMEDIATE`), so the lease check
and the append it guards are one step for every process sharing the file.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Literal

from statemachine_agent.persistence.base import (
    DEFAULT_LEASE_SECONDS,
    CheckpointCorruptError,
    UnsafeStoreError,
)
from statemachine_agent.persistence.crypto import EncryptionKey
from statemachine_agent.persistence.sql import SQLCheckpointer, _transient
from statemachine_agent.private_files import make_private_dirs, open_private, unsafe_reason

WAL_PAGES = 256
"""Pages (4 KiB) the WAL may hold before it is checkpointed into the database."""

JOURNAL_LIMIT = 1 << 20
"""Bytes a checkpointed WAL is truncated back to."""

OPEN_ATTEMPTS = 6
"""Tries at setting a file up while other processes do too. Some lock changes (such as
switching a new file to WAL, which needs the file to itself) can be refused with
"database is locked" without waiting out `busy_timeout`; a try a moment later finds
the other process done."""


SIDE_FILES = ("-wal", "-shm")
"""The suffixes of the files SQLite keeps beside the database in WAL mode."""


def _prepare_files(path: Path, allow_unsafe: bool) -> None:
    """Create the store file 0600 (its missing folders 0700) before SQLite opens it, or
    check the one that exists, and its WAL/SHM files: SQLite gives those the database
    file's mode when it creates them, so a private file keeps its whole store private.

    The file is opened (read-only: a read-only store stays usable) and checked through
    its descriptor, so what is checked is what was opened, a symbolic link's target
    included. One belonging to another user, or writable by group or others, is
    refused (`UnsafeStoreError`): whoever can write it can rewrite the runs this
    process resumes and the tool calls it repeats. Its mode is never changed here: the
    file is the user's, and the fix is theirs to make.
    """
    make_private_dirs(path.parent)
    handle = open_private(path, os.O_RDONLY)
    try:
        found = [(path, unsafe_reason(path, os.fstat(handle)))]
    finally:
        os.close(handle)
    for suffix in SIDE_FILES:
        side = path.with_name(path.name + suffix)
        with contextlib.suppress(FileNotFoundError):
            found.append((side, unsafe_reason(side, os.stat(side))))
    for file, problem in found:
        if problem is None:
            continue
        reason, fix = problem
        if not allow_unsafe:
            raise UnsafeStoreError(
                f"SQLite store file {file}: {reason}, so another user could rewrite its runs; "
                f"make it yours alone ({fix}), or pass allow_unsafe_permissions=True to "
                "use it anyway"
            )
        warnings.warn(
            f"SQLite store file {file}: {reason}; used anyway (allow_unsafe_permissions=True)",
            UserWarning,
            stacklevel=3,  # the line that opened the store
        )


class SQLiteCheckpointer(SQLCheckpointer):
    """Append-only checkpoints in one SQLite file, shared by any number of runs and processes."""

    def __init__(
        self,
        path: str | Path,
        *,
        synchronous: Literal["NORMAL", "FULL"] = "NORMAL",
        encryption_key: EncryptionKey | Sequence[EncryptionKey] | None = None,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
        compress: bool = True,
        allow_unsafe_permissions: bool = False,
    ) -> None:
        """
        Args:
            path: the database file (created 0600, with its missing folders 0700; its
                WAL and SHM files take the file's mode).
            synchronous: `FULL` to survive power loss, at a disk sync per checkpoint.
            encryption_key: a key (`generate_key()`) or a list of keys to encrypt every
                payload with AES-GCM; the first writes, all read (rotation).
            lease_seconds: how long a driver's lease outlives its last heartbeat.
            compress: deflate each checkpoint body against a dictionary of the body
                format (about a quarter of its JSON size); False keeps every body as JSON
                text in `sma_checkpoints.body`, for querying with SQL. Encrypted bodies
                are never packed.
            allow_unsafe_permissions: use a file (or its WAL/SHM file) that belongs to
                another user or that group or others may write, with a `UserWarning`,
                instead of refusing it with `UnsafeStoreError`.
        """
        self.path = Path(path)
        _prepare_files(self.path, allow_unsafe_permissions)
        db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._db = db
        super().__init__(
            # One cursor for every statement (each runs under the store's lock and is
            # read before the next): no cursor object made per statement.
            db.cursor().execute,
            self._shutdown,
            self._immediate,
            name=f"SQLite store {self.path}",
            mark="?",
            real="REAL",
            blob="BLOB",
            lock_rows="",
            corrupt_errors=(sqlite3.DatabaseError,),
            legacy_table="checkpoints",
            encryption_key=encryption_key,
            lease_seconds=lease_seconds,
            compress=compress,
        )
        try:
            for attempt in range(OPEN_ATTEMPTS):
                try:
                    self._configure(synchronous)
                    self._setup(self._has_table)
                    break
                except sqlite3.OperationalError as exc:
                    if not _transient(exc) or attempt == OPEN_ATTEMPTS - 1:
                        raise
                    time.sleep(0.05 * 2**attempt)  # another process is setting the file up
        except sqlite3.DatabaseError as exc:
            db.close()
            if _transient(exc):
                raise
            raise CheckpointCorruptError(
                f"not an SQLite database ({exc})", store=self.name
            ) from None
        except BaseException:
            db.close()
            raise

    def _configure(self, synchronous: str) -> None:
        """The connection's settings, and the file's (WAL mode, its limits)."""
        db = self._db
        db.execute("PRAGMA busy_timeout=10000")
        db.execute("PRAGMA auto_vacuum=INCREMENTAL")  # only takes on a new, empty file
        db.execute("PRAGMA journal_mode=WAL")
        db.execute(f"PRAGMA synchronous={synchronous}")
        db.execute(f"PRAGMA wal_autocheckpoint={WAL_PAGES}")
        db.execute(f"PRAGMA journal_size_limit={JOURNAL_LIMIT}")

    def _has_table(self, name: str) -> bool:
        found = self._db.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)
        ).fetchone()
        return found is not None

    @contextmanager
    def _immediate(self) -> Iterator[None]:
        execute = self._execute
        execute("BEGIN IMMEDIATE", ())
        try:
            yield
        except BaseException:
            execute("ROLLBACK", ())
            raise
        execute("COMMIT", ())

    def _compact(self) -> None:
        with self._lock:
            self._db.execute("PRAGMA incremental_vacuum")
            self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    def _shutdown(self) -> None:
        # another process reading makes this fail: it empties the WAL when it closes
        with contextlib.suppress(sqlite3.Error):
            self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        self._db.close()

    def __repr__(self) -> str:
        return f"<SQLiteCheckpointer {self.path}>"
