"""The one error an evaluation raises on purpose (a leaf module: it imports only the root)."""

from __future__ import annotations

from statemachine_agent.errors import Error


class EvalError(Error, ValueError):
    """An evaluation was given something it cannot use: a dataset with duplicate or
    invalid case ids, a bad JSONL line, no variants, a bad setting, or an `out` folder
    that holds another evaluation's results (the message names which)."""
