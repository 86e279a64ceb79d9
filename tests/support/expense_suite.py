"""Five hand-written tests of an expense agent: together they take every path it can.

Not collected here (no `test_` prefix): tests/test_expense_coverage.py runs it as a user
would, under `--transition-coverage`, and checks it reads 100% of the reachable rows.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from statemachine_agent import (
    Agent,
    Approve,
    Budget,
    CancelToken,
    MemoryCheckpointer,
    ModelError,
    ScriptedModel,
    tool,
)
from statemachine_agent.machine.observers import watch_transitions
from statemachine_agent.testing import replies


@tool
def find_expense(expense_id: str) -> str:
    """Find an expense claim by id."""
    return f"{expense_id}: 42.00 EUR, taxi"


@tool(requires_approval=True)
def approve_expense(expense_id: str) -> str:
    """Approve an expense claim for payment."""
    return f"{expense_id} approved"


def expense_agent(*script: Any, **options: Any) -> Agent:
    return Agent(
        ScriptedModel(list(script)),
        [find_expense, approve_expense],
        stall=None,
        max_tokens=1024,
        checkpointer=MemoryCheckpointer(),
        **options,
    )


FIND = replies.tool_use("find_expense", {"expense_id": "E-7"})
DONE = replies.text("E-7 is a 42 EUR taxi ride.")
TOO_LONG = ModelError("prompt is too long", status=400, context_exceeded=True)
EXCEEDED = replies.text("Cut", stop_reason="model_context_window_exceeded")


@contextmanager
def cancel_on_entering(state: str, token: CancelToken) -> Iterator[None]:
    """The host cancels the run as it enters `state`."""

    def note(run_id: str, row: Any, record: Any) -> None:
        if row.dest == state:
            token.cancel()

    with watch_transitions(note):
        yield


class CancelAfterReply(ScriptedModel):
    """The host cancels as the model's first reply comes back (the reply is kept)."""

    token = CancelToken()

    async def acomplete(self, request: Any) -> Any:
        reply = await super().acomplete(request)
        self.token.cancel()
        return reply


def test_expense_paths() -> None:
    looked_up = expense_agent(FIND, DONE).run("What is E-7?")
    assert looked_up.end_state == "completed"

    agent = expense_agent(
        replies.tool_use("approve_expense", {"expense_id": "E-7"}, id="tu_1"), DONE
    )
    paused = agent.run("Approve E-7.")
    assert paused.end_state == "awaiting_approval"
    assert agent.resume(paused.run_id, decisions={"tu_1": Approve()}).end_state == "completed"

    paused_turn = replies.reply(replies.text_block("Working."), stop_reason="pause_turn")
    compaction = replies.reply(
        {"type": "compaction", "content": "Summary."}, stop_reason="compaction"
    )
    assert expense_agent(paused_turn, compaction, DONE).run("E-7?").end_state == "completed"

    steered = expense_agent(FIND, DONE)

    def steer(run_id: str, row: Any, record: Any) -> None:
        if row.dest == "act":
            steered.steer(run_id, "Also give the date.")

    with watch_transitions(steer):
        assert steered.run("E-7?", run_id="run_steered").end_state == "completed"


def test_the_model_stops() -> None:
    assert expense_agent(replies.reply(stop_reason="refusal")).run("x").end_state == "refused"
    assert expense_agent(replies.reply(stop_reason="end_turn")).run("x").end_state == "failed"
    no_call = replies.reply(replies.text_block("No call."), stop_reason="tool_use")
    assert expense_agent(no_call).run("x").end_state == "failed"
    cut = replies.text("Cut", stop_reason="max_tokens", usage={"output_tokens": 10})
    assert expense_agent(cut).run("x").end_state == "truncated"
    full = replies.text("Cut", stop_reason="max_tokens", usage={"output_tokens": 1024})
    assert expense_agent(full).run("x").end_state == "truncated"
    bad_key = ModelError("invalid x-api-key", status=401)
    assert expense_agent(bad_key).run("x").end_state == "failed"


def test_context_limits() -> None:
    assert expense_agent(EXCEEDED, DONE).run("x").end_state == "completed"
    assert expense_agent(EXCEEDED, EXCEEDED).run("x").end_state == "context_overflow"
    assert expense_agent(TOO_LONG, DONE).run("x").end_state == "completed"
    assert expense_agent(TOO_LONG, TOO_LONG).run("x").end_state == "context_overflow"


def test_cancels_and_resumes() -> None:
    for state, script in [
        ("act", (FIND, DONE)),
        ("observe", (FIND, DONE)),
        ("compact", (TOO_LONG, DONE)),
        ("reason", (ModelError("overloaded", status=529), DONE)),
    ]:
        agent, token = expense_agent(*script), CancelToken()
        with cancel_on_entering(state, token):
            stopped = agent.run("E-7?", cancel=token)
        assert stopped.end_state == "cancelled", state
        assert agent.resume(stopped.run_id).end_state == "completed", state

    agent, token = expense_agent(DONE), CancelToken()
    token.cancel()
    stopped = agent.run("E-7?", cancel=token)
    assert stopped.end_state == "cancelled"
    assert agent.resume(stopped.run_id).end_state == "completed"

    model = CancelAfterReply([DONE])
    agent = expense_agent().replace(model=model)
    stopped = agent.run("E-7?", cancel=model.token)
    assert stopped.end_state == "cancelled"
    assert agent.resume(stopped.run_id).end_state == "completed"


def test_the_budget_runs_out() -> None:
    agent = expense_agent(FIND, replies.text("Found E-7 only."), budget=Budget(max_iterations=1))
    assert agent.run("List every claim.").end_state == "budget_exhausted"
