"""Approvals on the record: who decided, what, why, and how long the call waited.

A run pauses for approval in this process; a second process (a subprocess over the
same SQLite store and audit folder, the real `anthropic` SDK against the strict
local server) resumes it with a person's named decision; then the audit file,
`RunResult.approvals` and `inspect` all show the person, the decision, the note and
the wait. A policy's decision names the policy; a wrong-typed decision is refused
before anything runs; golden trails of an approved and a denied run differ.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from datetime import datetime
from html import escape as html_escape
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from statemachine_agent import (
    Agent,
    Approve,
    Audit,
    Conversation,
    DecisionTypeError,
    Defer,
    Deny,
    Edit,
    Error,
    ScriptedModel,
    SQLiteCheckpointer,
    ToolCall,
    report,
    tool,
)
from statemachine_agent.audit.sink import read_events
from statemachine_agent.cli import main
from statemachine_agent.testing import FakeAnthropicServer, replies
from statemachine_agent.testing.golden import render, trail_snapshot

ROOT = Path(__file__).resolve().parents[1]

AGENT = """
from pathlib import Path
from statemachine_agent import Agent, Audit, tool
from statemachine_agent.models.anthropic import AnthropicModel


def expense_agent(url: str, folder: Path) -> Agent:
    @tool(requires_approval=True, side_effect=True)
    def refund(amount: int) -> str:
        '''Refund an amount to the customer.'''
        return f"refunded {amount}"

    model = AnthropicModel("claude-sonnet-4-5", base_url=url, api_key="sk-ant-test-key",
                           max_retries=0)
    return Agent(model, tools=[refund], checkpointer=folder / "runs.sqlite3",
                 audit=Audit(dir=folder / "audit"))
"""

RESUME = (
    AGENT
    + """
import json, sys
from statemachine_agent import Approve, Deny, Edit

url, folder, run_id, kind = sys.argv[1:5]
decision = {
    "approve": Approve(by="carol", note="within policy"),
    "deny": Deny("Over the limit.", by="dave", note="needs a second look"),
    "edit": Edit({"amount": 5}, by="erin", note="capped at 5"),
}[kind]
result = expense_agent(url, Path(folder)).resume(run_id, decisions={"toolu_refund": decision})
print(json.dumps({"end_state": result.end_state,
                  "approvals": [a.fields() for a in result.approvals]}))
"""
)

WANTED = {
    "approve": ("carol", "within policy", "refunded 12"),
    "deny": ("dave", "needs a second look", "Over the limit."),
    "edit": ("erin", "capped at 5", "refunded 5"),
}


def expense_agent(url: str, folder: Path) -> Agent:
    namespace: dict[str, Any] = {}
    exec(AGENT, namespace)  # the very agent the second process builds
    agent: Agent = namespace["expense_agent"](url, folder)
    return agent


def pause(server: FakeAnthropicServer, folder: Path) -> str:
    """Start the expense run in this process; it pauses for the refund's approval."""
    paused = expense_agent(server.base_url, folder).run("Refund 12 to the customer.")
    assert paused.end_state == "awaiting_approval", paused.reason
    assert [a.decision for a in paused.approvals] == ["defer"]
    return paused.run_id


def resume_elsewhere(server: FakeAnthropicServer, folder: Path, run_id: str, kind: str) -> Any:
    done = subprocess.run(
        [sys.executable, "-c", RESUME, server.base_url, str(folder), run_id, kind],
        capture_output=True, text=True, timeout=120, check=False, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def inspected(path: Path, capsys: pytest.CaptureFixture[str]) -> str:
    capsys.readouterr()
    assert main(["inspect", str(path)]) == 0
    return capsys.readouterr().out


def script() -> list[Any]:
    return [
        replies.reply(
            replies.tool_use_block("refund", {"amount": 12}, id="toolu_refund"),
            stop_reason="tool_use",
        ),
        replies.text("Done."),
    ]


class TestAPersonsDecisionFromAnotherProcess:
    @pytest.mark.parametrize("kind", ["approve", "deny", "edit"])
    def test_the_audit_file_the_result_and_inspect_show_who_what_why_and_the_wait(
        self, kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """The resumed process records the person, the decision, the note and the wait;
        the pause and the resume are events with their times."""
        person, note, outcome = WANTED[kind]
        with FakeAnthropicServer(script()) as server:
            run_id = pause(server, tmp_path)
            done = resume_elsewhere(server, tmp_path, run_id, kind)
            assert server.unexpected() == []
        assert done["end_state"] == "completed"
        deferred, decided = done["approvals"]
        assert (deferred["decision"], deferred["decided_by"], deferred["by"]) == (
            "defer", "default", None,
        )  # fmt: skip
        assert decided["decision"] == kind
        assert (decided["source"], decided["decided_by"]) == ("resume", "person")
        assert (decided["by"], decided["note"]) == (person, note)

        events = read_events(tmp_path / "audit" / f"{run_id}.jsonl")
        names = [e["event"] for e in events]
        paused_at = next(
            e["ts"] for e in events
            if e["event"] == "run.ended" and e["end_state"] == "awaiting_approval"
        )  # fmt: skip
        resumed_at = events[names.index("run.resumed")]["ts"]
        assert paused_at <= resumed_at
        (event,) = [e for e in events if e["event"] == "approval.decided" and e["by"] == person]
        assert {k: event[k] for k in decided} == decided  # the event is the result's record
        decided_at = datetime.fromisoformat(event["decided_at"]).timestamp()
        assert paused_at - 0.01 <= decided_at <= resumed_at + 0.01
        assert isinstance(event["waited_s"], float)
        assert 0 <= event["waited_s"] <= resumed_at - paused_at + 0.01
        answered = [e for e in events if e["event"] in ("tool.finished", "tool.failed")]
        assert outcome in answered[-1]["content"]

        page = report.html(events)  # the reviewer's page of the same file
        timeline = page.split('id="timeline"')[-1] if 'id="timeline"' in page else page
        assert person in timeline
        assert html_escape(note) in timeline
        assert "waited" in timeline
        assert "paused" in timeline
        assert "resumed" in timeline

        out = inspected(tmp_path / "audit" / f"{run_id}.jsonl", capsys)
        section = out.split("Approvals, pauses and resumes:")[1].split("\nAudit:")[0]
        (line,) = [ln for ln in section.splitlines() if f" by {person}" in ln]
        assert f"{kind} refund (toolu_refund)" in line
        assert f"'{note}'" in line
        assert "waited " in line
        assert "paused: waiting for approval of 1 tool call(s)" in section
        assert "resumed" in section.split("paused:")[1]  # the resume follows the pause
        assert out.count(f" by {person}") == 1  # listed once: beside the table, not in it


def small_refunds_only(call: ToolCall) -> Approve | Deny:
    return Approve() if call.input.get("amount", 0) <= 20 else Deny("Too much.")


class FourEyes:
    """A policy written as a class: the audit trail names the class."""

    def __call__(self, call: ToolCall) -> Deny:
        return Deny("Needs a second reviewer.", note="four eyes")


def run_with_policy(tmp_path: Path, policy: Any) -> tuple[Any, list[dict[str, Any]]]:
    @tool(requires_approval=True)
    def refund(amount: int) -> str:
        """Refund an amount."""
        return f"refunded {amount}"

    script = [replies.tool_use("refund", {"amount": 12}), replies.text("Done.")]
    agent = Agent(ScriptedModel(script), tools=[refund], approval=policy,
                  audit=Audit(dir=tmp_path))  # fmt: skip
    result = agent.run("Refund 12.")
    events = read_events(tmp_path / f"{result.run_id}.jsonl")
    return result, [e for e in events if e["event"] == "approval.decided"]


class TestAPolicysDecision:
    @pytest.mark.parametrize(
        ("policy", "name", "decision", "note"),
        [
            (small_refunds_only, "small_refunds_only", "approve", None),
            (FourEyes(), "FourEyes", "deny", "four eyes"),
        ],
    )
    def test_it_is_marked_as_the_policys_and_names_it(
        self,
        policy: Any,
        name: str,
        decision: str,
        note: str | None,
        tmp_path: Path,
        capsys: pytest.CaptureFixture[str],
    ) -> None:
        """A function policy is named by its function, a class policy by its class."""
        result, (event,) = run_with_policy(tmp_path, policy)
        assert (event["decision"], event["source"], event["decided_by"]) == (
            decision, "policy", "policy",
        )  # fmt: skip
        assert (event["by"], event["note"], event["waited_s"]) == (name, note, 0.0)
        assert result.approvals[0].fields() == {k: event[k] for k in result.approvals[0].fields()}
        out = inspected(tmp_path / f"{result.run_id}.jsonl", capsys)
        assert f"{decision} refund" in out
        assert f"by {name} (policy)" in out

    def test_a_named_answer_from_a_policy_keeps_the_name_it_gave(self, tmp_path: Path) -> None:
        """A policy that relays a person's answer (a chat bot, a ticket) says who it was."""
        _, (event,) = run_with_policy(tmp_path, lambda call: Approve(by="frank", note="ok"))
        assert (event["by"], event["decided_by"], event["note"]) == ("frank", "policy", "ok")


class TestGoldenTrails:
    def test_an_approved_and_a_denied_run_differ_only_by_their_decision(
        self, tmp_path: Path
    ) -> None:
        """Same steps, same calls: the golden trail still tells them apart."""
        approved, _ = run_with_policy(tmp_path / "a", small_refunds_only)
        denied, _ = run_with_policy(tmp_path / "d", FourEyes())
        a, d = trail_snapshot(approved), trail_snapshot(denied)
        assert a["approvals"] == [{"tool": "refund", "decision": "approve", "decided_by": "policy"}]
        assert d["approvals"] == [{"tool": "refund", "decision": "deny", "decided_by": "policy"}]
        assert {k: v for k, v in a.items() if k != "approvals"} == {
            k: v for k, v in d.items() if k != "approvals"
        }
        assert "approval 1: refund deny by policy" in render(d)

    def test_a_run_without_approvals_keeps_its_old_snapshot(self) -> None:
        """No `approvals` key at all, so golden files written before it still match."""
        result = Agent(ScriptedModel([replies.text("Hi.")])).run("Hello")
        assert "approvals" not in trail_snapshot(result)


WRONG: list[Any] = ["approve", Approve, Deny, {"kind": "approve"}, True, None, 1]


class TestAWrongTypedDecision:
    @pytest.mark.parametrize("value", ["approve", Approve], ids=["string", "class"])
    @pytest.mark.parametrize("entry", ["Agent.resume", "Agent.aresume", "Conversation.resume"])
    def test_it_raises_naming_the_call_before_anything_runs(
        self, value: Any, entry: str, tmp_path: Path
    ) -> None:
        """No model request, no audit event, no checkpoint: the run still waits."""
        with FakeAnthropicServer(script()) as server:
            agent = expense_agent(server.base_url, tmp_path)
            if entry == "Conversation.resume":
                chat = Conversation(agent, conversation_id="c1")
                paused = chat.send("Refund 12 to the customer.")
                run_id = paused.run_id
            else:
                run_id = pause(server, tmp_path)
            audit = tmp_path / "audit" / f"{run_id}.jsonl"
            before = (len(server.requests), audit.read_bytes())
            store = SQLiteCheckpointer(tmp_path / "runs.sqlite3")
            checkpoints = len(list(store.bodies(run_id)))
            decisions = {"toolu_refund": value}
            attempts = {
                "Agent.resume": lambda: agent.resume(run_id, decisions=decisions),
                "Agent.aresume": lambda: asyncio.run(agent.aresume(run_id, decisions=decisions)),
                "Conversation.resume": lambda: chat.resume(decisions),
            }
            with pytest.raises(DecisionTypeError) as caught:
                attempts[entry]()
            assert (len(server.requests), audit.read_bytes()) == before
            assert len(list(store.bodies(run_id))) == checkpoints
        message = str(caught.value)
        assert "'toolu_refund'" in message
        assert repr(value) in message
        assert "Approve, Deny, Edit or Defer" in message
        assert isinstance(caught.value, TypeError)
        assert isinstance(caught.value, Error)
        # and the person's decision, given right, still goes through
        assert agent.resume(run_id, decisions={"toolu_refund": Approve(by="g")}).approvals

    @settings(max_examples=40, deadline=None)
    @given(
        value=st.one_of(
            st.sampled_from(WRONG),
            st.text(max_size=8),
            st.dictionaries(st.text(max_size=4), st.integers(), max_size=2),
            st.floats(allow_nan=False),
        )
    )
    def test_any_value_that_is_not_a_decision_is_refused(self, value: Any) -> None:
        """Whatever comes from JSON or a slip of the hand, it never reads as a deferral."""
        agent = Agent(ScriptedModel([]), checkpointer=False)
        with pytest.raises(DecisionTypeError, match="'t1'"):
            agent.resume("run_0123456789abcdef", decisions={"t1": value})

    @settings(max_examples=30, deadline=None)
    @given(by=st.one_of(st.integers(), st.binary(max_size=4), st.lists(st.text(), max_size=1)))
    def test_who_and_why_are_text(self, by: Any) -> None:
        """`by` and `note` go into the audit trail as they are: text or nothing."""
        for make in (
            lambda: Approve(by=by),
            lambda: Approve(note=by),
            lambda: Deny("no", by=by),
            lambda: Edit({}, note=by),
        ):
            with pytest.raises(DecisionTypeError):
                make()

    def test_todays_calls_stay_valid(self) -> None:
        assert Approve() == Approve(by=None, note=None)
        assert Deny().message == "A reviewer declined this call."
        assert Edit({"a": 1}).input == {"a": 1}
        assert isinstance(Defer(), Defer)
