"""Offline demo scenarios: real runs of the engine on the scripted model.

Each scenario pairs a prompt and tools with the exact Messages API replies a
model could give, so a reader sees the machine work with no key and no network.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from statemachine_agent.models.scripted import ScriptedModel
from statemachine_agent.testing.replies import text, tool_use
from statemachine_agent.tools.base import Tool
from statemachine_agent.tools.builtin import calculate, make_current_time_tool

DEMO_CLOCK = datetime(2026, 4, 11, 2, 28, tzinfo=UTC)
"""The demo pins time, so the scripted arithmetic (28 minutes x 15) is the right answer."""


@dataclass(frozen=True)
class Scenario:
    name: str
    title: str
    prompt: str
    system: str
    tools: Callable[[], list[Tool]]
    replies: Callable[[], list[dict[str, Any]]]

    def model(self) -> ScriptedModel:
        return ScriptedModel(self.replies())


SYSTEM = (
    "You solve tasks with tools. Use calculate for all arithmetic and get_current_time "
    "for the time; never guess either. When done, answer without calling tools."
)

TIME_AND_CALCULATE = Scenario(
    name="time-calculate",
    title="Seed 000: look up the time, multiply its minutes by 15 (3 model calls, 2 tools)",
    prompt="What time is it now? Take the minutes and multiply them by 15.",
    system=SYSTEM,
    tools=lambda: [make_current_time_tool(lambda: DEMO_CLOCK), calculate],
    replies=lambda: [
        tool_use("get_current_time", {"timezone": "UTC"}, text="Let me check the time."),
        tool_use("calculate", {"expression": "28 * 15"}, text="The minutes are 28."),
        text("It is 02:28 UTC. The minutes are 28, and 28 × 15 = 420."),
    ],
)

SCENARIOS: dict[str, Scenario] = {s.name: s for s in (TIME_AND_CALCULATE,)}
