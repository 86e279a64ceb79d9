"""What a run hands back: how it ended, what it produced and how it got there.

`RunResult` is generic in the agent's output type, so a type checker knows what
`result.output` holds: `Agent(model, output_type=Decision).run(...)` returns a
`RunResult[Decision]`, whose `output` is `Decision | None`. The `None` is honest,
not a formality: a run returns its end state rather than raising, so `output` is
set only when the run ended `ok` with a validated answer (a budget, a refusal or
exhausted output retries end without one). `output_or_raise()` is for code that
needs the value: it is typed `Decision`, and raises `NoOutputError` (naming the
end state and its reason) when there is none.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic

from typing_extensions import TypeVar

from statemachine_agent.errors import Error
from statemachine_agent.machine.ends import SUCCESS_STATES, EndState
from statemachine_agent.machine.run import TransitionRecord
from statemachine_agent.models.base import JSON, Usage
from statemachine_agent.policy.approval import ApprovalRecord

OutputT = TypeVar("OutputT", covariant=True, default=Any)
"""The type of a run's typed answer (`Agent(output_type=...)`): `None` for an agent
without one, `dict[str, Any]` for a JSON schema. Its default, `Any`, is what a bare
`RunResult` or `Agent` annotation means, so code that never sets an output type
needs no type arguments; covariant, since a result only hands its output out."""


class NoOutputError(Error, LookupError):
    """`RunResult.output_or_raise()` found no typed answer: the run ended without a
    validated one (its end state and reason are in the message and on `result`)."""

    def __init__(self, result: RunResult[Any]) -> None:
        super().__init__(
            f"{result.run_id} ended in {result.end_state} without a typed output; "
            f"its reason: {result.reason}"
        )
        self.result = result


@dataclass(frozen=True, slots=True)
class RunResult(Generic[OutputT]):
    """The outcome of one run, built by the handler of the end state it reached.

    `OutputT` is the type of `output`, the agent's `output_type` (see the module's
    docstring)."""

    end_state: EndState
    """The named end state (`completed`, `finished`, `budget_exhausted`, ...)."""
    text: str
    """The answer for a person: final text, finish summary, or salvage summary."""
    reason: str
    """Why the run ended, in one sentence with the figures."""
    run_id: str
    iterations: int
    """The loop's model calls, counted as the audit events number them: a call that was
    attempted and failed (the run ended on it) counts. `Budget.max_iterations` counts
    completed calls only, so a failed first call reports 1 here and used none of it."""
    turn: int
    usage: Usage
    cost_usd: float
    elapsed_s: float
    messages: list[JSON] = field(repr=False)
    """The exact Messages API history, ready to be sent again (left out of `repr`: a
    long run's history would make every repr, even asyncio's of the finished task,
    as large as the history)."""
    trail: tuple[TransitionRecord, ...] = field(repr=False)
    data: Any = None
    """A structured result, when there is one (the `finish` tool's input)."""
    audit_path: Path | None = None
    details: dict[str, Any] | None = None
    """End-state specific facts: error status and request id, refusal details, ..."""
    chat_ended: bool = False
    """The model called `end_chat`: a `Conversation` stops after this turn."""
    output: OutputT | None = None
    """The typed answer (an instance of the run's `output_type`): set only when the
    run ended `ok` with a validated answer, otherwise `None`; `output_or_raise()`
    returns it or raises `NoOutputError`."""
    approvals: tuple[ApprovalRecord, ...] = field(default=(), repr=False)
    """Every approval decision of the run, in order (a resumed run's earlier ones too):
    who decided, when, and how long the call waited."""

    @property
    def ok(self) -> bool:
        """Whether the run reached its goal by the model's own account (a `finish`
        with status `failed` or `needs_user_input` is an orderly end, not a success)."""
        if self.end_state == "finished" and isinstance(self.data, dict):
            return bool(self.data.get("status", "completed") == "completed")
        return self.end_state in SUCCESS_STATES

    def output_or_raise(self) -> OutputT:
        """The typed answer, for code that cannot go on without it.

        Raises `NoOutputError` (a `LookupError`) naming the end state and its reason
        when the run ended without a validated answer, so a service can turn that
        into its own error instead of meeting `None` later.
        """
        if self.output is None:
            raise NoOutputError(self)
        return self.output

    @property
    def path(self) -> list[str]:
        """The states visited, in order, starting state first (a resumed run's
        end state is followed by the state it carried on from)."""
        if not self.trail:
            return []
        states = [self.trail[0].source]
        for step in self.trail:
            if step.source != states[-1]:
                states.append(step.source)  # a resumed run carries on from here
            states.append(step.dest)
        return states
