"""A run's checkpoints stay within twice its transcript (issue #12, bounded files)."""

from __future__ import annotations

import json
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
from statemachine_agent.testing import replies
from statemachine_agent.testing.postgres import LocalPostgres

STEPS = 200
RESULT_CHARS = 1024


@tool
def lookup(n: int) -> str:
    """Look up an item."""
    text = f"item {n}"
    return text + " " + "lorem ipsum " * ((RESULT_CHARS - len(text)) // 12)


@pytest.fixture(scope="module")
def postgres() -> Iterator[LocalPostgres]:
    with LocalPostgres() as server:
        yield server


def long_run(path: Path | str) -> tuple[Any, Any]:
    """200 tool calls with 1 KiB results, then an answer, checkpointed to SQLite (a path)
    or PostgreSQL (a URL)."""
    script = [replies.tool_use("lookup", {"n": n}) for n in range(STEPS)]
    store: Any = PostgresCheckpointer(path) if isinstance(path, str) else SQLiteCheckpointer(path)
    agent = Agent(
        ScriptedModel([*script, replies.text("done")]),
        tools=[lookup],
        budget=Budget(max_iterations=STEPS + 10),
        stall=None,
        checkpointer=store,
    )
    result = agent.run("look everything up", run_id="long")
    assert result.end_state == "completed", result.reason
    return result, store


def transcript_bytes(messages: list[Any]) -> int:
    return len(json.dumps(messages, ensure_ascii=False, separators=(",", ":")).encode())


class TestCheckpointSize:
    @pytest.mark.parametrize("where", ["sqlite", "postgres"])
    def test_payload_at_200_steps_is_at_most_twice_the_transcript(
        self, tmp_path: Path, where: str, request: pytest.FixtureRequest
    ) -> None:
        """What the store keeps for the run (every checkpoint body) is at most 2x the
        final transcript, and it still folds back to the whole record."""
        target: Path | str = tmp_path / "runs.sqlite3"
        if where == "postgres":
            target = request.getfixturevalue("postgres").dsn
        result, store = long_run(target)
        (summary,) = store.runs()
        transcript = transcript_bytes(result.messages)
        assert summary.checkpoints > 4 * STEPS
        assert summary.bytes <= 2 * transcript, summary.bytes / transcript
        record = load_record(store, "long")
        assert record.messages == result.messages
        assert [t.to_dict() for t in record.trail] == [t.to_dict() for t in result.trail]
        store.close()

    def test_each_tool_result_is_stored_once(self, tmp_path: Path) -> None:
        """A tool's text is in the store once (its outcome), not again in the history."""
        import sqlite3

        _, store = long_run(tmp_path / "runs.sqlite3")
        store.close()
        with sqlite3.connect(tmp_path / "runs.sqlite3") as con:
            bodies = "".join(row[0] for row in con.execute("SELECT body FROM sma_checkpoints"))
        for n in (0, 77, STEPS - 1):
            assert bodies.count(f"item {n} lorem") == 1, n
