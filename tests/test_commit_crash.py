"""A crash inside `commit` repeats no staged call that ran (issue 34), on SQLite and
PostgreSQL.

A child process stages two payments and is SIGKILLed at one boundary inside
`commit` (entering it, its start, inside each payment, after each payment's outcome,
its end, leaving it); a new process resumes the run. Every payment is made once,
and a staged call runs again only when the kill came after its effect and before
its outcome was checkpointed (then its idempotency key makes the second call pay
nothing). The resumed audit file replays to the same trail. The boundaries are run
two at a time, since each is two interpreter starts.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from statemachine_agent.audit.chain import verify_file
from statemachine_agent.replay import replay
from statemachine_agent.testing.postgres import LocalPostgres
from tests.support.commit_crash_agent import BOUNDARIES, IN_TOOL
from tests.support.crashing import run_child

KEYS = ("toolu_pay5", "toolu_pay7")

RUN_AGAIN = {"in_pay5": "toolu_pay5", "pay5_finished": "toolu_pay5",
             "in_pay7": "toolu_pay7", "pay7_finished": "toolu_pay7"}  # fmt: skip
"""The one staged call a kill at each boundary may run twice: its effect happened and
its outcome was not yet checkpointed (the idempotency key keeps the effect single)."""


def child(*args: str) -> dict[str, Any]:
    return run_child("tests.support.commit_crash_agent", *args)


def crash_and_resume(where: str, folder: Path, boundary: str) -> dict[str, Any]:
    """Kill a run at `boundary`, resume it in a new process; what each saw and did."""
    folder.mkdir()
    ledger, run_id = folder / "ledger", f"run_commit_{boundary.replace('.', '_')}"
    crashed = child("run", where, str(ledger), run_id, boundary)
    resumed = child("resume", where, str(ledger), run_id)
    audit = folder / "audit" / f"{run_id}.jsonl"
    replayed = replay(audit) if audit.exists() else None
    return {
        "crashed": crashed.get("returncode"),
        "end_state": resumed.get("end_state", resumed),
        "committed": resumed.get("committed"),
        "paid": Counter(line.split()[0].split(":")[-1] for line in ledger.read_text().split("\n")
                        if line),
        "calls": Counter(line.split(":")[-1] for line in
                         (folder / "ledger.calls").read_text().split()),
        "chain_ok": verify_file(audit).ok,
        "replayed": replayed is not None and replayed.matched,
        "replay_commits": replayed is not None and replayed.replayed == replayed.recorded
        and any(step[2] == "commit" for step in replayed.recorded),
    }  # fmt: skip


def expected(boundary: str) -> dict[str, Any]:
    again = RUN_AGAIN.get(boundary)
    return {
        "crashed": -9,
        "end_state": "completed",
        "committed": ["S1", "S2"],
        "paid": Counter(KEYS),
        "calls": Counter({key: 2 if key == again else 1 for key in KEYS}),
        "chain_ok": True,
        "replayed": True,
        "replay_commits": True,
    }


@pytest.fixture(scope="module")
def postgres() -> Iterator[LocalPostgres]:
    with LocalPostgres() as server:
        yield server


class TestSigkillInsideCommit:
    @pytest.mark.parametrize("store", ["sqlite", "postgres"])
    def test_no_staged_call_that_ran_runs_again(
        self, store: str, tmp_path: Path, request: pytest.FixtureRequest
    ) -> None:
        """Killed at every boundary inside commit and resumed in another process: both
        payments made once, only the call in flight at the kill called twice, and the
        resumed audit file replays to the trail it recorded."""
        if store == "postgres":
            where = request.getfixturevalue("postgres").dsn
        else:
            where = str(tmp_path / "runs.sqlite3")
        boundaries = [*BOUNDARIES, *IN_TOOL]
        with ThreadPoolExecutor(max_workers=2) as pool:
            done = pool.map(lambda b: crash_and_resume(where, tmp_path / b, b), boundaries)
            seen = dict(zip(boundaries, done, strict=True))
        assert seen == {boundary: expected(boundary) for boundary in boundaries}
