"""Sub-agents (`Agent.as_tool`): a child run per call, linked to its parent, drawing on
the parent's budget, cancelled with it, and pausing it for approval.

Runs are real nested runs: ScriptedModel runs through the whole engine, and the real
`anthropic` SDK against the local strict server; approvals go through a SQLite store,
and one case resumes the parent in a new process.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from statemachine_agent import (
    Agent,
    AnthropicModel,
    Approve,
    Audit,
    Budget,
    CancelToken,
    Deny,
    MemoryCheckpointer,
    MemorySink,
    ReflectionPolicy,
    ScriptedModel,
    SQLiteCheckpointer,
    calculate,
    load_record,
    tool,
)
from statemachine_agent.audit.sink import read_events
from statemachine_agent.effects.base import InProcessEffects
from statemachine_agent.models.base import ModelRequest, Usage
from statemachine_agent.testing import FakeAnthropicServer, replies
from statemachine_agent.testing.assertions import assert_end_state
from statemachine_agent.tools.base import ToolCall

MODEL = "claude-sonnet-5"
ROOT = Path(__file__).resolve().parent.parent


def costly(reply: dict[str, Any], tokens: int) -> dict[str, Any]:
    return {**reply, "model": MODEL, "usage": {"input_tokens": tokens, "output_tokens": tokens}}


def scripted(*entries: dict[str, Any]) -> ScriptedModel:
    return ScriptedModel(list(entries), name=MODEL)


@tool(requires_approval=True)
def send_email(to: str) -> str:
    """Send an e-mail (needs a reviewer's approval)."""
    return f"sent to {to}"


def child_agent(*entries: dict[str, Any], **options: Any) -> Agent:
    return Agent(scripted(*entries), tools=[calculate, send_email], name="helper", **options)


def tool_results(result: Any) -> list[dict[str, Any]]:
    return [
        block
        for message in result.messages
        if message["role"] == "user" and isinstance(message["content"], list)
        for block in message["content"]
        if block.get("type") == "tool_result"
    ]


class TestAsTool:
    def test_the_tool_takes_a_task_and_runs_alone_without_a_timeout(self) -> None:
        """`as_tool` names the tool, asks for a task string, runs its calls one at a time
        (each child is capped by what the ones before it left) and has no tool timeout."""
        made = child_agent().as_tool(name="research", description="Researches things.")
        assert made.name == "research"
        assert made.description == "Researches things."
        assert made.input_schema["required"] == ["task"]
        assert made.sequential is True
        assert made.timeout is None

    def test_defaults_to_the_agent_name(self) -> None:
        """Without a name the tool is named after the agent, with a description saying so."""
        made = child_agent().as_tool()
        assert made.name == "helper"
        assert "helper" in made.description

    def test_outside_a_run_it_is_a_plain_run(self) -> None:
        """Executed directly (no parent run), the tool just runs the agent and answers."""
        from statemachine_agent.tools.registry import ToolRegistry

        registry = ToolRegistry([child_agent(replies.text("plain answer")).as_tool()])
        outcome = asyncio.run(registry.execute(ToolCall("t1", "helper", {"task": "go"})))
        assert outcome.content == "plain answer"


class TestNestedRun:
    def run(self, tmp_path: Path) -> tuple[Any, MemorySink, SQLiteCheckpointer]:
        child = child_agent(
            replies.tool_use("calculate", {"expression": "6*7"}), replies.text("It is 42.")
        )
        sink = MemorySink()
        store = SQLiteCheckpointer(tmp_path / "runs.sqlite3")
        parent = Agent(
            scripted(
                replies.tool_use("helper", {"task": "What is 6*7?"}, id="toolu_parent1"),
                replies.text("The helper says 42."),
            ),
            tools=[child.as_tool()],
            checkpointer=store,
            audit=Audit(dir=tmp_path / "audit", sinks=[sink]),
        )
        return parent.run("Ask the helper what 6*7 is."), sink, store

    def test_the_child_answer_is_the_tool_result(self, tmp_path: Path) -> None:
        """The child's final text comes back to the parent's model as the tool result."""
        result, _, _ = self.run(tmp_path)
        assert_end_state(result, "completed")
        assert [r["content"] for r in tool_results(result)] == ["It is 42."]

    def test_the_child_is_linked_in_its_events_and_checkpoints(self, tmp_path: Path) -> None:
        """Every child event names its parent run and tool call; the child's checkpoint
        names them too, and the parent's record names the child."""
        result, sink, store = self.run(tmp_path)
        child_id = f"{result.run_id}.toolu_parent1"
        child_events = [e for e in sink.events if e["run_id"] == child_id]
        assert child_events
        assert child_events[0]["event"] == "run.started"
        assert all(e["parent_run_id"] == result.run_id for e in child_events)
        assert all(e["parent_tool_use_id"] == "toolu_parent1" for e in child_events)
        assert child_events[-1]["event"] == "run.ended"
        record = load_record(store, child_id)
        assert record.parent == {"run_id": result.run_id, "tool_use_id": "toolu_parent1"}
        assert record.state == "completed"
        parent = load_record(store, result.run_id)
        assert parent.subagents.runs["toolu_parent1"]["run_id"] == child_id
        assert parent.subagents.runs["toolu_parent1"]["end_state"] == "completed"

    def test_both_runs_write_one_audit_file_whose_chain_holds(self, tmp_path: Path) -> None:
        """The child's events go into the parent's audit file, in one hash chain."""
        from statemachine_agent.audit.chain import verify_file

        result, _, _ = self.run(tmp_path)
        assert result.audit_path is not None
        events = read_events(result.audit_path)
        assert {e["run_id"] for e in events} == {result.run_id, f"{result.run_id}.toolu_parent1"}
        assert not list((tmp_path / "audit").glob("*.toolu_parent1.jsonl"))
        assert verify_file(result.audit_path, None).exit_code == 0

    def test_the_parent_replays_from_the_shared_file(self, tmp_path: Path) -> None:
        """A replay of the parent's audit file reads the parent's events only (the child's
        answer is the recorded tool result) and takes the same path."""
        from statemachine_agent.replay import replay

        result, _, _ = self.run(tmp_path)
        assert result.audit_path is not None
        replayed = replay(result.audit_path)
        assert replayed.matched, replayed.difference
        assert replayed.result.text == "The helper says 42."

    def test_the_parent_is_charged_what_the_child_spent(self, tmp_path: Path) -> None:
        """The parent's usage and cost include the child's two calls."""
        result, sink, _ = self.run(tmp_path)
        replied = [e for e in sink.events if e["event"] == "model.replied"]
        assert len(replied) == 4
        total = Usage()
        for event in replied:
            total = total + Usage.from_dict(event["usage"])
        assert result.usage == total
        assert result.cost_usd == pytest.approx(sum(e["cost_usd"] for e in replied))
        assert result.iterations == 2  # the parent's own model calls
        ended = next(e for e in sink.events if e["event"] == "subagent.ended")
        assert ended["cost_usd"] == pytest.approx(
            sum(e["cost_usd"] for e in replied if e["run_id"] != result.run_id)
        )


class TestTypedChild:
    def test_a_typed_answer_reaches_the_parent_as_json(self) -> None:
        """A child with an output type answers the parent with its typed value, as JSON."""
        child = Agent(
            scripted(replies.tool_use("final_result", {"value": 42})),
            output_type={"type": "object", "properties": {"value": {"type": "integer"}},
                         "required": ["value"]},
            name="typed",
        )  # fmt: skip
        parent = Agent(
            scripted(replies.tool_use("typed", {"task": "x"}), replies.text("ok")),
            tools=[child.as_tool()],
        )
        result = parent.run("go")
        assert_end_state(result, "completed")
        assert [json.loads(r["content"]) for r in tool_results(result)] == [{"value": 42}]


class TestBudget:
    def loop(self, n: int, tokens: int, summary: str) -> list[Any]:
        """`n` costly tool calls; a salvage request (tool use forbidden) gets `summary`."""

        def answer(i: int) -> Any:
            def reply(request: ModelRequest) -> dict[str, Any]:
                if request.tool_choice == {"type": "none"}:
                    return costly(replies.text(summary), 100)
                return costly(replies.tool_use("calculate", {"expression": f"{i}+1"}), tokens)

            return reply

        return [answer(i) for i in range(n)]

    def test_the_parent_remaining_cost_caps_the_child(self) -> None:
        """The child starts with its cost limit lowered to what the parent has left."""
        sink = MemorySink()
        child = child_agent(costly(replies.text("ok"), 100), budget=Budget(max_cost_usd=5.0))
        parent = Agent(
            scripted(
                costly(replies.tool_use("helper", {"task": "go"}), 1000),
                costly(replies.text("done"), 10),
            ),
            tools=[child.as_tool()],
            budget=Budget(max_cost_usd=1.0),
            audit=Audit(sinks=[sink]),
        )
        result = parent.run("go")
        assert_end_state(result, "completed")
        spent = next(e for e in sink.events if e["event"] == "model.replied")["cost_usd"]
        started = next(e for e in sink.events if e["event"] == "subagent.started")
        assert started["budget"]["max_cost_usd"] == pytest.approx(1.0 - spent)
        child_start = next(
            e for e in sink.events if e["event"] == "run.started" and e["run_id"] != result.run_id
        )
        assert child_start["budget"]["max_cost_usd"] == pytest.approx(1.0 - spent)

    def test_a_child_at_the_cap_salvages_and_its_summary_is_the_result(self) -> None:
        """A child stopped by the parent's limit ends in budget_exhausted; its salvage
        summary is the tool result, and the parent, now past its limit too, makes no
        salvage call of its own (the child's was the one call past the limit)."""
        child_model = ScriptedModel(self.loop(10, 20_000, "Found 1+1=2; 3+1 left."), name=MODEL)
        child = Agent(child_model, tools=[calculate], name="helper", stall=None)
        parent_model = scripted(
            costly(replies.tool_use("helper", {"task": "sum things"}), 1000),
            costly(replies.text("unused"), 10),
        )
        sink = MemorySink()
        parent = Agent(
            parent_model,
            tools=[child.as_tool()],
            budget=Budget(max_cost_usd=0.5),
            audit=Audit(sinks=[sink]),
        )
        result = parent.run("go")
        child_end = next(
            e for e in sink.events if e["event"] == "run.ended" and e["run_id"] != result.run_id
        )
        assert child_end["end_state"] == "budget_exhausted"
        assert child_end["text"] == "Found 1+1=2; 3+1 left."
        (answer,) = tool_results(result)
        assert "Found 1+1=2; 3+1 left." in answer["content"]
        assert "budget_exhausted" in answer["content"]
        assert_end_state(result, "budget_exhausted")
        assert len(parent_model.requests) == 1  # no salvage call of the parent
        assert result.details is not None
        assert "skipped" in result.details["salvage"]
        assert result.text == "Found 1+1=2; 3+1 left."
        assert result.cost_usd >= 0.5

    def test_a_spent_parent_does_not_start_another_child(self) -> None:
        """Two sub-agent calls in one reply run one after the other; when the first spent
        what was left, the second is answered without starting a child."""
        child_model = ScriptedModel(self.loop(10, 20_000, "partial"), name=MODEL)
        child = Agent(child_model, tools=[calculate], name="helper", stall=None)
        parent_model = scripted(
            costly(replies.tool_uses(("helper", {"task": "a"}), ("helper", {"task": "b"})), 1000)
        )
        sink = MemorySink()
        result = Agent(
            parent_model, tools=[child.as_tool()], budget=Budget(max_cost_usd=0.5),
            audit=Audit(sinks=[sink]),
        ).run("go")  # fmt: skip
        first, second = tool_results(result)
        assert "partial" in first["content"]
        assert second["is_error"] is True
        assert "budget is spent" in second["content"]
        assert sum(1 for e in sink.events if e["event"] == "subagent.started") == 1

    def test_the_token_limit_caps_the_child_too(self) -> None:
        """The parent's token limit lowers the child's, like its cost limit."""
        sink = MemorySink()
        child = child_agent(costly(replies.text("ok"), 100))
        parent = Agent(
            scripted(costly(replies.tool_use("helper", {"task": "go"}), 300), replies.text("done")),
            tools=[child.as_tool()],
            budget=Budget(max_total_tokens=10_000),
            audit=Audit(sinks=[sink]),
        )
        assert_end_state(parent.run("go"), "completed")
        started = next(e for e in sink.events if e["event"] == "subagent.started")
        assert started["budget"]["max_total_tokens"] == 10_000 - 600


class SteppedClock(InProcessEffects):
    """A clock that only moves when a tool moves it."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


class TestTimeCap:
    def test_the_parent_remaining_time_caps_the_child(self) -> None:
        """After 30 of the parent's 100 seconds, the child may run for 70."""
        clock = SteppedClock()

        @tool
        def wait(seconds: int) -> str:
            """Let time pass."""
            clock.now += seconds
            return "waited"

        sink = MemorySink()
        child = child_agent(replies.text("ok"), budget=Budget(max_seconds=500))
        parent = Agent(
            scripted(
                replies.tool_use("wait", {"seconds": 30}),
                replies.tool_use("helper", {"task": "go"}),
                replies.text("done"),
            ),
            tools=[wait, child.as_tool()],
            budget=Budget(max_seconds=100),
            effects=clock,
            audit=Audit(sinks=[sink]),
        )
        assert_end_state(parent.run("go"), "completed")
        started = next(e for e in sink.events if e["event"] == "subagent.started")
        assert started["budget"]["max_seconds"] == pytest.approx(70.0)


def calls_past_limits(
    events: list[dict[str, Any]], parent_id: str, parent: Budget, child: Budget
) -> dict[str, list[str]]:
    """Per owner of a limit, the purpose of every model call started past it.

    The parent's cost and token limits are measured on the whole tree (its spend and
    every child's); its iteration limit on its own loop calls. A child's own limits
    are measured on that child alone.
    """
    spent: dict[str, list[float]] = {}  # run id -> [iterations, cost, tokens]
    past: dict[str, list[str]] = {}
    for event in events:
        run_id = event["run_id"]
        mine = spent.setdefault(run_id, [0, 0.0, 0])
        if event["event"] == "model.requested":
            purpose = str(event.get("purpose", "loop"))
            tree_cost = sum(s[1] for s in spent.values())
            tree_tokens = int(sum(s[2] for s in spent.values()))
            own_iterations = int(mine[0]) if run_id == parent_id else 0
            if parent.exhausted(iterations=own_iterations, cost_usd=tree_cost,
                                total_tokens=tree_tokens, elapsed_s=0.0) is not None:  # fmt: skip
                past.setdefault(parent_id, []).append(purpose)
            if run_id != parent_id and child.exhausted(
                iterations=int(mine[0]), cost_usd=mine[1], total_tokens=int(mine[2]), elapsed_s=0.0
            ):
                past.setdefault(run_id, []).append(purpose)
        elif event["event"] == "model.replied":
            mine[1] += float(event["cost_usd"])
            mine[2] += Usage.from_dict(event["usage"]).total_tokens
            if "purpose" not in event:
                mine[0] += 1
    return past


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    parent_steps=st.lists(st.integers(0, 2), min_size=1, max_size=4),
    child_steps=st.integers(0, 6),
    tokens=st.integers(100, 40_000),
    child_tokens=st.integers(100, 40_000),
    max_iterations=st.integers(1, 5),
    child_iterations=st.integers(1, 6),
    max_cost=st.sampled_from([None, 0.01, 0.05, 0.2]),
    max_tokens=st.sampled_from([None, 5_000, 50_000]),
    child_cost=st.sampled_from([None, 0.02, 0.1]),
    interval=st.sampled_from([None, 1, 2]),
)
def test_no_call_in_parent_or_child_starts_past_a_limit_but_one_salvage(
    parent_steps: list[int],
    child_steps: int,
    tokens: int,
    child_tokens: int,
    max_iterations: int,
    child_iterations: int,
    max_cost: float | None,
    max_tokens: int | None,
    child_cost: float | None,
    interval: int | None,
) -> None:
    """Across a parent and its children, each limit is overrun by at most one model call,
    a salvage call: the parent's cost and token limits count every child's spending."""
    child_script = [
        *(
            costly(replies.tool_use("calculate", {"expression": f"{i}+1"}), child_tokens)
            if i % (child_steps + 1) < child_steps
            else costly(replies.text(f"child answer {i}"), child_tokens)
            for i in range(80)
        )
    ]
    child_budget = Budget(max_iterations=child_iterations, max_cost_usd=child_cost)
    child = Agent(
        ScriptedModel(child_script, name=MODEL, validate=False),
        tools=[calculate],
        name="helper",
        budget=child_budget,
        stall=None,
    )
    parent_script = [
        costly(
            replies.tool_uses(*[("helper", {"task": f"part {i}.{k}"}) for k in range(n)])
            if n
            else replies.tool_use("calculate", {"expression": "1+1"}),
            tokens,
        )
        for i, n in enumerate(parent_steps)
    ]
    parent_script += [costly(replies.text("done"), tokens) for _ in range(3)]
    critic = ScriptedModel(
        [costly(replies.text("keep going"), tokens) for _ in range(10)], name=MODEL
    )
    sink = MemorySink()
    budget = Budget(
        max_iterations=max_iterations, max_cost_usd=max_cost, max_total_tokens=max_tokens
    )
    parent = Agent(
        ScriptedModel(parent_script, name=MODEL, validate=False),
        tools=[calculate, child.as_tool()],
        budget=budget,
        stall=None,
        reflection=ReflectionPolicy(interval, critic=critic) if interval else None,
        audit=Audit(sinks=[sink]),
    )
    result = parent.run("go")
    past = calls_past_limits(list(sink.events), result.run_id, budget, child_budget)
    assert all(purposes == ["salvage"] for purposes in past.values()), past
    children = {e["run_id"] for e in sink.events if e.get("parent_run_id") == result.run_id}
    child_spend = sum(
        e["cost_usd"]
        for e in sink.events
        if e["event"] == "model.replied" and e["run_id"] in children
    )
    own_spend = sum(
        e["cost_usd"]
        for e in sink.events
        if e["event"] == "model.replied" and e["run_id"] == result.run_id
    )
    assert result.cost_usd == pytest.approx(own_spend + child_spend)


class TestCancel:
    def test_cancelling_the_parent_cancels_the_child_and_resume_resumes_both(self) -> None:
        """The parent's token reaches the child: both end cancelled; resuming the parent
        resumes the child where it stopped, and no tool runs twice."""
        token = CancelToken()
        ran: list[str] = []

        @tool
        def slow_step(n: int) -> str:
            """A step during which the host cancels."""
            ran.append(f"step {n}")
            token.cancel()
            return f"step {n} done"

        child = Agent(
            scripted(replies.tool_use("slow_step", {"n": 1}), replies.text("child done")),
            tools=[slow_step],
            name="helper",
        )
        store = MemoryCheckpointer()
        sink = MemorySink()
        parent = Agent(
            scripted(
                replies.tool_use("helper", {"task": "work"}, id="toolu_p"),
                replies.text("parent done"),
            ),
            tools=[child.as_tool()],
            checkpointer=store,
            audit=Audit(sinks=[sink]),
        )
        result = parent.run("go", cancel=token)
        assert_end_state(result, "cancelled")
        child_id = f"{result.run_id}.toolu_p"
        assert load_record(store, child_id).state == "cancelled"
        assert tool_results(result)[0]["content"].startswith("The tool call was not answered") or (
            tool_results(result)[0].get("is_error") is True
        )
        resumed = parent.resume(result.run_id)
        assert_end_state(resumed, "completed")
        assert resumed.text == "parent done"
        assert [r["content"] for r in tool_results(resumed)] == ["child done"]
        assert ran == ["step 1"]
        assert load_record(store, child_id).state == "completed"
        child_events = [e for e in sink.events if e["run_id"] == child_id]
        assert [e["event"] for e in child_events].count("run.resumed") == 1


class TestApproval:
    def agents(self, store: Any, **child_options: Any) -> tuple[Agent, Agent]:
        child = Agent(
            scripted(
                replies.tool_use("send_email", {"to": "bob@example.com"}, id="toolu_send"),
                replies.text("Mailed Bob."),
            ),
            tools=[send_email],
            name="mailer",
            **child_options,
        )
        parent = Agent(
            scripted(
                replies.tool_use("mailer", {"task": "Mail Bob"}, id="toolu_mail"),
                replies.text("Bob has been mailed."),
            ),
            tools=[child.as_tool()],
            checkpointer=store,
        )
        return parent, child

    def test_a_child_waiting_for_approval_pauses_the_parent(self, tmp_path: Path) -> None:
        """The parent ends in awaiting_approval listing the child's call, keyed
        `<parent call>/<child call>`, with the child's run id; both are checkpointed."""
        store = SQLiteCheckpointer(tmp_path / "runs.sqlite3")
        parent, _ = self.agents(store)
        result = parent.run("Mail Bob")
        assert_end_state(result, "awaiting_approval")
        child_id = f"{result.run_id}.toolu_mail"
        assert result.details == {
            "pending": [
                {
                    "tool_use_id": "toolu_mail/toolu_send",
                    "name": "send_email",
                    "input": {"to": "bob@example.com"},
                    "run_id": child_id,
                    "agent": "mailer",
                }
            ]
        }
        assert load_record(store, child_id).state == "awaiting_approval"
        assert load_record(store, result.run_id).approval.awaiting == ["toolu_mail/toolu_send"]

    @pytest.mark.parametrize("key", ["toolu_mail/toolu_send", "toolu_send"])
    def test_resume_with_a_decision_resumes_both(self, tmp_path: Path, key: str) -> None:
        """A decision keyed as listed (or by the child's own call id alone, when that is
        unambiguous) reaches the child, which runs the call and answers the parent."""
        store = SQLiteCheckpointer(tmp_path / "runs.sqlite3")
        parent, _ = self.agents(store)
        paused = parent.run("Mail Bob")
        result = parent.resume(paused.run_id, decisions={key: Approve()})
        assert_end_state(result, "completed")
        assert [r["content"] for r in tool_results(result)] == ["Mailed Bob."]
        child = load_record(store, f"{paused.run_id}.toolu_mail")
        assert child.state == "completed"
        sent = tool_results(child)
        assert sent[0]["content"] == "sent to bob@example.com"

    def test_a_denial_reaches_the_child(self, tmp_path: Path) -> None:
        """A Deny for the child's call is the child's tool result, not the parent's."""
        store = SQLiteCheckpointer(tmp_path / "runs.sqlite3")
        parent, _ = self.agents(store)
        paused = parent.run("Mail Bob")
        result = parent.resume(paused.run_id, decisions={"toolu_send": Deny("not Bob")})
        assert_end_state(result, "completed")
        child = load_record(store, f"{paused.run_id}.toolu_mail")
        answers = tool_results(child)
        assert answers[0] == {"type": "tool_result", "tool_use_id": "toolu_send",
                              "content": "not Bob", "is_error": True}  # fmt: skip

    def test_an_unknown_key_is_refused(self, tmp_path: Path) -> None:
        """A decision for no waiting call is a ValueError naming the waiting keys."""
        store = SQLiteCheckpointer(tmp_path / "runs.sqlite3")
        parent, _ = self.agents(store)
        paused = parent.run("Mail Bob")
        with pytest.raises(ValueError, match="toolu_mail/toolu_send"):
            parent.resume(paused.run_id, decisions={"toolu_nope": Approve()})

    def test_without_decisions_the_pair_pauses_again(self, tmp_path: Path) -> None:
        """Resuming with no decision leaves the child's call deferred: both pause again."""
        store = SQLiteCheckpointer(tmp_path / "runs.sqlite3")
        parent, _ = self.agents(store)
        paused = parent.run("Mail Bob")
        again = parent.resume(paused.run_id)
        assert_end_state(again, "awaiting_approval")
        assert again.details == paused.details

    def test_own_and_child_calls_wait_together(self, tmp_path: Path) -> None:
        """A reply with a call of the parent's own approval tool and a sub-agent call that
        pauses: both are listed, in call order; decisions for both finish both runs."""
        child = Agent(
            scripted(
                replies.tool_use("send_email", {"to": "bob"}, id="toolu_send"),
                replies.text("Mailed Bob."),
            ),
            tools=[send_email],
            name="mailer",
        )
        parent = Agent(
            scripted(
                replies.tool_uses(
                    ("send_email", {"to": "ann"}), ("mailer", {"task": "Mail Bob"}),
                    ids=("toolu_own", "toolu_mail"),
                ),
                replies.text("Both mailed."),
            ),
            tools=[send_email, child.as_tool()],
            checkpointer=SQLiteCheckpointer(tmp_path / "runs.sqlite3"),
        )  # fmt: skip
        paused = parent.run("Mail Ann and Bob")
        assert_end_state(paused, "awaiting_approval")
        keys = [p["tool_use_id"] for p in (paused.details or {})["pending"]]
        assert keys == ["toolu_own", "toolu_mail/toolu_send"]
        result = parent.resume(paused.run_id, decisions={k: Approve() for k in keys})
        assert_end_state(result, "completed")
        assert [r["content"] for r in tool_results(result)] == ["sent to ann", "Mailed Bob."]

    def test_a_grandchild_pause_pauses_all_three(self, tmp_path: Path) -> None:
        """Nesting keys the grandchild's call `<parent>/<child>/<grandchild>`; one decision,
        even by the grandchild's own id alone, resumes all three."""
        grandchild = Agent(
            scripted(
                replies.tool_use("send_email", {"to": "bob"}, id="toolu_g"), replies.text("G done")
            ),
            tools=[send_email],
            name="mailer",
        )
        child = Agent(
            scripted(
                replies.tool_use("mailer", {"task": "mail"}, id="toolu_c"), replies.text("C done")
            ),
            tools=[grandchild.as_tool()],
            name="manager",
        )
        parent = Agent(
            scripted(
                replies.tool_use("manager", {"task": "manage"}, id="toolu_p"),
                replies.text("P done"),
            ),
            tools=[child.as_tool()],
            checkpointer=SQLiteCheckpointer(tmp_path / "runs.sqlite3"),
        )
        paused = parent.run("go")
        assert_end_state(paused, "awaiting_approval")
        (call,) = (paused.details or {})["pending"]
        assert call["tool_use_id"] == "toolu_p/toolu_c/toolu_g"
        assert call["run_id"] == f"{paused.run_id}.toolu_p.toolu_c"
        assert call["agent"] == "mailer"
        result = parent.resume(paused.run_id, decisions={"toolu_g": Approve()})
        assert_end_state(result, "completed")
        assert result.text == "P done"
        assert [r["content"] for r in tool_results(result)] == ["C done"]

    def test_a_sub_agent_that_may_pause_gives_the_parent_a_store(self) -> None:
        """A parent whose sub-agent has approval tools is checkpointed by default (in
        memory), so its pause can be resumed in this process."""
        child = Agent(scripted(), tools=[send_email], name="mailer")
        assert isinstance(
            Agent(scripted(), tools=[child.as_tool()]).checkpointer, MemoryCheckpointer
        )
        plain = Agent(scripted(), tools=[calculate], name="plain")
        assert Agent(scripted(), tools=[plain.as_tool()]).checkpointer is None

    def test_resume_in_a_new_process(self, tmp_path: Path) -> None:
        """A parent paused by its child in one process is resumed in another, from the
        same SQLite file: the child is found there and both finish."""
        script = tmp_path / "agents.py"
        script.write_text(
            textwrap.dedent(
                f"""
                import json, sys
                from statemachine_agent import Agent, Approve, Audit, ScriptedModel, tool
                from statemachine_agent.testing import replies

                @tool(requires_approval=True)
                def send_email(to: str) -> str:
                    "Send an e-mail."
                    return f"sent to {{to}}"

                step = sys.argv[1]
                if step == "start":
                    child_replies = [
                        replies.tool_use("send_email", {{"to": "bob"}}, id="toolu_send")
                    ]
                    parent_replies = [
                        replies.tool_use("mailer", {{"task": "Mail Bob"}}, id="toolu_mail")
                    ]
                else:
                    child_replies = [replies.text("Mailed Bob.")]
                    parent_replies = [replies.text("Bob has been mailed.")]
                child = Agent(ScriptedModel(child_replies), tools=[send_email], name="mailer")
                parent = Agent(ScriptedModel(parent_replies), tools=[child.as_tool()],
                               checkpointer={str(tmp_path / "runs.sqlite3")!r},
                               audit=Audit(dir={str(tmp_path / "audit")!r}))
                if step == "start":
                    result = parent.run("Mail Bob")
                else:
                    pending = json.loads(sys.argv[3])
                    decisions = {{p["tool_use_id"]: Approve() for p in pending}}
                    result = parent.resume(sys.argv[2], decisions=decisions)
                print(json.dumps({{"run_id": result.run_id, "end_state": result.end_state,
                                  "text": result.text, "details": result.details}}))
                """
            ),
            encoding="utf-8",
        )

        def step(*args: str) -> dict[str, Any]:
            done = subprocess.run(
                [sys.executable, str(script), *args], cwd=ROOT, capture_output=True, text=True,
                check=False,
            )  # fmt: skip
            assert done.returncode == 0, done.stderr
            return dict(json.loads(done.stdout.strip().splitlines()[-1]))

        paused = step("start")
        assert paused["end_state"] == "awaiting_approval"
        pending = paused["details"]["pending"]
        assert [p["tool_use_id"] for p in pending] == ["toolu_mail/toolu_send"]
        finished = step("resume", paused["run_id"], json.dumps(pending))
        assert finished["end_state"] == "completed"
        assert finished["text"] == "Bob has been mailed."
        events = read_events(tmp_path / "audit" / f"{paused['run_id']}.jsonl")
        child_id = f"{paused['run_id']}.toolu_mail"
        child_ends = [
            e["end_state"] for e in events if e["event"] == "run.ended" and e["run_id"] == child_id
        ]
        assert child_ends == ["awaiting_approval", "completed"]


class TestCrash:
    def test_a_parent_that_crashed_mid_child_resumes_the_child(self, tmp_path: Path) -> None:
        """The process dies inside the child's tool; resumed in a new process, the parent
        finds the child in the store by its derived id and resumes it (its first model
        call is not made again), and both finish."""
        script = tmp_path / "crash.py"
        script.write_text(
            textwrap.dedent(
                f"""
                import json, os, sys
                from pathlib import Path
                from statemachine_agent import Agent, ScriptedModel, SQLiteCheckpointer, tool
                from statemachine_agent.testing import replies

                FLAG = Path({str(tmp_path / "crashed")!r})

                @tool
                def fragile(n: int) -> str:
                    "Dies the first time."
                    if not FLAG.exists():
                        FLAG.write_text("x")
                        os._exit(17)
                    return f"fragile {{n}} ok"

                step = sys.argv[1]
                if step == "start":
                    child_replies = [replies.tool_use("fragile", {{"n": 1}})]
                    parent_replies = [replies.tool_use("helper", {{"task": "t"}}, id="toolu_h")]
                else:
                    child_replies = [replies.text("child done")]
                    parent_replies = [replies.text("parent done")]
                child = Agent(ScriptedModel(child_replies), tools=[fragile], name="helper")
                # A short lease: the dead process's lease on the run expires soon.
                store = SQLiteCheckpointer({str(tmp_path / "runs.sqlite3")!r}, lease_seconds=1.0)
                parent = Agent(ScriptedModel(parent_replies), tools=[child.as_tool()],
                               checkpointer=store, audit={str(tmp_path / "audit")!r})
                if step == "start":
                    parent.run("go", run_id="run_crashy")
                else:
                    result = parent.resume("run_crashy", wait=30)
                    print(json.dumps({{"end_state": result.end_state, "text": result.text}}))
                """
            ),
            encoding="utf-8",
        )

        def step(name: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [sys.executable, str(script), name], cwd=ROOT, capture_output=True, text=True,
                check=False,
            )  # fmt: skip

        assert step("start").returncode == 17
        store = SQLiteCheckpointer(tmp_path / "runs.sqlite3")
        assert load_record(store, "run_crashy").state == "act"
        assert load_record(store, "run_crashy.toolu_h").state == "act"
        resumed = step("resume")
        assert resumed.returncode == 0, resumed.stderr
        assert json.loads(resumed.stdout.strip().splitlines()[-1]) == {
            "end_state": "completed",
            "text": "parent done",
        }
        events = read_events(tmp_path / "audit" / "run_crashy.jsonl")
        started = [e for e in events if e["event"] == "subagent.started"]
        assert [e["resumed"] for e in started] == [False, True]
        child = load_record(store, "run_crashy.toolu_h")
        assert child.state == "completed"
        assert child.iteration == 2
        assert [r["content"] for r in tool_results(child)] == ["fragile 1 ok"]

    def test_a_child_that_ended_before_the_parent_noted_it_is_not_run_again(
        self, tmp_path: Path
    ) -> None:
        """The process dies after the child ended but before the parent recorded its
        answer: the resumed parent takes the child's answer from its record."""
        script = tmp_path / "crash.py"
        script.write_text(
            textwrap.dedent(
                f"""
                import json, os, sys
                from statemachine_agent import Agent, Audit, ScriptedModel, SQLiteCheckpointer
                from statemachine_agent.testing import replies

                class DieOnChildEnd:
                    def write(self, event):
                        if event["event"] == "subagent.ended":
                            os._exit(17)
                    def close(self):
                        pass

                step = sys.argv[1]
                child_replies = [replies.text("child done")] if step == "start" else []
                parent_replies = (
                    [replies.tool_use("helper", {{"task": "t"}}, id="toolu_h")]
                    if step == "start" else [replies.text("parent done")]
                )
                sinks = [DieOnChildEnd()] if step == "start" else []
                child = Agent(ScriptedModel(child_replies), name="helper")
                # A short lease: the dead process's lease on the run expires soon.
                store = SQLiteCheckpointer({str(tmp_path / "runs.sqlite3")!r}, lease_seconds=1.0)
                parent = Agent(ScriptedModel(parent_replies), tools=[child.as_tool()],
                               checkpointer=store, audit=Audit(sinks=sinks))
                if step == "start":
                    parent.run("go", run_id="run_crashy")
                else:
                    result = parent.resume("run_crashy", wait=30)
                    print(json.dumps({{"end_state": result.end_state, "text": result.text,
                                      "answers": [b["content"] for m in result.messages
                                                  if isinstance(m["content"], list)
                                                  for b in m["content"]
                                                  if b.get("type") == "tool_result"],
                                      "input_tokens": result.usage.input_tokens}}))
                """
            ),
            encoding="utf-8",
        )

        def step(name: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [sys.executable, str(script), name], cwd=ROOT, capture_output=True, text=True,
                check=False,
            )  # fmt: skip

        assert step("start").returncode == 17
        store = SQLiteCheckpointer(tmp_path / "runs.sqlite3")
        assert load_record(store, "run_crashy.toolu_h").state == "completed"
        resumed = step("resume")
        assert resumed.returncode == 0, resumed.stderr
        done = json.loads(resumed.stdout.strip().splitlines()[-1])
        assert done["end_state"] == "completed"
        assert done["answers"] == ["child done"]
        assert done["input_tokens"] == 3 * Usage.from_api(replies.DEFAULT_USAGE).input_tokens


API_KEY = "sk-ant-api03-TESTSECRET-subagents-abcdef"


class TestThroughTheSDK:
    def test_a_nested_run_through_the_anthropic_sdk(self) -> None:
        """Parent and child both call the strict local server through the real SDK; every
        request of either is valid, and the child's request carries its own system prompt
        and only the task."""
        with FakeAnthropicServer() as server:
            server.add(
                replies.tool_use("helper", {"task": "What is 6*7?"}),
                replies.tool_use("calculate", {"expression": "6*7"}),
                replies.text("It is 42."),
                replies.text("The helper says 42."),
            )

            def model() -> AnthropicModel:
                return AnthropicModel(api_key=API_KEY, base_url=server.base_url)

            child = Agent(model(), tools=[calculate], system="You compute.", name="helper")
            parent = Agent(model(), tools=[child.as_tool()], system="You delegate.")
            result = parent.run("Ask the helper.")
            assert_end_state(result, "completed")
            assert server.invalid_requests == []
            systems = [r["system"][0]["text"] for r in server.requests]
            assert systems == ["You delegate.", "You compute.", "You compute.", "You delegate."]
            (task,) = server.requests[1]["messages"]
            assert [b["text"] for b in task["content"]] == ["What is 6*7?"]
            assert [r["content"] for r in tool_results(result)] == ["It is 42."]

    def test_an_approval_pause_through_the_sdk_and_sqlite(self, tmp_path: Path) -> None:
        """Through the SDK, a child's approval pause pauses the parent; resuming with the
        decision finishes both, every request valid."""
        with FakeAnthropicServer() as server:
            server.add(
                replies.tool_use("mailer", {"task": "Mail Bob"}),
                replies.tool_use("send_email", {"to": "bob"}),
                replies.text("Mailed Bob."),
                replies.text("Done."),
            )
            model = AnthropicModel(api_key=API_KEY, base_url=server.base_url)
            child = Agent(model, tools=[send_email], name="mailer")
            parent = Agent(model, tools=[child.as_tool()], checkpointer=tmp_path / "runs.sqlite3")
            paused = parent.run("Mail Bob")
            assert_end_state(paused, "awaiting_approval")
            (pending,) = (paused.details or {})["pending"]
            result = parent.resume(paused.run_id, decisions={pending["tool_use_id"]: Approve()})
            assert_end_state(result, "completed")
            assert server.invalid_requests == []
            assert len(server.requests) == 4


class TestReportAndInspect:
    @pytest.fixture
    def audit_file(self, tmp_path: Path) -> tuple[Path, str, str]:
        child = child_agent(
            replies.tool_use("calculate", {"expression": "6*7"}), replies.text("It is 42.")
        )
        parent = Agent(
            scripted(
                replies.tool_use("helper", {"task": "What is 6*7?"}, id="toolu_parent1"),
                replies.text("The helper says 42."),
            ),
            tools=[child.as_tool()],
            audit=tmp_path / "audit",
        )
        result = parent.run("Ask the helper.")
        assert result.audit_path is not None
        return result.audit_path, result.run_id, f"{result.run_id}.toolu_parent1"

    def test_the_report_nests_the_child_under_its_tool_call(
        self, audit_file: tuple[Path, str, str]
    ) -> None:
        """The parent's report holds only its own transitions; the child is a report of its
        own on the tool call that started it."""
        from statemachine_agent import report

        path, parent_id, child_id = audit_file
        built = report.build(read_events(path))
        assert built.run_id == parent_id
        assert {t.dest for t in built.transitions} <= {"perceive", "reason", "act", "observe",
                                                       "completed"}  # fmt: skip
        assert len(built.transitions) == 6
        ((_, call),) = built.children
        assert call.tool_use_id == "toolu_parent1"
        assert call.child is not None
        assert call.child.run_id == child_id
        assert call.child.agent == "helper"
        assert call.child.parent_run_id == parent_id
        assert call.child.outcome is not None
        assert call.child.outcome.text == "It is 42."
        assert [t.tool for i in call.child.iterations for t in i.tools] == ["calculate"]

    def test_inspect_prints_the_child_after_the_parent(
        self, audit_file: tuple[Path, str, str], capsys: pytest.CaptureFixture[str]
    ) -> None:
        """`inspect` shows the tool call's child run and then the child's own table."""
        from statemachine_agent.cli import main

        path, parent_id, child_id = audit_file
        assert main(["inspect", str(path)]) == 0
        out = capsys.readouterr().out
        assert "helper ✓" in out
        assert "↳ completed" in out
        assert "↳ Sub-agent helper, started by call toolu_parent1 in iteration 1:" in out
        assert "2 model calls (1 sub-agent)" not in out
        assert "4 model calls (2 sub-agent)" in out  # the parent's total counts the child's
        assert out.index(f"Run {parent_id}") < out.index(f"Run {child_id}")
        assert "Answer:     It is 42." in out

    def test_the_html_report_nests_the_child(
        self, audit_file: tuple[Path, str, str], tmp_path: Path
    ) -> None:
        """The HTML report holds the child's run inside the tool call that started it."""
        from statemachine_agent.cli import main

        path, _, child_id = audit_file
        out = tmp_path / "report.html"
        assert main(["report", str(path), "-o", str(out)]) == 0
        page = out.read_text(encoding="utf-8")
        assert f'data-run-id="{child_id}"' in page
        assert page.index("<code>helper</code>") < page.index(f'data-run-id="{child_id}"')

    @pytest.mark.parametrize("which", ["parent", "child"])
    def test_diagram_draws_either_run(
        self, audit_file: tuple[Path, str, str], which: str, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """`diagram --run FILE --run-id ID` highlights the path of the run chosen (the
        file's first run by default)."""
        from statemachine_agent import diagrams
        from statemachine_agent.cli import main

        path, parent_id, child_id = audit_file
        chosen = parent_id if which == "parent" else child_id
        extra = [] if which == "parent" else ["--run-id", child_id]
        assert main(["diagram", "--run", str(path), *extra]) == 0
        trail = [
            e for e in read_events(path)
            if e["event"] == "transition.fired" and e["run_id"] == chosen
        ]  # fmt: skip
        assert capsys.readouterr().out == diagrams.render("mermaid", trail, full=False)

    def test_diagram_of_an_unknown_run_names_the_runs(
        self, audit_file: tuple[Path, str, str], capsys: pytest.CaptureFixture[str]
    ) -> None:
        """An id the file does not hold is a one-line usage error listing its runs."""
        from statemachine_agent.cli import main

        path, parent_id, child_id = audit_file
        assert main(["diagram", "--run", str(path), "--run-id", "run_nope"]) == 2
        err = capsys.readouterr().err
        assert parent_id in err
        assert child_id in err
        assert len(err.strip().splitlines()) == 1


class TestDemo:
    def test_the_subagents_demo_pauses_both_and_resumes_both(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """`demo --scenario subagents` shows the sub-agents' transitions under the lead's,
        pauses on the mailer's send, approves it and completes; its audit file holds the
        three runs in one chain."""
        from statemachine_agent.audit.chain import verify_file
        from statemachine_agent.cli import main

        assert main(["demo", "--scenario", "subagents", "--audit-dir", str(tmp_path)]) == 0
        out = capsys.readouterr().out
        assert out.count("↳ sub-agent run") == 3  # researcher, mailer, mailer resumed
        assert "End state:  awaiting_approval" in out
        assert "Reviewer:   Approve send_email({'draft': 1})" in out
        assert "End state:  completed" in out
        (audit,) = tmp_path.glob("*.jsonl")
        assert len({e["run_id"] for e in read_events(audit)}) == 3
        assert verify_file(audit, None).exit_code == 0
