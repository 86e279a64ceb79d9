"""The run record: everything the machine knows about one run, as plain data.

Guards read only this record, so a transition is a pure function of it; phases
and end-state handlers are the only code that changes it. Keeping it plain data
(no clients, no callables) is what lets it be checkpointed, replayed and shown.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from statemachine_agent.machine.settings import RunSettings
from statemachine_agent.models.base import JSON, ModelReply, Usage
from statemachine_agent.policy.budget import Budget
from statemachine_agent.tools.base import ToolCall, ToolOutcome


@dataclass(frozen=True, slots=True)
class RunError:
    """Why a run could not go on: the error class, and what the API said."""

    kind: str
    message: str
    status: int | None = None
    request_id: str | None = None
    context_exceeded: bool = False

    def describe(self) -> str:
        parts = [self.kind]
        if self.status is not None:
            parts.append(f"status {self.status}")
        if self.request_id:
            parts.append(f"request id {self.request_id}")
        return f"{self.message} ({', '.join(parts)})"


@dataclass(frozen=True, slots=True)
class TransitionRecord:
    """One fired transition, as the audit trail and `RunResult.trail` keep it."""

    seq: int
    source: str
    trigger: str
    dest: str
    guards: dict[str, bool]
    """Every guard evaluated for this trigger, in order, with its verdict."""
    via: tuple[str, ...]
    """The guards of the row that fired (empty for a fallback row)."""
    iteration: int
    turn: int
    elapsed_s: float
    usage_total: dict[str, int]
    cost_usd: float

    @property
    def key(self) -> tuple[str, str, str, tuple[str, ...]]:
        """The table row this transition fired (see `Row.key`)."""
        return (self.source, self.trigger, self.dest, self.via)

    def to_dict(self) -> JSON:
        return {
            "seq": self.seq,
            "source": self.source,
            "trigger": self.trigger,
            "dest": self.dest,
            "guards": dict(self.guards),
            "via": list(self.via),
            "iteration": self.iteration,
            "turn": self.turn,
            "elapsed_s": self.elapsed_s,
            "usage_total": dict(self.usage_total),
            "cost_usd": self.cost_usd,
        }


@dataclass(slots=True)
class RunRecord:
    """The mutable state of one run; `state` is the machine's current state."""

    run_id: str
    settings: RunSettings
    model_name: str
    state: str = "perceive"
    messages: list[JSON] = field(default_factory=list)
    """The exact Messages API history, user prompt first."""
    iteration: int = 0
    """Model calls made so far (the loop's unit of work)."""
    turn: int = 1
    """User messages answered so far, counting this one (the conversation's unit)."""
    seq: int = 0
    """Transitions fired so far."""
    usage: Usage = field(default_factory=Usage)
    cost_usd: float = 0.0
    elapsed_s: float = 0.0
    """Wall time since the run started, refreshed before every transition."""
    last_reply: ModelReply | None = None
    error: RunError | None = None
    pending_calls: list[ToolCall] = field(default_factory=list)
    """Tool calls of the last reply still waiting for their results."""
    outcomes: list[ToolOutcome] = field(default_factory=list)
    """Results of the last `act`, not yet appended to the history."""
    calls_per_tool: dict[str, int] = field(default_factory=dict)
    finish: JSON | None = None
    """The input of a successful `finish` call, when the model made one."""
    cancel_requested: bool = False
    blocked_calls: int = 0
    """Calls refused because their tool reached its per-tool limit."""
    fatal_tool: str | None = None
    """A tool configured to fail the run failed; the run ends in `failed` naming it."""
    stall_state: dict[str, Any] = field(default_factory=dict)
    """The stall detector's observations (plain data, see `StallDetector.to_state`)."""
    stall: dict[str, Any] | None = None
    """The current stall finding, if the last observation showed one."""
    interventions: int = 0
    last_reflection: int = 0
    """The iteration at which the run last reflected."""
    claim: str | None = None
    """How the model claimed completion (`end_turn` or `finish`) while it is verified."""
    verdict: dict[str, Any] | None = None
    rejections: int = 0
    continuations: int = 0
    partial_text: str = ""
    """Text of replies cut at max_tokens and continued, to prefix the final answer."""
    overflow_retried: bool = False
    compactions: int = 0
    awaiting: list[str] = field(default_factory=list)
    """tool_use ids whose approval was deferred to a human."""
    decisions: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Approval decisions brought by `resume`, by tool_use id, not yet applied."""
    cancelled_at: tuple[str, str] | None = None
    """(state, trigger) that led to `cancelled`, so a resumed run carries on from there."""
    chat_ended: bool = False
    """The model called `end_chat`: the conversation around this run should stop."""
    dirty_from: int | None = None
    """The first message rewritten in place since the last checkpoint (by compaction)."""
    trail: list[TransitionRecord] = field(default_factory=list)
    audit_path: Path | None = None
    notes: dict[str, Any] = field(default_factory=dict)
    """Free-form facts end-state handlers want to report (e.g. salvage usage)."""

    @property
    def budget(self) -> Budget:
        return self.settings.budget
