"""A process that dies while an approved call runs: the resume keeps the approval."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from statemachine_agent import (
    Agent,
    Approve,
    Audit,
    Defer,
    Deny,
    ScriptedModel,
    SQLiteCheckpointer,
    ToolCall,
    tool,
)
from statemachine_agent.audit.sink import read_events
from statemachine_agent.testing import replies


class Died(BaseException):
    """The process died here: nothing after this point reaches the store."""


class DiesBeforeStoring(SQLiteCheckpointer):
    """A store whose process dies just before the checkpoint holding `text` is written."""

    def __init__(self, path: Path, text: str) -> None:
        super().__init__(path)
        self.text = text

    def append(self, run_id: str, body: Mapping[str, Any]) -> None:
        if self.text in json.dumps(body):
            raise Died
        super().append(run_id, body)


def agents(tmp_path: Path, asked: list[str], payments: dict[str, int]) -> tuple[Any, Any]:
    """The same agent twice over one SQLite file: the first process dies when it would
    store the payment's outcome (after the payment was made), the second is fresh."""

    @tool(side_effect=True, requires_approval=True)
    def pay(amount: int, idempotency_key: str) -> str:
        """Pay an amount; a repeated key pays nothing again."""
        payments.setdefault(idempotency_key, amount)
        payments.setdefault("runs", 0)
        payments["runs"] += 1
        return f"paid {amount}"

    @tool(requires_approval=True)
    def wipe() -> str:
        """Delete everything."""
        return "wiped"

    def policy(call: ToolCall) -> Defer:
        asked.append(call.name)
        return Defer()

    reply = replies.reply(
        replies.tool_use_block("pay", {"amount": 7}, id="toolu_pay"),
        replies.tool_use_block("wipe", {}, id="toolu_wipe"),
        stop_reason="tool_use",
    )
    db = tmp_path / "runs.sqlite3"
    options: dict[str, Any] = {"tools": [pay, wipe], "approval": policy,
                               "audit": Audit(dir=tmp_path / "audit")}  # fmt: skip
    first = Agent(ScriptedModel([reply]), checkpointer=DiesBeforeStoring(db, "paid 7"), **options)
    second = Agent(ScriptedModel([replies.text("Paid; nothing wiped.")]),
                   checkpointer=SQLiteCheckpointer(db), **options)  # fmt: skip
    return first, second


class TestApprovalSurvivesACrash:
    def test_the_resumed_run_does_not_ask_again_or_repeat_the_payment(self, tmp_path: Path) -> None:
        """Approve the payment, deny the wipe, die while the payment is being recorded:
        the next process finishes with the stored approval, asks nobody, pays once."""
        asked: list[str] = []
        payments: dict[str, int] = {}
        first, second = agents(tmp_path, asked, payments)
        paused = first.run("pay 7 and wipe", run_id="r")
        assert paused.end_state == "awaiting_approval"
        assert asked == ["pay", "wipe"]
        with pytest.raises(Died):
            first.resume("r", decisions={"toolu_pay": Approve(), "toolu_wipe": Deny("no")})
        assert payments == {"r:toolu_pay": 7, "runs": 1}  # its outcome never reached the store

        result = second.resume("r")
        assert result.end_state == "completed", result.reason
        assert asked == ["pay", "wipe"], "nobody was asked again"
        # The call in flight ran again (at-least-once), under the same idempotency key,
        # so the payment was made once.
        assert payments == {"r:toolu_pay": 7, "runs": 2}
        events = read_events(tmp_path / "audit" / "r.jsonl")
        resumed = max(i for i, e in enumerate(events) if e["event"] == "run.resumed")
        decided = [e for e in events[resumed:] if e["event"] == "approval.decided"]
        assert [(e["tool"], e["decision"], e["source"]) for e in decided] == [
            ("pay", "approve", "resume")
        ]
        outcomes = {e["tool_use_id"]: e["event"] for e in events if e["event"].startswith("tool.f")}
        assert outcomes == {"toolu_pay": "tool.finished", "toolu_wipe": "tool.failed"}
