"""Reading a run's audit events one at a time into its report (`RunReader`): what is
kept is bounded by what a person can read, not by the file (see `build.py`)."""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from statemachine_agent.report._lenient import as_float, as_int, as_mapping, as_str
from statemachine_agent.report._records import (
    Gap,
    Iteration,
    LeftOut,
    ModelCall,
    Note,
    Outcome,
    Point,
    Report,
    SummaryStep,
    Tokens,
    ToolRun,
    Transition,
)
from statemachine_agent.report.fmt import duration
from statemachine_agent.report.fold import ITERATIONS_CAP, POINTS_CAP, ROWS_CAP

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
    "run.steered": False,
    "run.forked": False,
    "taint.entered": False,
    "taint.gated": False,
    "call.staged": False,
    "call.unstaged": False,
    "call.discarded": True,
    "commit.started": False,
    "commit.finished": False,
}
"""Events shown as one-line notes in their iteration."""


MODEL_CALL_EVENTS = ("model.replied", "model.failed")
"""The events that close a model call: one per call, whatever its purpose."""


SUBAGENT_CALLS = "sub-agent"
"""The purpose under which a run counts its sub-agents' model calls."""


PURPOSES_CAP = 32
"""Distinct purposes counted one by one; any beyond are counted as `other` (a file can
name any number of them)."""


def tally(calls: Counter[str], purpose: str) -> None:
    if purpose not in calls and len(calls) >= PURPOSES_CAP:
        purpose = "other"
    calls[purpose] += 1


class RunReader:
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
        self.clock = _Clock()
        self.forked: Mapping[str, Any] = {}

    def add(self, event: Mapping[str, Any]) -> None:
        if not self.count:
            self.first = {
                k: event.get(k) for k in ("run_id", "parent_run_id", "parent_tool_use_id")
            }
        self.count += 1
        name = event.get("event")
        self.clock.add(event)
        transition: Transition | None = None
        if name == "run.started" and self.started is None:
            self.started = event
        elif name == "run.ended":
            self.ended = event
        elif name == "run.forked":  # a fork's file: what came before was its history
            self.forked = event
            self.first = {**self.first, "run_id": event.get("run_id")}
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
            tally(self.calls, as_str(event.get("purpose")) or "loop")
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
            run_id=as_str(first.get("run_id")),
            model=as_str(started.get("model")) or None,
            prompt=_prompt(started.get("messages")),
            started_ts=as_float(started["ts"]) if "ts" in started else None,
            budget=as_mapping(started.get("budget")),
            preamble=preamble,
            iterations=tuple(shown),
            transitions=tuple(self.transitions),
            outcome=outcome,
            points=self.points.points(self.last, outcome),
            event_count=self.count,
            summaries=tuple(self.summaries.steps),
            calls=self.calls + subagent_calls(children.values()),
            parent_run_id=as_str(first.get("parent_run_id")) or None,
            parent_tool_use_id=as_str(first.get("parent_tool_use_id")) or None,
            agent=agent,
            gap=Gap(len(self.head), self.skipped) if self.skipped else None,
            transition_count=self.transition_count,
            last_transition=self.last,
            tool_call_count=self.tool_calls,
            failed_tool_call_count=self.failed_tool_calls,
            summaries_left_out=self.summaries.left_out,
            wall_s=self.clock.wall_s,
            waited_s=self.clock.waited_s,
            pauses=self.clock.pauses,
            forked_from=as_str(self.forked.get("forked_from")) or None,
            forked_at=as_int(self.forked.get("forked_at")) if self.forked else None,
        )


def subagent_calls(children: Iterable[Report]) -> Counter[str]:
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
        name = as_str(event.get("event"))
        if event.get("purpose") == "summary" and name == "model.requested":
            self.model = as_str(event.get("model")) or None
        elif event.get("purpose") == "summary" and name == "model.replied":
            self.call = _model_call(event, self.model)
        elif name == "context.summarized" and len(self.steps) >= ITERATIONS_CAP:
            self.left_out += 1
            self.call = None
        elif name == "context.summarized":
            self.steps.append(
                SummaryStep(
                    after_iteration=as_int(event.get("iteration")),
                    messages_replaced=as_int(event.get("messages_replaced")),
                    tokens_replaced=as_int(event.get("tokens_replaced")),
                    tokens_before=as_int(event.get("tokens_before")),
                    tokens_after=as_int(event.get("tokens_after")),
                    summary=as_str(event.get("summary")),
                    call=self.call,
                )
            )
            self.call = None


PAUSED = "awaiting_approval"
"""The end state a run pauses in until people decide; its `run.ended` is a pause."""


class _Clock:
    """The run's wall time by its events' `ts`, and the time it waited for people: from
    each pause to the `run.resumed` after it (a file without `ts` gives none)."""

    def __init__(self) -> None:
        self.first: float | None = None
        self.last: float | None = None
        self.paused_at: float | None = None
        self.waited_s = 0.0
        self.pauses = 0

    def add(self, event: Mapping[str, Any]) -> None:
        ts = event.get("ts")
        if not isinstance(ts, int | float) or isinstance(ts, bool):
            return
        self.first = ts if self.first is None else min(self.first, ts)
        self.last = ts if self.last is None else max(self.last, ts)
        name = event.get("event")
        if name == "run.ended" and event.get("end_state") == PAUSED:
            self.paused_at = ts
            self.pauses += 1
        elif name == "run.resumed" and self.paused_at is not None:
            self.waited_s += max(0.0, ts - self.paused_at)
            self.paused_at = None

    @property
    def wall_s(self) -> float | None:
        return None if self.first is None or self.last is None else self.last - self.first


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
        name = as_str(event.get("event"))
        purpose = as_str(event.get("purpose")) or None
        loop = event.get("purpose") is None and "iteration" in event
        if self.number is None and loop and name in ("model.requested", *MODEL_CALL_EVENTS):
            self.number = as_int(event.get("iteration"))
        if name == "transition.fired":
            transition = transition or _transition(event)
            self.totals = _Totals(transition.tokens, transition.cost_usd)
        elif name == "run.ended":
            tokens = Tokens.of(event.get("usage_total"))
            self.totals = _Totals(tokens, as_float(event.get("cost_usd")))
        if name == "model.requested":
            if len(self.requested) >= ROWS_CAP:
                self.requested.clear()  # a reply is matched to a recent request
            self.requested[(as_int(event.get("iteration")), purpose)] = as_str(event.get("model"))
        elif name in MODEL_CALL_EVENTS:
            self._call(name, purpose, event)
        elif name.startswith("tool.") and name != "tool.skipped":
            self._tool(name, event)
        elif transition is not None:
            if len(self.transitions) < ROWS_CAP:
                self.transitions.append(transition)
            else:
                self.left["transitions"] += 1
        review = _review_note(name, event)
        if review is not None and len(self.notes) < ROWS_CAP:
            self.notes.append(review)
        elif review is not None:
            self.left["notes"] += 1
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
        key = (as_int(event.get("iteration")), purpose)
        if name == "model.replied":
            self.calls.append(_model_call(event, self.requested.get(key)))
            return
        self.calls.append(
            ModelCall(
                number=key[0],
                purpose=purpose,
                model=self.requested.get(key),
                error=as_str(event.get("error")) or "the model call failed",
                request_id=as_str(event.get("request_id")) or None,
            )
        )

    def _tool(self, name: str, event: Mapping[str, Any]) -> None:
        key = as_str(event.get("tool_use_id")) or f"#{len(self.tools)}"
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
            texts.append(as_str(block.get("text")))
        elif kind == "thinking":
            thinking.append(as_str(block.get("thinking")))
        elif kind != "tool_use":
            others.append(block)
    return ModelCall(
        number=as_int(event.get("iteration")),
        purpose=as_str(event.get("purpose")) or None,
        model=model,
        stop_reason=as_str(event.get("stop_reason")) or None,
        text="\n\n".join(t for t in texts if t),
        thinking="\n\n".join(t for t in thinking if t),
        other_blocks=tuple(others),
        tokens=Tokens.of(event.get("usage")),
        cost_usd=as_float(event.get("cost_usd")) if "cost_usd" in event else None,
        request_id=as_str(event.get("request_id")) or None,
    )


def _tool_event(tools: dict[str, ToolRun], key: str, name: str, event: Mapping[str, Any]) -> None:
    call = tools.get(key) or ToolRun(
        tool=as_str(event.get("tool")), tool_use_id=key, input=event.get("input")
    )
    if name == "tool.finished":
        call = _replace_tool(call, event, failed=False)
    elif name == "tool.failed":
        call = _replace_tool(call, event, failed=True)
    tools[key] = call


def _replace_tool(call: ToolRun, event: Mapping[str, Any], *, failed: bool) -> ToolRun:
    return ToolRun(
        tool=call.tool or as_str(event.get("tool")),
        tool_use_id=call.tool_use_id,
        input=call.input if call.input is not None else event.get("input"),
        output=as_str(event.get("content")),
        failed=failed,
        error_kind=(as_str(event.get("error_kind")) or "error") if failed else None,
        fatal=bool(event.get("fatal")) if failed else False,
        duration_s=as_float(event.get("duration_s")) if "duration_s" in event else None,
    )


def _transition(event: Mapping[str, Any]) -> Transition:
    guards = as_mapping(event.get("guards"))
    via = event.get("via")
    return Transition(
        seq=as_int(event.get("seq")),
        source=as_str(event.get("source")),
        trigger=as_str(event.get("trigger")),
        dest=as_str(event.get("dest")),
        guards=tuple((str(k), bool(v)) for k, v in guards.items()),
        via=tuple(str(v) for v in via) if isinstance(via, list) else (),
        elapsed_s=as_float(event.get("elapsed_s")),
        tokens=Tokens.of(event.get("usage_total")),
        cost_usd=as_float(event.get("cost_usd")),
    )


def _outcome(event: Mapping[str, Any]) -> Outcome:
    return Outcome(
        end_state=as_str(event.get("end_state")) or "unknown",
        reason=as_str(event.get("reason")),
        text=as_str(event.get("text")),
        data=event.get("data"),
        iterations=as_int(event.get("iterations")),
        tokens=Tokens.of(event.get("usage_total")),
        cost_usd=as_float(event.get("cost_usd")),
        elapsed_s=as_float(event.get("elapsed_s")),
    )


REVIEW_EVENTS = ("approval.decided", "run.paused", "run.resumed")
"""The notes a reviewer looks for first: a decision on a call, a pause (`run.ended` in
`awaiting_approval`, named `run.paused` here) and a resume."""


def _review_note(name: str, event: Mapping[str, Any]) -> Note | None:
    """A decision, pause or resume as one sentence; the fields added to `approval.decided`
    later (`by`, `decided_by`, `note`, `waited_s`) are read when there, so an older file
    still shows its decisions."""
    if name == "approval.decided":
        decision = as_str(event.get("decision")) or "decided"
        who = as_str(event.get("by")) or ""
        kind = as_str(event.get("decided_by")) or as_str(event.get("source"))
        text = f"{decision}: {as_str(event.get('tool'))} ({as_str(event.get('tool_use_id'))})"
        if who:
            text += f" by {who}"
        if kind:
            text += f" ({kind})"
        waited = event.get("waited_s")
        if isinstance(waited, int | float) and not isinstance(waited, bool):
            text += f" · waited {duration(max(0.0, float(waited)))}"
        note = as_str(event.get("note")) if event.get("note") is not None else ""
        if note:
            text += f" · note: {note}"
        return Note(name, text, decision == "deny")
    if name == "run.ended" and event.get("end_state") == PAUSED:
        details = as_mapping(event.get("details"))
        pending = details.get("pending")
        waiting = len(pending) if isinstance(pending, list) else 0
        calls = f" ({waiting} {'call' if waiting == 1 else 'calls'} waiting)" if waiting else ""
        return Note("run.paused", f"paused for a decision{calls}", False)
    if name == "run.resumed":
        return Note(name, f"resumed from {as_str(event.get('state')) or 'its checkpoint'}", False)
    return None


def _note_text(name: str, event: Mapping[str, Any]) -> str:
    """One sentence for a note event, from the keys docs/events.md gives it."""
    if name == "stall.detected":
        return as_str(event.get("detail")) or f"stall: {as_str(event.get('pattern'))}"
    if name == "stall.intervened":
        return (
            f"intervention {as_int(event.get('intervention'))} against the "
            f"{as_str(event.get('pattern'))} of {as_str(event.get('tool'))}"
        )
    if name == "reflection.added":
        return f"reflection ({as_str(event.get('source'))}): {as_str(event.get('text'))}"
    if name == "verify.checked":
        verdict = "passed" if event.get("ok") else "rejected"
        feedback = as_str(event.get("feedback"))
        return f"verifier {verdict} the {as_str(event.get('via'))} claim" + (
            f": {feedback}" if feedback else ""
        )
    if name == "context.continued":
        return f"reply cut at max_tokens; continuation {as_int(event.get('count'))}"
    if name == "context.compacted":
        return (
            f"compacted {as_int(event.get('replaced'))} tool results "
            f"({as_int(event.get('tokens_before'))} → {as_int(event.get('tokens_after'))} tokens)"
        )
    if name == "context.summary_failed":
        return f"no summary ({as_str(event.get('reason'))}); old tool results compacted instead"
    if name == "model.fallback":
        return (
            f"{as_str(event.get('failed_model'))} failed ({as_str(event.get('error'))}); "
            f"falling back to {as_str(event.get('model'))}"
        )
    if name == "tool.skipped":
        return f"{as_int(event.get('count'))} tool calls left unanswered were closed"
    if name == "run.steered":
        who = as_str(event.get("by")) if event.get("by") is not None else ""
        return f"steered{f' by {who}' if who else ''}: {as_str(event.get('text'))}"
    if name == "run.forked":
        return (
            f"forked from {as_str(event.get('forked_from'))} at transition "
            f"{as_int(event.get('forked_at'))}"
        )
    if name == "taint.entered":
        return (
            f"untrusted text from {as_str(event.get('tool'))} "
            f"({as_str(event.get('tool_use_id'))}): {as_str(event.get('excerpt'))}"
        )
    if name == "taint.gated":
        action = {"approve": "sent for approval", "deny": "refused"}.get(
            as_str(event.get("action")), as_str(event.get("action"))
        )
        return (
            f"{as_str(event.get('tool'))} ({as_str(event.get('tool_use_id'))}) {action}: "
            "the run has read untrusted text"
        )
    if name == "phase.crashed":
        return f"{as_str(event.get('state'))} crashed: {as_str(event.get('error'))}"
    if name in ("call.staged", "call.unstaged", "call.discarded"):
        what = {"call.staged": "staged, not run yet", "call.unstaged": "taken back, never run",
                "call.discarded": f"never run: {as_str(event.get('why'))}"}[name]  # fmt: skip
        return f"{as_str(event.get('ref'))} {as_str(event.get('tool'))} {what}"
    if name == "commit.started":
        staged = event.get("staged")
        calls = [as_mapping(c) for c in staged] if isinstance(staged, list) else []
        listed = ", ".join(f"{as_str(c.get('ref'))} {as_str(c.get('tool'))}" for c in calls)
        return f"runs {len(calls)} staged calls" + (f" ({listed})" if listed else "")
    if name == "commit.finished":
        failure = as_mapping(event.get("failure"))
        left = event.get("left")
        text = "done" if not failure else (
            f"stopped: {as_str(failure.get('ref'))} {as_str(failure.get('tool'))} "
            f"failed: {as_str(failure.get('error'))}")  # fmt: skip
        return text + (f"; {len(left)} still staged" if isinstance(left, list) and left else "")
    return as_str(event.get("error")) or name


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
                    as_str(b.get("text"))
                    for b in content
                    if isinstance(b, Mapping) and b.get("type") == "text"
                )
    return ""
