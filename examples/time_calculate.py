"""Look up the time, then multiply its minutes by 15: two tools chained in one turn.

The task needs a fact the model cannot know (the time) and arithmetic it should
not do in its head, so it calls `get_current_time`, reads the minutes, calls
`calculate`, and answers: three model calls for one question. The clock is
pinned, so the scripted model's arithmetic is right and every run is the same.

Run it: `python examples/time_calculate.py` (offline: a scripted model, no key).
"""

from __future__ import annotations

from datetime import UTC, datetime

from statemachine_agent import Agent, Budget, Model, RunResult, ScriptedModel, calculate
from statemachine_agent.testing import replies
from statemachine_agent.tools import make_current_time_tool

PINNED_NOW = datetime(2026, 4, 11, 2, 28, tzinfo=UTC)
"""The time the clock tool reports: 02:28, so the minutes are 28 and 28 x 15 = 420."""

QUESTION = "What time is it now (UTC)? Take the minutes and multiply them by 15."


def make_model() -> Model:
    """The model that answers. Swap the script for a real model to run it live:

        from statemachine_agent import AnthropicModel
        return AnthropicModel("claude-sonnet-5")  # reads ANTHROPIC_API_KEY

    or any OpenAI-compatible server (`pip install 'statemachine-agent[openai]'`):

        from statemachine_agent.models.openai import OpenAIModel
        return OpenAIModel("gpt-4o-mini")  # reads OPENAI_API_KEY and OPENAI_BASE_URL
    """
    return ScriptedModel(
        [
            replies.tool_use("get_current_time", {"timezone": "UTC"}, text="Let me check."),
            replies.tool_use("calculate", {"expression": "28 * 15"}, text="The minutes are 28."),
            replies.text("It is 02:28 UTC. The minutes are 28, and 28 × 15 = 420."),
        ]
    )


def main() -> RunResult:
    agent = Agent(
        make_model(),
        tools=[make_current_time_tool(lambda: PINNED_NOW), calculate],
        system=(
            "Use get_current_time for the time and calculate for all arithmetic; never "
            "guess either. When done, answer in one or two sentences."
        ),
        budget=Budget(max_iterations=6),
    )
    return agent.run(QUESTION)


if __name__ == "__main__":
    result = main()
    print(result.text)
    print(f"[{result.end_state}] {result.reason}; {result.iterations} model calls")
