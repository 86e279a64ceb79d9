"""The tool boundary keeps its promises against hostile handlers.

A handler gets its own copy of its input, whatever it raises (a `BaseException`
included) becomes an outcome the same way for sync and async handlers, and a
handler that ignores cancellation cannot hold a run past its timeout or its
deadline.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from statemachine_agent import Agent, Audit, CancelToken, Conversation, ScriptedModel, tool
from statemachine_agent.audit.sink import MemorySink
from statemachine_agent.persistence.base import load_record
from statemachine_agent.persistence.sqlite import SQLiteCheckpointer
from statemachine_agent.testing import replies
from statemachine_agent.tools import Tool, ToolCall, ToolOutcome, ToolRegistry


class Custom(BaseException):
    """A BaseException that is neither an Exception nor one of the named ones."""


BASE_RAISES: list[BaseException] = [
    SystemExit(3),
    KeyboardInterrupt(),
    GeneratorExit(),
    Custom("x"),
]


def execute(found: Tool, payload: dict[str, Any] | None = None) -> ToolOutcome:
    call = ToolCall(id="c1", name=found.name, input=payload or {})
    return asyncio.run(ToolRegistry([found]).execute(call))


def same(outcome: ToolOutcome) -> tuple[Any, ...]:
    return (outcome.content, outcome.is_error, outcome.error_kind, outcome.fatal)


class TestInputIsolation:
    def test_a_kept_list_mutated_later_changes_no_record(self, tmp_path: Path) -> None:
        """post() keeps the list it was given; mention() extends it after post is recorded."""
        kept: list[list[str]] = []

        def post_handler(mentions: list[str]) -> str:
            mentions.append("post-added")
            kept.append(mentions)
            return "posted"

        @tool
        def mention(name: str) -> str:
            """Mention one more person in the last post."""
            kept[-1].append(name)
            return "mentioned"

        # A plain Tool: no validating wrapper between the engine and the handler.
        schema = {"type": "object", "properties": {"mentions": {"type": "array"}}}
        post = Tool(name="post", description="Post a message.", input_schema=schema,
                    handler=post_handler)  # fmt: skip

        model = ScriptedModel(
            [
                replies.tool_use("post", {"mentions": ["ann"]}, id="t1"),
                replies.tool_use("mention", {"name": "bob"}, id="t2"),
                replies.text("Done."),
            ]
        )
        sink = MemorySink()
        store = SQLiteCheckpointer(tmp_path / "runs.sqlite3")
        agent = Agent(model, tools=[post, mention], checkpointer=store,
                      audit=Audit(dir=tmp_path, sinks=[sink]))  # fmt: skip
        result = agent.run("Post it.")
        assert result.end_state == "completed"
        assert kept == [["ann", "post-added", "bob"]]  # the handler's own copy changed

        def post_inputs(messages: list[dict[str, Any]]) -> list[Any]:
            return [
                block["input"]
                for m in messages
                if m["role"] == "assistant" and isinstance(m["content"], list)
                for block in m["content"]
                if block.get("type") == "tool_use" and block["name"] == "post"
            ]

        assert post_inputs(result.messages) == [{"mentions": ["ann"]}]
        for request in model.requests[1:]:
            assert post_inputs(request.messages) == [{"mentions": ["ann"]}]
        assert post_inputs(load_record(store, result.run_id).messages) == [{"mentions": ["ann"]}]
        called = [e for e in sink.events if e["event"] == "tool.called" and e["tool"] == "post"]
        assert [e["input"] for e in called] == [{"mentions": ["ann"]}]
        assert result.audit_path is not None
        written = [json.loads(line) for line in result.audit_path.read_text().splitlines()]
        assert "post-added" not in json.dumps(written)
        assert "bob" not in json.dumps([e for e in written if e.get("tool") == "post"])

    def test_an_edited_input_is_isolated_too(self) -> None:
        """A handler mutating its kwargs in place leaves the call's input as the model sent it."""
        seen: list[dict[str, Any]] = []

        @tool
        def grab(items: Any) -> str:
            """Mutate the nested input (`Any`: the validating wrapper passes it as is)."""
            items["a"].append(99)
            seen.append(items)
            return "ok"

        given = {"items": {"a": [1]}}
        outcome = execute(grab, given)
        assert outcome.content == "ok"
        assert given == {"items": {"a": [1]}}
        assert seen == [{"a": [1, 99]}]


class TestBaseExceptions:
    @pytest.mark.parametrize("exc", BASE_RAISES, ids=lambda e: type(e).__name__)
    def test_async_raise_is_answered_exactly_as_a_sync_raise(self, exc: BaseException) -> None:
        def sync_probe() -> str:
            raise exc

        async def async_probe() -> str:
            raise exc

        sync_outcome = execute(tool(name="probe", description="d")(sync_probe))
        async_outcome = execute(tool(name="probe", description="d")(async_probe))
        assert sync_outcome.is_error
        assert sync_outcome.error_kind == "raised"
        assert type(exc).__name__ in sync_outcome.content
        assert same(async_outcome) == same(sync_outcome)

    @pytest.mark.parametrize("exc", BASE_RAISES, ids=lambda e: type(e).__name__)
    @pytest.mark.parametrize("on_error", ["return", "fail"])
    def test_whole_runs_end_by_name(self, exc: BaseException, on_error: str) -> None:
        async def explode() -> str:
            raise exc

        probe = tool(name="probe", description="d", on_error=on_error)(explode)  # type: ignore[arg-type]
        model = ScriptedModel([replies.tool_use("probe", {}), replies.text("Recovered.")])
        result = Agent(model, tools=[probe]).run("Go.")
        assert result.end_state == ("failed" if on_error == "fail" else "completed")
        answer = result.messages[2]["content"][0]
        assert answer["is_error"] is True
        assert type(exc).__name__ in answer["content"]


async def stubborn(seconds: float = 30.0) -> str:
    """Ignores every cancellation until `seconds` have passed."""
    loop = asyncio.get_running_loop()
    end = loop.time() + seconds
    while loop.time() < end:
        try:
            await asyncio.sleep(0.01)
        except asyncio.CancelledError:
            continue
    return "finally done"


class TestSwallowedCancellation:
    def test_the_timeout_abandons_the_task(self) -> None:
        found = tool(name="stubborn", description="d", timeout=0.05)(stubborn)
        outcome = execute(found)
        assert outcome.is_error
        assert outcome.error_kind == "abandoned"
        assert "abandoned after" in outcome.content
        assert "it may still be running" in outcome.content

    def test_an_abandoned_call_is_not_retried(self) -> None:
        found = tool(name="stubborn", description="d", timeout=0.05, on_error="retry",
                     retry_backoff=0.0)(stubborn)  # fmt: skip
        outcome = execute(found)
        assert outcome.error_kind == "abandoned"
        assert "attempts" not in outcome.extra

    def test_a_run_with_a_stubborn_tool_ends(self) -> None:
        found = tool(name="stubborn", description="d", timeout=0.05)(stubborn)
        model = ScriptedModel([replies.tool_use("stubborn", {}), replies.text("Moved on.")])
        result = Agent(model, tools=[found]).run("Go.")
        assert result.end_state == "completed"
        assert "abandoned after" in result.messages[2]["content"][0]["content"]

    def test_the_deadline_abandons_a_tool_without_a_timeout(self) -> None:
        found = tool(name="stubborn", description="d", timeout=None)(stubborn)
        model = ScriptedModel([replies.tool_use("stubborn", {}, id="t1"), replies.text("x")])
        result = Agent(model, tools=[found]).run("Go.", deadline=0.2)
        assert result.end_state == "cancelled"
        answer = result.messages[2]["content"][0]
        assert answer["tool_use_id"] == "t1"
        assert answer["is_error"] is True
        assert "abandoned after" in answer["content"]
        assert "it may still be running" in answer["content"]
        assert "Not run" not in answer["content"]


def results_of(messages: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Every tool_result in a history, by tool_use id."""
    return {
        block["tool_use_id"]: block
        for m in messages
        if m["role"] == "user" and isinstance(m["content"], list)
        for block in m["content"]
        if block.get("type") == "tool_result"
    }


class FailingStore:
    """A checkpointer that stores until told to fail (a disk that fills up mid-run)."""

    def __init__(self) -> None:
        from statemachine_agent.persistence.base import MemoryCheckpointer

        self.inner = MemoryCheckpointer()
        self.broken = False

    def append(self, run_id: str, body: Any) -> None:
        if self.broken:
            raise OSError("disk full")
        self.inner.append(run_id, body)

    def bodies(self, run_id: str) -> Any:
        return self.inner.bodies(run_id)

    def runs(self) -> Any:
        return self.inner.runs()

    def close(self) -> None:
        return None


class TestHistoryTruth:
    """A call that ran is never reported as not run, in the result or the next turn."""

    def pay_tools(self, payments: list[str], after: Any = None) -> list[Tool]:
        @tool(side_effect=True)
        def pay(amount: int) -> str:
            """Send a payment."""
            payments.append(f"paid {amount}")
            if after is not None:
                after()
            return f"paid {amount}"

        @tool(on_error="fail")
        def audit_check() -> str:
            """A check whose failure must stop the run."""
            raise RuntimeError("ledger offline")

        return [pay, audit_check]

    def test_cancel_while_tools_run_keeps_their_results(self) -> None:
        """act -> cancelled: the payment went out, and the history says so (next turn too)."""
        token = CancelToken()
        payments: list[str] = []
        model = ScriptedModel([replies.tool_use("pay", {"amount": 5}, id="p1"),
                               replies.text("What next?")])  # fmt: skip
        agent = Agent(model, tools=self.pay_tools(payments, after=token.cancel))
        chat = Conversation(agent)
        result = chat.send("Pay 5.", cancel=token)
        assert result.end_state == "cancelled"
        assert payments == ["paid 5"]
        answer = results_of(result.messages)["p1"]
        assert answer["content"] == "paid 5"
        assert "is_error" not in answer
        chat.send("Anything else?")
        next_request = model.requests[-1]
        assert results_of(next_request.messages)["p1"]["content"] == "paid 5"
        assert payments == ["paid 5"]

    def test_fatal_tool_keeps_the_other_results(self) -> None:
        """act -> failed (on_error='fail'): the sibling payment's result is kept."""
        payments: list[str] = []
        model = ScriptedModel([replies.tool_uses(("pay", {"amount": 7}), ("audit_check", {}),
                                                 ids=("p1", "a1"))])  # fmt: skip
        result = Agent(model, tools=self.pay_tools(payments)).run("Pay 7 and check.")
        assert result.end_state == "failed"
        answers = results_of(result.messages)
        assert answers["p1"]["content"] == "paid 7"
        assert answers["a1"]["is_error"] is True
        assert "ledger offline" in answers["a1"]["content"]
        assert not any("Not run" in a["content"] for a in answers.values())

    def test_failed_checkpoint_keeps_the_results(self) -> None:
        """The store fails right after the payment: the run fails, the history says paid."""
        payments: list[str] = []
        store = FailingStore()

        def break_store() -> None:
            store.broken = True

        model = ScriptedModel([replies.tool_use("pay", {"amount": 9}, id="p1")])
        agent = Agent(model, tools=self.pay_tools(payments, after=break_store), checkpointer=store)
        result = agent.run("Pay 9.")
        assert result.end_state == "failed"
        assert "CheckpointError" in result.reason or "disk full" in result.reason
        assert results_of(result.messages)["p1"]["content"] == "paid 9"

    def test_a_call_in_flight_when_act_crashed_is_not_called_not_run(self) -> None:
        """A defect inside act (here: the approval policy raising) after a call ran."""
        from statemachine_agent.context.notices import INTERRUPTED, close_pending

        messages: list[dict[str, Any]] = [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": [
                {"type": "tool_use", "id": "a", "name": "pay", "input": {}},
                {"type": "tool_use", "id": "b", "name": "pay", "input": {}},
            ]},
        ]  # fmt: skip
        answered = {"a": {"type": "tool_result", "tool_use_id": "a", "content": "paid"}}
        assert close_pending(messages, "ended", answered, interrupted=True) == 0
        last = messages[-1]["content"]
        assert last[0]["content"] == "paid"
        assert last[1]["content"] == INTERRUPTED
        assert "it may have taken effect" in INTERRUPTED.lower()
