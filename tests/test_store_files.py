"""Bounded files: a small WAL, retention by age and state, and the store commands."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from statemachine_agent import (
    Agent,
    Budget,
    PostgresCheckpointer,
    ScriptedModel,
    SQLiteCheckpointer,
    calculate,
)
from statemachine_agent.cli import main
from statemachine_agent.persistence import MemoryCheckpointer, load_record
from statemachine_agent.testing import replies
from statemachine_agent.testing.postgres import LocalPostgres


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


@pytest.fixture(scope="module")
def postgres() -> Iterator[LocalPostgres]:
    with LocalPostgres() as server:
        yield server


@pytest.fixture(params=["sqlite", "postgres"])
def store_target(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh SQLite file, or a real PostgreSQL server's database emptied of runs."""
    if request.param == "sqlite":
        return str(tmp_path / "runs.sqlite3")
    server: LocalPostgres = request.getfixturevalue("postgres")
    with PostgresCheckpointer(server.dsn) as store:
        store.prune(older_than=-1.0)
    return server.dsn


def open_target(target: str, **options: object) -> Any:
    if target.startswith("postgresql://"):
        return PostgresCheckpointer(target, **options)  # type: ignore[arg-type]
    return SQLiteCheckpointer(target, **options)  # type: ignore[arg-type]


def stamped_run(store: object, run_id: str, metadata: dict[str, Any]) -> None:
    Agent(
        ScriptedModel([replies.text("done")]),
        checkpointer=store,  # type: ignore[arg-type]
    ).run("hello", run_id=run_id, metadata=metadata)


class TestRunsByMetadata:
    def test_runs_lists_and_filters_by_metadata(
        self, store_target: str, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """`runs` lists id, state, model calls, cost, last update and metadata on both
        stores; each `--metadata key=value` narrows the list (all must match)."""
        with open_target(store_target) as store:
            stamped_run(store, "acme_1", {"tenant": "acme", "user": 42})
            stamped_run(store, "acme_2", {"tenant": "acme", "user": 7})
            stamped_run(store, "globex_1", {"tenant": "globex", "user": 42})
            assert [r.run_id for r in store.runs(metadata={"tenant": "acme"})] == [
                "acme_1",
                "acme_2",
            ]
            assert store.runs(metadata={"user": 42})[1].metadata == {
                "tenant": "globex",
                "user": 42,
            }
        assert main(["runs", "--store", store_target]) == 0
        out = capsys.readouterr().out.splitlines()
        assert out[0].split() == ["RUN", "STATE", "ITER", "COST", "USD", "LAST", "UPDATE"]
        assert [line.split()[:3] for line in out[1:]] == [
            ["acme_1", "completed", "1"],
            ["acme_2", "completed", "1"],
            ["globex_1", "completed", "1"],
        ]
        assert out[1].endswith('{"tenant": "acme", "user": 42}')
        argv = [
            "runs",
            "--store",
            store_target,
            "--metadata",
            "tenant=acme",
            "--metadata",
            "user=42",
        ]
        assert main(argv) == 0
        listed = capsys.readouterr().out.splitlines()[1:]
        assert [line.split()[0] for line in listed] == ["acme_1"]
        assert main(["runs", "--store", store_target, "--metadata", "tenant=initech"]) == 0
        assert capsys.readouterr().out == "(no runs)\n"

    def test_a_resume_with_new_metadata_is_what_is_searched(self, store_target: str) -> None:
        """Metadata merged by a resume is stamped again, so the listing follows it."""
        with open_target(store_target) as store:
            agent = Agent(ScriptedModel([replies.text("a"), replies.text("b")]), checkpointer=store)
            agent.run("hello", run_id="r", metadata={"tenant": "acme"}, cancel=_cancelled())
            agent.resume("r", metadata={"ticket": "T-1"})
            (listed,) = store.runs(metadata={"ticket": "T-1"})
            assert listed.metadata == {"tenant": "acme", "ticket": "T-1"}

    def test_encrypted_metadata_is_sealed_and_searchable_with_the_key(
        self, store_target: str
    ) -> None:
        """With an encryption key the metadata is sealed in the store, and searched after
        it is opened; without the key, searching is refused by name."""
        from statemachine_agent import CheckpointCorruptError, generate_key

        key = generate_key()
        with open_target(store_target, encryption_key=key) as store:
            stamped_run(store, "sealed", {"tenant": "Zyxwvut-acme"})
            assert [r.run_id for r in store.runs(metadata={"tenant": "Zyxwvut-acme"})] == ["sealed"]
        if not store_target.startswith("postgresql://"):
            assert b"Zyxwvut" not in Path(store_target).read_bytes()
        with (
            open_target(store_target) as store,
            pytest.raises(CheckpointCorruptError, match="metadata"),
        ):
            store.runs(metadata={"tenant": "Zyxwvut-acme"})


def _cancelled() -> Any:
    from statemachine_agent import CancelToken

    token = CancelToken()
    token.cancel()
    return token


def schema_2_store(tmp_path: Path) -> Path:
    """A SQLite file as a version before metadata and packed rows left it, with one run."""
    import sqlite3

    db = tmp_path / "runs.sqlite3"
    with SQLiteCheckpointer(db, compress=False) as store:
        counting_run(store, "before", 1)
    con = sqlite3.connect(db, isolation_level=None)
    con.execute("ALTER TABLE sma_runs DROP COLUMN metadata")
    con.execute("ALTER TABLE sma_checkpoints DROP COLUMN packed")
    con.execute("UPDATE sma_checkpoints SET version = 2")
    con.execute("UPDATE sma_meta SET value = '2' WHERE key = 'schema_version'")
    con.close()
    return db


def stored_rows(store: Any, run_id: str) -> list[tuple[str, bytes | None]]:
    """A run's rows as the database holds them: (body text, packed bytes)."""
    mark = "%s" if isinstance(store, PostgresCheckpointer) else "?"
    query = f"SELECT body, packed FROM sma_checkpoints WHERE run_id = {mark} ORDER BY seq"
    return [(body, None if p is None else bytes(p)) for body, p in store._execute(query, (run_id,))]


class TestPackedRows:
    def test_rows_are_packed_unless_asked_not_to_and_both_read_back(
        self, store_target: str
    ) -> None:
        """By default each body is packed (its text column empty); with `compress=False`
        it is JSON text anyone can query. One store holds both kinds, and a run continued
        with the other setting folds back whole."""
        import json

        with open_target(store_target, compress=False) as store:
            agent = Agent(ScriptedModel([replies.text("a"), replies.text("b")]), checkpointer=store)
            first = agent.run("hello", run_id="mixed", cancel=_cancelled())
            plain = stored_rows(store, "mixed")
            assert plain
            assert all(p is None and json.loads(body) for body, p in plain)
        with open_target(store_target) as store:
            agent = Agent(ScriptedModel([replies.text("b")]), checkpointer=store)
            resumed = agent.resume("mixed")
            rows = stored_rows(store, "mixed")
            assert rows[: len(plain)] == plain
            assert all(body == "" and p is not None for body, p in rows[len(plain) :])
            record = load_record(store, "mixed")
            (listed,) = (r for r in store.runs() if r.run_id == "mixed")
        assert first.end_state == "cancelled"
        assert resumed.end_state == "completed"
        assert record.messages == resumed.messages
        assert listed.bytes == sum(len(body.encode()) + len(p or b"") for body, p in rows)

    def test_encrypted_rows_are_sealed_not_packed(self, store_target: str) -> None:
        """Packing before sealing would let each row's size say something of its content."""
        from statemachine_agent import generate_key

        with open_target(store_target, encryption_key=generate_key()) as store:
            stamped_run(store, "sealed", {})
            rows = stored_rows(store, "sealed")
        assert rows
        assert all(body.startswith("enc1:") and p is None for body, p in rows)


class TestSchemaUpgrade:
    def test_a_schema_2_store_gains_the_metadata_column(self, tmp_path: Path) -> None:
        """A store written before metadata was listed opens, is upgraded in place, keeps
        its runs (metadata unknown), and lists new runs by metadata."""
        import sqlite3

        from statemachine_agent.persistence.sql import SCHEMA_VERSION

        db = schema_2_store(tmp_path)
        with SQLiteCheckpointer(db) as store:
            stamped_run(store, "after", {"tenant": "acme"})
            assert {r.run_id: r.metadata for r in store.runs()} == {
                "before": None,
                "after": {"tenant": "acme"},
            }
            assert load_record(store, "before").state == "completed"
        con = sqlite3.connect(db)
        assert con.execute("SELECT value FROM sma_meta").fetchone() == (str(SCHEMA_VERSION),)
        kinds = con.execute(
            "SELECT run_id, MIN(packed IS NULL), MAX(packed IS NULL) FROM sma_checkpoints "
            "GROUP BY run_id ORDER BY run_id"
        ).fetchall()
        assert kinds == [("after", 0, 0), ("before", 1, 1)]  # old rows kept as text
        con.close()

    def test_processes_opening_an_old_store_at_once_upgrade_it_once(self, tmp_path: Path) -> None:
        """Workers started together against a schema-2 file all open it: the upgrade runs
        inside the file's write lock, so the second opener finds it done, not half done."""
        import subprocess
        import sys
        import time
        from subprocess import PIPE

        db = schema_2_store(tmp_path)
        go = time.time() + 2.0
        code = (
            "import sys, time\n"
            "from statemachine_agent.persistence.sqlite import SQLiteCheckpointer\n"
            f"time.sleep(max(0.0, {go!r} - time.time()))\n"
            f"with SQLiteCheckpointer({str(db)!r}) as store:\n"
            "    print(sorted(r.run_id for r in store.runs()))\n"
        )
        workers = [
            subprocess.Popen([sys.executable, "-c", code], stdout=PIPE, stderr=PIPE, text=True)
            for _ in range(6)
        ]
        outcomes = [(w.wait(timeout=120), *w.communicate()) for w in workers]
        assert [(code, out.strip()) for code, out, _ in outcomes] == [(0, "['before']")] * len(
            workers
        ), [err for _, _, err in outcomes]
