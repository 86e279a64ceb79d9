"""The end states: every way a run can end, each declared exactly once.

Everything else that speaks of end states is derived from `ENDS`: the table's
states, the CLI's exit codes, which states `resume` accepts, `RunResult.ok`,
the README's end-state table and `docs/states.md`. Adding an end state is one
`End` here (and its name in `EndState`), the rows that enter it, its handler in
`endings.py` and its test; the engine refuses to build when one is missing.

This module is plain data on purpose: the table, the CLI and the doc generator
read it without importing the engine.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal, get_args

EndState = Literal[
    "completed",
    "finished",
    "budget_exhausted",
    "stalled",
    "truncated",
    "refused",
    "context_overflow",
    "failed",
    "cancelled",
    "awaiting_approval",
]
"""The name of an end state, as `RunResult.end_state` carries it (checked against `ENDS`)."""


@dataclass(frozen=True, slots=True)
class End:
    """One end state: its name, how the CLI reports it, and what `resume` may do with it."""

    name: EndState
    exit_code: int
    """The exit status of `statemachine-agent run` and friends (0 only on success; 2 is
    reserved for usage errors)."""
    description: str
    """One line on when a run ends here (the README's end-state table)."""
    success: bool = False
    """Whether a run that ends here reached its goal (`RunResult.ok`)."""
    resumable: bool = False
    """Whether `Agent.resume` can carry the run on from here. A resumable end keeps its
    unanswered tool calls open in the record, so that the resumed run can answer them."""

    def __post_init__(self) -> None:
        if (self.exit_code == 0) != self.success or self.exit_code == 2:
            raise ValueError(f"end state {self.name!r}: exit code 0 means success; 2 is usage")


ENDS: tuple[End, ...] = (
    End("completed", 0, "The model ended its turn with an answer (and the verifier agreed).",
        success=True),
    End("finished", 0, "The model called the finish tool; its input is the structured result.",
        success=True),
    End("budget_exhausted", 3, "A limit was reached: iterations, cost, tokens, time or a tool's "
        "call limit; a salvage call summarises what was found."),
    End("stalled", 4, "The model kept repeating itself after every allowed intervention."),
    End("truncated", 5, "The reply was cut off at max_tokens (and could not be continued)."),
    End("refused", 6, "The model refused to continue; the API's stop details are kept."),
    End("context_overflow", 7, "The prompt outgrew the context window even after compaction."),
    End("failed", 8, "An unrecoverable error: the API, a fatal tool, the verifier's limit, or a "
        "raising component, named in the reason."),
    End("cancelled", 9, "The host cancelled the run (token, deadline); it can be resumed.",
        resumable=True),
    End("awaiting_approval", 10, "Tool calls wait for a human decision; resume with decisions.",
        resumable=True),
)  # fmt: skip

END_STATES: tuple[EndState, ...] = tuple(end.name for end in ENDS)
END_BY_NAME: Mapping[str, End] = {end.name: end for end in ENDS}
EXIT_CODES: Mapping[str, int] = {end.name: end.exit_code for end in ENDS}
"""Exit status per end state: 0 only when the run reached its goal. 2 is a usage error."""
SUCCESS_STATES: frozenset[str] = frozenset(end.name for end in ENDS if end.success)
RESUMABLE_STATES: frozenset[str] = frozenset(end.name for end in ENDS if end.resumable)
"""End states a run can be resumed from; their unanswered tool calls stay open in the
record (the result's copy of a cancelled run's history closes them)."""

if get_args(EndState) != END_STATES:  # pragma: no cover - a definition error, caught at import
    raise RuntimeError("EndState and ENDS name different end states, or in another order")
