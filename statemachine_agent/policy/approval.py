"""Human approval of tool calls: the decisions and the policy that asks for them.

A tool declared `requires_approval=True` does not run until someone says so. The
agent's approval policy answers at once (`Approve`, `Deny`) or `Defer`s to a
human, and then the run stops in `awaiting_approval`, checkpointed, until
`Agent.resume(run_id, decisions={...})` brings the answers, possibly hours
later and from another process.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from statemachine_agent.tools.base import ToolCall


@dataclass(frozen=True, slots=True)
class Approve:
    """Run the call as the model asked."""


DEFAULT_DENIAL = "A reviewer declined this call."


@dataclass(frozen=True, slots=True)
class Deny:
    """Do not run the call; the message goes back to the model as an error result."""

    message: str = DEFAULT_DENIAL


@dataclass(frozen=True, slots=True)
class Edit:
    """Run the call with a reviewer's corrected input."""

    input: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Defer:
    """Nobody can decide now: pause the run until a human does."""


Decision = Approve | Deny | Edit
PolicyAnswer = Approve | Deny | Edit | Defer
ApprovalPolicy = Callable[[ToolCall], PolicyAnswer | Awaitable[PolicyAnswer]]
"""Decides on a call that needs approval (sync or async)."""


def decision_to_plain(decision: PolicyAnswer) -> dict[str, Any]:
    """A decision as plain data, to keep in the run record until it is used."""
    if isinstance(decision, Approve):
        return {"kind": "approve"}
    if isinstance(decision, Deny):
        return {"kind": "deny", "message": decision.message}
    if isinstance(decision, Edit):
        return {"kind": "edit", "input": dict(decision.input)}
    return {"kind": "defer"}


def decision_from_plain(data: Mapping[str, Any]) -> PolicyAnswer:
    kind = data.get("kind")
    if kind == "approve":
        return Approve()
    if kind == "deny":
        return Deny(str(data.get("message") or DEFAULT_DENIAL))
    if kind == "edit":
        return Edit(dict(data.get("input") or {}))
    return Defer()
