"""Re-run a recorded run from its audit file and check it takes the same path.

Everything that came from outside the machine is in the audit file: model
replies, tool results, verifier verdicts, approval decisions, cancellations and
the clock readings at each transition. Fed back in, they must drive the machine
through the identical sequence of transitions (source, trigger, dest, guard
verdicts); if not, the first difference is named. This is what makes a run's
trail an audit trail rather than a log: it can be checked, not only read.

A resumed run's file holds one *segment* per process that worked on it: from
`run.started` or `run.resumed` to its `run.ended`, or to where the file stops
(the process died). The replay drives each segment in turn and resumes from its
own checkpoint, as the run did: after a pause for approval with the decisions
recorded at the resume, after a cancellation by cancelling where the record
says, and after a crash by stopping the replay at the first step the dead
process never recorded an answer for.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from statemachine_agent.agent import Agent
from statemachine_agent.agent.subagents import SubRun
from statemachine_agent.audit.config import Audit
from statemachine_agent.audit.sink import MemorySink, iter_numbered, iter_run_events
from statemachine_agent.errors import Error
from statemachine_agent.machine.cancel import CancelToken
from statemachine_agent.machine.ends import RESUMABLE_STATES
from statemachine_agent.machine.result import RunResult
from statemachine_agent.machine.settings import RunSettings
from statemachine_agent.models.base import Model, ModelReply, ModelRequest, Usage
from statemachine_agent.models.replay import ReplayDivergenceError, ReplayModel
from statemachine_agent.persistence.base import MemoryCheckpointer
from statemachine_agent.persistence.codec import from_plain
from statemachine_agent.policy.approval import Approve, Decision, Defer, Deny, Edit, PolicyAnswer
from statemachine_agent.policy.reflection import ReflectionPolicy
from statemachine_agent.policy.verify import Claim, Verdict, VerifyPolicy
from statemachine_agent.tools.base import Tool, ToolCall, ToolOutcome
from statemachine_agent.tools.output import OUTPUT_TOOL
from statemachine_agent.tools.registry import ToolRegistry

Step = tuple[str, str, str, tuple[tuple[str, bool], ...]]


@dataclass(frozen=True)
class ReplayReport:
    """How a replay went: whether it matched, and where it first did not."""

    matched: bool
    difference: str | None
    recorded: list[Step]
    replayed: list[Step]
    result: RunResult


class ProcessDied(BaseException):
    """Stops a replayed segment where the recorded process died.

    A BaseException, like the signal that killed the process: the engine turns
    every `Exception` from a phase into a `crashed` transition, which the run
    being replayed never fired.
    """


@dataclass(frozen=True)
class Segment:
    """The events one process wrote for the run, from `run.started` or `run.resumed`."""

    events: tuple[Mapping[str, Any], ...]

    @property
    def ended(self) -> Mapping[str, Any] | None:
        """Its `run.ended`, or None when the process died before writing one."""
        return next((e for e in reversed(self.events) if e["event"] == "run.ended"), None)

    @property
    def end_state(self) -> str | None:
        ended = self.ended
        return str(ended["end_state"]) if ended is not None else None

    @property
    def last_seq(self) -> int:
        """The number of the last transition it recorded (or that it started after)."""
        seqs = [int(e["seq"]) for e in self.events if e["event"] == "transition.fired"]
        start = int(self.events[0].get("seq") or 0) if self.events else 0
        return max(seqs, default=start)


def segments(events: Sequence[Mapping[str, Any]]) -> list[Segment]:
    """Split a run's events at each `run.started` and `run.resumed`."""
    parts: list[list[Mapping[str, Any]]] = []
    for event in events:
        if event["event"] in ("run.started", "run.resumed") or not parts:
            parts.append([])
        parts[-1].append(event)
    return [Segment(tuple(part)) for part in parts]


class _Progress:
    """Which segment is being replayed, and its cancel token; shared by model and effects."""

    def __init__(self, parts: Sequence[Segment]) -> None:
        self.parts = list(parts)
        self.index = 0
        self.token = CancelToken()

    @property
    def current(self) -> Segment:
        return self.parts[self.index]

    def begin(self, index: int) -> CancelToken:
        self.index = index
        self.token = CancelToken()
        return self.token

    async def unanswered(self, what: str) -> None:
        """The segment has no answer for `what`: it is where the recorded process died,
        or was cancelled while waiting for it. Anything else is a divergence."""
        end = self.current.end_state
        if end is None:
            raise ProcessDied(what)
        if end == "cancelled":
            self.token.cancel()
            await asyncio.Event().wait()  # abandoned by the cancellation, as it was
        raise ReplayDivergenceError(f"{what} is not in the record")


class SegmentedModel:
    """Answers each segment's model calls from that segment's record."""

    def __init__(self, progress: _Progress, name: str) -> None:
        self._progress = progress
        self._models = [ReplayModel(part.events) for part in progress.parts]
        self.name = name

    @property
    def divergence(self) -> str | None:
        return next((m.divergence for m in self._models if m.divergence), None)

    async def acomplete(self, request: ModelRequest) -> ModelReply:
        model = self._models[self._progress.index]
        if model.remaining == 0:
            await self._progress.unanswered("a model call")
        return await model.acomplete(request)


class ReplayEffects:
    """Answers tool calls and clock readings from the record instead of the world.

    It is also an audit sink of the replaying agent: the transitions the replay
    fires tell it which recorded transition comes next, whose clock reading and
    cancellation it then plays back, and a transition the dead process never
    recorded is where the replay of its segment stops.
    """

    def __init__(
        self, events: Sequence[Mapping[str, Any]], progress: _Progress | None = None
    ) -> None:
        """`progress` says which segment is replayed; by default the events are one."""
        progress = (
            progress if progress is not None else _Progress(segments(events) or [Segment(())])
        )
        self._progress = progress
        self._outcomes: list[dict[str, ToolOutcome]] = [
            _tool_outcomes(part.events) for part in progress.parts
        ]
        self._children = [_recorded_children(part.events) for part in progress.parts]
        self._fired: dict[int, Mapping[str, Any]] = {}
        """The transitions recorded so far by number, as of the segment being replayed:
        a later segment's re-done transition (a crash re-does what was carried since
        the last checkpoint) replaces the dead process's one of the same number."""
        self._seq = 0
        self._starting = True
        self.divergence: str | None = None

    def begin(self, start_seq: int) -> None:
        """A segment starts after transition `start_seq`: the clock carries on from there
        (its first reading, when the run starts, is that transition's)."""
        for event in self._progress.current.events:
            if event["event"] == "transition.fired":
                self._fired[int(event["seq"])] = event
        self._seq = start_seq
        self._starting = True

    def _clock(self, seq: int) -> float:
        """The recorded elapsed time at transition `seq` (the last one recorded, past the
        end of the record)."""
        if not self._fired:
            return 0.0
        event = self._fired.get(seq) or self._fired[max(self._fired)]
        return float(event.get("elapsed_s", 0.0)) if seq > 0 else 0.0

    def write(self, event: Mapping[str, Any]) -> None:
        """Follow the replay's transitions; stop a dead process's segment at one it never
        wrote (before the transition is checkpointed, as a death there would)."""
        segment = self._progress.current
        if event.get("event") == "run.ended" and not self._reported(segment):
            raise ProcessDied("run.ended")
        if event.get("event") != "transition.fired":
            return
        seq = int(event["seq"])
        if segment.ended is None and seq > segment.last_seq:
            raise ProcessDied(f"transition {seq}")
        self._seq = seq

    def _reported(self, segment: Segment) -> bool:
        """Whether the process of `segment` got its `run.ended` out for good: it wrote one,
        and no later process had to finish the report (a later segment after a final
        end state means the process died before it could mark the end reported)."""
        if segment.ended is None:
            return False
        later = self._progress.index + 1 < len(self._progress.parts)
        return not later or segment.end_state in RESUMABLE_STATES

    def close(self) -> None:
        return None

    async def call_model(self, model: Model, request: ModelRequest) -> ModelReply:
        return await model.acomplete(request)

    async def run_tools(
        self,
        registry: ToolRegistry,
        calls: Sequence[ToolCall],
        on_outcome: Callable[[ToolCall, ToolOutcome], None] | None = None,
    ) -> list[ToolOutcome]:
        outcomes = []
        recorded = self._outcomes[self._progress.index]
        for call in calls:
            outcome = recorded.get(call.id)
            child = self._children[self._progress.index].get(call.id)
            if child is not None:  # a sub-agent's call: it comes back (or pauses) as it did
                answer = (outcome.content, outcome.is_error) if outcome is not None else None
                sub = dataclasses.replace(child, answer=answer)
                outcome = ToolOutcome(tool_use_id=call.id, name=call.name, content="", data=sub)
            if outcome is None:
                if self._progress.current.ended is None:
                    raise ProcessDied(f"tool call {call.id}")
                self.divergence = self.divergence or f"tool call {call.id} is not in the record"
                raise ReplayDivergenceError(self.divergence)
            found = registry.get(call.name)
            if found is not None and found.ends_run and not outcome.is_error:
                outcome = dataclasses.replace(outcome, data=_recorded_data(outcome.content))
            if on_outcome is not None:
                on_outcome(call, outcome)
            outcomes.append(outcome)
        return outcomes

    def monotonic(self) -> float:
        """The recorded elapsed time at the next transition, so time limits trip as they
        did; and where the record shows the host had asked to cancel by then, the
        replay's cancel token is cancelled."""
        if self._starting:
            self._starting = False
            return self._clock(self._seq)
        upcoming = self._seq + 1
        if upcoming in self._fired and upcoming <= self._progress.current.last_seq:
            guards = self._fired[upcoming].get("guards") or {}
            if guards.get("cancel_requested"):
                self._progress.token.cancel()
        return self._clock(upcoming)


def _recorded_children(events: Sequence[Mapping[str, Any]]) -> dict[str, SubRun]:
    """How each sub-agent call of the run came back (`subagent.ended`): its end, what was
    charged for it and, for a child that paused, its pending calls (from `run.ended`)."""
    ended = next((e for e in events if e["event"] == "run.ended"), {})
    pending = list((ended.get("details") or {}).get("pending") or [])
    children: dict[str, SubRun] = {}
    for event in events:
        if event["event"] != "subagent.ended" or str(event["tool_use_id"]) in children:
            continue
        call = str(event["tool_use_id"])
        prefix = f"{call}/"
        mine = tuple(
            {**p, "tool_use_id": str(p["tool_use_id"])[len(prefix) :]}
            for p in pending
            if str(p.get("tool_use_id", "")).startswith(prefix)
        )
        children[call] = SubRun(
            run_id=str(event.get("child_run_id", "")),
            agent=str(event.get("agent", "")),
            end_state=str(event.get("end_state", "")),
            text="",
            reason="",
            usage=Usage.from_dict(event.get("usage") or {}),
            cost_usd=float(event.get("cost_usd") or 0.0),
            pending=mine,
            salvaged=bool(event.get("salvaged", False)),
            tainted=bool(event.get("taints_parent", False)),  # as the parent recorded it
        )
    return children


def _recorded_data(content: str) -> Any:
    """A run-ending tool's structured result, as its recorded JSON text gives it back."""
    try:
        return json.loads(content)
    except ValueError:
        return content


def _tool_outcomes(events: Sequence[Mapping[str, Any]]) -> dict[str, ToolOutcome]:
    outcomes: dict[str, ToolOutcome] = {}
    for event in events:
        if event["event"] in ("tool.finished", "tool.failed"):
            failed = event["event"] == "tool.failed"
            outcomes[str(event["tool_use_id"])] = ToolOutcome(
                tool_use_id=str(event["tool_use_id"]),
                name=str(event["tool"]),
                content=str(event.get("content", "")),
                is_error=failed,
                error_kind=event.get("error_kind") if failed else None,
                fatal=bool(event.get("fatal", False)),
            )
    return outcomes


def _steps(records: Sequence[Mapping[str, Any]]) -> list[Step]:
    return [
        (str(r["source"]), str(r["trigger"]), str(r["dest"]), tuple(dict(r["guards"]).items()))
        for r in records
    ]


def _stub_tools(started: Mapping[str, Any]) -> ToolRegistry:
    """Tools with the recorded definitions; their handlers are never called. The
    final-answer tool is left out: the replaying agent's output type makes its own."""
    flags = started.get("tool_flags") or {}

    def never(**_: Any) -> str:
        raise ReplayDivergenceError("a tool was executed during a replay")

    registry = ToolRegistry()
    for definition in started.get("tools") or []:
        name = str(definition["name"])
        if name == OUTPUT_TOOL:
            continue
        registry.register(
            Tool(
                name=name,
                description=str(definition.get("description", "")),
                input_schema=dict(definition.get("input_schema") or {"type": "object"}),
                handler=never,
                ends_run=bool(flags.get(name, {}).get("ends_run")),
                requires_approval=bool(flags.get(name, {}).get("requires_approval")),
                side_effect=bool(flags.get(name, {}).get("side_effect")),
                deferrable=bool(flags.get(name, {}).get("deferrable")),
            )
        )
    return registry


def _recorded_output_schema(started: Mapping[str, Any]) -> Any:
    """The schema of the recorded run's final-answer tool, if it had an output type."""
    for definition in started.get("tools") or []:
        if definition.get("name") == OUTPUT_TOOL:
            return dict(definition.get("input_schema") or {})
    return None


def _reflection(
    settings: RunSettings, events: Sequence[Mapping[str, Any]]
) -> ReflectionPolicy | None:
    """The recorded run's reflection, its critic (if it had one) answering from the record."""
    if settings.reflection_interval is None:
        return None
    critic = ReplayModel(events, purpose="critic") if settings.has_critic else None
    return ReflectionPolicy(settings.reflection_interval, critic=critic)


def _recorded_verdicts(events: Sequence[Mapping[str, Any]]) -> Callable[[Claim], Verdict]:
    verdicts = iter([e for e in events if e["event"] == "verify.checked"])

    def verifier(claim: Claim) -> Verdict:
        event = next(verdicts, None)
        if event is None:
            raise ReplayDivergenceError("the verifier was asked more often than recorded")
        return Verdict(ok=bool(event["ok"]), feedback=str(event.get("feedback") or ""))

    return verifier


def _decision(event: Mapping[str, Any], events: Sequence[Mapping[str, Any]]) -> PolicyAnswer:
    """The decision an `approval.decided` event records, with the denial message or the
    edited input taken from the events of that call."""
    call = str(event["tool_use_id"])
    kind = str(event["decision"])
    if kind == "approve":
        return Approve()
    if kind == "deny":
        denied = [e for e in events if e["event"] == "tool.failed" and e.get("tool_use_id") == call]
        return Deny(str(denied[-1]["content"])) if denied else Deny()
    if kind == "edit":
        called = [e for e in events if e["event"] == "tool.called" and e.get("tool_use_id") == call]
        return Edit(dict(called[-1].get("input") or {}) if called else {})
    return Defer()


def _recorded_approvals(events: Sequence[Mapping[str, Any]]) -> Callable[[ToolCall], PolicyAnswer]:
    decided = {
        str(e["tool_use_id"]): _decision(e, events)
        for e in events
        if e["event"] == "approval.decided" and e.get("source") != "resume"
    }

    def policy(call: ToolCall) -> PolicyAnswer:
        return decided.get(call.id, Defer())

    return policy


def _resume_decisions(segment: Segment) -> dict[str, Decision]:
    """The decisions passed to the `resume` that started `segment`."""
    decisions: dict[str, Decision] = {}
    for event in segment.events:
        if event["event"] == "approval.decided" and event.get("source") == "resume":
            answer = _decision(event, segment.events)
            if not isinstance(answer, Defer):
                decisions[str(event["tool_use_id"])] = answer
    return decisions


class ReplayError(Error, ValueError):
    """The file is not something a replay can start from (no start, two runs, no end)."""


REPLAYED_EVENTS = frozenset(
    {
        "run.started",
        "run.resumed",
        "run.ended",
        "model.requested",
        "model.replied",
        "model.failed",
        "tool.called",
        "tool.finished",
        "tool.failed",
        "transition.fired",
        "verify.checked",
        "approval.decided",
        "subagent.ended",
    }
)
"""The events a replay answers from; it keeps only these of a file it reads."""

MAX_REPLAYED_EVENTS = 50_000
"""The most of those a replay holds (about 200 MB): a run that recorded more (tens of
thousands of iterations) is refused with a `ReplayError` saying so, rather than replayed
in memory without bound or replayed in part."""


def replay(
    audit: str | Path,
    *,
    output_type: Any = None,
    encryption_key: str | Sequence[str] | None = None,
) -> ReplayReport:
    """Re-run the run recorded in `audit` offline, segment by segment, and compare its
    transitions with the recorded ones.

    A run with an output type replays with it: `output_type` rebuilds the typed
    answer (`report.result.output`); without it, the recorded `final_result`
    schema is used and the answer is its JSON form. An encrypted audit file needs
    its `encryption_key`.
    """
    events = (event for _, event in iter_numbered(Path(audit), encryption_key))
    return replay_events(events, str(audit), output_type=output_type)


def replay_events(
    stream: Iterable[Mapping[str, Any]], source: str = "events", *, output_type: Any = None
) -> ReplayReport:
    """Re-run a recorded run from its events (see `replay`).

    The events may be a stream: one pass keeps only those a replay answers from
    (`REPLAYED_EVENTS`), verbatim, so its memory is what they hold, not the file; a run
    with more than `MAX_REPLAYED_EVENTS` of them is a `ReplayError`, found as soon as
    the stream reaches one too many.
    """
    audit = source
    events: list[Mapping[str, Any]] = []
    for event in iter_run_events(stream):  # not its sub-agents'
        if event["event"] not in REPLAYED_EVENTS:
            continue
        if len(events) >= MAX_REPLAYED_EVENTS:
            raise ReplayError(
                f"{audit}: too many events to replay in bounded memory: the run recorded "
                f"more than {MAX_REPLAYED_EVENTS:,} model, tool and transition events"
            )
        events.append(event)
    parts = segments(events)
    started = parts[0].events[0] if parts and parts[0].events else {"event": None}
    if started["event"] != "run.started":
        raise ReplayError(f"{audit}: no run.started event; is this an audit file of one run?")
    if sum(1 for e in events if e["event"] == "run.started") > 1:
        raise ReplayError(f"{audit}: the file holds more than one run.started; replay one run")
    settings: RunSettings = from_plain(RunSettings, started["settings"], "settings")
    progress = _Progress(parts)
    model = SegmentedModel(progress, str(started.get("model") or "replay"))
    effects = ReplayEffects(events, progress)
    seen = MemorySink()
    agent = Agent(
        model,
        tools=_stub_tools(started),
        system=started.get("system"),
        budget=settings.budget,
        stall=settings.stall,
        context=settings.context,
        reflection=_reflection(settings, events),
        verify=(
            VerifyPolicy(_recorded_verdicts(events), max_rejections=settings.max_rejections)
            if settings.has_verifier
            else None
        ),
        max_continuations=settings.max_continuations,
        output_type=output_type or _recorded_output_schema(started),
        output_retries=settings.output_retries,
        summary_model=(
            ReplayModel(events, purpose="summary")
            if settings.context.summarize_at_tokens is not None
            else None
        ),
        approval=_recorded_approvals(events),
        commit=settings.commit,
        effects=effects,
        checkpointer=MemoryCheckpointer(),
        audit=Audit(sinks=[effects, seen]),
    )
    messages = list(started.get("messages") or [])
    run_id = str(started["run_id"])
    result: RunResult | None = None
    for index, part in enumerate(parts):
        token = progress.begin(index)
        effects.begin(int(part.events[0].get("seq") or 0))
        try:
            if index == 0:
                result = agent.run(
                    messages[-1]["content"], history=messages[:-1], run_id=run_id, cancel=token
                )
            else:
                result = agent.resume(run_id, decisions=_resume_decisions(part), cancel=token)
        except ProcessDied:
            continue
    recorded = _steps([e for e in events if e["event"] == "transition.fired"])
    replayed = _steps([e for e in seen.events if e["event"] == "transition.fired"])
    difference = model.divergence or effects.divergence
    if result is None:
        raise ReplayError(f"{audit}: the run never reached an end state, so nothing to compare")
    if difference is None:
        for index, (want, got) in enumerate(zip(recorded, replayed, strict=False), start=1):
            if want != got:
                difference = f"transition {index}: recorded {_show(want)}, replayed {_show(got)}"
                break
        else:
            if len(recorded) != len(replayed):
                difference = (
                    f"the record has {len(recorded)} transitions, the replay {len(replayed)}"
                )
    return ReplayReport(difference is None, difference, recorded, replayed, result)


def _show(step: Step) -> str:
    source, trigger, dest, guards = step
    verdicts = ", ".join(f"{name}={value}" for name, value in guards)
    return f"{source} --{trigger}--> {dest} [{verdicts}]"
