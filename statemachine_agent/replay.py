"""Re-run a recorded run from its audit file and check it takes the same path.

Everything that came from outside the machine is in the audit file: model
replies, tool results, verifier verdicts, approval decisions and the clock
readings at each transition. Fed back in, they must drive the machine through
the identical sequence of transitions (source, trigger, dest, guard verdicts);
if not, the first difference is named. This is what makes a run's trail an
audit trail rather than a log: it can be checked, not only read.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from statemachine_agent.agent import Agent
from statemachine_agent.audit.sink import read_events
from statemachine_agent.machine.result import RunResult
from statemachine_agent.machine.settings import RunSettings
from statemachine_agent.models.base import Model, ModelReply, ModelRequest
from statemachine_agent.models.replay import ReplayDivergenceError, ReplayModel
from statemachine_agent.output import OUTPUT_TOOL
from statemachine_agent.persistence.codec import from_plain
from statemachine_agent.policy.approval import Approve, Defer, Deny, PolicyAnswer
from statemachine_agent.policy.reflection import ReflectionPolicy
from statemachine_agent.policy.verify import Claim, Verdict, VerifyPolicy
from statemachine_agent.tools.base import Tool, ToolCall, ToolOutcome
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


class ReplayEffects:
    """Answers tool calls and clock readings from the record instead of the world."""

    def __init__(self, events: Sequence[Mapping[str, Any]]) -> None:
        self._outcomes: dict[str, ToolOutcome] = {}
        for event in events:
            if event["event"] in ("tool.finished", "tool.failed"):
                failed = event["event"] == "tool.failed"
                self._outcomes[str(event["tool_use_id"])] = ToolOutcome(
                    tool_use_id=str(event["tool_use_id"]),
                    name=str(event["tool"]),
                    content=str(event.get("content", "")),
                    is_error=failed,
                    error_kind=event.get("error_kind") if failed else None,
                    fatal=bool(event.get("fatal", False)),
                )
        self._clock = [0.0] + [
            float(e.get("elapsed_s", 0.0)) for e in events if e["event"] == "transition.fired"
        ]
        self._tick = 0
        self.divergence: str | None = None

    async def call_model(self, model: Model, request: ModelRequest) -> ModelReply:
        return await model.acomplete(request)

    async def run_tools(
        self,
        registry: ToolRegistry,
        calls: Sequence[ToolCall],
        on_outcome: Callable[[ToolCall, ToolOutcome], None] | None = None,
    ) -> list[ToolOutcome]:
        outcomes = []
        for call in calls:
            outcome = self._outcomes.get(call.id)
            if outcome is None:
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
        """The recorded elapsed time at each transition, so time limits trip as they did."""
        value = self._clock[min(self._tick, len(self._clock) - 1)]
        self._tick += 1
        return value


def _recorded_data(content: str) -> Any:
    """A run-ending tool's structured result, as its recorded JSON text gives it back."""
    try:
        return json.loads(content)
    except ValueError:
        return content


def _steps(records: Sequence[Mapping[str, Any]]) -> list[Step]:
    return [
        (str(r["source"]), str(r["trigger"]), str(r["dest"]), tuple(dict(r["guards"]).items()))
        for r in records
    ]


def _stub_tools(started: Mapping[str, Any]) -> ToolRegistry:
    """Tools with the recorded definitions; their handlers are never called."""
    flags = started.get("tool_flags") or {}

    def never(**_: Any) -> str:
        raise ReplayDivergenceError("a tool was executed during a replay")

    registry = ToolRegistry()
    for definition in started.get("tools") or []:
        name = str(definition["name"])
        registry.register(
            Tool(
                name=name,
                description=str(definition.get("description", "")),
                input_schema=dict(definition.get("input_schema") or {"type": "object"}),
                handler=never,
                ends_run=bool(flags.get(name, {}).get("ends_run")),
                requires_approval=bool(flags.get(name, {}).get("requires_approval")),
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


def _recorded_approvals(events: Sequence[Mapping[str, Any]]) -> Callable[[ToolCall], PolicyAnswer]:
    decided = {
        str(e["tool_use_id"]): str(e["decision"])
        for e in events
        if e["event"] == "approval.decided" and e.get("source") != "resume"
    }

    def policy(call: ToolCall) -> PolicyAnswer:
        decision = decided.get(call.id, "defer")
        if decision == "approve":
            return Approve()
        if decision == "deny":
            return Deny()
        return Defer()

    return policy


def replay(audit: str | Path, *, output_type: Any = None) -> ReplayReport:
    """Re-run the run recorded in `audit` offline and compare its transitions.

    A run with an output type replays with it: `output_type` rebuilds the typed
    answer (`report.result.output`); without it, the recorded `final_result`
    schema is used and the answer is its JSON form.
    """
    events = read_events(Path(audit))
    started = next((e for e in events if e["event"] == "run.started"), None)
    if started is None:
        raise ValueError(f"{audit}: no run.started event; is this an audit file of one run?")
    if any(e["event"] == "run.resumed" for e in events):
        raise ValueError(f"{audit}: the run was resumed; replaying resumed runs is not supported")
    settings: RunSettings = from_plain(RunSettings, started["settings"], "settings")
    model = ReplayModel(events)
    effects = ReplayEffects(events)
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
        effects=effects,
    )
    messages = list(started.get("messages") or [])
    result = agent.run(messages[-1]["content"], history=messages[:-1], run_id=started["run_id"])
    recorded = _steps([e for e in events if e["event"] == "transition.fired"])
    replayed = _steps([t.to_dict() for t in result.trail])
    difference = model.divergence or effects.divergence
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
