"""The run record: everything the machine knows about one run, as plain data.

Guards read only this record, so a transition is a pure function of it; phases
and end-state handlers are the only code that changes it. Keeping it plain data
(no clients, no callables) is what lets it be checkpointed, replayed and shown.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Literal

from statemachine_agent.machine.settings import RunSettings
from statemachine_agent.models.base import JSON, ModelError, ModelReply, Usage
from statemachine_agent.policy.approval import ApprovalRecord
from statemachine_agent.policy.budget import Budget
from statemachine_agent.tools.base import ToolCall, ToolOutcome
from statemachine_agent.unicode import repair_text


@dataclass(frozen=True, slots=True)
class RunError:
    """Why a run could not go on: the error class, and what the API said."""

    kind: str
    message: str
    status: int | None = None
    request_id: str | None = None
    context_exceeded: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "message", repair_text(self.message))

    @classmethod
    def from_model_error(cls, exc: ModelError) -> RunError:
        """The run's error for a failed model call: what the API said, kept whole."""
        return cls(
            kind=exc.error_type or "ModelError",
            message=exc.message,
            status=exc.status,
            request_id=exc.request_id,
            context_exceeded=exc.context_exceeded,
        )

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


Checkpointing = Literal["diffed", "replaced", "appended", "not_stored"]
"""How the checkpoint codec stores a record field (see `checkpointing`):

- `diffed`: stored as a JSON diff against the previous checkpoint (counters, groups);
- `replaced`: its value is only ever replaced, never changed in place, so its plain form
  is computed once per value (frozen records, lists phases only reassign);
- `appended`: a list that only grows (or is rewritten from a marked index), stored as
  its new items;
- `not_stored`: bookkeeping of this process that a resumed run rebuilds.
"""


REPLACED: Mapping[str, Checkpointing] = {"checkpoint": "replaced"}
APPENDED: Mapping[str, Checkpointing] = {"checkpoint": "appended"}
NOT_STORED: Mapping[str, Checkpointing] = {"checkpoint": "not_stored"}
"""Field metadata declaring a record field's checkpoint rule (`diffed` when absent)."""


def checkpointing(name: str) -> Checkpointing:
    """The checkpoint rule of a `RunRecord` field (`diffed` unless declared otherwise)."""
    rule: Checkpointing = _FIELDS[name].metadata.get("checkpoint", "diffed")
    return rule


@dataclass(slots=True)
class StallTrack:
    """What the stall detector has seen and found, and how often the run was told."""

    observations: dict[str, Any] = field(default_factory=dict, metadata=REPLACED)
    """The detector's observations (plain data, see `StallDetector.to_state`)."""
    finding: dict[str, Any] | None = None
    """The current stall finding, if the last observation showed one."""
    interventions: int = 0


@dataclass(slots=True)
class VerifyTrack:
    """The verifier's last verdict on a claimed completion, and how often it rejected."""

    verdict: dict[str, Any] | None = None
    rejections: int = 0


@dataclass(slots=True)
class ContinuationTrack:
    """Replies cut at max_tokens and continued."""

    count: int = 0
    partial_text: str = ""
    """Text of the cut replies, to prefix the final answer."""


@dataclass(slots=True)
class SummaryTrack:
    """The second context layer: the prompt as `perceive` measured it, and the summaries.

    `perceive` measures; the `summary_due` guard decides from these figures alone.
    """

    prompt_tokens: int = 0
    """The size of the prompt about to be sent, as `perceive` measured it."""
    replaceable: int = 0
    """Messages a summary would replace now (0: too few are older than `keep_last`)."""
    attempted_at: int = -1
    """The iteration of the last attempt: one attempt per model call of the loop, so a
    run never loops on summarizing."""
    count: int = 0
    """Summaries that replaced older messages."""
    failure: str | None = None
    """Why the last attempt did not replace anything (its fallback then compacts)."""


@dataclass(slots=True)
class ApprovalTrack:
    """Tool calls waiting for a human, and the decisions `resume` brought for them."""

    awaiting: list[str] = field(default_factory=list)
    """tool_use ids whose approval was deferred to a human."""
    decisions: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Approval decisions by tool_use id, not yet applied."""
    paused_at: float | None = None
    """When the run last paused for approval (seconds since the epoch), so the decisions
    that `resume` brings can say how long their calls waited (`waited_s`)."""
    log: list[ApprovalRecord] = field(default_factory=list)
    """Every decision made in the run, in order: `RunResult.approvals`."""


@dataclass(slots=True)
class SubagentTrack:
    """The sub-agent runs this run started through `Agent.as_tool` tools, and what of
    their spending is already charged to it."""

    runs: dict[str, dict[str, Any]] = field(default_factory=dict)
    """By the tool_use id that started it: the child's `run_id`, `agent`, `end_state`,
    the `usage` and `cost_usd` charged here so far, and (while it waits for approval)
    its `pending` calls, keyed as this run's `approval.awaiting` names them."""
    limit_salvage: dict[str, str] | None = None
    """A child's salvage call already spent past this run's cost, token or time limit
    (`run_id`, `text`): the one call the budget allows past a limit is used, so this
    run's own salvage is not made and the child's summary stands for it."""


@dataclass(slots=True)
class SteeringTrack:
    """Messages steered into the run (`Agent.steer`): read from its queue, delivered.

    `seen` is checkpointed with the history the messages went into, so a resumed run
    reads from its queue exactly what its last checkpoint had not (see
    `persistence/steering.py`)."""

    seen: int = 0
    """The highest queue number read into this record (waiting or delivered)."""
    waiting: list[dict[str, Any]] = field(default_factory=list, metadata=REPLACED)
    """Messages read and not yet in the history (`SteerMessage.to_plain()` each): the
    `steering_waiting` guard routes `perceive` through its delivery row."""
    delivered: int = 0
    """Messages added to the history so far."""
    seen_by_call: int = -1
    """The model call (iteration number) that first sees the latest delivery: the
    reflection interval does not fire on it (the model has just been redirected)."""


@dataclass(slots=True)
class TaintTrack:
    """Where untrusted text entered the run, and the calls its `TaintPolicy` gated.

    The run is tainted from its first source on, for good: compaction and summaries
    rewrite the history, never this list (a summary of tainted text is tainted, and a
    run that acted on text it has since dropped acted on it all the same)."""

    sources: list[dict[str, Any]] = field(default_factory=list)
    """Each untrusted result that entered the history (`TaintSource` fields: `tool`,
    `tool_use_id`, `excerpt`, `iteration`), in order; a sub-agent starts with its
    parent's."""
    gated: list[str] = field(default_factory=list)
    """tool_use ids of the side-effect calls the policy gated (sent for approval or
    refused), and the keys of sub-agents' pending calls their own taint gated, so the
    `taint_approval_pending` guard can tell a taint pause."""

    @property
    def tainted(self) -> bool:
        return bool(self.sources)


@dataclass(slots=True)
class StagedTrack:
    """Side effects last: the calls of deferrable tools staged during the loop, and what
    `commit` made of them (each entry is plain JSON; a list is only ever replaced).

    Every field has a default, so a checkpoint written before staging existed loads."""

    calls: list[dict[str, Any]] = field(default_factory=list, metadata=REPLACED)
    """Staged and not yet run, in the order staged: `ref` ("S1"), `tool_use_id`,
    `tool`, `input`, `iteration`."""
    issued: int = 0
    """References handed out so far (the next is `S{issued + 1}`), never reused."""
    committing: bool = False
    """The run is inside `commit` (or paused for approval in it): resuming goes back there."""
    ran: list[dict[str, Any]] = field(default_factory=list, metadata=REPLACED)
    """Staged calls `commit` ran, in order: `ref`, `tool_use_id`, `tool`, `input`,
    `content`, `is_error`. A resumed commit never runs one of these again."""
    failure: dict[str, Any] | None = None
    """The staged call of the last commit that failed (`ref`, `tool`, `error`)."""


@dataclass(slots=True)
class RunRecord:
    """The mutable state of one run; `state` is the machine's current state.

    Fields are grouped by the feature that owns them (`stall`, `verification`,
    `continuation`, `summary`, `approval`); each field declares how checkpoints store it.
    """

    run_id: str
    settings: RunSettings = field(default_factory=RunSettings, metadata=REPLACED)
    state: str = "perceive"
    messages: list[JSON] = field(default_factory=list, metadata=APPENDED)
    """The exact Messages API history, user prompt first."""
    iteration: int = 0
    """Model calls made so far (the loop's unit of work)."""
    turn: int = 1
    """User messages answered so far, counting this one (the conversation's unit)."""
    seq: int = 0
    """Transitions fired so far."""
    usage: Usage = field(default_factory=Usage, metadata=REPLACED)
    cost_usd: float = 0.0
    elapsed_s: float = 0.0
    """Wall time since the run started, refreshed before every transition."""
    last_reply: ModelReply | None = field(default=None, metadata=REPLACED)
    reply_max_tokens: int | None = None
    """The `max_tokens` of the call that made `last_reply`: a reply stopped at
    `max_tokens` with fewer output tokens than this was stopped by something else."""
    error: RunError | None = field(default=None, metadata=REPLACED)
    pending_calls: list[ToolCall] = field(default_factory=list, metadata=REPLACED)
    """Tool calls of the last reply still waiting for their results."""
    outcomes: list[ToolOutcome] = field(default_factory=list)
    """Results of the last `act`, not yet appended to the history."""
    calls_per_tool: dict[str, int] = field(default_factory=dict)
    finish: JSON | None = None
    """The input of a successful `finish` call, when the model made one."""
    cancel_requested: bool = False
    cancelled_at: tuple[str, str] | None = None
    """(state, trigger) that led to `cancelled`; the `resumed` rows read it."""
    blocked_calls: int = 0
    """Calls refused because their tool reached its per-tool limit."""
    fatal_tool: str | None = None
    invalid_answers: int = 0
    """Calls of a run-ending tool (`finish`, `final_result`) whose input was rejected."""
    """A tool configured to fail the run failed; the run ends in `failed` naming it."""
    stall: StallTrack = field(default_factory=StallTrack)
    last_reflection: int = 0
    """The iteration at which the run last reflected."""
    verification: VerifyTrack = field(default_factory=VerifyTrack)
    continuation: ContinuationTrack = field(default_factory=ContinuationTrack)
    overflow_retried: bool = False
    """The one compaction-and-retry after an overflow was used."""
    summary: SummaryTrack = field(default_factory=SummaryTrack)
    approval: ApprovalTrack = field(default_factory=ApprovalTrack)
    chat_ended: bool = False
    """The model called `end_chat`: the conversation around this run should stop."""
    dirty_from: int | None = field(default=None, metadata=NOT_STORED)
    """The first message rewritten in place since the last checkpoint (by compaction)."""
    trail: list[TransitionRecord] = field(default_factory=list, metadata=APPENDED)
    audit_path: Path | None = None
    notes: dict[str, Any] = field(default_factory=dict)
    """Free-form facts end-state handlers want to report (e.g. salvage usage)."""
    metadata: dict[str, Any] = field(default_factory=dict, metadata=REPLACED)
    """The host's `metadata=` (tenant, user, request id): JSON, stamped on every event;
    only ever replaced (a resume merging new metadata builds a new dict)."""
    parent: dict[str, str] | None = field(default=None, metadata=REPLACED)
    """For a sub-agent's run: the parent's `run_id` and the `tool_use_id` of the call
    that started it (see `Agent.as_tool`)."""
    subagents: SubagentTrack = field(default_factory=SubagentTrack)
    staged: StagedTrack = field(default_factory=StagedTrack)
    taint: TaintTrack = field(default_factory=TaintTrack)
    steering: SteeringTrack = field(default_factory=SteeringTrack)
    forked_from: dict[str, Any] | None = field(default=None, metadata=REPLACED)
    """For a fork (`Agent.fork`): the original's `run_id` and the transition `seq` it
    was forked at (`{"run_id": ..., "seq": ...}`)."""
    reporting_end: bool = False
    """The run entered a final end state and its `run.ended` is not yet known to be
    written: set by the engine as it enters the state, cleared (and written) once the
    event is out. A process that dies in between leaves it set, and `resume` then
    finishes the report instead of refusing an ended run."""

    @property
    def budget(self) -> Budget:
        return self.settings.budget


_FIELDS = {f.name: f for f in fields(RunRecord)}
