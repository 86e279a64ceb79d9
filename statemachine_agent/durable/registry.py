"""Agents by name, so a worker process can rebuild the agent a run belongs to.

Models and tools are live objects (clients, functions, connections): they
cannot travel in a queue message or a workflow history. What travels is the
agent's *name*; every worker imports the module that registered a factory under
that name and builds its own agent from it, with the `Effects` of the engine it
runs on. A factory is therefore a function of the effects, and the registry
checks that the agent it returns really uses them: an agent that silently kept
the in-process default would run outside the durable engine.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, Protocol, TypeVar, overload, runtime_checkable

from statemachine_agent.agent import Agent
from statemachine_agent.effects.base import Effects
from statemachine_agent.errors import Error
from statemachine_agent.policy.approval import ApprovalPolicy

AgentFactory = Callable[[Effects], Agent]
"""Builds an agent that runs its effects through the given `Effects` (pass it as `effects=`)."""

E = TypeVar("E", bound=Effects)


class UnknownAgentError(Error, LookupError):
    """No factory is registered under the name a run asked for."""


@runtime_checkable
class WaitsForApproval(Protocol):
    """Effects of an engine that can wait durably for a human's decision."""

    def approval(self, timeout_seconds: float) -> ApprovalPolicy:
        """A policy that waits up to `timeout_seconds` for a decision, then defers."""
        ...


_factories: dict[str, AgentFactory] = {}
_lock = threading.Lock()


@overload
def register_agent(name: str, factory: AgentFactory, *, replace: bool = False) -> AgentFactory: ...


@overload
def register_agent(
    name: str, factory: None = None, *, replace: bool = False
) -> Callable[[AgentFactory], AgentFactory]: ...


def register_agent(
    name: str, factory: AgentFactory | None = None, *, replace: bool = False
) -> AgentFactory | Callable[[AgentFactory], AgentFactory]:
    """Register `factory` under `name` (also usable as `@register_agent(name)`).

    Registering the same function twice is harmless (a module imported again);
    another function under a taken name is refused unless `replace=True`, since
    two workers building different agents for one name would split a run's
    history between two programs.
    """
    if not name or not name.strip():
        raise ValueError("an agent name must not be empty")

    def add(made: AgentFactory) -> AgentFactory:
        with _lock:
            known = _factories.get(name)
            if known is not None and known is not made and not replace:
                raise ValueError(
                    f"an agent named {name!r} is already registered "
                    f"({_describe(known)}); pass replace=True to replace it"
                )
            _factories[name] = made
        return made

    return add if factory is None else add(factory)


def unregister_agent(name: str) -> None:
    """Forget the factory registered under `name` (no error if there is none)."""
    with _lock:
        _factories.pop(name, None)


def registered_agents() -> tuple[str, ...]:
    """The registered names, sorted."""
    with _lock:
        return tuple(sorted(_factories))


def agent_factory(name: str) -> AgentFactory:
    """The factory registered under `name`; names the known ones when there is none."""
    with _lock:
        found = _factories.get(name)
        known = sorted(_factories)
    if found is None:
        listing = ", ".join(known) or "none"
        raise UnknownAgentError(
            f"no agent registered as {name!r} in this process (registered: {listing}); "
            "import the module that calls register_agent before starting the worker"
        )
    return found


def build_agent(name: str, effects: Effects) -> Agent:
    """Build the agent registered as `name` on `effects`, refusing one that cannot be durable."""
    agent = agent_factory(name)(effects)
    if not isinstance(agent, Agent):
        raise TypeError(f"the factory of agent {name!r} returned {type(agent).__name__}, not Agent")
    if agent.effects is not effects:
        raise TypeError(
            f"the factory of agent {name!r} ignored its effects: build the agent with "
            "Agent(..., effects=effects), or its model and tool calls escape the engine"
        )
    if agent.checkpointer is not None:
        raise ValueError(
            f"the agent {name!r} has a checkpointer: on a durable engine the engine records "
            "the run, and a replayed run would write its checkpoints twice; drop checkpointer="
        )
    return agent


class AgentCache(Generic[E]):
    """One agent per name per process, built on first use with that engine's effects.

    Agents hold no per-run state, so a worker builds each once and serves all
    its runs with it. A name registered again (a new factory) is rebuilt.
    """

    def __init__(
        self,
        make_effects: Callable[[str], E],
        prepare: Callable[[Agent], Agent] | None = None,
    ) -> None:
        self._make_effects = make_effects
        self._prepare = prepare
        self._built: dict[str, tuple[AgentFactory, Agent, E]] = {}
        self._lock = threading.Lock()

    def get(self, name: str) -> tuple[Agent, E]:
        factory = agent_factory(name)
        with self._lock:
            cached = self._built.get(name)
            if cached is not None and cached[0] is factory:
                return cached[1], cached[2]
        effects = self._make_effects(name)
        agent = build_agent(name, effects)
        if self._prepare is not None:
            agent = self._prepare(agent)  # agents are read-only: it returns the prepared copy
        with self._lock:
            self._built[name] = (factory, agent, effects)
        return agent, effects

    def build_all(self) -> list[str]:
        """Build every registered agent now, so a broken factory stops the worker at start-up.

        Also keeps slow construction (imports, clients) out of the first run,
        where Temporal's deadlock detector would count it against a workflow task.
        """
        names = list(registered_agents())
        for name in names:
            self.get(name)
        return names

    def clear(self) -> None:
        with self._lock:
            self._built.clear()


def _describe(factory: AgentFactory) -> str:
    module = getattr(factory, "__module__", "?")
    qualname = getattr(factory, "__qualname__", repr(factory))
    return f"{module}.{qualname}"
