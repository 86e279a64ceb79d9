"""Verifying a claimed completion before believing it.

A model saying "done" is a claim. A verifier checks it objectively (tests pass,
the output validates against a schema) and, when it does not hold, its
feedback goes back to the model as the next thing it reads.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from statemachine_agent.models.base import JSON


@dataclass(frozen=True, slots=True)
class Verdict:
    """The verifier's answer: whether the claim holds and, if not, what to fix."""

    ok: bool
    feedback: str = ""


@dataclass(frozen=True, slots=True)
class Claim:
    """What the verifier is shown: the claimed answer and how it came about."""

    via: Literal["end_turn", "finish"]
    text: str
    """The final text, or the finish tool's summary."""
    data: Any
    """The finish tool's input, when the claim came through it."""
    messages: Sequence[JSON]
    iteration: int
    run_id: str
    output: Any = None
    """The typed answer (an instance of the run's `output_type`), when it has one."""


Verifier = Callable[[Claim], Verdict | Awaitable[Verdict]]
"""Checks a claimed completion (sync or async): `Verdict(ok, feedback)`."""


@dataclass(frozen=True, slots=True)
class VerifyPolicy:
    """Who checks a claimed completion, and how many rejections a run may take."""

    verifier: Verifier
    """Called with each `Claim` (an `end_turn`, or `finish` with status `completed`)."""
    max_rejections: int = 2
    """Rejections tolerated; the next one ends the run in `failed`."""

    def __post_init__(self) -> None:
        if not callable(self.verifier):
            raise TypeError(f"VerifyPolicy.verifier must be callable, not {self.verifier!r}")
        if self.max_rejections < 0:
            raise ValueError("VerifyPolicy.max_rejections must be >= 0")
