"""Typed output the type checker knows: an expense decision as a pydantic model.

`Agent(model, output_type=Decision)` is an `Agent[Decision]`: the model answers by
calling the `final_result` tool with a `Decision`'s fields, and each run returns a
`RunResult[Decision]`. Its `output` is `Decision | None`, and the `None` is real:
a run hands back its end state instead of raising, so a run that ended without a
validated answer (here: a model that kept answering in prose) has none.
`output_or_raise()` is typed `Decision` and raises `NoOutputError`, naming the end
state and its reason, when there is none.

`mypy --strict examples` checks the `assert_type` lines below, so the types this
file claims are the types users get; at run time `assert_type` does nothing.

Run it: `python examples/typed_output.py` (offline: a scripted model, no key).
"""

from __future__ import annotations

from typing import Literal, assert_type

from pydantic import BaseModel

from statemachine_agent import Agent, Model, NoOutputError, RunResult, ScriptedModel
from statemachine_agent.testing import replies

CLAIM = "Expense claim 311: a 42 EUR taxi from the airport, receipt attached."


class Decision(BaseModel):
    """What the service needs back: a verdict it can act on, and why."""

    verdict: Literal["approve", "reject"]
    reason: str


def make_model(*script: replies.JSON) -> Model:
    """The model that answers. Swap the script for a real model to run it live:

    from statemachine_agent import AnthropicModel
    return AnthropicModel("claude-sonnet-5")  # reads ANTHROPIC_API_KEY
    """
    return ScriptedModel(list(script))


def decide(model: Model, *, output_retries: int = 3) -> RunResult[Decision]:
    """One claim through an `Agent[Decision]`: the result's type follows the agent's."""
    agent = Agent(
        model,
        system="You review expense claims against the travel policy.",
        output_type=Decision,
        output_retries=output_retries,
    )
    assert_type(agent, Agent[Decision])
    result = agent.run(CLAIM)
    assert_type(result, RunResult[Decision])
    assert_type(result.output, Decision | None)
    return result


def main() -> tuple[RunResult[Decision], RunResult[Decision], str]:
    """A claim answered with a valid `Decision`, then one where the model answers in
    prose with no retry left; returns both results and the second one's error."""
    answered = decide(
        make_model(
            replies.tool_use(
                "final_result", {"verdict": "approve", "reason": "Airport taxis are covered."}
            )
        )
    )
    decision = answered.output_or_raise()
    assert_type(decision, Decision)
    prose = decide(make_model(replies.text("Looks fine to me.")), output_retries=0)
    try:
        prose.output_or_raise()
    except NoOutputError as error:  # run_... ended in failed without a typed output; ...
        return answered, prose, str(error)
    raise AssertionError("a prose answer gave a typed output")


if __name__ == "__main__":
    answered, prose, error = main()
    print(answered.end_state, answered.output)
    print(prose.end_state, prose.output)
    print(error)
