"""Bounded files: a small WAL, retention by age and state, and the store commands."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
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
from statemachine_agent.persistence.codec import record_to_plain
from statemachine_agent.persistence.sql import SCHEMA_VERSION
from statemachine_agent.testing import replies
from statemachine_agent.testing.postgres import LocalPostgres
from tests.support.barrier import start_together
from tests.support.store_worker import open_target


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


HEADER = ["RUN", "STATE", "ITER", "COST", "USD", "LAST", "UPDATE", "DRIVER", "ORIGIN", "METADATA"]
"""The `runs` listing's header: one name for every column."""


class TestCommands:
    def test_runs_lists_a_store(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """`runs` shows run id, state, model calls, cost and the last update."""
        db = tmp_path / "db"
        with SQLiteCheckpointer(db) as store:
            counting_run(store, "run_listed", 2)
        assert main(["runs", "--store", str(db)]) == 0
        out = capsys.readouterr().out.splitlines()
        assert out[0].split() == HEADER
        with SQLiteCheckpointer(db) as store:
            cost = load_record(store, "run_listed").cost_usd
        fields = out[1].split()
        assert fields[:4] == ["run_listed", "completed", "3", f"{cost:.4f}"]
        assert fields[6:] == ["UTC", "-", "-", "-"]  # no driver, not a fork, no metadata

    def test_every_column_has_a_header(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """The driver and the metadata are columns with headers like the rest: each cell
        starts under its header, and an empty cell shows `-`."""
        db = tmp_path / "db"
        with SQLiteCheckpointer(db) as store:
            counting_run(store, "run_plain", 1)
            agent = Agent(ScriptedModel([replies.text("done")]), checkpointer=store)
            agent.run("count", run_id="run_held", metadata={"tenant": "acme"})
            lease = store.acquire("run_held")
            assert main(["runs", "--store", str(db)]) == 0
            store.release(lease)
        header, *rows = capsys.readouterr().out.splitlines()
        assert header.split() == HEADER
        by_id = {row.split()[0]: row for row in rows}
        driver, meta = header.index("DRIVER"), header.index("METADATA")
        held, plain = by_id["run_held"], by_id["run_plain"]
        assert held[driver:].startswith(lease.owner)
        assert held[meta:] == '{"tenant": "acme"}'
        assert plain[driver:].split() == ["-", "-", "-"]
        assert plain[meta:] == "-"

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
        assert out[0].split() == HEADER
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


@contextmanager
def connect(target: str) -> Iterator[Any]:
    """A plain driver connection to the store, committing each statement."""
    if target.startswith("postgresql://"):
        import psycopg

        with psycopg.connect(target, autocommit=True) as pg:
            yield pg
        return
    con = sqlite3.connect(target, isolation_level=None)
    try:
        yield con
    finally:
        con.close()


def schema_2_store(target: str) -> dict[str, Any]:
    """Make TARGET a store as a version before metadata and packed rows left it, with
    one run, and return that run's record as it folded then."""
    with open_target(target, compress=False) as store:
        counting_run(store, "before", 1)
        before = record_to_plain(load_record(store, "before"))
    with connect(target) as con:
        con.execute("ALTER TABLE sma_runs DROP COLUMN metadata")
        con.execute("ALTER TABLE sma_checkpoints DROP COLUMN packed")
        con.execute("UPDATE sma_checkpoints SET version = 2")
        con.execute("UPDATE sma_meta SET value = '2' WHERE key = 'schema_version'")
    return before


def layout(target: str) -> tuple[list[tuple[str, str]], list[tuple[str]]]:
    """The store's (table, column) pairs, repeats included, and its `sma_meta` rows."""
    with connect(target) as con:
        if target.startswith("postgresql://"):
            found = con.execute(
                "SELECT table_name, column_name FROM information_schema.columns "
                "WHERE table_schema = 'public'"
            ).fetchall()
        else:
            tables = con.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
            found = [
                (table, column[1])
                for (table,) in tables
                for column in con.execute(f"PRAGMA table_info({table})").fetchall()
            ]
        meta = con.execute("SELECT value FROM sma_meta").fetchall()
    return sorted((str(t), str(c)) for t, c in found), [tuple(row) for row in meta]


def new_database(dsn: str) -> str:
    """An empty database of its own on DSN's PostgreSQL server, as a URL."""
    name = f"sma_{uuid.uuid4().hex[:12]}"
    with connect(dsn) as con:
        con.execute(f"CREATE DATABASE {name}")
    return dsn.rsplit("/", 1)[0] + "/" + name


def made_alone(target: str, tmp_path: Path) -> str:
    """A store of TARGET's kind whose tables one process created alone, to compare with."""
    alone = new_database(target) if target.startswith("postgresql://") else str(tmp_path / "alone")
    open_target(alone).close()
    return alone


@pytest.fixture(params=["sqlite", "postgres"])
def empty_target(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Where no store is yet: a new SQLite path, or a new database on the test server."""
    if request.param == "sqlite":
        return str(tmp_path / "runs.sqlite3")
    return new_database(request.getfixturevalue("postgres").dsn)


def race(target: str, folder: Path, workers: int = 6) -> list[dict[str, Any]]:
    """WORKERS processes open the store at the same moment, then each drives a run."""
    racing = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.support.store_worker", target, str(folder), f"w{i}"],
            cwd=Path(__file__).resolve().parent.parent,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(workers)
    ]
    start_together(racing, folder)
    ended = [(p.wait(timeout=120), *p.communicate()) for p in racing]
    assert [code for code, _, _ in ended] == [0] * workers, [err for _, _, err in ended]
    return [json.loads(out) for _, out, _ in ended]


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


class TestOpeningBusyFiles:
    def test_a_file_locked_while_another_process_sets_it_up_is_tried_again(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """ "database is locked" while opening (another process is switching the new file
        to WAL) is not corruption: the store tries again and opens; a file that stays
        locked is the driver's error, not `CheckpointCorruptError`."""
        import sqlite3

        real = SQLiteCheckpointer._configure
        refusals = iter([True, True])

        def busy_at_first(store: SQLiteCheckpointer, synchronous: str) -> None:
            if next(refusals, False):
                raise sqlite3.OperationalError("database is locked")
            real(store, synchronous)

        monkeypatch.setattr(SQLiteCheckpointer, "_configure", busy_at_first)
        with SQLiteCheckpointer(tmp_path / "runs.sqlite3") as store:
            store.append("r", {"seq": 0, "state_name": "perceive"})
            assert [b["state_name"] for b in store.bodies("r")] == ["perceive"]

        def always_busy(store: SQLiteCheckpointer, synchronous: str) -> None:
            raise sqlite3.OperationalError("database is locked")

        monkeypatch.setattr(SQLiteCheckpointer, "_configure", always_busy)
        with pytest.raises(sqlite3.OperationalError, match="locked"):
            SQLiteCheckpointer(tmp_path / "other.sqlite3")


class TestSchemaUpgrade:
    def test_a_schema_2_store_gains_the_metadata_column(self, tmp_path: Path) -> None:
        """A store written before metadata was listed opens, is upgraded in place, keeps
        its runs (metadata unknown), and lists new runs by metadata."""
        db = str(tmp_path / "runs.sqlite3")
        schema_2_store(db)
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

    def test_processes_opening_an_old_store_at_once_upgrade_it_once(
        self, empty_target: str, tmp_path: Path
    ) -> None:
        """Six workers started together against a schema-2 store all open it: the upgrade
        runs under the store's setup lock (SQLite's write lock, PostgreSQL's advisory
        lock), so the others find it done, not half done, and none adds a column again."""
        before = schema_2_store(empty_target)
        seen = race(empty_target, tmp_path)
        assert all("before" in worker["listed"] for worker in seen), seen
        assert [worker["state"] for worker in seen] == ["completed"] * len(seen)
        assert layout(empty_target)[1] == [(str(SCHEMA_VERSION),)]
        assert layout(empty_target) == layout(made_alone(empty_target, tmp_path))
        with open_target(empty_target) as store:
            assert record_to_plain(load_record(store, "before")) == before
            assert {r.run_id: r.metadata for r in store.runs()} == {
                "before": None,
                **{f"w{i}": {"worker": f"w{i}"} for i in range(len(seen))},
            }

    def test_processes_opening_no_store_at_once_create_it_once(
        self, empty_target: str, tmp_path: Path
    ) -> None:
        """Six workers started together where there is no store yet: one creates the
        tables, the others use them, and every worker's run is stored."""
        seen = race(empty_target, tmp_path)
        assert [worker["state"] for worker in seen] == ["completed"] * len(seen)
        assert layout(empty_target)[1] == [(str(SCHEMA_VERSION),)]
        assert layout(empty_target) == layout(made_alone(empty_target, tmp_path))
        with open_target(empty_target) as store:
            assert sorted(r.run_id for r in store.runs()) == [f"w{i}" for i in range(len(seen))]
