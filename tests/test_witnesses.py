"""Witnesses: every row an agent can reach is fired by its scenario, scripted and through the
real SDK against the strict local server; random scripts never fire a row ruled out."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from statemachine_agent import (
    Agent,
    Budget,
    ContextPolicy,
    ReflectionPolicy,
    StallPolicy,
    finish,
    tool,
)
from statemachine_agent.machine import observers
from statemachine_agent.machine.run import TransitionRecord
from statemachine_agent.machine.table import Row
from statemachine_agent.models.base import ModelError
from statemachine_agent.models.scripted import ScriptedModel
from statemachine_agent.policy.commit import CommitPolicy
from statemachine_agent.testing import FakeAnthropicServer, replies
from statemachine_agent.testing.reachability import reachable_rows
from statemachine_agent.testing.witnesses import (
    defect_witnesses,
    inject_defect,
    unwitnessed,
    witnesses,
)


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


@tool(untrusted=True)
def fetch_page(url: str) -> str:
    """Fetch a web page."""
    return url


@tool(side_effect=True)
def send_email(to: str) -> str:
    """Send an e-mail."""
    return to


@tool(side_effect=True, deferrable=True)
def refund(amount: int) -> str:
    """Refund an amount (staged: it runs in commit); a negative amount fails."""
    if amount < 0:
        raise ValueError("a refund cannot be negative")
    return f"refunded {amount}"


@tool(side_effect=True, deferrable=True, requires_approval=True)
def wire(amount: int) -> str:
    """Wire an amount (staged, and approved by a person when committed); negative fails."""
    if amount < 0:
        raise ValueError("a wire cannot be negative")
    return f"wired {amount}"


class Expense(BaseModel):
    total: int
    note: str


def every_feature() -> Agent:
    """Verifier, reflection with a critic, summarize, continuations, approval, an output
    type, a stall policy and a budget with a clock: every feature on at once."""
    return Agent(
        ScriptedModel([]),
        [lookup, pay, finish],
        verify=lambda claim: None,  # type: ignore[arg-type,return-value]
        reflection=ReflectionPolicy(3, critic=ScriptedModel([])),
        context=ContextPolicy(summarize_at_tokens=50_000),
        summary_model=ScriptedModel([]),
        max_continuations=2,
        output_type=Expense,
        stall=StallPolicy(),
        budget=Budget(max_iterations=12, max_seconds=600),
    )


def sub_agent_parent() -> Agent:
    """A parent whose only tool is a child agent that has a tool needing approval."""
    child = Agent(ScriptedModel([]), [lookup, pay], name="child", stall=None)
    return Agent(ScriptedModel([]), [child.as_tool(name="delegate")], stall=None)


def commit_with_approval() -> Agent:
    """A deferrable tool needing approval (the commit pauses for it), a verifier, and a
    failed staged write going back to the model (`on_failure="retry"`)."""
    return Agent(
        ScriptedModel([]),
        [lookup, wire],
        verify=lambda claim: None,  # type: ignore[arg-type,return-value]
        commit=CommitPolicy(on_failure="retry"),
        stall=None,
    )


CONFIGURATIONS: dict[str, Any] = {
    "commit": lambda: Agent(ScriptedModel([]), [lookup, refund, finish], stall=None),
    "commit_with_approval": commit_with_approval,
    "bare": lambda: Agent(ScriptedModel([]), stall=None),
    "approval_only": lambda: Agent(ScriptedModel([]), [pay], stall=None),
    "tools_stall_fatal": lambda: Agent(ScriptedModel([]), [lookup, pay, deploy]),
    "every_feature": every_feature,
    "sub_agent_parent": sub_agent_parent,
    "taint": lambda: Agent(ScriptedModel([]), [fetch_page, send_email], stall=None),
    "taint_through_child": lambda: Agent(
        ScriptedModel([]),
        [Agent(ScriptedModel([]), [fetch_page, send_email], name="reader").as_tool()],
        stall=None,
    ),
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


@pytest.mark.parametrize("name", ["every_feature", "sub_agent_parent"])
def test_defect_rows_fire_through_the_injected_defect(name: str) -> None:
    """Each defect row (kept apart from the reachable ones) is fired by its witness, the
    defect injected with `inject_defect` into the run itself (not a sub-agent's)."""
    agent = CONFIGURATIONS[name]()
    found = defect_witnesses(agent)
    assert [w.row.key for w in found] == [r.key for r in reachable_rows(agent).defect_rows]
    for witness in found:
        with FakeAnthropicServer() as server:
            assert witness.run(server=server).end_state == "failed", witness.name
            assert server.invalid == [], witness.name


def test_inject_defect_names_a_state_without_a_phase() -> None:
    with pytest.raises(ValueError, match="no phase runs 'completed'"), inject_defect("completed"):
        pass


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


_FEATURE_ANSWERS = st.sampled_from(
    [
        lambda: replies.text("Done."),
        lambda: replies.tool_use("lookup", {"query": "q"}),
        lambda: replies.tool_use("pay", {"amount": 3}),
        lambda: replies.tool_use("final_result", {"total": 3, "note": "taxi"}),
        lambda: replies.tool_use("final_result", {"total": "many"}),
        lambda: replies.tool_use("finish", {"status": "failed", "summary": "No."}),
        lambda: replies.tool_use("delegate", {"task": "Pay 3."}),
        lambda: replies.tool_use("fetch_page", {"url": "https://example.com"}),
        lambda: replies.tool_use("send_email", {"to": "ann@example.com"}),
        lambda: replies.tool_use("refund", {"amount": 3}),
        lambda: replies.tool_use("refund", {"amount": -1}),
        lambda: replies.tool_use("wire", {"amount": 3}),
        lambda: replies.tool_use("wire", {"amount": -1}),
        lambda: replies.tool_use("unstage", {"reference": "S1"}),
        lambda: replies.text("Cut", stop_reason="max_tokens", usage={"output_tokens": 5}),
        lambda: replies.reply(stop_reason="refusal"),
        lambda: replies.reply(replies.text_block("..."), stop_reason="pause_turn"),
        lambda: ModelError("prompt is too long", status=400, context_exceeded=True),
    ]
)
_PROPERTY_CONFIGURATIONS = [
    "every_feature",
    "sub_agent_parent",
    "approval_only",
    "taint",
    "commit",
    "commit_with_approval",
]


@pytest.mark.parametrize("name", _PROPERTY_CONFIGURATIONS)
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(script=st.lists(_FEATURE_ANSWERS, min_size=1, max_size=7), data=st.data())
def test_random_scripts_fire_only_reachable_rows_with_features(
    name: str, script: list[Any], data: st.DataObject
) -> None:
    """The same for richer configurations (every feature on, a sub-agent parent, approval
    only, taint, deferrable writes: staged, unstaged, failing when committed): each model
    (the loop's, the critic, the summary model, the child's)
    answers from a random script calling only the tools it is offered; a run is resumed
    approving what it waits for. No row said unreachable fires."""
    from statemachine_agent import Approve, MemoryCheckpointer
    from statemachine_agent.policy.verify import Verdict

    agent = CONFIGURATIONS[name]()
    reach = reachable_rows(agent)
    allowed = {row.key for row in (*reach.reachable, *reach.defect_rows)}
    offered = {t.name for t in agent.tools} | ({"unstage"} if agent.commit else set())
    answers = [a for a in (make() for make in script) if _offered(a, offered)]
    side = [replies.text("Keep going.") for _ in range(8)]
    changes: dict[str, Any] = {
        "model": ScriptedModel(answers, validate=False),
        "checkpointer": MemoryCheckpointer(),
    }
    if name in ("every_feature", "commit_with_approval"):
        ok = data.draw(st.booleans())
        changes["verify"] = lambda claim: Verdict(ok, "" if ok else "Check again.")
    if name == "every_feature":
        changes["reflection"] = ReflectionPolicy(3, critic=ScriptedModel(side))
        changes["summary_model"] = ScriptedModel(side)
        changes["context"] = ContextPolicy(
            summarize_at_tokens=data.draw(st.sampled_from([1, 10**6]))
        )
    if name == "sub_agent_parent":
        child = Agent(ScriptedModel([]), [lookup, pay], name="child", stall=None)
        kid = [a for a in (make() for make in script) if _offered(a, {"lookup", "pay"})]
        child = child.replace(model=ScriptedModel([*kid, *side], validate=False))
        changes["tools"] = [child.as_tool(name="delegate")]
    seen: set[tuple[str, str, str, tuple[str, ...]]] = set()

    def note(run_id: str, row: Row, record: TransitionRecord) -> None:
        seen.add(row.key)

    scripted = agent.replace(**changes)
    with observers.watch_transitions(note):
        result = scripted.run("Go.")
        if result.end_state == "awaiting_approval":
            pending = (result.details or {}).get("pending") or []
            approve = {p["tool_use_id"]: Approve() for p in pending}
            scripted.resume(result.run_id, decisions=approve)
    assert seen <= allowed, seen - allowed


def _offered(answer: Any, names: set[str]) -> bool:
    """A model honours the request: it calls only tools it is offered."""
    if not isinstance(answer, dict):
        return True
    called = {b["name"] for b in answer["content"] if b.get("type") == "tool_use"}
    return called <= names | ({"final_result"} if "final_result" in names else set())
