"""Bounded files: a small WAL, retention by age and state, and the store commands."""

from __future__ import annotations

import time
from datetime import timedelta
from pathlib import Path

import pytest

from statemachine_agent import Agent, Budget, ScriptedModel, SQLiteCheckpointer, calculate
from statemachine_agent.cli import main
from statemachine_agent.persistence import MemoryCheckpointer, load_record
from statemachine_agent.testing import replies


def counting_run(store: object, run_id: str, steps: int) -> None:
    script = [replies.tool_use("calculate", {"expression": f"{i}+1"}) for i in range(steps)]
    Agent(
        ScriptedModel([*script, replies.text("done")]),
        tools=[calculate],
        checkpointer=store,  # type: ignore[arg-type]
        budget=Budget(max_iterations=steps + 1),
    ).run("count", run_id=run_id)


class TestSmallFiles:
    def test_the_wal_stays_small_and_is_emptied_on_close(self, tmp_path: Path) -> None:
        """A 50-step run keeps its WAL near its limit while open, and none after close."""
        db = tmp_path / "runs.sqlite3"
        store = SQLiteCheckpointer(db)
        counting_run(store, "r", 50)
        wal = Path(f"{db}-wal")
        assert wal.stat().st_size <= 2 * 1024 * 1024
        store.close()
        assert not wal.exists() or wal.stat().st_size == 0
        assert db.stat().st_size < 1024 * 1024


class TestPrune:
    @pytest.mark.parametrize("make", [MemoryCheckpointer, "sqlite"])
    def test_old_runs_in_the_given_states_go(self, tmp_path: Path, make: object) -> None:
        """prune deletes by age and state; newer, other-state and leased runs stay."""
        store = SQLiteCheckpointer(tmp_path / "db") if make == "sqlite" else MemoryCheckpointer()
        counting_run(store, "old", 1)
        time.sleep(0.2)
        counting_run(store, "new", 1)
        leased = store.acquire("old")
        assert store.prune(older_than=0.1) == []  # "old" is being driven
        store.release(leased)
        assert store.prune(older_than=timedelta(seconds=0.1), states=["failed"]) == []
        assert store.prune(older_than=0.1, states=["completed"]) == ["old"]
        assert [r.run_id for r in store.runs()] == ["new"]
        assert store.bodies("old") == []
        store.close()


class TestCommands:
    def test_runs_lists_a_store(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """`runs` shows run id, state, model calls, cost and the last update."""
        db = tmp_path / "db"
        with SQLiteCheckpointer(db) as store:
            counting_run(store, "run_listed", 2)
        assert main(["runs", "--store", str(db)]) == 0
        out = capsys.readouterr().out.splitlines()
        assert out[0].split() == ["RUN", "STATE", "ITER", "COST", "USD", "LAST", "UPDATE"]
        with SQLiteCheckpointer(db) as store:
            cost = load_record(store, "run_listed").cost_usd
        fields = out[1].split()
        assert fields[:4] == ["run_listed", "completed", "3", f"{cost:.4f}"]
        assert out[1].endswith("UTC")

    def test_prune_by_age(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """`prune --older-than` deletes only what is old enough."""
        db = tmp_path / "db"
        with SQLiteCheckpointer(db) as store:
            counting_run(store, "r", 1)
        assert main(["prune", "--store", str(db), "--older-than", "30d"]) == 0
        assert capsys.readouterr().out == "Pruned 0 runs.\n"
        time.sleep(1.1)
        assert main(["prune", "--store", str(db), "--older-than", "1s"]) == 0
        assert capsys.readouterr().out == "Pruned 1 run.\n"

    @pytest.mark.parametrize(
        ("argv", "message"),
        [
            (["runs", "--store", "missing.db"], "no store at missing.db"),
            (["prune", "--store", "x.db", "--older-than", "soon"], "is not a duration"),
        ],
    )
    def test_mistakes_are_one_line(
        self, argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """A missing store or a bad age: one error line, exit 2."""
        assert exit_code(argv) == 2
        err = capsys.readouterr().err
        assert err.startswith("statemachine-agent")  # bad flags name the subcommand too
        assert ": error: " in err
        assert message in err
        assert err.count("\n") == 1


def exit_code(argv: list[str]) -> int:
    """The command's exit status, whether it returned it or argparse exited with it."""
    try:
        return main(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
