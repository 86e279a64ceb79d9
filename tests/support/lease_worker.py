"""A worker process racing others for one run: pause it, resume it, or die holding it.

Usage: python -m tests.support.lease_worker MODE STORE RUN_ID FOLDER [NAME]

MODE is `pause` (run until both payments wait for approval), `resume` (approve
them and drive the run), `kill` (the same, but SIGKILL itself in the lookup after the
payments) or `takeover` (resume without decisions, waiting for a dead holder's
lease). STORE is `sqlite:PATH` or a PostgreSQL URL. Every tool execution is
appended to FOLDER/calls; payments also to FOLDER/ledger, deduplicated by
idempotency key as a payment provider would. A resuming worker says it is
ready (FOLDER/ready.NAME) and waits for FOLDER/go, so all of them start at once.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from statemachine_agent import Agent, Approve, Audit, RunLockedError, tool
from statemachine_agent.machine.resume import RunAlreadyEndedError
from statemachine_agent.persistence import PostgresCheckpointer, SQLiteCheckpointer
from tests.support.barrier import wait_for_go
from tests.support.crash_agent import ProgressModel

LEASE_SECONDS = 3.0
"""Long enough that a loaded machine never starves a live driver's heartbeat past it."""


def store(spec: str) -> Any:
    if spec.startswith("sqlite:"):
        return SQLiteCheckpointer(spec.removeprefix("sqlite:"), lease_seconds=LEASE_SECONDS)
    return PostgresCheckpointer(spec, lease_seconds=LEASE_SECONDS)


def build(spec: str, folder: Path, mode: str, name: str) -> Agent:
    calls, ledger = folder / "calls", folder / "ledger"

    def note(tool_use: str) -> None:
        with calls.open("a") as out:
            out.write(f"{tool_use} {name}\n")

    @tool
    def lookup(key: str) -> str:
        """Read a value."""
        note(f"lookup:{key}")
        if mode == "kill" and key == "b":
            os.kill(os.getpid(), signal.SIGKILL)
        return key.upper()

    @tool(side_effect=True, sequential=True, requires_approval=True)
    def pay(amount: int, idempotency_key: str) -> str:
        """Pay an amount; a repeated key pays nothing more."""
        note(f"pay:{amount}")
        done = ledger.read_text().splitlines() if ledger.exists() else []
        if not any(line.startswith(idempotency_key + " ") for line in done):
            with ledger.open("a") as out:
                out.write(f"{idempotency_key} {amount}\n")
        time.sleep(0.05)  # long enough for racing workers to try while this one drives
        return f"paid {amount}"

    return Agent(
        ProgressModel(),
        tools=[lookup, pay],
        checkpointer=store(spec),
        audit=Audit(dir=folder / f"audit.{name}"),
        stall=None,
    )


def main() -> None:
    mode, spec, run_id, folder = sys.argv[1], sys.argv[2], sys.argv[3], Path(sys.argv[4])
    name = sys.argv[5] if len(sys.argv) > 5 else mode
    agent = build(spec, folder, mode, name)
    if mode == "pause":
        result = agent.run("Pay my bills.", run_id=run_id)
        print(json.dumps({"outcome": "paused", "end_state": result.end_state}))
        return
    wait_for_go(folder, name)
    approve = {"toolu_pay5": Approve(), "toolu_pay7": Approve()}
    try:
        if mode == "takeover":
            result = agent.resume(run_id, wait=10 * LEASE_SECONDS)
        else:
            result = agent.resume(run_id, decisions=approve)
    except RunLockedError as exc:
        print(json.dumps({"outcome": "locked", "owner": exc.owner, "error": str(exc)}))
        return
    except (RunAlreadyEndedError, ValueError) as exc:  # it got the lease after the driver
        print(json.dumps({"outcome": "ended", "error": str(exc)}))
        return
    owner = agent.checkpointer.leases.owner  # type: ignore[union-attr]
    print(json.dumps({"outcome": "drove", "end_state": result.end_state, "owner": owner}))


if __name__ == "__main__":
    main()
