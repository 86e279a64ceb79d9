"""Where a run's events go: a JSONL file per run, memory, or nowhere.

Sinks receive events already redacted. They are the library's own objects,
passed per agent, so writing an audit file needs no global logging config.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any, Protocol

from statemachine_agent.audit.chain import AuditKey, continue_file


class AuditSink(Protocol):
    def write(self, event: Mapping[str, Any]) -> None: ...

    def close(self) -> None: ...


class JsonlSink:
    """Appends one JSON object a line; each line is flushed, so a crash loses at most one.

    Every line is sealed into the file's hash chain (`audit/chain.py`): `prev` is the
    digest of the line before, and `run.ended` carries the digest of the whole file.
    A file that already has lines (a resumed run) is continued, not restarted.
    `audit_key` makes every digest an HMAC, so only the key's holder can forge them.
    """

    def __init__(self, path: Path, *, audit_key: AuditKey | None = None) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self.chain = continue_file(path, audit_key)
        self._file: IO[str] | None = path.open("a", encoding="utf-8")
        if self._file.tell() and not _ends_with_newline(path):
            self._file.write("\n")  # a line cut short by a crash stays a line of its own

    def write(self, event: Mapping[str, Any]) -> None:
        """Seal the event into this file's chain and append it."""
        self.write_line(self.chain.seal(event).line)

    def write_line(self, line: str) -> None:
        """Append a line sealed by `self.chain` (the emitter seals once for every sink)."""
        if self._file is None:
            raise ValueError(f"audit sink for {self.path} is closed")
        self._file.write(line + "\n")
        self._file.flush()

    def close(self) -> None:
        if self._file is not None:
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


def read_events(path: Path) -> list[dict[str, Any]]:
    """Load an audit file, naming the line of anything malformed."""
    events: list[dict[str, Any]] = []
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                event = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}:{number}: not a JSON object ({exc.msg})") from exc
            if not isinstance(event, dict) or "event" not in event:
                raise ValueError(f"{path}:{number}: not an audit event (no 'event' key)")
            events.append(event)
    return events
