"""The store tells the truth about itself: verified rows, named corruption, versions, tools."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from statemachine_agent import (
    Agent,
    CheckpointCorruptError,
    MissingToolsError,
    ScriptedModel,
    SQLiteCheckpointer,
    calculate,
)
from statemachine_agent.cli import main
from statemachine_agent.persistence import MemoryCheckpointer, PostgresCheckpointer, load_record
from statemachine_agent.persistence.codec import record_to_plain
from statemachine_agent.persistence.sql import SCHEMA_VERSION, link
from statemachine_agent.testing import replies
from statemachine_agent.testing.postgres import LocalPostgres

SCRIPT = [
    replies.tool_use("calculate", {"expression": "6*7"}),
    replies.tool_use("calculate", {"expression": "1+1"}),
    replies.text("42 and 2"),
]


def stored_run(path: Path, run_id: str = "r", *, compress: bool = True) -> int:
    """A finished run in an SQLite store (packed rows, or JSON text); its checkpoint count."""
    store = SQLiteCheckpointer(path, compress=compress)
    Agent(ScriptedModel(SCRIPT), tools=[calculate], checkpointer=store).run("q", run_id=run_id)
    (summary,) = store.runs()
    store.close()
    return summary.checkpoints


def raw(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(path, isolation_level=None)


def corrupt_error(path: Path, run_id: str = "r") -> CheckpointCorruptError:
    with pytest.raises(CheckpointCorruptError) as caught:
        load_record(SQLiteCheckpointer(path), run_id)
    return caught.value


class TestVerifiedRows:
    def test_a_deleted_row_is_named(self, tmp_path: Path) -> None:
        """A checkpoint deleted from the middle: the error names the store, run and number."""
        db = tmp_path / "db"
        stored_run(db)
        raw(db).execute("DELETE FROM sma_checkpoints WHERE run_id = 'r' AND seq = 3")
        error = corrupt_error(db)
        assert (error.store, error.run_id, error.seq) == (f"SQLite store {db}", "r", 3)
        assert "checkpoint 3 is missing" in str(error)

    def test_deleted_last_rows_are_noticed(self, tmp_path: Path) -> None:
        """The newest checkpoints deleted: the run's row still counts them."""
        db = tmp_path / "db"
        count = stored_run(db)
        raw(db).execute(f"DELETE FROM sma_checkpoints WHERE seq > {count - 2}")
        error = corrupt_error(db)
        assert error.seq == count - 1
        assert "the last ones are gone" in str(error)

    @pytest.mark.parametrize(
        ("compress", "damage"),
        [
            (False, "UPDATE sma_checkpoints SET body = body || ' ' WHERE seq = 4"),
            (False, "UPDATE sma_checkpoints SET body = substr(body, 1, 20) WHERE seq = 4"),
            (
                True,
                "UPDATE sma_checkpoints SET packed = CAST(packed || x'00' AS BLOB) WHERE seq = 4",
            ),
            (True, "UPDATE sma_checkpoints SET packed = substr(packed, 1, 9) WHERE seq = 4"),
            (True, "UPDATE sma_checkpoints SET packed = NULL WHERE seq = 4"),
        ],
        ids=["altered", "truncated", "packed-altered", "packed-truncated", "packed-gone"],
    )
    def test_an_altered_or_truncated_row_is_named(
        self, tmp_path: Path, compress: bool, damage: str
    ) -> None:
        """A row whose text (or packed bytes) changed fails its digest, by number."""
        db = tmp_path / "db"
        stored_run(db, compress=compress)
        raw(db).execute(damage)
        error = corrupt_error(db)
        assert error.seq == 4
        assert "does not match its digest" in str(error)

    @pytest.mark.parametrize(
        ("packed", "says"),
        [
            (b"\x01\xff\xfe garbage", "does not inflate"),
            (b"\x01", "truncated"),
            (b"", "is empty"),
            (b"\x09" + b"x" * 20, "packed with dictionary 9, which this version lacks"),
        ],
        ids=["garbage", "truncated", "empty", "unknown-dictionary"],
    )
    def test_a_forged_packed_row_is_named(self, tmp_path: Path, packed: bytes, says: str) -> None:
        """Packed bytes that do not inflate, with the digests fixed up so the chain holds:
        still CheckpointCorruptError by number, never a raw zlib or Unicode error."""
        db = tmp_path / "db"
        with SQLiteCheckpointer(db) as store:
            store.append("r", {"seq": 0, "state_name": "perceive"})
        digest = link("", packed)
        con = raw(db)
        con.execute("UPDATE sma_checkpoints SET packed = ?, digest = ?", (packed, digest))
        con.execute("UPDATE sma_runs SET digest = ?", (digest,))
        error = corrupt_error(db)
        assert (error.run_id, error.seq) == ("r", 1)
        assert says in str(error)

    def test_reordered_rows_are_noticed(self, tmp_path: Path) -> None:
        """Two rows swapped: the chain breaks at the first of them."""
        db = tmp_path / "db"
        stored_run(db)
        con = raw(db)
        con.execute("UPDATE sma_checkpoints SET seq = -1 WHERE seq = 2")
        con.execute("UPDATE sma_checkpoints SET seq = 2 WHERE seq = 3")
        con.execute("UPDATE sma_checkpoints SET seq = 3 WHERE seq = -1")
        assert corrupt_error(db).seq == 2

    def test_a_body_of_the_wrong_shape_is_named(self, tmp_path: Path) -> None:
        """Rows that verify but do not fold into a record: still CheckpointCorruptError."""
        db = tmp_path / "db"
        store = SQLiteCheckpointer(db)
        store.append("r", {"seq": 0, "state_name": "perceive", "messages": {"from": "x"}})
        store.close()
        error = corrupt_error(db)
        assert error.run_id == "r"
        assert "do not make a run record" in str(error)

    def test_a_foreign_file_is_named(self, tmp_path: Path) -> None:
        """A file that is not a database: CheckpointCorruptError naming it, at open."""
        db = tmp_path / "db"
        db.write_bytes(b"this is not SQLite\n" * 500)
        with pytest.raises(CheckpointCorruptError, match=r"SQLite store .*not an SQLite database"):
            SQLiteCheckpointer(db)

    @settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(data=st.data())
    def test_damaged_bytes_never_give_a_raw_error(
        self, tmp_path_factory: pytest.TempPathFactory, data: st.DataObject
    ) -> None:
        """Random bytes overwritten anywhere in the file: the run loads intact, or the
        error is CheckpointCorruptError; never a raw driver, JSON or type error."""
        db = tmp_path_factory.mktemp("damage") / "db"
        stored_run(db)
        good = record_to_plain(load_record(SQLiteCheckpointer(db), "r"))
        content = bytearray(db.read_bytes())
        offset = data.draw(st.integers(0, len(content) - 1), label="offset")
        junk = data.draw(st.binary(min_size=1, max_size=64), label="junk")
        content[offset : offset + len(junk)] = junk
        db.write_bytes(bytes(content[: len(db.read_bytes())]))
        outcome: Any
        try:
            outcome = record_to_plain(load_record(SQLiteCheckpointer(db), "r"))
        except CheckpointCorruptError as exc:
            outcome = exc
        if isinstance(outcome, CheckpointCorruptError):
            assert str(outcome).startswith(f"SQLite store {db}")
        else:
            assert outcome == good


class TestVersions:
    def test_a_newer_store_is_refused(self, tmp_path: Path) -> None:
        """A store whose schema version is newer than this code: refused by name."""
        db = tmp_path / "db"
        stored_run(db)
        raw(db).execute("UPDATE sma_meta SET value = '99' WHERE key = 'schema_version'")
        with pytest.raises(CheckpointCorruptError, match=r"newer version.*schema 99"):
            SQLiteCheckpointer(db)

    def test_a_wrong_schema_version_is_refused(self, tmp_path: Path) -> None:
        """A schema version that is not a number: refused by name."""
        db = tmp_path / "db"
        stored_run(db)
        raw(db).execute("UPDATE sma_meta SET value = 'two' WHERE key = 'schema_version'")
        with pytest.raises(CheckpointCorruptError, match="schema version 'two'"):
            SQLiteCheckpointer(db)

    def test_a_row_written_by_a_newer_version_is_named(self, tmp_path: Path) -> None:
        """One row in a newer format: the error names its run and number."""
        db = tmp_path / "db"
        stored_run(db)
        raw(db).execute(f"UPDATE sma_checkpoints SET version = {SCHEMA_VERSION + 1} WHERE seq = 2")
        error = corrupt_error(db)
        assert error.seq == 2
        assert "newer version" in str(error)

    def test_a_schema_1_store_is_migrated(self, tmp_path: Path) -> None:
        """A store of the first layout opens as the current one, every run intact."""
        memory = MemoryCheckpointer()
        Agent(ScriptedModel(SCRIPT), tools=[calculate], checkpointer=memory).run("q", run_id="r")
        db = tmp_path / "db"
        write_schema_1(raw(db), "checkpoints", "?", memory)
        migrated = SQLiteCheckpointer(db)
        assert record_to_plain(load_record(migrated, "r")) == record_to_plain(
            load_record(memory, "r")
        )
        assert [r.run_id for r in migrated.runs()] == ["r"]
        assert raw(db).execute("SELECT value FROM sma_meta").fetchone() == (str(SCHEMA_VERSION),)


def write_schema_1(con: Any, table: str, mark: str, memory: MemoryCheckpointer) -> None:
    """The store layout before schema versions: one table, no numbering, no digests."""
    serial = "BIGSERIAL" if mark == "%s" else "INTEGER PRIMARY KEY AUTOINCREMENT"
    key = " PRIMARY KEY" if mark == "%s" else ""
    con.execute(
        f"CREATE TABLE {table} (id {serial}{key}, run_id TEXT NOT NULL, seq INTEGER NOT NULL, "
        "state TEXT NOT NULL, body TEXT NOT NULL)"
    )
    for body in memory.bodies("r"):
        con.execute(
            f"INSERT INTO {table} (run_id, seq, state, body) VALUES ({', '.join([mark] * 4)})",
            ("r", body["seq"], body["state_name"], json.dumps(body)),
        )


@pytest.fixture(scope="module")
def postgres() -> Iterator[LocalPostgres]:
    with LocalPostgres() as server:
        yield server


class TestPostgres:
    def test_rows_are_verified_in_postgres(self, postgres: LocalPostgres) -> None:
        """A row deleted in PostgreSQL is named as in SQLite."""
        import psycopg

        store = PostgresCheckpointer(postgres.dsn)
        Agent(ScriptedModel(SCRIPT), tools=[calculate], checkpointer=store).run("q", run_id="pg")
        with psycopg.connect(postgres.dsn, autocommit=True) as con:
            con.execute("DELETE FROM sma_checkpoints WHERE run_id = 'pg' AND seq = 2")
        with pytest.raises(CheckpointCorruptError) as caught:
            load_record(store, "pg")
        assert caught.value.seq == 2
        assert caught.value.store.startswith("PostgreSQL store")
        store.close()

    def test_an_altered_packed_row_is_named_in_postgres(self, postgres: LocalPostgres) -> None:
        """Packed bytes changed in PostgreSQL fail the digest chain, by number."""
        import psycopg

        store = PostgresCheckpointer(postgres.dsn)
        Agent(ScriptedModel(SCRIPT), tools=[calculate], checkpointer=store).run("q", run_id="pk")
        with psycopg.connect(postgres.dsn, autocommit=True) as con:
            con.execute(
                "UPDATE sma_checkpoints SET packed = packed || '\\x00'::bytea "
                "WHERE run_id = 'pk' AND seq = 3"
            )
        with pytest.raises(CheckpointCorruptError, match="does not match its digest") as caught:
            load_record(store, "pk")
        assert caught.value.seq == 3
        store.close()

    def test_a_schema_1_postgres_store_is_migrated(self) -> None:
        """The first layout's `sma_checkpoints` table becomes the current tables."""
        import psycopg

        memory = MemoryCheckpointer()
        Agent(ScriptedModel(SCRIPT), tools=[calculate], checkpointer=memory).run("q", run_id="r")
        with LocalPostgres() as server:
            with psycopg.connect(server.dsn, autocommit=True) as con:
                write_schema_1(con, "sma_checkpoints", "%s", memory)
                con.execute("CREATE INDEX sma_checkpoints_run ON sma_checkpoints (run_id, id)")
            store = PostgresCheckpointer(server.dsn)
            assert record_to_plain(load_record(store, "r")) == record_to_plain(
                load_record(memory, "r")
            )
            store.close()


class TestResumeTools:
    def test_resuming_without_a_called_tool_names_it(self, tmp_path: Path) -> None:
        """A resumed run whose tools lack ones it called: MissingToolsError naming them."""
        from statemachine_agent import CancelToken, tool

        token = CancelToken()

        @tool
        def step(n: int) -> str:
            """A step after which the host cancels."""
            token.cancel()
            return "ok"

        store = SQLiteCheckpointer(tmp_path / "db")
        script = [replies.tool_use("step", {"n": 1}), replies.text("done")]
        Agent(ScriptedModel(script), tools=[step], checkpointer=store).run(
            "go", run_id="c", cancel=token
        )
        without = Agent(
            ScriptedModel([replies.text("done")]), tools=[calculate], checkpointer=store
        )
        with pytest.raises(MissingToolsError, match="step") as caught:
            without.resume("c")
        assert caught.value.missing == ["step"]


class TestCommandLine:
    def test_a_corrupt_store_is_one_line(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """`runs` on a damaged store: one `statemachine-agent: error:` line, exit 2."""
        db = tmp_path / "db"
        db.write_bytes(b"\x00garbage" * 1000)
        assert main(["runs", "--store", str(db)]) == 2
        err = capsys.readouterr().err
        assert err.startswith("statemachine-agent: error: SQLite store")
        assert err.count("\n") == 1


def test_link_depends_on_the_previous_digest() -> None:
    """The chain: the same row after different predecessors has different digests."""
    assert link("", "x") != link(link("", "y"), "x")
