"""Per-run options as one typed value: written once, passed to every call.

A service answering for one tenant stamps the same metadata on every run and
gives each the same deadline. `TurnOptions` (a `TypedDict`: the options every
run takes, `RunOptions` without `history` and `run_id`) holds them, so a type
checker checks each key and value where they are written, and
`agent.run(prompt, history=..., **options)` takes them as keywords (a
`RunOptions` value could hold a `history` too, so mypy would refuse that call).

A misspelled option is caught twice: by mypy before the code runs (`mypy
--strict examples` keeps the deliberate slip below an error: its `type: ignore`
would otherwise be unused), and by the agent when it runs, with a `TypeError`
naming it.

Run it: `python examples/run_options.py` (offline: a scripted model, no key).
"""

from __future__ import annotations

from statemachine_agent import Agent, Model, RunResult, ScriptedModel, TurnOptions
from statemachine_agent.testing import replies


def make_model() -> Model:
    """The model that answers. Swap the script for a real model to run it live:

    from statemachine_agent import AnthropicModel
    return AnthropicModel("claude-sonnet-5")  # reads ANTHROPIC_API_KEY
    """
    return ScriptedModel(
        [
            replies.text("Order 7 ships on Monday."),
            replies.text("Order 8 ships on Tuesday."),
        ]
    )


def main() -> tuple[list[RunResult], str]:
    """Two turns with the same options, then a misspelled one; returns the results
    and the error the slip raised."""
    agent = Agent(make_model(), system="You answer questions about orders.")
    options: TurnOptions = {"metadata": {"tenant": "acme"}, "deadline": 60.0}
    first = agent.run("When does order 7 ship?", **options)
    second = agent.run("And order 8?", history=first.messages, **options)
    try:
        agent.run("And order 9?", histroy=second.messages, **options)  # type: ignore[call-overload]
    except TypeError as error:  # ... got an unexpected keyword argument 'histroy' ...
        return [first, second], str(error)
    raise AssertionError("a misspelled option ran")


if __name__ == "__main__":
    results, slip = main()
    for result in results:
        print(result.end_state, result.text)
    print(slip)
