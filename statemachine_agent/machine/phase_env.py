"""What a phase is given: the run's data and the services it may use, kept apart.

`state` is the serializable run record; `deps` are the agent's services (model,
tools, effects, emitter), which are never checkpointed. Splitting them is what
lets a run be stored and resumed with fresh services.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from statemachine_agent.audit.events import Emitter
from statemachine_agent.context.compaction import SizeCache
from statemachine_agent.effects.base import Effects
from statemachine_agent.machine.cancel import CancelToken
from statemachine_agent.machine.run import RunRecord
from statemachine_agent.machine.table import Row
from statemachine_agent.models.base import Model, ModelRequest
from statemachine_agent.persistence.base import Checkpointer
from statemachine_agent.persistence.delta import CheckpointWriter, tombstone
from statemachine_agent.persistence.steering import Mailbox
from statemachine_agent.policy.approval import ApprovalPolicy
from statemachine_agent.policy.context import ContextPolicy
from statemachine_agent.policy.pricing import PriceTable
from statemachine_agent.policy.stall import StallDetector, StallPolicy
from statemachine_agent.policy.verify import Claim, Verdict
from statemachine_agent.tools.output import OutputSpec
from statemachine_agent.tools.registry import ToolRegistry


@dataclass(frozen=True, slots=True)
class AgentDeps:
    """The services of one agent, shared by all its runs."""

    model: Model
    tools: ToolRegistry
    effects: Effects
    prices: PriceTable
    system: str | None = None
    max_tokens: int = 4096
    cache_prompt: bool = True
    """Mark the system prompt with `cache_control` so later iterations read it from cache."""
    request_options: Mapping[str, Any] = field(default_factory=dict)
    context: ContextPolicy = field(default_factory=ContextPolicy)
    fallback_models: Sequence[Model] = ()
    """Tried in order when the model is overloaded or rate-limited after the SDK's retries."""
    critic: Model | None = None
    summary_model: Model | None = None
    """Writes the `summarize` state's summaries; None: the agent's model does."""
    verifier: Callable[[Claim], Verdict | Awaitable[Verdict]] | None = None
    approval: ApprovalPolicy | None = None
    checkpointer: Checkpointer | None = None
    output: OutputSpec | None = None
    """The run's output type, when its answer must validate (`Agent(output_type=...)`)."""


@dataclass(slots=True)
class PhaseEnv:
    """One run in flight: its record, the agent's services and its emitter."""

    state: RunRecord
    deps: AgentDeps
    emitter: Emitter
    started_at: float = 0.0
    request: ModelRequest | None = None
    """The request `perceive` built for the next `reason`."""
    writer: CheckpointWriter | None = None
    sizes: SizeCache = field(default_factory=SizeCache)
    """The history's measured size, kept between calls (see `SizeCache`)."""
    stall_detector: StallDetector | None = None
    """The live detector, kept between observations (rebuilt from the record on resume)."""
    checkpoint_error: str | None = None
    """Why checkpointing failed; the engine then ends the run in `failed`."""
    entered_by: Row | None = None
    """The row that entered the current state (set by the engine as it fires)."""
    host_deps: Any = None
    """The host's `deps=` for this run, handed to tools in their `RunContext`; a live
    object of this process, never checkpointed."""
    used_call_ids: set[str] | None = None
    """The tool_use ids this run's calls have used, kept between acts (read from the
    history once, at this process's first act; see `call_ids_used`)."""
    cancel: CancelToken | None = None
    """The run's `CancelToken`, if the host gave one (set by the engine): a sub-agent's
    run started by this one is cancelled with it."""
    mailbox: Mailbox | None = None
    """Where messages steered into this run wait (the store's queue, or the agent's
    own without a store); `perceive` reads it (see `persistence/steering.py`)."""
    outside_input: bool = False
    """The phase took something from outside the record that a re-run of it could not
    take again the same way (a steered message read from the queue), so the engine
    writes its transition even out of a carried phase (see `engine.CARRIED`)."""
    listed: dict[str, Mapping[str, Any]] = field(default_factory=dict)
    """What this run's last `toolset.listed` event said of each toolset (by name), so it
    is said again only when a listing changes it."""

    def call_ids_used(self) -> set[str]:
        """The tool_use ids earlier calls of this run used: a call is known by its id (its
        result, its idempotency key), so a reused one cannot be told apart. Read from the
        history's results once per process, then kept up to date by `act`, so each act
        costs what is new in it, not the whole history."""
        if self.used_call_ids is None:
            self.used_call_ids = {
                str(block.get("tool_use_id"))
                for message in self.state.messages
                if message.get("role") == "user" and isinstance(message.get("content"), list)
                for block in message["content"]
                if isinstance(block, Mapping) and block.get("type") == "tool_result"
            }
        return self.used_call_ids

    @property
    def arrival(self) -> str | None:
        """What the row that entered this state asks of its phase (`Row.arrival`)."""
        return self.entered_by.arrival if self.entered_by is not None else None

    def detector(self, policy: StallPolicy) -> StallDetector:
        """The run's stall detector: the live one, or rebuilt from the record's state."""
        if self.stall_detector is None:
            self.stall_detector = StallDetector.from_state(policy, self.state.stall.observations)
        return self.stall_detector

    def checkpoint(self) -> None:
        """Append what changed since the last checkpoint (no-op without a checkpointer).

        Never raises: a record that cannot be stored (a value JSON cannot hold,
        a store that is down) is noted, checkpointing stops, and the engine ends
        the run by name instead of carrying on without durability.
        """
        store = self.deps.checkpointer
        if store is None or self.checkpoint_error is not None:
            return
        if self.writer is None:
            self.writer = CheckpointWriter()
        self.emitter.flush()  # the audit file is never behind what the store holds
        try:
            store.append(self.state.run_id, self.writer.delta(self.state))
        except Exception as exc:
            self.checkpoint_error = f"{type(exc).__name__}: {exc}"
            self.emitter.emit("checkpoint.failed", state=self.state.state,
                              error=self.checkpoint_error)  # fmt: skip
            with contextlib.suppress(Exception):  # a store that is down takes nothing
                store.append(self.state.run_id, tombstone(self.state, self.checkpoint_error))
