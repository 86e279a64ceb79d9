"""A run's checkpoints stay within twice its transcript (issue #12, bounded files)."""

from __future__ import annotations

import json
import random
import string
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from statemachine_agent import (
    Agent,
    Budget,
    PostgresCheckpointer,
    ScriptedModel,
    SQLiteCheckpointer,
    tool,
)
from statemachine_agent.persistence import load_record
from statemachine_agent.persistence.packing import unpack
from statemachine_agent.testing import replies
from statemachine_agent.testing.postgres import LocalPostgres

STEPS = 200
RESULT_CHARS = 1024


def result_text(n: int) -> str:
    """1 KiB of random letters and digits after "item n": text deflate cannot shrink much,
    so packing gains nothing from the results themselves (the hard case for the bound)."""
    head = f"item {n} "
    pad = random.Random(n).choices(string.ascii_letters + string.digits, k=RESULT_CHARS)
    return head + "".join(pad[: RESULT_CHARS - len(head)])


@tool
def lookup(n: int) -> str:
    """Look up an item."""
    return result_text(n)


@tool(name="lookup")
def short_lookup(n: int) -> str:
    """Look up an item."""
    return f"item {n}"


RESULTS = {"1 KiB": lookup, "one word": short_lookup}
"""Tool results of a realistic size (and no redundancy), and results so small that each
step's bookkeeping (counters, usage, timings, the trail) outweighs its part of the
transcript."""
RUN_IDS = {"1 KiB": "long", "one word": "long-short"}


@pytest.fixture(scope="module")
def postgres() -> Iterator[LocalPostgres]:
    with LocalPostgres() as server:
        yield server


def long_run(path: Path | str, results: str = "1 KiB") -> tuple[Any, Any]:
    """200 tool calls (with `RESULTS[results]`), then an answer, checkpointed to SQLite (a
    path) or PostgreSQL (a URL)."""
    script = [replies.tool_use("lookup", {"n": n}) for n in range(STEPS)]
    store: Any = PostgresCheckpointer(path) if isinstance(path, str) else SQLiteCheckpointer(path)
    agent = Agent(
        ScriptedModel([*script, replies.text("done")]),
        tools=[RESULTS[results]],
        budget=Budget(max_iterations=STEPS + 10),
        stall=None,
        checkpointer=store,
    )
    result = agent.run("look everything up", run_id=RUN_IDS[results])
    assert result.end_state == "completed", result.reason
    return result, store


def stored_bytes(store: Any, run_id: str) -> int:
    """The bytes the database itself holds in the run's rows (text and packed columns)."""
    octets = "octet_length" if isinstance(store, PostgresCheckpointer) else "length"
    query = (
        f"SELECT SUM({octets}(CAST(body AS BLOB))) + SUM(COALESCE({octets}(packed), 0)) "
        f"FROM sma_checkpoints WHERE run_id = '{run_id}'"
    )
    if isinstance(store, PostgresCheckpointer):
        query = query.replace("CAST(body AS BLOB)", "body")
    return int(store._execute(query, ()).fetchone()[0])


def transcript_bytes(messages: list[Any]) -> int:
    return len(json.dumps(messages, ensure_ascii=False, separators=(",", ":")).encode())


class TestCheckpointSize:
    @pytest.mark.parametrize("results", list(RESULTS))
    @pytest.mark.parametrize("where", ["sqlite", "postgres"])
    def test_payload_at_200_steps_is_at_most_twice_the_transcript(
        self, tmp_path: Path, where: str, results: str, request: pytest.FixtureRequest
    ) -> None:
        """What the store keeps for the run (every checkpoint body, as the database holds
        it) is at most 2x the final transcript, and it still folds back to the whole record."""
        target: Path | str = tmp_path / "runs.sqlite3"
        if where == "postgres":
            target = request.getfixturevalue("postgres").dsn
        result, store = long_run(target, results)
        (summary,) = (s for s in store.runs() if s.run_id == RUN_IDS[results])
        transcript = transcript_bytes(result.messages)
        assert summary.checkpoints >= 2 * STEPS  # the reply and the outcome, each iteration
        assert summary.bytes == stored_bytes(store, summary.run_id)
        assert summary.bytes <= 2 * transcript, summary.bytes / transcript
        record = load_record(store, summary.run_id)
        assert record.messages == result.messages
        assert [t.to_dict() for t in record.trail] == [t.to_dict() for t in result.trail]
        store.close()

    def test_each_tool_result_is_stored_once(self, tmp_path: Path) -> None:
        """A tool's text is in the store once (its outcome), not again in the history."""
        import sqlite3

        _, store = long_run(tmp_path / "runs.sqlite3")
        store.close()
        with sqlite3.connect(tmp_path / "runs.sqlite3") as con:
            rows = con.execute("SELECT packed FROM sma_checkpoints").fetchall()
        bodies = "".join(unpack(packed) for (packed,) in rows)
        for n in (0, 77, STEPS - 1):
            assert bodies.count(result_text(n)) == 1, n
