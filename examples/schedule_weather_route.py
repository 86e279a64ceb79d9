"""Plan the day: schedule, then weather, then route, then one answer (4 model calls).

Each step needs the one before: the schedule says where and when, the weather
is looked up for that place and time, and the route for that place. The model
chains three tools and stops calling them once it can answer, so the loop ends
on its own (`completed`), not on a fixed number of rounds.

Run it: `python examples/schedule_weather_route.py` (offline: a scripted model).
"""

from __future__ import annotations

from typing import Any

from statemachine_agent import Agent, Budget, Model, RunResult, ScriptedModel, tool
from statemachine_agent.testing import replies


@tool
def get_schedule(date: str) -> dict[str, Any]:
    """The user's events on a date.

    Args:
        date: The day, e.g. "today" or "2026-04-11".
    """
    return {"date": date, "events": [{"time": "19:00", "location": "Umeda", "title": "Dinner"}]}


@tool
def get_weather(location: str, time: str) -> dict[str, str]:
    """The forecast for a place at a time.

    Args:
        location: Where, e.g. "Umeda".
        time: When, as HH:MM.
    """
    return {"location": location, "time": time, "forecast": "rain from 18:00"}


@tool
def get_route(origin: str, destination: str) -> dict[str, str]:
    """How long the trip between two places takes.

    Args:
        origin: Where the user starts, e.g. "home".
        destination: Where the user goes.
    """
    return {"origin": origin, "destination": destination, "duration": "30 minutes"}


def make_model() -> Model:
    """The model that answers. Swap the script for a real model to run it live:

        from statemachine_agent import AnthropicModel
        return AnthropicModel("claude-sonnet-5")  # reads ANTHROPIC_API_KEY

    or `OpenAIModel("gpt-4o-mini")` from `statemachine_agent.models.openai`.
    """
    return ScriptedModel(
        [
            replies.tool_use("get_schedule", {"date": "today"}),
            replies.tool_use("get_weather", {"location": "Umeda", "time": "19:00"}),
            replies.tool_use("get_route", {"origin": "home", "destination": "Umeda"}),
            replies.text(
                "You have dinner in Umeda at 19:00. Rain is expected from 18:00, so take an "
                "umbrella. The trip takes 30 minutes: leave home at 18:20."
            ),
        ]
    )


def main() -> RunResult:
    agent = Agent(
        make_model(),
        tools=[get_schedule, get_weather, get_route],
        system=(
            "Plan the user's day with the tools: the schedule first, then the weather "
            "where and when they are going, then the route. Then answer briefly."
        ),
        budget=Budget(max_iterations=8),
    )
    return agent.run("How should I plan today?")


if __name__ == "__main__":
    result = main()
    print(result.text)
    print(f"[{result.end_state}] {result.reason}; {result.iterations} model calls")
