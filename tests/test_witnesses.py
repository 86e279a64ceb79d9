"""Witnesses: every row an agent can reach is fired by its scenario, scripted and through the
real SDK against the strict local server; random scripts never fire a row ruled out."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from statemachine_agent import Agent, tool
from statemachine_agent.machine import observers
from statemachine_agent.machine.run import TransitionRecord
from statemachine_agent.machine.table import Row
from statemachine_agent.models.base import ModelError
from statemachine_agent.models.scripted import ScriptedModel
from statemachine_agent.testing import FakeAnthropicServer, replies
from statemachine_agent.testing.reachability import reachable_rows
from statemachine_agent.testing.witnesses import unwitnessed, witnesses


@tool
def lookup(query: str) -> str:
    """Look something up."""
    return query


@tool(requires_approval=True)
def pay(amount: int) -> str:
    """Pay an amount."""
    return f"paid {amount}"


@tool(on_error="fail")
def deploy(target: str) -> str:
    """Deploy to a target."""
    return target


CONFIGURATIONS: dict[str, Any] = {
    "bare": lambda: Agent(ScriptedModel([]), stall=None),
    "approval_only": lambda: Agent(ScriptedModel([]), [pay], stall=None),
    "tools_stall_fatal": lambda: Agent(ScriptedModel([]), [lookup, pay, deploy]),
}


@pytest.mark.parametrize("name", sorted(CONFIGURATIONS))
class TestWitnesses:
    def test_every_reachable_row_has_a_witness(self, name: str) -> None:
        """A reachable row without a recipe is named (add it to `witnesses.RECIPES`)."""
        assert [row.key for row in unwitnessed(CONFIGURATIONS[name]())] == []

    def test_each_witness_fires_its_row_scripted(self, name: str) -> None:
        """Through `ScriptedModel`, each witness fires its row and ends in a named state."""
        agent = CONFIGURATIONS[name]()
        for witness in witnesses(agent):
            result = witness.run()
            assert result.end_state, witness.name

    def test_each_witness_fires_its_row_through_the_sdk(self, name: str) -> None:
        """Through the real `anthropic` SDK against the strict server: every request valid."""
        agent = CONFIGURATIONS[name]()
        for witness in witnesses(agent):
            with FakeAnthropicServer() as server:
                witness.run(server=server)
                assert server.invalid == [], witness.name
                assert server.remaining == 0, witness.name


_ANSWERS = st.sampled_from(
    [
        lambda: replies.text("Done."),
        lambda: replies.tool_use("lookup", {"query": "q"}),
        lambda: replies.text("Cut", stop_reason="max_tokens"),
        lambda: replies.reply(stop_reason="refusal"),
        lambda: replies.reply(replies.text_block("..."), stop_reason="pause_turn"),
        lambda: replies.reply(stop_reason="end_turn"),
        lambda: replies.text("Cut", stop_reason="model_context_window_exceeded"),
        lambda: ModelError("prompt is too long", status=400, context_exceeded=True),
        lambda: ModelError("overloaded", status=529, retryable=True),
    ]
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(script=st.lists(_ANSWERS, min_size=1, max_size=6), tools=st.booleans())
def test_random_scripts_fire_only_reachable_rows(script: list[Any], tools: bool) -> None:
    """Under a configuration, no script fires a row said unreachable."""
    agent = Agent(ScriptedModel([]), [lookup] if tools else [], stall=None)
    reach = reachable_rows(agent)
    allowed = {row.key for row in (*reach.reachable, *reach.defect_rows)}
    seen: set[tuple[str, str, str, tuple[str, ...]]] = set()

    def note(run_id: str, row: Row, record: TransitionRecord) -> None:
        seen.add(row.key)

    answers = [make() for make in script]
    if not tools:  # a model honours the request: no tool calls when none is offered
        answers = [
            a for a in answers if not (isinstance(a, dict) and a["stop_reason"] == "tool_use")
        ]
    scripted = agent.replace(model=ScriptedModel(answers, validate=False))
    with observers.watch_transitions(note):
        scripted.run("Go.")
    assert seen <= allowed, seen - allowed
