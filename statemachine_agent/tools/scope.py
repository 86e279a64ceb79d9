"""`RunContext`: what a tool may know about the run calling it.

A tool that declares a parameter annotated `RunContext` (or `RunContext[Deps]`)
receives one per call: the host's own services for this run (`deps`: a user, a
tenant, a database handle), the run's identity and progress, the host's
`metadata`, and the call's id and idempotency key. The model never sees the
parameter: it is not part of the tool's input schema.

The context travels from `act` to the registry as a context variable of the
run's task (`tool_scope`), not through the effects boundary: DBOS steps and
Temporal activities carry only plain records, and `deps` is a live object of
this process. A tool executed where no run scope is set (a Temporal activity in
another worker, a direct `registry.execute`) gets a context with `deps=None` and
only the ids of its call (no deps, no metadata).
"""

from __future__ import annotations

import contextlib
import contextvars
import inspect
import typing
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from statemachine_agent.models.base import Usage

if TYPE_CHECKING:
    from statemachine_agent.machine.phase_env import PhaseEnv

DepsT = TypeVar("DepsT")


@dataclass(frozen=True, slots=True)
class RunContext(Generic[DepsT]):
    """The run as one tool call sees it; built fresh for every call."""

    deps: DepsT
    """What the host passed as `agent.run(..., deps=...)` (None when it passed nothing)."""
    run_id: str
    iteration: int
    """Model calls made so far in the run (the reply that asked for this call is the last)."""
    usage: Usage
    """Tokens used by the run so far."""
    metadata: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    """The host's `metadata=` (tenant, user, request id), read-only."""
    tool_call_id: str = ""
    """The `tool_use` id of this call."""
    idempotency_key: str = ""
    """`<run_id>:<tool_use_id>`: stable across retries and resumes of this call."""
    tool_name: str = ""


@dataclass(frozen=True, slots=True)
class RunScope:
    """The per-run part of every `RunContext` of one `act` (the per-call part is added
    by the registry)."""

    deps: Any
    run_id: str
    iteration: int
    usage: Usage
    metadata: Mapping[str, Any]
    env: PhaseEnv | None = None
    """The calling run's phase environment, for tools that are part of the run (a
    sub-agent runs on its budget, trail and store); never handed to a host's tool."""

    def for_call(self, call_id: str, idempotency_key: str, tool_name: str) -> RunContext[Any]:
        return RunContext(
            deps=self.deps,
            run_id=self.run_id,
            iteration=self.iteration,
            usage=self.usage,
            metadata=self.metadata,
            tool_call_id=call_id,
            idempotency_key=idempotency_key,
            tool_name=tool_name,
        )


_SCOPE: contextvars.ContextVar[RunScope | None] = contextvars.ContextVar(
    "statemachine_agent_run_scope", default=None
)


@contextlib.contextmanager
def tool_scope(scope: RunScope) -> Iterator[None]:
    """Make `scope` the run scope of the tool calls started inside the block."""
    token = _SCOPE.set(scope)
    try:
        yield
    finally:
        _SCOPE.reset(token)


def call_context(call_id: str, idempotency_key: str, tool_name: str) -> RunContext[Any]:
    """The context of one call: from the current run scope, or only its ids without one."""
    scope = _SCOPE.get()
    if scope is None:
        run_id = idempotency_key.rpartition(":")[0] if idempotency_key else ""
        return RunContext(deps=None, run_id=run_id, iteration=0, usage=Usage(),
                          tool_call_id=call_id, idempotency_key=idempotency_key,
                          tool_name=tool_name)  # fmt: skip
    return scope.for_call(call_id, idempotency_key, tool_name)


def calling_run() -> PhaseEnv | None:
    """The phase environment of the run whose `act` is calling the current tool, or
    None outside one (a direct `registry.execute`, a Temporal activity elsewhere)."""
    scope = _SCOPE.get()
    return None if scope is None else scope.env


def context_parameter(func: Callable[..., Any]) -> str | None:
    """The name of `func`'s parameter annotated `RunContext` (or `RunContext[...]`), if any.

    Raises `TypeError` for two such parameters: the registry would not know
    which one to fill.
    """
    target = inspect.unwrap(func)
    try:
        hints = typing.get_type_hints(target)
    except Exception:
        hints = dict(getattr(target, "__annotations__", {}) or {})
    try:
        names = list(inspect.signature(target).parameters)
    except (TypeError, ValueError):
        return None
    found = [name for name in names if _is_context(hints.get(name))]
    if len(found) > 1:
        raise TypeError(
            f"{getattr(target, '__name__', target)!r} declares {len(found)} RunContext "
            f"parameters ({', '.join(found)}); declare one"
        )
    return found[0] if found else None


def _is_context(hint: Any) -> bool:
    if hint is RunContext or typing.get_origin(hint) is RunContext:
        return True
    if isinstance(hint, str):  # an annotation the hints could not resolve
        return hint == "RunContext" or hint.startswith("RunContext[")
    return False
