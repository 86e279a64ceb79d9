"""Human approval of tool calls: the decisions and the policy that asks for them.

A tool declared `requires_approval=True` does not run until someone says so. The
agent's approval policy answers at once (`Approve`, `Deny`) or `Defer`s to a
human, and then the run stops in `awaiting_approval`, checkpointed, until
`Agent.resume(run_id, decisions={...})` brings the answers, possibly hours
later and from another process.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from statemachine_agent.errors import Error
from statemachine_agent.tools.base import ToolCall


class DecisionTypeError(Error, TypeError):
    """A decision given to `resume` (or a field of one) is not of an accepted type.

    Raised before anything runs: a decision read from JSON as the string
    `"approve"`, or the class `Approve` instead of `Approve()`, would otherwise not
    be a decision at all, and the person's answer would be silently dropped.
    """


def _check_person(kind: str, by: object, note: object) -> None:
    """`by` and `note` are text or absent: they go into the audit trail as they are."""
    for name, value in (("by", by), ("note", note)):
        if value is not None and not isinstance(value, str):
            raise DecisionTypeError(
                f"{kind}({name}=...) takes a str or None, not {type(value).__name__}: {value!r}"
            )


@dataclass(frozen=True, slots=True)
class Approve:
    """Run the call as the model asked."""

    by: str | None = None
    """Who decided (a person's name or id), recorded in the audit trail."""
    note: str | None = None
    """Why, in the reviewer's words, recorded in the audit trail."""

    def __post_init__(self) -> None:
        _check_person("Approve", self.by, self.note)


DEFAULT_DENIAL = "A reviewer declined this call."


@dataclass(frozen=True, slots=True)
class Deny:
    """Do not run the call; the message goes back to the model as an error result."""

    message: str = DEFAULT_DENIAL
    by: str | None = None
    """Who decided, recorded in the audit trail."""
    note: str | None = None
    """Why, for the record (the model reads `message`, not this)."""

    def __post_init__(self) -> None:
        if not isinstance(self.message, str):
            raise DecisionTypeError(
                f"Deny(message) takes a str, not {type(self.message).__name__}: {self.message!r}"
            )
        _check_person("Deny", self.by, self.note)


@dataclass(frozen=True, slots=True)
class Edit:
    """Run the call with a reviewer's corrected input."""

    input: Mapping[str, Any]
    by: str | None = None
    """Who decided, recorded in the audit trail."""
    note: str | None = None
    """Why the input was changed, recorded in the audit trail."""

    def __post_init__(self) -> None:
        if not isinstance(self.input, Mapping):
            raise DecisionTypeError(
                f"Edit(input) takes a mapping, not {type(self.input).__name__}: {self.input!r}"
            )
        _check_person("Edit", self.by, self.note)


@dataclass(frozen=True, slots=True)
class Defer:
    """Nobody can decide now: pause the run until a human does."""


Decision = Approve | Deny | Edit
PolicyAnswer = Approve | Deny | Edit | Defer
ApprovalPolicy = Callable[[ToolCall], PolicyAnswer | Awaitable[PolicyAnswer]]
"""Decides on a call that needs approval (sync or async)."""

ACCEPTED = (Approve, Deny, Edit, Defer)
"""What `resume` takes as a decision: instances of these, never the classes or text."""

DecidedBy = Literal["person", "policy", "default"]


def check_decisions(decisions: object) -> None:
    """Refuse, by call id, any decision that is not an `Approve`, `Deny`, `Edit` or
    `Defer` instance; called by every resume entry point before the lease is taken
    or the run loaded, so a refused resume leaves no trace."""
    if decisions is None:
        return
    if not isinstance(decisions, Mapping):
        raise DecisionTypeError(
            f"decisions must be a mapping of tool_use id to a decision, not "
            f"{type(decisions).__name__}: {decisions!r}"
        )
    for key, value in decisions.items():
        if not isinstance(key, str):
            raise DecisionTypeError(
                f"decision keys are tool_use ids (str), not {type(key).__name__}: {key!r}"
            )
        if not isinstance(value, ACCEPTED):
            hint = f" (an instance: {value.__name__}())" if value in ACCEPTED else ""
            raise DecisionTypeError(
                f"decision for call {key!r} is {value!r} ({type(value).__name__}); "
                f"expected an instance of Approve, Deny, Edit or Defer{hint}"
            )


def policy_name(policy: object) -> str:
    """How the audit trail names an approval policy: its function's or class's name."""
    while isinstance(policy, functools.partial):
        policy = policy.func
    name = getattr(policy, "__qualname__", None) or type(policy).__qualname__
    return str(name)


def now_iso(at: float) -> str:
    """A wall-clock time (seconds since the epoch) as the audit trail spells it."""
    return datetime.fromtimestamp(at, UTC).isoformat(timespec="milliseconds")


@dataclass(frozen=True, slots=True)
class ApprovalRecord:
    """One decision on a call, as the audit trail's `approval.decided` event and
    `RunResult.approvals` hold it: who decided, when, and how long the call waited."""

    tool_use_id: str
    tool: str
    decision: Literal["approve", "deny", "edit", "defer"]
    source: Literal["policy", "resume", "default"]
    """Where the decision came from (the event's field since the first release)."""
    decided_by: DecidedBy
    """`person` for a decision passed to `resume`, `policy` for the approval policy's
    answer, `default` when there is no policy (the call is deferred)."""
    by: str | None
    """The person's name as given (`Approve(by=...)`), or for a policy's answer the
    name the answer gave or else the policy's function or class name."""
    note: str | None
    decided_at: str
    """When the decision was made, ISO 8601 in UTC (for a person's: when `resume`
    received it)."""
    waited_s: float | None
    """Seconds between the run pausing for the call and the decision; 0 for a decision
    made without pausing; None when the pause time is unknown (a run paused by an
    earlier version)."""

    def fields(self) -> dict[str, Any]:
        """The event's decision fields (besides `iteration`, `tool`, `tool_use_id`)."""
        return {
            "decision": self.decision,
            "source": self.source,
            "by": self.by,
            "decided_by": self.decided_by,
            "note": self.note,
            "decided_at": self.decided_at,
            "waited_s": self.waited_s,
        }


def decision_to_plain(decision: PolicyAnswer, *, decided_at: float | None = None) -> dict[str, Any]:
    """A decision as plain data, to keep in the run record until it is used (with the
    time it was received, when known, for the audit trail's `waited_s`)."""
    plain: dict[str, Any]
    if isinstance(decision, Approve):
        plain = {"kind": "approve"}
    elif isinstance(decision, Deny):
        plain = {"kind": "deny", "message": decision.message}
    elif isinstance(decision, Edit):
        plain = {"kind": "edit", "input": dict(decision.input)}
    else:
        plain = {"kind": "defer"}
    if not isinstance(decision, Defer):
        plain.update({k: v for k, v in (("by", decision.by), ("note", decision.note)) if v})
    if decided_at is not None:
        plain["decided_at"] = decided_at
    return plain


def decision_from_plain(data: Mapping[str, Any]) -> PolicyAnswer:
    kind = data.get("kind")
    by, note = _text(data.get("by")), _text(data.get("note"))
    if kind == "approve":
        return Approve(by=by, note=note)
    if kind == "deny":
        return Deny(str(data.get("message") or DEFAULT_DENIAL), by=by, note=note)
    if kind == "edit":
        return Edit(dict(data.get("input") or {}), by=by, note=note)
    return Defer()


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None
