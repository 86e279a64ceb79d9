"""What a reviewer looks for first in a run that waited for people: each approval
decision (who, what, why, how long the call waited) and each pause and resume.

Read from the audit events alone, like the rest of the report, and as forgivingly:
a pause is the `run.ended` event whose `end_state` is `awaiting_approval`, a resume
the `run.resumed` event, a decision the `approval.decided` event (see
docs/events.md); a file written before decisions named their maker still reads,
with the missing facts left blank. At most `ROWS_CAP` entries a run are kept, the
rest counted, so a stream of any length is read in bounded memory.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from statemachine_agent.report._lenient import as_str
from statemachine_agent.report.fold import ROWS_CAP, RUNS_CAP

PAUSE_STATE = "awaiting_approval"
"""The end state a run pauses in for people; leaving it by `resume` is the resume."""


@dataclass(frozen=True, slots=True)
class ReviewEntry:
    """One line of a run's review: a decision, a pause or a resume."""

    kind: Literal["approval", "pause", "resume"]
    at: str
    """When, as ISO 8601 (UTC): the decision's `decided_at`, else the event's `ts`."""
    decision: str = ""
    tool: str = ""
    tool_use_id: str = ""
    by: str = ""
    decided_by: str = ""
    """`person`, `policy` or `default` (blank in files older than the field)."""
    note: str = ""
    waited_s: float | None = None
    reason: str = ""
    """A pause's reason (the calls it waits for)."""

    def line(self) -> str:
        """The entry as one sentence for the terminal."""
        if self.kind == "pause":
            return f"{self.at}  paused: {self.reason or 'waiting for approval'}"
        if self.kind == "resume":
            return f"{self.at}  resumed"
        who = self.by or "nobody"
        if self.decided_by and self.decided_by != "person":
            who = f"{who} ({self.decided_by})" if self.by else self.decided_by
        text = f"{self.at}  {self.decision or '?'} {self.tool} ({self.tool_use_id}) by {who}"
        if self.waited_s is not None:
            text += f", waited {_duration(self.waited_s)}"
        if self.note:
            text += f": {self.note!r}"
        return text


@dataclass(slots=True)
class Reviews:
    """The review entries of each run in a file, gathered while the events stream by
    (`tap`), kept per run up to `ROWS_CAP`, the others counted in `left_out`."""

    entries: dict[str, list[ReviewEntry]] = field(default_factory=dict)
    left_out: dict[str, int] = field(default_factory=dict)

    def tap(self, events: Iterable[Mapping[str, Any]]) -> Iterator[Mapping[str, Any]]:
        """The events, unchanged, each review entry among them kept on the way."""
        for event in events:
            self.add(event)
            yield event

    def add(self, event: Mapping[str, Any]) -> None:
        entry = review_entry(event)
        if entry is None:
            return
        run_id = as_str(event.get("run_id"))
        kept = self.entries.get(run_id)
        if kept is None:
            if len(self.entries) >= RUNS_CAP:
                return
            kept = self.entries[run_id] = []
        if len(kept) < ROWS_CAP:
            kept.append(entry)
        else:
            self.left_out[run_id] = self.left_out.get(run_id, 0) + 1

    def of(self, run_id: str) -> list[ReviewEntry]:
        return self.entries.get(run_id, [])


def review_entry(event: Mapping[str, Any]) -> ReviewEntry | None:
    """The review entry an event is, if it is one."""
    name = event.get("event")
    at = _iso(event.get("ts"))
    if name == "run.resumed":
        return ReviewEntry("resume", at)
    if name == "run.ended" and event.get("end_state") == PAUSE_STATE:
        return ReviewEntry("pause", at, reason=as_str(event.get("reason")))
    if name != "approval.decided":
        return None
    waited = event.get("waited_s")
    return ReviewEntry(
        "approval",
        as_str(event.get("decided_at")) or at,
        decision=as_str(event.get("decision")),
        tool=as_str(event.get("tool")),
        tool_use_id=as_str(event.get("tool_use_id")),
        by=as_str(event.get("by")),
        decided_by=as_str(event.get("decided_by")),
        note=as_str(event.get("note")),
        waited_s=float(waited)
        if isinstance(waited, int | float) and not isinstance(waited, bool)
        else None,
    )


def _iso(ts: object) -> str:
    if isinstance(ts, int | float) and not isinstance(ts, bool):
        try:
            return datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds")
        except (OverflowError, OSError, ValueError):
            pass
    return "?"


def _duration(seconds: float) -> str:
    """A wait as a person reads it: seconds, minutes or hours."""
    if seconds < 60:
        return f"{seconds:.1f} s"
    if seconds < 3600:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"
