"""A run that stages two payments and dies at a chosen boundary inside `commit`.

Usage: python -m tests.support.commit_crash_agent run|resume STORE LEDGER RUN_ID [KILL]

STORE is a SQLite file or a PostgreSQL URL. The model answers by how far the
conversation has got, so a resumed process gets the same replies as the one that
died. KILL names the boundary (`BOUNDARIES`); the kill comes before the event that
marks it is written to the audit file, as a real death between two lines would,
or (`in_pay5`, `in_pay7`) inside the payment, after its ledger line is written.
The ledger holds each payment made (a repeated key pays nothing), LEDGER.calls
every time `pay` was called, so the test sees a staged call run again.
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
from statemachine_agent.testing import replies
from tests.support.crashing import LEASE_SECONDS, store

BOUNDARIES: Mapping[str, tuple[str, Mapping[str, Any]]] = {
    "entering_commit": ("transition.fired", {"dest": "commit"}),
    "commit.started": ("commit.started", {}),
    "pay5_finished": ("tool.finished", {"tool_use_id": "toolu_pay5"}),
    "pay7_finished": ("tool.finished", {"tool_use_id": "toolu_pay7"}),
    "commit.finished": ("commit.finished", {}),
    "leaving_commit": ("transition.fired", {"source": "commit"}),
}
"""Each transition boundary inside `commit`: the event that marks it, and its fields."""

IN_TOOL = ("in_pay5", "in_pay7")
"""Kills inside a staged payment, after its effect and before its outcome is recorded."""


def script() -> list[dict[str, Any]]:
    return [
        replies.tool_uses(("lookup", {"key": "claim"}), ids=("toolu_read",)),
        replies.tool_uses(
            ("pay", {"amount": 5}), ("pay", {"amount": 7}), ids=("toolu_pay5", "toolu_pay7")
        ),
        replies.text("Both payments are staged; they run at commit."),
    ]


class ProgressModel:
    """Replies with the script entry matching the number of assistant turns so far."""

    name = "claude-sonnet-5"

    async def acomplete(self, request: ModelRequest) -> ModelReply:
        turns = sum(1 for m in request.messages if m["role"] == "assistant")
        return ModelReply.from_api(script()[turns])


class KillAt:
    """An audit sink that SIGKILLs the process at the first event matching a boundary."""

    def __init__(self, boundary: tuple[str, Mapping[str, Any]], mark: Path) -> None:
        self.boundary, self.mark = boundary, mark

    def write(self, event: Mapping[str, Any]) -> None:
        name, fields = self.boundary
        matches = event.get("event") == name and all(
            event.get(key) == value for key, value in fields.items()
        )
        if matches and not self.mark.exists():
            self.mark.write_text(name)
            os.kill(os.getpid(), signal.SIGKILL)

    def close(self) -> None:
        return None


def build(where: str, ledger: Path, kill: str | None) -> Agent:
    mark = ledger.with_suffix(".killed")

    @tool
    def lookup(key: str) -> str:
        """Read a value (read-only: safe to run again)."""
        return key.upper()

    @tool(side_effect=True, deferrable=True, sequential=True)
    def pay(amount: int, idempotency_key: str) -> str:
        """Pay an amount; a repeated key answers as the first payment did, paying nothing."""
        with ledger.with_suffix(".calls").open("a") as calls:
            calls.write(f"{idempotency_key}\n")
        paid = ledger.read_text().splitlines() if ledger.exists() else []
        if any(line.startswith(idempotency_key + " ") for line in paid):
            return f"paid {amount}"
        with ledger.open("a") as out:
            out.write(f"{idempotency_key} {amount}\n")
        if kill == f"in_pay{amount}" and not mark.exists():
            mark.write_text(kill)
            os.kill(os.getpid(), signal.SIGKILL)
        return f"paid {amount}"

    sinks = [KillAt(BOUNDARIES[kill], mark)] if kill is not None and kill in BOUNDARIES else []
    return Agent(
        ProgressModel(),
        tools=[lookup, pay],
        checkpointer=store(where),
        audit=Audit(dir=ledger.parent / "audit", sinks=sinks),
        stall=None,
    )


def main() -> None:
    mode, where, ledger, run_id = sys.argv[1], sys.argv[2], Path(sys.argv[3]), sys.argv[4]
    kill = sys.argv[5] if len(sys.argv) > 5 else None
    agent = build(where, ledger, kill)
    result = (
        agent.run("Pay the claim.", run_id=run_id)
        if mode == "run"
        else agent.resume(run_id, wait=10 * LEASE_SECONDS)
    )
    committed = [c["ref"] for c in (result.details or {}).get("committed", [])]
    print(json.dumps({"end_state": result.end_state, "messages": result.messages,
                      "committed": committed}))  # fmt: skip


if __name__ == "__main__":
    main()
