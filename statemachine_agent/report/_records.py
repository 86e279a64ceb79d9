"""What a report holds: frozen records of one run's iterations, model calls, tool
calls, transitions and notes, gathered from its audit events by `build` (`build.py`)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from statemachine_agent.machine.ends import SUCCESS_STATES
from statemachine_agent.report._lenient import as_int
from statemachine_agent.report.fold import left_out


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
            input=as_int(usage.get("input_tokens")),
            output=as_int(usage.get("output_tokens")),
            cache_read=as_int(usage.get("cache_read_tokens")),
            cache_write=as_int(usage.get("cache_write_5m_tokens"))
            + as_int(usage.get("cache_write_1h_tokens")),
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
    wall_s: float | None = None
    """From the run's first event to its last, by their `ts` (a paused run's wait included;
    `Outcome.elapsed_s` is the engine's own clock)."""
    forked_from: str | None = None
    """For a fork (`Agent.fork`): the run it was forked from (its `run.forked` event)."""
    forked_at: int | None = None
    """The transition of that run it was forked at."""
    waited_s: float = 0.0
    """Time spent waiting for people: from each pause (`run.ended` in `awaiting_approval`)
    to the `run.resumed` after it."""
    pauses: int = 0

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
