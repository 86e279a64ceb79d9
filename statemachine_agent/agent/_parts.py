"""What an agent's runs are made with, as one typed bundle.

The helpers beside `core` (`_records`, `_resume`, `_driving`) take an `AgentParts`
rather than the `Agent`: they see only what a run needs (its settings, services,
engine, audit trail and redactor), the bundle is built once when the agent is,
and nothing outside `core` depends on how `Agent` stores its settings.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from statemachine_agent.agent._building import with_output
from statemachine_agent.persistence.steering import LocalMailbox, Mailbox

if TYPE_CHECKING:  # annotations only: the bundle's module imports no engine, no phases
    from statemachine_agent.audit.config import Audit
    from statemachine_agent.audit.redact import Redactor
    from statemachine_agent.machine.engine import Engine
    from statemachine_agent.machine.phase_env import AgentDeps
    from statemachine_agent.machine.settings import RunSettings
    from statemachine_agent.persistence.base import Checkpointer


@dataclass(frozen=True, slots=True)
class AgentParts:
    """One agent's run-making parts, fixed when the agent is built."""

    name: str
    """The agent's label: its trace spans and sub-agent events carry it."""
    settings: RunSettings
    """Every fresh run record starts with these (limits, stall, context, ...)."""
    deps: AgentDeps
    """The services of a run without a per-run output type."""
    audit: Audit
    """Where the runs' events go (folder, sinks, logger, key, tracer provider)."""
    redactor: Redactor
    """Masks the agent's secrets in every event it emits."""
    engine: Engine
    """Drives the runs through the machine built from the table."""
    outputs: dict[int, AgentDeps] = field(default_factory=dict, compare=False, repr=False)
    """The services per run-time output type, made once each (see `deps_for`)."""
    local_mailbox: LocalMailbox = field(default_factory=LocalMailbox, compare=False, repr=False)
    """The steering queues of this agent's runs when its store has none (or no store)."""
    driving: set[str] = field(default_factory=set, compare=False, repr=False)
    """Ids of the runs this agent is driving now in this process (steerable without a
    store)."""

    @property
    def mailbox(self) -> Mailbox:
        """Where messages steered into this agent's runs wait: the store's queue (shared
        by every process using the store), or this agent's own."""
        store = self.deps.checkpointer
        return store if isinstance(store, Mailbox) else self.local_mailbox

    @property
    def checkpointer(self) -> Checkpointer | None:
        """The store the runs are checkpointed to, if any."""
        return self.deps.checkpointer


def deps_for(parts: AgentParts, output_type: Any) -> AgentDeps:
    """The services of one run: the agent's own, or with a per-run output type.

    Made once per output type (keyed by identity, checked against a reused id), so
    a run with the same `output_type=` as an earlier one builds no new registry.
    """
    if output_type is None:
        return parts.deps
    cached = parts.outputs.get(id(output_type))
    if cached is None or cached.output is None or cached.output.output_type is not output_type:
        cached = parts.outputs[id(output_type)] = with_output(parts.deps, output_type)
    return cached
