"""Limits that keep a run from running away with time or money.

Every limit is checked before a model call, never after, so a run stops before
it spends past a limit rather than noticing once it has. The one call a run may
still make past a limit is the salvage summary, and that can be capped or off.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from statemachine_agent._args import check_bool, check_int, check_number, check_type


@dataclass(frozen=True, slots=True)
class Budget:
    """The run's limits; `None` switches a limit off. A step limit is always on."""

    max_iterations: int = 15
    """Model calls allowed in one run."""
    max_cost_usd: float | None = None
    """USD spent on input, output, cache-read and cache-write tokens."""
    max_total_tokens: int | None = None
    max_seconds: float | None = None
    """Wall time, on a monotonic clock."""
    max_calls_per_tool: int | Mapping[str, int] | None = None
    """One limit for every tool, or limits by tool name; a call past it is answered
    with an error telling the model the limit, not executed."""
    end_after_blocked_calls: int | None = 3
    """Calls refused by a per-tool limit before the run ends in `budget_exhausted`."""
    salvage: bool = True
    """When a limit ends the run, make one last call for a summary of what was found."""
    salvage_max_tokens: int = 1024
    """Caps the salvage call's output."""
    salvage_max_cost_usd: float | None = None
    """Caps what the salvage call may cost (its estimated input plus its output limit,
    at the model's price): its output limit is lowered to fit, and the call is not
    made when even a short summary would not."""
    _per_tool: Mapping[str, int] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        # Types first, so a wrong one is named rather than met as a failed comparison.
        check_int("Budget.max_iterations", self.max_iterations, at_least=1)
        for name in ("max_cost_usd", "max_seconds", "salvage_max_cost_usd"):
            check_number(f"Budget.{name}", getattr(self, name), optional=True)
        for name in ("max_total_tokens", "end_after_blocked_calls"):
            check_int(f"Budget.{name}", getattr(self, name), optional=True)
        check_bool("Budget.salvage", self.salvage)
        check_int("Budget.salvage_max_tokens", self.salvage_max_tokens, at_least=1)
        check_type("Budget.max_calls_per_tool", self.max_calls_per_tool, (int, Mapping),
                   "an int, a mapping of tool names to ints, or None",
                   optional=True)  # fmt: skip
        if isinstance(self.max_calls_per_tool, Mapping):
            for tool, limit in self.max_calls_per_tool.items():
                check_type("Budget.max_calls_per_tool", tool, str, "keyed by tool name")
                check_int(f"Budget.max_calls_per_tool[{tool!r}]", limit)
        for name in (
            "max_cost_usd", "max_total_tokens", "max_seconds", "end_after_blocked_calls",
            "salvage_max_cost_usd",
        ):  # fmt: skip
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ValueError(f"Budget.{name} must be positive or None")
        if self.salvage_max_tokens < 1:
            raise ValueError("Budget.salvage_max_tokens must be at least 1")
        limits = self.max_calls_per_tool
        if isinstance(limits, int) and limits < 1:
            raise ValueError("Budget.max_calls_per_tool must be at least 1")
        if isinstance(limits, Mapping):
            bad = {k: v for k, v in limits.items() if v < 1}
            if bad:
                raise ValueError(f"Budget.max_calls_per_tool limits must be at least 1: {bad}")
            object.__setattr__(self, "_per_tool", dict(limits))

    def tool_limit(self, name: str) -> int | None:
        """The call limit of one tool, if any."""
        if isinstance(self.max_calls_per_tool, int):
            return self.max_calls_per_tool
        return self._per_tool.get(name)

    def exhausted(
        self,
        *,
        iterations: int,
        cost_usd: float,
        total_tokens: int,
        elapsed_s: float,
        blocked_calls: int = 0,
    ) -> str | None:
        """Name the first limit reached, with its figures, or None while all hold."""
        if iterations >= self.max_iterations:
            return f"iterations {iterations} >= {self.max_iterations}"
        after = f"after {iterations} iterations"
        if self.max_cost_usd is not None and cost_usd >= self.max_cost_usd:
            return f"cost ${cost_usd:.2f} >= ${self.max_cost_usd:.2f} {after}"
        if self.max_total_tokens is not None and total_tokens >= self.max_total_tokens:
            return f"tokens {total_tokens} >= {self.max_total_tokens} {after}"
        if self.max_seconds is not None and elapsed_s >= self.max_seconds:
            return f"wall time {elapsed_s:.1f}s >= {self.max_seconds:.1f}s {after}"
        if (
            self.end_after_blocked_calls is not None
            and blocked_calls >= self.end_after_blocked_calls
        ):
            return f"{blocked_calls} calls refused by per-tool limits {after}"
        return None
