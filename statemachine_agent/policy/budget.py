"""Limits that keep a run from running away with time or money.

Every limit is checked before a model call, never after, so a run stops before
it spends past a limit rather than noticing once it has.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Budget:
    """The run's limits; `None` switches a limit off. A step limit is always on."""

    max_iterations: int = 15
    """Model calls allowed in one run."""
    max_cost_usd: float | None = None
    max_total_tokens: int | None = None
    max_seconds: float | None = None
    """Wall time, on a monotonic clock."""

    def __post_init__(self) -> None:
        if self.max_iterations < 1:
            raise ValueError("Budget.max_iterations must be at least 1")
        for name in ("max_cost_usd", "max_total_tokens", "max_seconds"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ValueError(f"Budget.{name} must be positive or None")

    def exhausted(
        self, *, iterations: int, cost_usd: float, total_tokens: int, elapsed_s: float
    ) -> str | None:
        """Name the first limit reached, with its figures, or None while all hold."""
        if iterations >= self.max_iterations:
            return f"iterations {iterations} >= {self.max_iterations}"
        if self.max_cost_usd is not None and cost_usd >= self.max_cost_usd:
            return f"cost ${cost_usd:.2f} >= ${self.max_cost_usd:.2f} after {iterations} iterations"
        if self.max_total_tokens is not None and total_tokens >= self.max_total_tokens:
            return f"tokens {total_tokens} >= {self.max_total_tokens} after {iterations} iterations"
        if self.max_seconds is not None and elapsed_s >= self.max_seconds:
            return (
                f"wall time {elapsed_s:.1f}s >= {self.max_seconds:.1f}s "
                f"after {iterations} iterations"
            )
        return None
