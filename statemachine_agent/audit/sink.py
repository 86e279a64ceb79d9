"""Where a run's events go: a JSONL file per run, memory, or nowhere.

Sinks receive events already redacted. They are the library's own objects,
passed per agent, so writing an audit file needs no global logging config.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Protocol

from statemachine_agent.audit.chain import AUDIT_CONTEXT, ENCRYPTED, AuditKey, continue_file
from statemachine_agent.errors import Error
from statemachine_agent.private_files import make_private_dirs, open_private

if TYPE_CHECKING:
    from statemachine_agent.persistence.crypto import Cipher, EncryptionKey


class AuditFileError(Error, ValueError):
    """A line of an audit file cannot be read: not UTF-8, not JSON, not an event, or
    encrypted with another key (or none given); the message names the file and line."""


class AuditSink(Protocol):
    """Receives a run's events. A sink that buffers may also define `flush()`: the
    emitter calls it at the points where the trail must be on disk (see
    `Emitter.flush`), and `close()` must write whatever is still buffered."""

    def write(self, event: Mapping[str, Any]) -> None: ...

    def close(self) -> None: ...


class JsonlSink:
    """Appends one JSON object a line, in batches.

    Lines are kept in memory and written together when the emitter flushes: before
    the run waits on the model, before a tool runs, before every checkpoint and at
    the end (`Emitter.flush`), or when `batch` lines are waiting. So the file is
    always at least as far on as the run's checkpoints and its side effects, and a
    crash loses only events of work that was not yet recorded anywhere, at the cost
    of one write a batch instead of one a line. `batch=1` writes every line at once.
    Nothing is ever dropped: a slow disk slows the run, it does not lose lines.

    Every line is sealed into the file's hash chain (`audit/chain.py`): `prev` is the
    digest of the line before, and `run.ended` carries the digest of the whole file.
    A file that already has lines (a resumed run) is continued, not restarted.
    A new file is created 0600 and its missing folders 0700 (`private_files`): the
    trail is the user's alone, whatever the process umask; an existing one keeps its mode.
    `audit_key` makes every digest an HMAC, so only the key's holder can forge them.

    With an encryption key (or the `cipher` of an encrypted store, which the agent
    passes), each event is sealed with AES-GCM like the store's payloads, inside an
    envelope that carries the chain: `verify` checks the file without the key, while
    `report`, `inspect` and `replay` need it (`--encryption-key`).
    """

    def __init__(
        self,
        path: Path,
        *,
        audit_key: AuditKey | None = None,
        batch: int = 256,
        encryption_key: EncryptionKey | Sequence[EncryptionKey] | None = None,
        cipher: Cipher | None = None,
    ) -> None:
        from statemachine_agent.persistence.crypto import cipher_for

        if batch < 1:
            raise ValueError(f"batch must be at least 1 line, not {batch}")
        self.path = path
        self.batch = batch
        self._pending: list[str] = []
        make_private_dirs(path.parent)
        self.chain = continue_file(path, audit_key, cipher or cipher_for(encryption_key))
        handle = open_private(path, os.O_WRONLY | os.O_APPEND)
        self._file: IO[str] | None = os.fdopen(handle, "a", encoding="utf-8")
        if self._file.tell() and not _ends_with_newline(path):
            self._file.write("\n")  # a line cut short by a crash stays a line of its own

    def write(self, event: Mapping[str, Any]) -> None:
        """Seal the event into this file's chain and append it."""
        self.write_line(self.chain.seal(event).line)

    def write_line(self, line: str) -> None:
        """Append a line sealed by `self.chain` (the emitter seals once for every sink)."""
        if self._file is None:
            raise ValueError(f"audit sink for {self.path} is closed")
        self._pending.append(line + "\n")
        if len(self._pending) >= self.batch:
            self.flush()

    def flush(self) -> None:
        """Write the waiting lines in one call and hand them to the operating system."""
        if self._file is None or not self._pending:
            return
        lines, self._pending = "".join(self._pending), []
        self._file.write(lines)
        self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            try:
                self.flush()
            finally:
                self._file.close()
                self._file = None


def _ends_with_newline(path: Path) -> bool:
    with path.open("rb") as handle:
        handle.seek(-1, 2)
        return handle.read(1) == b"\n"


class MemorySink:
    """Keeps events in a list: for tests and for callers that ship events themselves."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    def write(self, event: Mapping[str, Any]) -> None:
        self.events.append(dict(event))

    def close(self) -> None:
        return None


def read_events(
    path: str | os.PathLike[str],
    encryption_key: EncryptionKey | Sequence[EncryptionKey] | None = None,
) -> list[dict[str, Any]]:
    """Load an audit file, naming the line of anything malformed (or sealed with another key)."""
    return [event for _, event in iter_numbered(path, encryption_key)]


def read_numbered(
    path: str | os.PathLike[str],
    encryption_key: EncryptionKey | Sequence[EncryptionKey] | Cipher | None = None,
) -> list[tuple[int, dict[str, Any]]]:
    """The file's events with their line numbers (all in memory; see `iter_numbered`)."""
    return list(iter_numbered(path, encryption_key))


def iter_numbered(
    path: str | os.PathLike[str],
    encryption_key: EncryptionKey | Sequence[EncryptionKey] | Cipher | None = None,
) -> Iterator[tuple[int, dict[str, Any]]]:
    """The file's events with their line numbers, read as a stream (one line in memory at
    a time). Any malformed line is an `AuditFileError` (a `ValueError`) naming it: not
    UTF-8, not JSON, nested too deeply, not an event, encrypted with another key (or
    altered)."""
    from statemachine_agent.persistence.crypto import Cipher, KeyMismatchError, cipher_for

    cipher = encryption_key if isinstance(encryption_key, Cipher) else cipher_for(encryption_key)
    path = Path(path)
    with path.open("rb") as handle:
        for number, raw in enumerate(handle, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise AuditFileError(
                    f"{path}:{number}: not a UTF-8 text file (byte {exc.start + 1} of the line)"
                ) from None
            if not line.strip():
                continue
            event = _json_object(path, number, line)
            if isinstance(event.get(ENCRYPTED), str) and "event" not in event:
                try:
                    opened = _open_line(cipher, event[ENCRYPTED])
                except KeyMismatchError as exc:
                    hint = "; give the key (--encryption-key)" if cipher is None else ""
                    raise AuditFileError(f"{path}:{number}: {exc}{hint}") from None
                event = _json_object(path, number, opened)
            if not isinstance(event.get("event"), str):
                raise AuditFileError(f"{path}:{number}: not an audit event (no 'event' key)")
            yield number, event


def _open_line(cipher: Cipher | None, sealed: str) -> str:
    from statemachine_agent.persistence.crypto import KeyMismatchError, open_payload

    if cipher is None:
        raise KeyMismatchError("the line is encrypted and no encryption key was given")
    return open_payload(cipher, sealed, AUDIT_CONTEXT)


def _json_object(path: Path, number: int, line: str) -> dict[str, Any]:
    try:
        event = json.loads(line)
    except json.JSONDecodeError as exc:
        raise AuditFileError(f"{path}:{number}: not a JSON object ({exc.msg})") from None
    except RecursionError:
        raise AuditFileError(f"{path}:{number}: nested too deeply to read") from None
    if not isinstance(event, dict):
        raise AuditFileError(f"{path}:{number}: not an audit event (not a JSON object)")
    return event


def run_events(
    events: Iterable[Mapping[str, Any]], run_id: str | None = None
) -> list[Mapping[str, Any]]:
    """The events of one run of an audit file: `run_id`'s, or the file's first run's.

    A sub-agent's run writes its events into its parent's file (each with its own
    `run_id` and a `parent_run_id`), so one file may hold several runs.
    """
    return list(iter_run_events(events, run_id))


def iter_run_events(
    events: Iterable[Mapping[str, Any]], run_id: str | None = None
) -> Iterator[Mapping[str, Any]]:
    """`run_events` as a stream: the first event read names the run when `run_id` is None.

    A fork's file (`Agent.fork`) begins with the original's events up to the fork
    point, then `run.forked` under the fork's own id: that history is the fork's, so
    the file's first run is followed into its fork (and a replay of the fork goes
    through the original's transitions first)."""
    follow = run_id is None
    for event in events:
        if run_id is None:
            run_id = str(event.get("run_id", ""))
        if follow and event.get("event") == "run.forked" and event.get("forked_from") == run_id:
            run_id = str(event.get("run_id", ""))
        if event.get("run_id") == run_id:
            yield event
