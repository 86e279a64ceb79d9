"""Where a run's events go: a JSONL file per run, memory, or nowhere.

Sinks receive events already redacted. They are the library's own objects,
passed per agent, so writing an audit file needs no global logging config.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any, Protocol

from statemachine_agent.unicode import repair_text


class AuditSink(Protocol):
    def write(self, event: Mapping[str, Any]) -> None: ...

    def close(self) -> None: ...


class JsonlSink:
    """Appends one JSON object a line; each line is flushed, so a crash loses at most one."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file: IO[str] | None = path.open("a", encoding="utf-8")

    def write(self, event: Mapping[str, Any]) -> None:
        if self._file is None:
            raise ValueError(f"audit sink for {self.path} is closed")
        # Repaired here too: text that is not valid Unicode must not fail the write.
        self._file.write(repair_text(json.dumps(event, ensure_ascii=False, default=str)) + "\n")
        self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


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
