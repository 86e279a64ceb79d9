"""What a phase is given: the run's data and the services it may use, kept apart.

`state` is the serializable run record; `deps` are the agent's services (model,
tools, effects, emitter), which are never checkpointed. Splitting them is what
lets a run be stored and resumed with fresh services.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from statemachine_agent.audit.events import Emitter
from statemachine_agent.effects.base import Effects
from statemachine_agent.machine.run import RunRecord
from statemachine_agent.models.base import Model, ModelRequest
from statemachine_agent.policy.context import ContextPolicy
from statemachine_agent.policy.pricing import PriceTable
from statemachine_agent.policy.verify import Claim, Verdict
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
    verifier: Callable[[Claim], Verdict | Awaitable[Verdict]] | None = None


@dataclass(slots=True)
class RunContext:
    """One run in flight: its record, the agent's services and its emitter."""

    state: RunRecord
    deps: AgentDeps
    emitter: Emitter
    started_at: float = 0.0
    request: ModelRequest | None = None
    """The request `perceive` built for the next `reason`."""
