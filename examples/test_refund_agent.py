"""A complete test file for an agent, written with the statemachine-agent pytest plugin.

The plugin comes with the package: these fixtures (`anthropic_server`,
`scripted_model`, `audit_events`) need no conftest. Copy this file and its
`golden/` folder next to your tests, then run

    pytest test_refund_agent.py --transition-coverage

to see it pass and print which rows of the machine these tests fired.
After changing the agent on purpose, `pytest --update-golden` rewrites the
golden trail, and the diff of `golden/refund.json` is what you review.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from statemachine_agent import Agent, Approve, Budget, Model, ScriptedModel, tool
from statemachine_agent.testing import (
    FakeAnthropicServer,
    assert_end_state,
    assert_fired,
    assert_trail_matches,
    replies,
)

GOLDEN = Path(__file__).parent / "golden"

# -- the agent under test -------------------------------------------------------------

ORDERS = {"A-1001": 25.0, "A-1002": 480.0}


@tool
def lookup_order(order_id: str) -> dict[str, Any]:
    """Look an order up by its id.

    Args:
        order_id: the order id, like A-1001.
    """
    if order_id not in ORDERS:
        raise ValueError(f"no order {order_id}")
    return {"order_id": order_id, "total": ORDERS[order_id], "status": "delivered"}


@tool(requires_approval=True, side_effect=True)
def refund(order_id: str, amount: float) -> str:
    """Refund an amount on an order (a person approves each refund).

    Args:
        order_id: the order to refund.
        amount: how much to refund, at most the order's total.
    """
    return f"refunded {amount:.2f} on {order_id}"


def refund_agent(model: Model, **options: Any) -> Agent:
    return Agent(
        model,
        tools=[lookup_order, refund],
        system="You handle refund requests. Look the order up before refunding it.",
        budget=Budget(max_iterations=6),
        **options,
    )


# -- its tests ------------------------------------------------------------------------


def test_a_refund_waits_for_approval_then_completes(
    anthropic_server: FakeAnthropicServer,
) -> None:
    """Through the real SDK: look up, ask to refund, pause for a person, resume, answer."""
    anthropic_server.add(
        replies.tool_use("lookup_order", {"order_id": "A-1001"}),
        replies.tool_use("refund", {"order_id": "A-1001", "amount": 25.0}, id="toolu_refund"),
        replies.text("Refunded 25.00 on order A-1001."),
    )
    agent = refund_agent(anthropic_server.model())

    paused = agent.run("Please refund order A-1001.")
    assert_end_state(paused, "awaiting_approval")

    result = agent.resume(paused.run_id, decisions={"toolu_refund": Approve()})
    assert_end_state(result, "completed")
    assert result.text == "Refunded 25.00 on order A-1001."
    # The whole control flow, and the tool inputs, are the reviewed golden trail.
    assert_trail_matches(result, GOLDEN / "refund.json")
    # What the model was sent last: the refund's result answers its tool call.
    last = anthropic_server.requests[-1]["messages"][-1]["content"][0]
    assert (last["tool_use_id"], last["content"]) == ("toolu_refund", "refunded 25.00 on A-1001")


def test_an_overloaded_api_is_retried(anthropic_server: FakeAnthropicServer) -> None:
    """A 529 and a 429 are retried by the SDK; the run never sees them."""
    anthropic_server.overloaded()
    anthropic_server.rate_limited(retry_after=0.01)
    anthropic_server.add(replies.text("Which order should I refund?"))

    result = refund_agent(anthropic_server.model()).run("I want a refund.")

    assert_end_state(result, "completed")
    assert len(anthropic_server.requests) == 3  # two faults, then the answer


def test_an_unknown_order_goes_back_to_the_model(
    scripted_model: Callable[..., ScriptedModel],
) -> None:
    """A tool error is an answer for the model, not the end of the run."""
    model = scripted_model(
        replies.tool_use("lookup_order", {"order_id": "B-9"}),
        replies.text("I could not find order B-9; could you check the number?"),
    )
    result = refund_agent(model).run("Refund order B-9.")

    assert_end_state(result, "completed")
    assert_fired(result, "act", "tools_done", "observe")
    tool_result = result.messages[2]["content"][0]
    assert tool_result["is_error"] is True


def test_a_looping_model_runs_out_of_budget(
    scripted_model: Callable[..., ScriptedModel],
) -> None:
    """Six lookups in a row exhaust the budget; the run ends by name, with a summary."""
    lookups = [replies.tool_use("lookup_order", {"order_id": "A-1002"}) for _ in range(6)]
    model = scripted_model(*lookups, replies.text("Summary: I kept looking order A-1002 up."))
    agent = refund_agent(model, stall=None)  # no stall detector: let it loop

    result = agent.run("Refund A-1002.")

    assert_end_state(result, "budget_exhausted")
    assert "iterations 6 >= 6" in result.reason


def test_every_event_is_audited(
    scripted_model: Callable[..., ScriptedModel], audit_events: list[dict[str, Any]]
) -> None:
    """`audit_events` holds what the audit file would: here, each tool call's input."""
    model = scripted_model(
        replies.tool_use("lookup_order", {"order_id": "A-1002"}),
        replies.text("Order A-1002 totals 480.00."),
    )
    refund_agent(model).run("How much was A-1002?")

    calls = [e for e in audit_events if e["event"] == "tool.called"]
    assert [c["input"] for c in calls] == [{"order_id": "A-1002"}]
    assert audit_events[-1]["event"] == "run.ended"
