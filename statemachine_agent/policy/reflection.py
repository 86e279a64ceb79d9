"""Reflection: stepping back every few model calls to check the run's direction.

Every `interval` model calls the run passes through `reflect`, which adds a
progress check to the history ("where are we, which assumption may be wrong,
what is the shortest path"), or, with a `critic`, that model's review of the
run so far. The interval and the critic are one feature, so they are one object.
"""

from __future__ import annotations

from dataclasses import dataclass

from statemachine_agent.models.base import Model


@dataclass(frozen=True, slots=True)
class ReflectionPolicy:
    """When the run reflects, and who reviews it then."""

    interval: int
    """Pass through `reflect` every N model calls (at least 1)."""
    critic: Model | str | None = None
    """A second model asked for a review at each reflection (a string is a Claude model
    name); its usage counts against the budget. Without one, a fixed prompt is used."""

    def __post_init__(self) -> None:
        if isinstance(self.interval, bool) or not isinstance(self.interval, int):
            raise TypeError(f"ReflectionPolicy.interval must be an int, not {self.interval!r}")
        if self.interval < 1:
            raise ValueError(f"ReflectionPolicy.interval must be at least 1, not {self.interval}")
