"""The fleet view: what many runs did, read from their audit files (`statemachine-agent stats`).

A reviewer or an operator asks questions no single report answers: which rows of the
table production never reaches, how runs end, what stalls and approvals cost. `stats`
reads any number of audit files (or folders of them) and answers with one `FleetStats`.

How it counts:

- **Files.** A folder is searched for `*.jsonl` files (recursively, in name order); a
  file named on its own is read whatever its name. Each file's hash chain is checked
  first (`audit/chain.py`): a file that does not verify (edited, or cut short) is
  counted and named, and nothing of it is counted; a file that cannot be read (not an
  audit file, encrypted without the key) is skipped, named with why.
- **Runs.** A run is its `run_id`. A resumed run (several `run.started`/`run.resumed`/
  `run.ended` in one file, or its events spread over several files) counts once, by its
  last `run.ended` (the latest `ts`; on a tie, the one read last). Its iterations and
  cost are that event's (the run's totals); its wall time runs from its first event to
  that one by `ts`, so time spent waiting for people is in it (without `ts`, the
  event's `elapsed_s`). A run with no `run.ended` is `unfinished`.
- **Sub-agent runs** (events with a `parent_run_id`, written into the parent's file)
  are runs of their own but counted apart: the end-state table's `sub_agent_runs`
  column, never in `runs` nor in the figures, because a parent's cost and iterations
  already include its sub-agents' calls. Their transitions, approvals and stall
  interventions count like any run's (they fire the same table's rows).
- **Rows** are counted by `(source, trigger, dest, via)`, every `transition.fired` of
  every counted file; rows a file names that the table does not have are listed apart.
- **Approvals** are the `approval.decided` events: by decision, by reviewer (`by`, else
  the kind of decider in parentheses: `(person)`, `(policy)`, `(default)`), and the
  wait (`waited_s`; for an older file without it, a person's decision is timed from
  the run's pause). The fleet's wait figures are over people's decisions only; a
  policy answers at once and would hide how long people take.
- **Stalls**: runs with at least one `stall.intervened`, how many interventions, and
  how those runs ended.

Memory is bounded by the runs, never by the events: each run is a small summary kept
until the end (a resumed run may continue in any later file), and each figure keeps at
most `SAMPLE_CAP` values; past that, a reservoir sample (median and p90 then estimated,
`Figures.exact` false; count and max stay exact). Names a file supplies (reviewers,
decisions, unknown rows, end states) are capped too, so a hostile file cannot grow them.
"""

from __future__ import annotations

import math
import os
import random
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from statemachine_agent.machine import table
from statemachine_agent.report._lenient import as_float, as_int, as_str
from statemachine_agent.report.build import ReportError

if TYPE_CHECKING:
    from statemachine_agent.audit.chain import AuditKey
    from statemachine_agent.persistence.crypto import Cipher, EncryptionKey

SAMPLE_CAP = 10_000
"""Values one figure keeps exactly; past it, a reservoir of this many (`_Sample`)."""
NAMES_CAP = 200
"""Distinct names (reviewers, decisions, end states, unknown rows) counted one by one;
any more are counted under `OTHER`."""
FILES_NAMED_CAP = 1_000
"""Files named in each problem list; any more are counted, not named."""
OTHER = "(other)"
UNFINISHED = "unfinished"
"""The end state of a run whose file holds no `run.ended` of it."""
PERSON = "person"

RowKey = tuple[str, str, str, tuple[str, ...]]


# -- what it returns -------------------------------------------------------------------


@dataclass(frozen=True)
class Figures:
    """Median, 90th percentile and maximum of one measure (None when there are no values).

    The p90 is the nearest-rank one: the smallest value at least 90% of the values
    are at or below."""

    count: int = 0
    median: float | None = None
    p90: float | None = None
    max: float | None = None
    exact: bool = True
    """False when more than `SAMPLE_CAP` values came and median and p90 are estimated."""


@dataclass(frozen=True)
class EndStateStats:
    """How often runs ended in one end state, and what those runs took."""

    end_state: str
    runs: int
    """Top-level runs (not sub-agent runs) that ended here."""
    sub_agent_runs: int
    iterations: Figures
    cost_usd: Figures
    wall_s: Figures


@dataclass(frozen=True)
class RowCount:
    """One row of the transition table (or one a file fired that the table lacks) and
    how often it fired across the files."""

    source: str
    trigger: str
    dest: str
    guards: tuple[str, ...]
    fired: int
    description: str = ""
    """The table's sentence for it; empty for a row the table does not have."""

    @property
    def label(self) -> str:
        guards = f" [{' & '.join(self.guards)}]" if self.guards else ""
        return f"{self.source} --{self.trigger}{guards}--> {self.dest}"


@dataclass(frozen=True)
class ReviewerStats:
    """The decisions one reviewer (a person's name, or a kind of decider) made."""

    reviewer: str
    decisions: Mapping[str, int]
    wait_s: Figures


@dataclass(frozen=True)
class ApprovalStats:
    """Every `approval.decided` of the counted files."""

    count: int = 0
    by_decision: Mapping[str, int] = field(default_factory=dict)
    by_decider: Mapping[str, int] = field(default_factory=dict)
    """`person`, `policy` or `default` (older files: from the event's `source`)."""
    wait_s: Figures = Figures()
    """How long calls waited for people's decisions (`decider == "person"`)."""
    reviewers: tuple[ReviewerStats, ...] = ()


@dataclass(frozen=True)
class StallStats:
    """Runs the stall detector had to steer, and how they ended."""

    runs: int = 0
    interventions: int = 0
    detections: int = 0
    ended: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class FileProblem:
    """A file left out of the counts, and why, in one line."""

    path: str
    problem: str


@dataclass(frozen=True)
class FleetStats:
    """What the runs of many audit files did (see the module's docstring for how each
    figure is counted). `as_dict()` is its JSON form (`stats --json`)."""

    files_counted: int
    """Files whose events are counted."""
    not_verified: tuple[FileProblem, ...]
    """Files whose hash chain does not hold (the first `FILES_NAMED_CAP`): not counted."""
    not_verified_count: int
    skipped: tuple[FileProblem, ...]
    """Files that could not be read (the first `FILES_NAMED_CAP`)."""
    skipped_count: int
    runs: int
    """Top-level runs counted (each resumed run once)."""
    sub_agent_runs: int
    end_states: tuple[EndStateStats, ...]
    """Most frequent first."""
    rows: tuple[RowCount, ...]
    """Every row of the table, in the table's order."""
    unknown_rows: tuple[RowCount, ...]
    """Rows fired that the table does not have (a file from an older table), most first."""
    approvals: ApprovalStats
    stalls: StallStats

    @property
    def files_read(self) -> int:
        """Files opened and judged: counted, or found not to verify."""
        return self.files_counted + self.not_verified_count

    @property
    def never_fired(self) -> tuple[RowCount, ...]:
        """The table's rows no counted run fired."""
        return tuple(row for row in self.rows if not row.fired)

    def as_dict(self) -> dict[str, Any]:
        """Plain JSON data: every field, plus `files_read` and `never_fired`."""
        data = asdict(self)
        data["files_read"] = self.files_read
        data["never_fired"] = [asdict(row) for row in self.never_fired]
        return data


# -- counting --------------------------------------------------------------------------


class _Sample:
    """The values of one figure: all of them up to `cap`, then a reservoir sample of
    `cap` (Algorithm R, with its own seeded generator: the same files give the same
    figures), with the count and maximum kept exact."""

    __slots__ = ("cap", "count", "largest", "random", "values")

    def __init__(self, cap: int = SAMPLE_CAP) -> None:
        self.cap = cap
        self.values: list[float] = []
        self.count = 0
        self.largest: float | None = None
        self.random: random.Random | None = None

    def add(self, value: float) -> None:
        self.count += 1
        self.largest = value if self.largest is None else max(self.largest, value)
        if len(self.values) < self.cap:
            self.values.append(value)
            return
        if self.random is None:
            self.random = random.Random(0)
        slot = self.random.randrange(self.count)
        if slot < self.cap:
            self.values[slot] = value

    def figures(self) -> Figures:
        if not self.values:
            return Figures(self.count)
        ordered = sorted(self.values)
        n = len(ordered)
        middle = n // 2
        median = ordered[middle] if n % 2 else (ordered[middle - 1] + ordered[middle]) / 2
        p90 = ordered[max(0, math.ceil(0.9 * n) - 1)]
        return Figures(self.count, median, p90, self.largest, self.count <= self.cap)


def _capped(counter: Counter[str], name: str, amount: int = 1) -> None:
    """Count `name`, or `OTHER` once `NAMES_CAP` names are counted."""
    if name not in counter and len(counter) >= NAMES_CAP:
        name = OTHER
    counter[name] += amount


class _Run:
    """What the fleet view keeps of one run until the end: a few figures, no events."""

    __slots__ = (
        "cost",
        "detections",
        "elapsed",
        "end_order",
        "end_state",
        "end_ts",
        "first_ts",
        "interventions",
        "iterations",
        "paused_at",
        "sub_agent",
    )

    def __init__(self) -> None:
        self.first_ts: float | None = None
        self.end_state: str | None = None
        self.end_ts: float | None = None
        self.end_order = -1
        self.iterations = 0
        self.cost = 0.0
        self.elapsed = 0.0
        self.interventions = 0
        self.detections = 0
        self.paused_at: float | None = None
        self.sub_agent = False

    def later_than(self, ts: float | None, order: int) -> bool:
        """Whether an end at (`ts`, `order`) is this run's last so far."""
        if self.end_state is None:
            return True
        if ts is not None and self.end_ts is not None and ts != self.end_ts:
            return ts > self.end_ts
        return order > self.end_order

    def merge(self, other: _Run) -> None:
        """Take what one file said of this run."""
        if other.first_ts is not None:
            self.first_ts = (
                other.first_ts if self.first_ts is None else min(self.first_ts, other.first_ts)
            )
        if other.end_state is not None and self.later_than(other.end_ts, other.end_order):
            self.end_state, self.end_ts, self.end_order = (
                other.end_state,
                other.end_ts,
                other.end_order,
            )
            self.iterations, self.cost, self.elapsed = other.iterations, other.cost, other.elapsed
        self.interventions += other.interventions
        self.detections += other.detections
        self.paused_at = other.paused_at if other.paused_at is not None else self.paused_at
        self.sub_agent = self.sub_agent or other.sub_agent

    @property
    def wall_s(self) -> float:
        if self.first_ts is not None and self.end_ts is not None:
            return max(0.0, self.end_ts - self.first_ts)
        return self.elapsed


class _Approvals:
    """The counts of `approval.decided` events (mergeable: a file's go in only once the
    whole file was read)."""

    def __init__(self) -> None:
        self.count = 0
        self.decisions: Counter[str] = Counter()
        self.deciders: Counter[str] = Counter()
        self.waits = _Sample()
        self.reviewers: dict[str, tuple[Counter[str], _Sample]] = {}

    def add(self, decision: str, decider: str, reviewer: str, wait: float | None) -> None:
        self.count += 1
        _capped(self.decisions, decision)
        _capped(self.deciders, decider)
        if reviewer not in self.reviewers and len(self.reviewers) >= NAMES_CAP:
            reviewer = OTHER
        kinds, waits = self.reviewers.setdefault(reviewer, (Counter(), _Sample(SAMPLE_CAP // 10)))
        _capped(kinds, decision)
        if wait is not None:
            waits.add(wait)
            if decider == PERSON:
                self.waits.add(wait)

    def merge(self, other: _Approvals) -> None:
        self.count += other.count
        for name, n in other.decisions.items():
            _capped(self.decisions, name, n)
        for name, n in other.deciders.items():
            _capped(self.deciders, name, n)
        for value in other.waits.values:
            self.waits.add(value)
        for reviewer, (kinds, waits) in other.reviewers.items():
            if reviewer not in self.reviewers and len(self.reviewers) >= NAMES_CAP:
                reviewer = OTHER
            mine, my_waits = self.reviewers.setdefault(
                reviewer, (Counter(), _Sample(SAMPLE_CAP // 10))
            )
            for name, n in kinds.items():
                _capped(mine, name, n)
            for value in waits.values:
                my_waits.add(value)

    def stats(self) -> ApprovalStats:
        reviewers = sorted(self.reviewers.items(), key=lambda item: (-item[1][0].total(), item[0]))
        return ApprovalStats(
            self.count,
            dict(self.decisions.most_common()),
            dict(self.deciders.most_common()),
            self.waits.figures(),
            tuple(
                ReviewerStats(name, dict(kinds.most_common()), waits.figures())
                for name, (kinds, waits) in reviewers
            ),
        )


_DECIDERS = {"resume": PERSON, "policy": "policy", "default": "default"}
"""An older `approval.decided` (no `decided_by`): its `source` says who decided."""


class _FileTally:
    """What one file adds: merged into the fleet's counts only once the whole file was
    read, so a file that fails halfway adds nothing."""

    def __init__(self, known: Mapping[str, _Run], order: int) -> None:
        self.known = known
        self.order = order
        self.rows: Counter[RowKey] = Counter()
        self.runs: dict[str, _Run] = {}
        self.approvals = _Approvals()

    def _run(self, run_id: str) -> _Run:
        run = self.runs.get(run_id)
        if run is None:
            run = self.runs[run_id] = _Run()
            before = self.known.get(run_id)
            run.paused_at = before.paused_at if before is not None else None
        return run

    def add(self, event: Mapping[str, Any]) -> None:
        name = event.get("event")
        run = self._run(as_str(event.get("run_id")))
        ts = event.get("ts")
        stamp = float(ts) if isinstance(ts, int | float) and not isinstance(ts, bool) else None
        if stamp is not None and not math.isfinite(stamp):
            stamp = None
        if stamp is not None:
            run.first_ts = stamp if run.first_ts is None else min(run.first_ts, stamp)
        if event.get("parent_run_id") is not None:
            run.sub_agent = True
        if name == "transition.fired":
            self._transition(event)
        elif name == "run.ended":
            self.order += 1
            end_state = as_str(event.get("end_state")) or UNFINISHED
            if run.later_than(stamp, self.order):
                run.end_state, run.end_ts, run.end_order = end_state, stamp, self.order
                run.iterations = as_int(event.get("iterations"))
                run.cost = _finite(as_float(event.get("cost_usd")))
                run.elapsed = _finite(as_float(event.get("elapsed_s")))
            if end_state == "awaiting_approval":
                run.paused_at = stamp
        elif name == "stall.intervened":
            run.interventions += 1
        elif name == "stall.detected":
            run.detections += 1
        elif name == "approval.decided":
            self._approval(event, run, stamp)

    def _transition(self, event: Mapping[str, Any]) -> None:
        via = event.get("via")
        guards = tuple(as_str(g) for g in via) if isinstance(via, list) else ()
        parts = (
            as_str(event.get("source")),
            as_str(event.get("trigger")),
            as_str(event.get("dest")),
        )
        if all(parts):
            key = (*parts, guards)
            if (
                key in self.rows
                or key in _TABLE_KEYS
                or len(self.rows) < NAMES_CAP + len(_TABLE_KEYS)
            ):
                self.rows[key] += 1

    def _approval(self, event: Mapping[str, Any], run: _Run, stamp: float | None) -> None:
        decision = as_str(event.get("decision")) or "(none)"
        decider = as_str(event.get("decided_by")) or _DECIDERS.get(
            as_str(event.get("source")), "(unknown)"
        )
        by = event.get("by")
        reviewer = by if isinstance(by, str) and by else f"({decider})"
        waited = event.get("waited_s")
        wait: float | None = None
        if isinstance(waited, int | float) and not isinstance(waited, bool):
            wait = _finite(float(waited))
        elif decider == PERSON and stamp is not None and run.paused_at is not None:
            wait = stamp - run.paused_at
        if decision == "defer":
            wait = None  # a deferral is no decision on the call: it is what starts the wait
        self.approvals.add(decision, decider, reviewer, None if wait is None else max(0.0, wait))


_TABLE_KEYS: frozenset[RowKey] = frozenset(row.key for row in table.ROWS)


def _finite(value: float) -> float:
    return value if math.isfinite(value) else 0.0


class _Fleet:
    """The counts so far, over every file read."""

    def __init__(self) -> None:
        self.rows: Counter[RowKey] = Counter()
        self.runs: dict[str, _Run] = {}
        self.approvals = _Approvals()
        self.order = 0
        self.counted = 0
        self.not_verified: list[FileProblem] = []
        self.not_verified_count = 0
        self.skipped: list[FileProblem] = []
        self.skipped_count = 0

    def take(self, tally: _FileTally) -> None:
        self.counted += 1
        self.order = tally.order
        for key, n in tally.rows.items():
            if (
                key in self.rows
                or key in _TABLE_KEYS
                or len(self.rows) < NAMES_CAP + len(_TABLE_KEYS)
            ):
                self.rows[key] += n
        for run_id, run in tally.runs.items():
            self.runs.setdefault(run_id, _Run()).merge(run)
        self.approvals.merge(tally.approvals)

    def refuse(self, path: Path, problem: str, *, verified: bool) -> None:
        if verified:
            self.skipped_count += 1
            if len(self.skipped) < FILES_NAMED_CAP:
                self.skipped.append(FileProblem(str(path), problem))
        else:
            self.not_verified_count += 1
            if len(self.not_verified) < FILES_NAMED_CAP:
                self.not_verified.append(FileProblem(str(path), problem))

    def result(self) -> FleetStats:
        ends: dict[str, tuple[list[int], _Sample, _Sample, _Sample]] = {}
        stalled = _StallCounts()
        top = sub = 0
        for run in self.runs.values():
            state = run.end_state or UNFINISHED
            if state not in ends and len(ends) >= NAMES_CAP:
                state = OTHER
            counts, iterations, cost, wall = ends.setdefault(
                state, ([0, 0], _Sample(), _Sample(), _Sample())
            )
            if run.interventions or run.detections:
                stalled.add(run, state)
            if run.sub_agent:
                sub += 1
                counts[1] += 1
                continue
            top += 1
            counts[0] += 1
            iterations.add(run.iterations)
            cost.add(run.cost)
            wall.add(run.wall_s)
        end_states = sorted(
            (
                EndStateStats(name, c[0], c[1], i.figures(), m.figures(), w.figures())
                for name, (c, i, m, w) in ends.items()
            ),
            key=lambda e: (-(e.runs + e.sub_agent_runs), e.end_state),
        )
        rows = tuple(
            RowCount(*row.key, fired=self.rows[row.key], description=row.description)
            for row in table.ROWS
        )
        unknown = sorted(
            (RowCount(*key, fired=n) for key, n in self.rows.items() if key not in _TABLE_KEYS),
            key=lambda r: (-r.fired, r.label),
        )
        return FleetStats(
            files_counted=self.counted,
            not_verified=tuple(self.not_verified),
            not_verified_count=self.not_verified_count,
            skipped=tuple(self.skipped),
            skipped_count=self.skipped_count,
            runs=top,
            sub_agent_runs=sub,
            end_states=tuple(end_states),
            rows=rows,
            unknown_rows=tuple(unknown),
            approvals=self.approvals.stats(),
            stalls=stalled.stats(),
        )


class _StallCounts:
    """The stall figures, gathered run by run at the end."""

    def __init__(self) -> None:
        self.runs = 0
        self.interventions = 0
        self.detections = 0
        self.ended: Counter[str] = Counter()

    def add(self, run: _Run, state: str) -> None:
        if run.interventions:
            self.runs += 1
            self.ended[state] += 1
        self.interventions += run.interventions
        self.detections += run.detections

    def stats(self) -> StallStats:
        return StallStats(
            self.runs, self.interventions, self.detections, dict(self.ended.most_common())
        )


# -- reading ---------------------------------------------------------------------------


def audit_files(paths: Iterable[str | os.PathLike[str]]) -> Iterator[Path]:
    """Each file to read, in order: a file as given, a folder's `*.jsonl` files
    (recursively, in name order, found as the walk goes: nothing listed in advance).

    Raises `ReportError` for a path that does not exist, when it is reached."""
    for given in paths:
        path = Path(given)
        if path.is_dir():
            yield from _walk(path)
        elif path.exists():
            yield path
        else:
            raise ReportError(f"{path}: no such file or folder")


def _walk(folder: Path) -> Iterator[Path]:
    try:
        entries = sorted(os.scandir(folder), key=lambda entry: entry.name)
    except OSError:
        return
    for entry in entries:
        path = Path(entry.path)
        try:
            if entry.is_dir(follow_symlinks=False):
                yield from _walk(path)
            elif entry.name.endswith(".jsonl") and entry.is_file():
                yield path
        except OSError:
            continue


def stats(
    paths: Iterable[str | os.PathLike[str]] | str | os.PathLike[str],
    *,
    encryption_key: EncryptionKey | Sequence[EncryptionKey] | Cipher | None = None,
    audit_key: AuditKey | None = None,
) -> FleetStats:
    """The fleet view of the audit files at `paths` (files or folders; see the module's
    docstring for what is counted and how).

    `encryption_key` opens encrypted files (their chains verify without it, their events
    do not read); `audit_key` checks the chains of files written with one. Raises
    `ReportError` for a path that does not exist, and when no file at all could be
    read (none found, or every one skipped).
    """
    from statemachine_agent.persistence.crypto import Cipher, cipher_for

    if isinstance(paths, str | os.PathLike):
        paths = [paths]
    cipher = encryption_key if isinstance(encryption_key, Cipher) else cipher_for(encryption_key)
    fleet = _Fleet()
    for path in audit_files(paths):
        _read_file(fleet, path, cipher, audit_key)
    if not fleet.counted and not fleet.not_verified_count:
        found = fleet.skipped_count
        why = f"; the first: {fleet.skipped[0].path}: {fleet.skipped[0].problem}" if found else ""
        raise ReportError(
            f"no audit file could be read ({found} skipped{why})"
            if found
            else "no audit files found (a folder is searched for *.jsonl files)"
        )
    return fleet.result()


def _read_file(
    fleet: _Fleet, path: Path, cipher: Cipher | None, audit_key: AuditKey | None
) -> None:
    """Verify one file, then count its events; a problem names the file and leaves it out."""
    from statemachine_agent.audit.chain import verify_file
    from statemachine_agent.audit.sink import iter_numbered
    from statemachine_agent.persistence.crypto import KeyMismatchError

    try:
        verification = verify_file(path, audit_key, cipher)
    except KeyMismatchError as exc:
        fleet.refuse(path, f"--encryption-key: {exc}", verified=True)
        return
    except OSError as exc:
        fleet.refuse(path, f"cannot read: {exc.strerror or exc}", verified=True)
        return
    if not verification.ok:
        fleet.refuse(path, f"{verification.status}: {verification.message}", verified=False)
        return
    tally = _FileTally(fleet.runs, fleet.order)
    try:
        for _, event in iter_numbered(path, cipher):
            tally.add(event)
    except (OSError, ValueError) as exc:  # AuditFileError names the line
        problem = str(exc).removeprefix(f"{path}:")
        fleet.refuse(path, problem.strip(), verified=True)
        return
    fleet.take(tally)
