"""Any error in user-supplied or pluggable code ends the run by name.

A guard (through the budget it reads), a verifier, an approval policy, a critic, a
model adapter, an audit sink, a logger and a checkpointer are injected to raise
at a chosen call; whatever happens, `Agent.run` returns a result in a named end
state, and when the component's failure stopped the run it ended in `failed`
naming the component.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from statemachine_agent import (
    Agent,
    Approve,
    Audit,
    Budget,
    MemoryCheckpointer,
    ModelReply,
    ModelRequest,
    ReflectionPolicy,
    ScriptedModel,
    tool,
)
from statemachine_agent.machine.ends import END_STATES
from statemachine_agent.policy.verify import Verdict
from statemachine_agent.testing import replies

COMPONENTS = (
    "guard", "verifier", "approval", "critic", "model", "sink", "logger", "checkpointer",
)  # fmt: skip
ERRORS: tuple[type[Exception], ...] = (RuntimeError, ValueError, KeyError, TypeError, OSError)
NAMES = {
    "guard": "budget",  # as `guard budget_exceeded`, or the budget checked before a call
    "verifier": "verifier",
    "approval": "approval policy",
    "critic": "model adapter",
    "model": "model adapter",
    "sink": "audit sink",
    "logger": "audit logger",
    "checkpointer": "",  # named by its own error (CheckpointError)
}


@dataclass
class Trap:
    """Raises `error` on its `at`-th call (counting from 0), then keeps working."""

    error: type[Exception]
    at: int
    calls: int = 0
    sprung: bool = False

    def spring(self) -> None:
        n, self.calls = self.calls, self.calls + 1
        if n == self.at:
            self.sprung = True
            raise self.error("injected failure")


class TrapBudget(Budget):
    def __init__(self, trap: Trap) -> None:
        super().__init__(max_iterations=6)
        object.__setattr__(self, "_trap", trap)

    def exhausted(self, **figures: Any) -> str | None:
        self._trap.spring()  # type: ignore[attr-defined]
        return super().exhausted(**figures)


class TrapModel:
    """Wraps a scripted model; its adapter raises (not a ModelError) when sprung."""

    def __init__(self, inner: ScriptedModel, trap: Trap | None) -> None:
        self.inner, self.trap, self.name = inner, trap, inner.name

    async def acomplete(self, request: ModelRequest) -> ModelReply:
        if self.trap is not None:
            self.trap.spring()
        return await self.inner.acomplete(request)


class TrapSink:
    def __init__(self, trap: Trap | None) -> None:
        self.trap = trap

    def write(self, event: Any) -> None:
        if self.trap is not None:
            self.trap.spring()

    def flush(self) -> None:
        """A buffering sink can fail when it writes its batch, too."""
        if self.trap is not None:
            self.trap.spring()

    def close(self) -> None:
        return None


class TrapLogger:
    def __init__(self, trap: Trap) -> None:
        self.trap = trap

    def info(self, event: str, **fields: Any) -> None:
        self.trap.spring()


class TrapStore(MemoryCheckpointer):
    def __init__(self, trap: Trap | None) -> None:
        super().__init__()
        self.trap = trap

    def append(self, run_id: str, body: Any) -> None:
        if self.trap is not None:
            self.trap.spring()
        super().append(run_id, body)


@tool(requires_approval=True)
def deploy(target: str) -> str:
    """Deploy to a target (needs approval)."""
    return f"deployed {target}"


SCRIPT = [
    replies.tool_use("deploy", {"target": "staging"}),
    replies.tool_use("deploy", {"target": "prod"}),
    replies.text("all deployed"),
]


def build(component: str, trap: Trap) -> Agent:
    mine = {c: (trap if c == component else None) for c in COMPONENTS}
    options: dict[str, Any] = {
        "budget": TrapBudget(trap) if component == "guard" else Budget(max_iterations=6),
        "checkpointer": TrapStore(mine["checkpointer"]),
        "audit": Audit(
            sinks=[TrapSink(mine["sink"])],
            logger=TrapLogger(trap) if component == "logger" else None,
        ),
        "reflection": ReflectionPolicy(
            1, critic=TrapModel(ScriptedModel([replies.text("fine")] * 5), mine["critic"])
        ),
    }

    def verifier(claim: Any) -> Verdict:
        if mine["verifier"] is not None:
            mine["verifier"].spring()
        return Verdict(ok=True)

    def approval(call: Any) -> Approve:
        if mine["approval"] is not None:
            mine["approval"].spring()
        return Approve()

    model = TrapModel(ScriptedModel(list(SCRIPT)), mine["model"])
    return Agent(model, tools=[deploy], verify=verifier, approval=approval, **options)


@settings(max_examples=60, deadline=None)
@given(
    component=st.sampled_from(COMPONENTS),
    error=st.sampled_from(ERRORS),
    at=st.integers(min_value=0, max_value=12),
)
def test_a_raising_component_ends_the_run_by_name(
    component: str, error: type[Exception], at: int
) -> None:
    """Nothing escapes; a component that raised before the end fails the run, by name."""
    trap = Trap(error, at)
    result = build(component, trap).run("deploy everywhere")
    assert result.end_state in END_STATES
    if not trap.sprung:
        assert result.end_state == "completed", result.reason
        return
    if result.end_state != "failed":
        # only a failure at the very end (run.ended, the final checkpoint) leaves the
        # end state as it was; the result then names the failure
        assert (result.details or {}).get("audit_error") or (result.details or {}).get(
            "checkpoint_error"
        ), result
        return
    assert error.__name__ in result.reason or component == "checkpointer", result.reason
    assert NAMES[component] in result.reason, result.reason


@pytest.mark.parametrize("component", COMPONENTS)
def test_every_extension_point_is_reached(component: str) -> None:
    """Each injected component is really called by this agent's run (the property above
    would prove nothing about one that is never reached), and its first failure ends the
    run in `failed` by name."""
    trap = Trap(RuntimeError, 0)
    result = build(component, trap).run("deploy everywhere")
    assert trap.sprung
    assert result.end_state == "failed"
    assert NAMES[component] in result.reason
