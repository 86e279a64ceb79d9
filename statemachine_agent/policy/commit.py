"""Side effects last: how a run's staged writes are committed.

A call of a `deferrable` tool (`@tool(side_effect=True, deferrable=True)`) is not
run when the model asks for it: it is staged, and the staged calls run together in
the `commit` state, once the run would end successfully and the verifier (if any)
has accepted. A run that stalls, runs out of budget, is refused or rejected has
then changed nothing, and a person approving the writes sees them as one batch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

OnCommitFailure = Literal["fail", "retry"]
"""What a staged call that fails when committed does to the run (see `CommitPolicy`)."""


@dataclass(frozen=True, slots=True)
class CommitPolicy:
    """How the staged calls of a run are committed (`Agent(commit=CommitPolicy())`).

    An agent with a deferrable tool commits with the default policy even without
    one; `commit=` only says what a failing staged call means.
    """

    on_failure: OnCommitFailure = "fail"
    """A staged call failed (it raised, timed out, or a person denied it) when committed:

    - `"fail"`: the run ends in `failed` naming the call; the staged calls after it
      are not run (the result lists them under `details["staged"]`).
    - `"retry"`: the failure goes back to the model (the calls after it stay staged),
      and the loop goes on from `perceive`, so it can stage a corrected plan.
    """

    def __post_init__(self) -> None:
        if self.on_failure not in get_args(OnCommitFailure):
            raise ValueError(
                f"CommitPolicy: on_failure must be 'fail' or 'retry', got {self.on_failure!r}"
            )
