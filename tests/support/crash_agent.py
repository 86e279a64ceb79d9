"""An agent run in a child process that kills itself at a chosen boundary.

Usage: python -m tests.support.crash_agent run|resume DB LEDGER [KILL_EVENT]

The model answers by how far the conversation has got (not by how often it was
called), so a resumed process gets the same replies as the one that died. The
audit file goes to `audit/` next to DB; the kill comes before the event that
triggers it is written there, as a real death between two lines would.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from statemachine_agent import Agent, Audit, ModelReply, ModelRequest, tool
from statemachine_agent.persistence import SQLiteCheckpointer
from statemachine_agent.testing import replies

RUN_ID = "run_crash_test"
KILLED_MARK = ".killed"
LEASE_SECONDS = 1.0
"""Short, so the resuming process takes over the killed one's lease soon."""


def script() -> list[dict[str, Any]]:
    return [
        replies.tool_uses(("lookup", {"key": "a"}), ids=("toolu_step1a",)),
        replies.tool_uses(
            ("pay", {"amount": 5}), ("pay", {"amount": 7}), ids=("toolu_pay5", "toolu_pay7")
        ),
        replies.tool_uses(("lookup", {"key": "b"}), ids=("toolu_step3",)),
        replies.text("Paid 12 in total; a=A, b=B."),
    ]


class ProgressModel:
    """Replies with the script entry matching the number of assistant turns so far."""

    name = "claude-sonnet-5"

    async def acomplete(self, request: ModelRequest) -> ModelReply:
        turns = sum(1 for m in request.messages if m["role"] == "assistant")
        return ModelReply.from_api(script()[turns])


class KillAt:
    """An audit sink that SIGKILLs the process at the first event of the given name."""

    def __init__(self, event: str, mark: Path) -> None:
        self.event, self.mark = event, mark

    def write(self, event: Mapping[str, Any]) -> None:
        name = event.get("event")
        if name == self.event and not self.mark.exists():
            self.mark.write_text(name)
            os.kill(os.getpid(), signal.SIGKILL)

    def close(self) -> None:
        return None


def build(db: Path, ledger: Path, kill: str | None) -> Agent:
    @tool
    def lookup(key: str) -> str:
        """Read a value (read-only: safe to run again)."""
        return key.upper()

    @tool(side_effect=True, sequential=True)
    def pay(amount: int, idempotency_key: str) -> str:
        """Pay an amount; a repeated key answers as the first payment did, paying nothing."""
        done = ledger.read_text().splitlines() if ledger.exists() else []
        if any(line.startswith(idempotency_key + " ") for line in done):
            return f"paid {amount}"
        with ledger.open("a") as out:
            out.write(f"{idempotency_key} {amount}\n")
        if kill == "in_second_payment" and amount == 7 and not (db.parent / KILLED_MARK).exists():
            (db.parent / KILLED_MARK).write_text("pay")
            os.kill(os.getpid(), signal.SIGKILL)
        return f"paid {amount}"

    sinks = []
    if kill and kill != "in_second_payment":
        sinks.append(KillAt(kill, db.parent / KILLED_MARK))
    return Agent(
        ProgressModel(),
        tools=[lookup, pay],
        checkpointer=SQLiteCheckpointer(db, lease_seconds=LEASE_SECONDS),
        audit=Audit(dir=db.parent / "audit", sinks=sinks),
        stall=None,
    )


def main() -> None:
    mode, db, ledger = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
    kill = sys.argv[4] if len(sys.argv) > 4 else None
    agent = build(db, ledger, kill)
    result = (
        agent.run("Pay my bills.", run_id=RUN_ID)
        if mode == "run"
        else agent.resume(RUN_ID, wait=10 * LEASE_SECONDS)
    )
    print(json.dumps({"end_state": result.end_state, "messages": result.messages}))


if __name__ == "__main__":
    main()
