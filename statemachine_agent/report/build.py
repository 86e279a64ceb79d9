"""Turn an audit file's events into the iterations a person reads.

The report and `inspect` are built from the events alone (never from the engine's
objects), so they work for any audit file: an old one, one from another machine,
one cut short by a crash. Every lookup is therefore forgiving: a missing or
oddly typed key gives an empty value, not a traceback.

An iteration is one trip through the model-calling state: it starts with the
transition into `reason` and holds everything up to the next one (the reply, the
tools it asked for, the guards that chose where to go next). Events before the
first model call, if any transitions happen there, form the `preamble`.

What is kept is bounded by what a person can read, not by the file (`fold.py` has the
caps): of each iteration, the first `ROWS_CAP` model calls, tool calls, transitions
and notes, the rest counted (`LeftOut`); of a run, the first and last iterations
(`ITERATIONS_CAP` in all), those between counted (`Gap`). The figures (iterations,
transitions, tool calls, tokens, cost) stay exact, so a file of millions of tiny
events is reported in bounded memory.
"""

from __future__ import annotations

import json
from collections import Counter, deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from statemachine_agent.machine.ends import SUCCESS_STATES
from statemachine_agent.report.fold import (
    ITERATIONS_CAP,
    POINTS_CAP,
    ROWS_CAP,
    RUNS_CAP,
    left_out,
)

MODEL_STATE = "reason"
"""The one state whose phase calls the model: entering it starts an iteration."""

_NOTE_EVENTS: Mapping[str, bool] = {
    # event name -> whether it is an error the reader should see flagged
    "phase.crashed": True,
    "model.fallback": True,
    "reflection.failed": True,
    "tool.skipped": True,
    "stall.detected": False,
    "stall.intervened": False,
    "reflection.added": False,
    "verify.checked": False,
    "context.continued": False,
    "context.compacted": False,
    "context.summary_failed": True,
}
"""Events shown as one-line notes in their iteration."""


MODEL_CALL_EVENTS = ("model.replied", "model.failed")
"""The events that close a model call: one per call, whatever its purpose."""


SUBAGENT_CALLS = "sub-agent"
"""The purpose under which a run counts its sub-agents' model calls."""


def model_calls(events: Iterable[Mapping[str, Any]]) -> Counter[str]:
    """The model calls a run made, by purpose (`loop` for its own, `salvage`, `critic`):
    every call the budget was charged for, not only the loop's iterations. In an audit
    file with sub-agent runs, the calls of runs other than the file's first are counted
    as `sub-agent` calls (the first run was charged for them). The events may be a stream."""
    calls: Counter[str] = Counter()
    first: list[Any] = []
    for event in events:
        if not first:
            first.append(event.get("run_id"))
        if event.get("event") in MODEL_CALL_EVENTS:
            own = event.get("run_id") == first[0]
            _tally(calls, (_str(event.get("purpose")) or "loop") if own else SUBAGENT_CALLS)
    return calls


PURPOSES_CAP = 32
"""Distinct purposes counted one by one; any beyond are counted as `other` (a file can
name any number of them)."""


def _tally(calls: Counter[str], purpose: str) -> None:
    if purpose not in calls and len(calls) >= PURPOSES_CAP:
        purpose = "other"
    calls[purpose] += 1


def describe_calls(calls: Counter[str]) -> str:
    """`4 model calls (1 salvage)`: the total, and the calls that were not the loop's."""
    total = sum(calls.values())
    others = ", ".join(
        f"{n} {purpose}" for purpose, n in sorted(calls.items()) if purpose != "loop"
    )
    return f"{total} model call{'s' if total != 1 else ''}" + (f" ({others})" if others else "")


class ReportError(ValueError):
    """The file holds audit events, but nothing a report can be built from."""


@dataclass(frozen=True)
class Tokens:
    """A usage record (the `usage` shape of docs/events.md)."""

    input: int = 0
    output: int = 0
    cache_read: int = 0
    cache_write: int = 0

    @classmethod
    def of(cls, usage: Any) -> Tokens:
        if not isinstance(usage, Mapping):
            return cls()
        return cls(
            input=_int(usage.get("input_tokens")),
            output=_int(usage.get("output_tokens")),
            cache_read=_int(usage.get("cache_read_tokens")),
            cache_write=_int(usage.get("cache_write_5m_tokens"))
            + _int(usage.get("cache_write_1h_tokens")),
        )

    @property
    def total(self) -> int:
        """Every token touched, cached or not (what `Usage.total_tokens` counts)."""
        return self.input + self.output + self.cache_read + self.cache_write

    def __sub__(self, other: Tokens) -> Tokens:
        return Tokens(
            self.input - other.input,
            self.output - other.output,
            self.cache_read - other.cache_read,
            self.cache_write - other.cache_write,
        )


@dataclass(frozen=True)
class Transition:
    """One `transition.fired` event; `tokens` and `cost_usd` are the run's totals so far."""

    seq: int
    source: str
    trigger: str
    dest: str
    guards: tuple[tuple[str, bool], ...]
    via: tuple[str, ...]
    elapsed_s: float
    tokens: Tokens
    cost_usd: float


@dataclass(frozen=True)
class ToolRun:
    """One tool call, from `tool.called` to its `tool.finished` or `tool.failed`."""

    tool: str
    tool_use_id: str
    input: Any
    output: str | None = None
    """The text sent back to the model; None when no result was recorded."""
    failed: bool = False
    error_kind: str | None = None
    fatal: bool = False
    duration_s: float | None = None
    child: Report | None = None
    """The sub-agent run this call started (`Agent.as_tool`), when its events are in
    the same audit file."""


@dataclass(frozen=True)
class ModelCall:
    """One model call: its reply, or how it failed."""

    number: int
    purpose: str | None
    """None for the loop's own calls; `salvage` or `critic` for the others."""
    model: str | None = None
    stop_reason: str | None = None
    text: str = ""
    thinking: str = ""
    other_blocks: tuple[Any, ...] = ()
    """Content blocks that are neither text, thinking nor tool_use, verbatim."""
    tokens: Tokens = field(default_factory=Tokens)
    cost_usd: float | None = None
    """The `cost_usd` of `model.replied`, as recorded (this call's cost)."""
    request_id: str | None = None
    error: str | None = None


@dataclass(frozen=True)
class Note:
    """Any other notable event of an iteration, as one sentence."""

    event: str
    text: str
    error: bool


@dataclass(frozen=True)
class LeftOut:
    """How much of one iteration a report leaves out: each kind of row past `ROWS_CAP`."""

    model_calls: int = 0
    tool_calls: int = 0
    failed_tool_calls: int = 0
    """Of `tool_calls`, the ones that failed."""
    transitions: int = 0
    notes: int = 0
    errors: int = 0
    """Failed calls and error notes among what was left out."""

    def lines(self) -> list[str]:
        """The note of each kind left out, e.g. `… [9,950 more tool calls left out of
        this report]`."""
        kinds = (
            (self.model_calls, "model calls"),
            (self.tool_calls, "tool calls"),
            (self.transitions, "transitions"),
            (self.notes, "notes"),
        )
        return [left_out(n, what) for n, what in kinds if n]


@dataclass(frozen=True)
class Gap:
    """The iterations of a run a report leaves out, between its first and last ones."""

    at: int
    """Where they were: the index in `Report.iterations` of the first one after them."""
    count: int

    @property
    def note(self) -> str:
        return left_out(self.count, "iterations")


@dataclass(frozen=True)
class Iteration:
    """One trip through the loop; `tokens` and `cost_usd` are what it added."""

    number: int
    calls: tuple[ModelCall, ...]
    tools: tuple[ToolRun, ...]
    transitions: tuple[Transition, ...]
    notes: tuple[Note, ...]
    tokens: Tokens
    cost_usd: float
    left_out: LeftOut = field(default_factory=lambda: LeftOut())
    """What the iteration held beyond the `ROWS_CAP` of each kind kept above."""

    @property
    def call(self) -> ModelCall | None:
        """The loop's own model call (the last attempt, if it was retried)."""
        loop = [c for c in self.calls if c.purpose is None]
        return loop[-1] if loop else None

    @property
    def has_error(self) -> bool:
        return (
            any(n.error for n in self.notes)
            or any(t.failed for t in self.tools)
            or any(c.error for c in self.calls)
            or self.left_out.errors > 0
        )

    @property
    def tool_calls(self) -> int:
        """Its tool calls, those left out of the report included."""
        return len(self.tools) + self.left_out.tool_calls

    @property
    def failed_tool_calls(self) -> int:
        return sum(1 for t in self.tools if t.failed) + self.left_out.failed_tool_calls

    @property
    def path(self) -> list[str]:
        """The states passed through, the entered state first."""
        if not self.transitions:
            return []
        return [self.transitions[0].source, *(t.dest for t in self.transitions)]


@dataclass(frozen=True)
class Outcome:
    """The `run.ended` event."""

    end_state: str
    reason: str
    text: str
    data: Any
    iterations: int
    tokens: Tokens
    cost_usd: float
    elapsed_s: float

    @property
    def success(self) -> bool:
        return self.end_state in SUCCESS_STATES


@dataclass(frozen=True)
class Point:
    """One point of the budget chart: the run's totals after a transition (or at the end)."""

    label: str
    detail: str
    cost_usd: float
    tokens: int


@dataclass(frozen=True)
class SummaryStep:
    """One pass through `summarize` that replaced older messages by a summary, shown as a
    step of its own (its call is not counted among the iteration's)."""

    after_iteration: int
    """The loop model calls made before it."""
    messages_replaced: int
    tokens_replaced: int
    tokens_before: int
    tokens_after: int
    summary: str
    call: ModelCall | None
    """The summary model's call (its usage and cost), when recorded."""


@dataclass(frozen=True)
class Report:
    """Everything the HTML report and `inspect` show, gathered from one audit file."""

    run_id: str
    model: str | None
    prompt: str
    started_ts: float | None
    budget: Mapping[str, Any]
    preamble: Iteration | None
    iterations: tuple[Iteration, ...]
    """The iterations shown: all of them, or the first and last ones around `gap`."""
    transitions: tuple[Transition, ...]
    """The run's transitions, up to the first `POINTS_CAP` (`transitions_fired` counts all)."""
    outcome: Outcome | None
    points: tuple[Point, ...]
    event_count: int
    summaries: tuple[SummaryStep, ...] = ()
    """Each time older exchanges were replaced by a summary (`context.summarized`)."""
    calls: Counter[str] = field(default_factory=Counter)
    """Model calls by purpose (`model_calls`)."""
    parent_run_id: str | None = None
    """For a sub-agent's run: the run that started it."""
    parent_tool_use_id: str | None = None
    agent: str | None = None
    """For a sub-agent's run: the agent's name (from the parent's `subagent.started`)."""
    gap: Gap | None = None
    """The iterations left out between the first and last ones shown (`ITERATIONS_CAP`)."""
    transition_count: int | None = None
    """Every transition of the run; `transitions` keeps the first `POINTS_CAP` of them.
    None: as many as `transitions` holds."""
    last_transition: Transition | None = None
    """The run's last transition (its totals), even when `transitions` stops before it."""
    tool_call_count: int | None = None
    """Every tool call of the run's iterations, those left out included (None: count them)."""
    failed_tool_call_count: int | None = None
    summaries_left_out: int = 0
    """Summaries past the `ITERATIONS_CAP` kept in `summaries`."""

    @property
    def children(self) -> tuple[tuple[Iteration, ToolRun], ...]:
        """The sub-agent runs this run started, with the iteration and tool call of each."""
        parts = [self.preamble] if self.preamble is not None else []
        return tuple(
            (i, t) for i in (*parts, *self.iterations) for t in i.tools if t.child is not None
        )

    @property
    def _last(self) -> Transition | None:
        if self.last_transition is not None:
            return self.last_transition
        return self.transitions[-1] if self.transitions else None

    @property
    def tokens(self) -> Tokens:
        """The run's token totals: from `run.ended`, else from the last transition."""
        if self.outcome is not None:
            return self.outcome.tokens
        last = self._last
        return last.tokens if last is not None else Tokens()

    @property
    def cost_usd(self) -> float:
        if self.outcome is not None:
            return self.outcome.cost_usd
        last = self._last
        return last.cost_usd if last is not None else 0.0

    @property
    def iteration_count(self) -> int:
        """Every iteration of the run, those left out of the report included."""
        return len(self.iterations) + (self.gap.count if self.gap is not None else 0)

    @property
    def transitions_fired(self) -> int:
        """Every transition of the run (`transitions` may hold only the first ones)."""
        if self.transition_count is not None:
            return self.transition_count
        return len(self.transitions)

    @property
    def tool_calls(self) -> int:
        if self.tool_call_count is not None:
            return self.tool_call_count
        return sum(i.tool_calls for i in self.iterations)

    @property
    def failed_tool_calls(self) -> int:
        if self.failed_tool_call_count is not None:
            return self.failed_tool_call_count
        return sum(i.failed_tool_calls for i in self.iterations)


def build(events: Iterable[Mapping[str, Any]], run_id: str | None = None) -> Report:
    """Gather a report from a run's events, in the order they were written.

    An audit file may hold sub-agent runs besides its own (their events carry a
    `parent_run_id`): the report is of `run_id`'s run (by default the file's first),
    and each sub-agent run it started is a report of its own, nested under the tool
    call that started it (`ToolRun.child`).

    The events are taken one at a time (a stream is fine), and each run's builder keeps
    only what the report shows (see the module's docstring), so its memory is bounded
    whatever the file's size or number of events. Runs that are neither `run_id`'s nor
    started by it, and runs past `RUNS_CAP`, are not gathered.
    """
    builders: dict[str, _Builder] = {}
    parents: dict[str, tuple[str, str]] = {}
    """Each sub-agent run: its parent's run id and the tool call that started it."""
    agents: dict[str, str] = {}
    chosen = run_id
    for event in events:
        rid = _str(event.get("run_id"))
        if chosen is None:
            chosen = rid
        parent = event.get("parent_run_id")
        builder = builders.get(rid)
        if builder is None:
            if len(builders) >= RUNS_CAP or not (rid == chosen or _str(parent) in builders):
                continue  # not a run this report shows
            builder = builders[rid] = _Builder()
        if parent is not None and _str(parent) != rid and rid not in parents:
            parents[rid] = (_str(parent), _str(event.get("parent_tool_use_id")))
        if event.get("event") == "subagent.started" and len(agents) < RUNS_CAP:
            agents.setdefault(_str(event.get("child_run_id")), _str(event.get("agent")))
        builder.add(event)
    if chosen is None:
        raise ReportError("the audit file holds no events")
    if chosen not in builders:
        raise ReportError(f"the audit file holds no events of run {chosen!r}")
    return _assemble(chosen, builders, parents, agents, frozenset({chosen}))


def _assemble(
    run_id: str,
    builders: Mapping[str, _Builder],
    parents: Mapping[str, tuple[str, str]],
    agents: Mapping[str, str],
    above: frozenset[str],
) -> Report:
    """The report of `run_id`, with the reports of the sub-agent runs it started (`above`:
    the runs it was started under, so a file whose runs claim each other ends)."""
    children: dict[str, Report] = {}
    for child, (parent, call) in parents.items():
        if parent == run_id and child not in above and call not in children:
            children[call] = _assemble(child, builders, parents, agents, above | {child})
    return builders[run_id].report(children, agents.get(run_id) or None)


class _Builder:
    """The state of `build` for one run between two of its events: what the report will
    show of it, and the counts of what it will not."""

    def __init__(self) -> None:
        self.count = 0
        self.first: Mapping[str, Any] = {}
        self.started: Mapping[str, Any] | None = None
        self.ended: Mapping[str, Any] | None = None
        self.totals = _Totals()
        self.preamble: Iteration | None = None
        self.head: list[Iteration] = []
        """The first iterations (half of `ITERATIONS_CAP`)."""
        self.tail: deque[Iteration] = deque(maxlen=ITERATIONS_CAP - ITERATIONS_CAP // 2)
        """The last ones so far."""
        self.skipped = 0
        """The iterations between the two, left out."""
        self.segment = _Segment(0)
        self.fallback = 0
        """The number of the segment being gathered (0: before the first model call)."""
        self.transitions: list[Transition] = []
        self.transition_count = 0
        self.last: Transition | None = None
        self.points = _Points()
        self.tool_calls = 0
        self.failed_tool_calls = 0
        self.summaries = _Summaries()
        self.calls: Counter[str] = Counter()

    def add(self, event: Mapping[str, Any]) -> None:
        if not self.count:
            self.first = {
                k: event.get(k) for k in ("run_id", "parent_run_id", "parent_tool_use_id")
            }
        self.count += 1
        name = event.get("event")
        transition: Transition | None = None
        if name == "run.started" and self.started is None:
            self.started = event
        elif name == "run.ended":
            self.ended = event
        elif name == "transition.fired":
            transition = _transition(event)
            self.transition_count += 1
            self.last = transition
            if len(self.transitions) < POINTS_CAP:
                self.transitions.append(transition)
            self.points.add(self.transition_count, transition)
            if event.get("dest") == MODEL_STATE:
                self._close()
                self.fallback += 1
                self.segment = _Segment(self.fallback)
        if name in MODEL_CALL_EVENTS:
            _tally(self.calls, _str(event.get("purpose")) or "loop")
        self.summaries.add(event)
        self.segment.add(event, transition)

    def _close(self) -> None:
        """Turn the segment gathered since the last transition into `reason` into an
        iteration, and keep it if it is among the first or (so far) the last ones."""
        after = self.segment.totals or self.totals
        iteration = self.segment.iteration(after, self.totals)
        self.totals = after
        if not self.segment.fallback:
            self.preamble = iteration
            return
        self.tool_calls += iteration.tool_calls
        self.failed_tool_calls += iteration.failed_tool_calls
        if len(self.head) < ITERATIONS_CAP // 2:
            self.head.append(iteration)
            return
        if len(self.tail) == self.tail.maxlen:
            self.skipped += 1
        self.tail.append(iteration)

    def report(self, children: Mapping[str, Report], agent: str | None) -> Report:
        self._close()
        self.segment = _Segment(self.fallback)  # a second report() adds nothing more
        shown = [*self.head, *self.tail]
        preamble = self.preamble
        if children:
            shown = [_with_children(segment, children) for segment in shown]
            preamble = _with_children(preamble, children) if preamble is not None else None
        if preamble is not None and not preamble.transitions and not preamble.notes:
            preamble = None
        started = self.started or {}
        outcome = _outcome(self.ended) if self.ended is not None else None
        first = self.first
        return Report(
            run_id=_str(first.get("run_id")),
            model=_str(started.get("model")) or None,
            prompt=_prompt(started.get("messages")),
            started_ts=_float(started["ts"]) if "ts" in started else None,
            budget=_mapping(started.get("budget")),
            preamble=preamble,
            iterations=tuple(shown),
            transitions=tuple(self.transitions),
            outcome=outcome,
            points=self.points.points(self.last, outcome),
            event_count=self.count,
            summaries=tuple(self.summaries.steps),
            calls=self.calls + _subagent_calls(children.values()),
            parent_run_id=_str(first.get("parent_run_id")) or None,
            parent_tool_use_id=_str(first.get("parent_tool_use_id")) or None,
            agent=agent,
            gap=Gap(len(self.head), self.skipped) if self.skipped else None,
            transition_count=self.transition_count,
            last_transition=self.last,
            tool_call_count=self.tool_calls,
            failed_tool_call_count=self.failed_tool_calls,
            summaries_left_out=self.summaries.left_out,
        )


def _subagent_calls(children: Iterable[Report]) -> Counter[str]:
    """The model calls of the sub-agent runs (at any depth), counted as `sub-agent` calls:
    the run's tokens and cost include theirs, so its count of calls does too."""
    total = sum(sum(child.calls.values()) for child in children)
    return Counter({SUBAGENT_CALLS: total}) if total else Counter()


def _with_children(segment: Iteration, children: Mapping[str, Report]) -> Iteration:
    tools = tuple(
        replace(t, child=children[t.tool_use_id]) if t.tool_use_id in children else t
        for t in segment.tools
    )
    return replace(segment, tools=tools)


class _Summaries:
    """Each `context.summarized` event, with the summary call that preceded it."""

    def __init__(self) -> None:
        self.steps: list[SummaryStep] = []
        self.left_out = 0
        """Summaries past the `ITERATIONS_CAP` kept."""
        self.model: str | None = None
        self.call: ModelCall | None = None

    def add(self, event: Mapping[str, Any]) -> None:
        name = _str(event.get("event"))
        if event.get("purpose") == "summary" and name == "model.requested":
            self.model = _str(event.get("model")) or None
        elif event.get("purpose") == "summary" and name == "model.replied":
            self.call = _model_call(event, self.model)
        elif name == "context.summarized" and len(self.steps) >= ITERATIONS_CAP:
            self.left_out += 1
            self.call = None
        elif name == "context.summarized":
            self.steps.append(
                SummaryStep(
                    after_iteration=_int(event.get("iteration")),
                    messages_replaced=_int(event.get("messages_replaced")),
                    tokens_replaced=_int(event.get("tokens_replaced")),
                    tokens_before=_int(event.get("tokens_before")),
                    tokens_after=_int(event.get("tokens_after")),
                    summary=_str(event.get("summary")),
                    call=self.call,
                )
            )
            self.call = None


# -- segmenting ----------------------------------------------------------------------


@dataclass(frozen=True)
class _Totals:
    """The run's running totals at the end of a segment."""

    tokens: Tokens = field(default_factory=Tokens)
    cost_usd: float = 0.0


class _Points:
    """The budget chart's points, one per transition until `POINTS_CAP`; past it, every
    second one is dropped and only every second one after taken, and so on (the chart
    keeps its shape, its memory stays bounded)."""

    def __init__(self) -> None:
        self.kept: list[Point] = []
        self.stride = 1
        self.last = 0

    def add(self, number: int, transition: Transition) -> None:
        if number % self.stride:
            return
        self.kept.append(_point(transition))
        self.last = number
        if len(self.kept) > POINTS_CAP:
            self.kept = self.kept[1::2]
            self.stride *= 2

    def points(self, last: Transition | None, outcome: Outcome | None) -> tuple[Point, ...]:
        """Zero, the points kept, the last transition, and the end when it spent more
        (a salvage call is charged after the last transition)."""
        points = [Point("start", "run started", 0.0, 0), *self.kept]
        if last is not None and (not self.kept or self.kept[-1].label != f"#{last.seq}"):
            points.append(_point(last))
        if outcome is not None and (
            outcome.cost_usd > points[-1].cost_usd or outcome.tokens.total > points[-1].tokens
        ):
            points.append(
                Point(
                    "end", f"run ended: {outcome.end_state}", outcome.cost_usd, outcome.tokens.total
                )
            )
        return tuple(points)


def _point(t: Transition) -> Point:
    return Point(f"#{t.seq}", f"#{t.seq} {t.source} → {t.dest}", t.cost_usd, t.tokens.total)


class _Segment:
    """The iteration being gathered, one event at a time: at most `ROWS_CAP` of each kind
    of row (model calls, tool calls, transitions, notes) is kept, the rest counted."""

    def __init__(self, fallback: int) -> None:
        self.fallback = fallback
        """The iteration's number unless a model call names it (0: the preamble)."""
        self.number: int | None = None
        self.totals: _Totals | None = None
        """The totals of its last transition or `run.ended`, once it has one."""
        self.calls: list[ModelCall] = []
        self.requested: dict[tuple[int, str | None], str] = {}
        self.tools: dict[str, ToolRun] = {}
        self.transitions: list[Transition] = []
        self.notes: list[Note] = []
        self.left: Counter[str] = Counter()

    def add(self, event: Mapping[str, Any], transition: Transition | None = None) -> None:
        """Take the next event (`transition`: its `Transition`, if it is one, already made)."""
        name = _str(event.get("event"))
        purpose = _str(event.get("purpose")) or None
        loop = event.get("purpose") is None and "iteration" in event
        if self.number is None and loop and name in ("model.requested", *MODEL_CALL_EVENTS):
            self.number = _int(event.get("iteration"))
        if name == "transition.fired":
            transition = transition or _transition(event)
            self.totals = _Totals(transition.tokens, transition.cost_usd)
        elif name == "run.ended":
            tokens = Tokens.of(event.get("usage_total"))
            self.totals = _Totals(tokens, _float(event.get("cost_usd")))
        if name == "model.requested":
            if len(self.requested) >= ROWS_CAP:
                self.requested.clear()  # a reply is matched to a recent request
            self.requested[(_int(event.get("iteration")), purpose)] = _str(event.get("model"))
        elif name in MODEL_CALL_EVENTS:
            self._call(name, purpose, event)
        elif name.startswith("tool.") and name != "tool.skipped":
            self._tool(name, event)
        elif transition is not None:
            if len(self.transitions) < ROWS_CAP:
                self.transitions.append(transition)
            else:
                self.left["transitions"] += 1
        if name in _NOTE_EVENTS:
            if len(self.notes) < ROWS_CAP:
                self.notes.append(Note(name, _note_text(name, event), _NOTE_EVENTS[name]))
            else:
                self.left["notes"] += 1
                self.left["errors"] += _NOTE_EVENTS[name]

    def _call(self, name: str, purpose: str | None, event: Mapping[str, Any]) -> None:
        if len(self.calls) >= ROWS_CAP:
            self.left["model_calls"] += 1
            self.left["errors"] += name == "model.failed"
            return
        key = (_int(event.get("iteration")), purpose)
        if name == "model.replied":
            self.calls.append(_model_call(event, self.requested.get(key)))
            return
        self.calls.append(
            ModelCall(
                number=key[0],
                purpose=purpose,
                model=self.requested.get(key),
                error=_str(event.get("error")) or "the model call failed",
                request_id=_str(event.get("request_id")) or None,
            )
        )

    def _tool(self, name: str, event: Mapping[str, Any]) -> None:
        key = _str(event.get("tool_use_id")) or f"#{len(self.tools)}"
        if key in self.tools or len(self.tools) < ROWS_CAP:
            _tool_event(self.tools, key, name, event)
        elif name == "tool.called":
            self.left["called"] += 1
        elif name in ("tool.finished", "tool.failed"):
            self.left["ended"] += 1
            self.left["failed"] += name == "tool.failed"

    def iteration(self, totals: _Totals, previous: _Totals) -> Iteration:
        left = self.left
        return Iteration(
            number=self.fallback and (self.number if self.number is not None else self.fallback),
            calls=tuple(self.calls),
            tools=tuple(self.tools.values()),
            transitions=tuple(self.transitions),
            notes=tuple(self.notes),
            tokens=totals.tokens - previous.tokens,
            cost_usd=totals.cost_usd - previous.cost_usd,
            left_out=LeftOut(
                model_calls=left["model_calls"],
                tool_calls=max(left["called"], left["ended"]),
                failed_tool_calls=left["failed"],
                transitions=left["transitions"],
                notes=left["notes"],
                errors=left["errors"] + left["failed"],
            ),
        )


def _model_call(event: Mapping[str, Any], model: str | None) -> ModelCall:
    texts: list[str] = []
    thinking: list[str] = []
    others: list[Any] = []
    content = event.get("content")
    for block in content if isinstance(content, list) else []:
        kind = block.get("type") if isinstance(block, Mapping) else None
        if kind == "text":
            texts.append(_str(block.get("text")))
        elif kind == "thinking":
            thinking.append(_str(block.get("thinking")))
        elif kind != "tool_use":
            others.append(block)
    return ModelCall(
        number=_int(event.get("iteration")),
        purpose=_str(event.get("purpose")) or None,
        model=model,
        stop_reason=_str(event.get("stop_reason")) or None,
        text="\n\n".join(t for t in texts if t),
        thinking="\n\n".join(t for t in thinking if t),
        other_blocks=tuple(others),
        tokens=Tokens.of(event.get("usage")),
        cost_usd=_float(event.get("cost_usd")) if "cost_usd" in event else None,
        request_id=_str(event.get("request_id")) or None,
    )


def _tool_event(tools: dict[str, ToolRun], key: str, name: str, event: Mapping[str, Any]) -> None:
    call = tools.get(key) or ToolRun(
        tool=_str(event.get("tool")), tool_use_id=key, input=event.get("input")
    )
    if name == "tool.finished":
        call = _replace_tool(call, event, failed=False)
    elif name == "tool.failed":
        call = _replace_tool(call, event, failed=True)
    tools[key] = call


def _replace_tool(call: ToolRun, event: Mapping[str, Any], *, failed: bool) -> ToolRun:
    return ToolRun(
        tool=call.tool or _str(event.get("tool")),
        tool_use_id=call.tool_use_id,
        input=call.input if call.input is not None else event.get("input"),
        output=_str(event.get("content")),
        failed=failed,
        error_kind=(_str(event.get("error_kind")) or "error") if failed else None,
        fatal=bool(event.get("fatal")) if failed else False,
        duration_s=_float(event.get("duration_s")) if "duration_s" in event else None,
    )


def _transition(event: Mapping[str, Any]) -> Transition:
    guards = _mapping(event.get("guards"))
    via = event.get("via")
    return Transition(
        seq=_int(event.get("seq")),
        source=_str(event.get("source")),
        trigger=_str(event.get("trigger")),
        dest=_str(event.get("dest")),
        guards=tuple((str(k), bool(v)) for k, v in guards.items()),
        via=tuple(str(v) for v in via) if isinstance(via, list) else (),
        elapsed_s=_float(event.get("elapsed_s")),
        tokens=Tokens.of(event.get("usage_total")),
        cost_usd=_float(event.get("cost_usd")),
    )


def _outcome(event: Mapping[str, Any]) -> Outcome:
    return Outcome(
        end_state=_str(event.get("end_state")) or "unknown",
        reason=_str(event.get("reason")),
        text=_str(event.get("text")),
        data=event.get("data"),
        iterations=_int(event.get("iterations")),
        tokens=Tokens.of(event.get("usage_total")),
        cost_usd=_float(event.get("cost_usd")),
        elapsed_s=_float(event.get("elapsed_s")),
    )


def _note_text(name: str, event: Mapping[str, Any]) -> str:
    """One sentence for a note event, from the keys docs/events.md gives it."""
    if name == "stall.detected":
        return _str(event.get("detail")) or f"stall: {_str(event.get('pattern'))}"
    if name == "stall.intervened":
        return (
            f"intervention {_int(event.get('intervention'))} against the "
            f"{_str(event.get('pattern'))} of {_str(event.get('tool'))}"
        )
    if name == "reflection.added":
        return f"reflection ({_str(event.get('source'))}): {_str(event.get('text'))}"
    if name == "verify.checked":
        verdict = "passed" if event.get("ok") else "rejected"
        feedback = _str(event.get("feedback"))
        return f"verifier {verdict} the {_str(event.get('via'))} claim" + (
            f": {feedback}" if feedback else ""
        )
    if name == "context.continued":
        return f"reply cut at max_tokens; continuation {_int(event.get('count'))}"
    if name == "context.compacted":
        return (
            f"compacted {_int(event.get('replaced'))} tool results "
            f"({_int(event.get('tokens_before'))} → {_int(event.get('tokens_after'))} tokens)"
        )
    if name == "context.summary_failed":
        return f"no summary ({_str(event.get('reason'))}); old tool results compacted instead"
    if name == "model.fallback":
        return (
            f"{_str(event.get('failed_model'))} failed ({_str(event.get('error'))}); "
            f"falling back to {_str(event.get('model'))}"
        )
    if name == "tool.skipped":
        return f"{_int(event.get('count'))} tool calls left unanswered were closed"
    if name == "phase.crashed":
        return f"{_str(event.get('state'))} crashed: {_str(event.get('error'))}"
    return _str(event.get("error")) or name


def _prompt(messages: Any) -> str:
    """The text of the last user message the run started from."""
    if not isinstance(messages, list):
        return ""
    for message in reversed(messages):
        if isinstance(message, Mapping) and message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, str):
                return content
            if isinstance(content, list):
                return "\n".join(
                    _str(b.get("text"))
                    for b in content
                    if isinstance(b, Mapping) and b.get("type") == "text"
                )
    return ""


# -- forgiving lookups ---------------------------------------------------------------


def _str(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, default=str)


def _int(value: Any) -> int:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value)
    return 0


def _float(value: Any) -> float:
    if isinstance(value, bool):
        return float(value)
    return float(value) if isinstance(value, int | float) else 0.0


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}
