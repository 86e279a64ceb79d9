"""A worker process opening a store while others open it: the schema setup race.

Usage: python -m tests.support.store_worker TARGET FOLDER NAME

TARGET is an SQLite path or a PostgreSQL URL. Once ready, the worker waits for the
others (`barrier.py`), then opens the store (creating or upgrading its tables, as
every worker tries to at that moment), lists the runs, drives a run of its own
(run id NAME, metadata `{"worker": NAME}`) and prints what it saw as JSON.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from statemachine_agent import Agent, ScriptedModel
from statemachine_agent.persistence import PostgresCheckpointer, SQLiteCheckpointer, load_record
from tests.support.barrier import wait_for_go

ANSWER = {
    "type": "message",
    "role": "assistant",
    "content": [{"type": "text", "text": "done"}],
    "stop_reason": "end_turn",
    "usage": {"input_tokens": 10, "output_tokens": 2},
}
"""The worker's one model reply (built here: `statemachine_agent.testing` takes seconds
to import, times six workers)."""


def open_target(target: str, **options: Any) -> Any:
    """The store at TARGET: a PostgreSQL URL, or else an SQLite path."""
    if target.startswith("postgresql://"):
        return PostgresCheckpointer(target, **options)
    return SQLiteCheckpointer(target, **options)


def main() -> None:
    target, folder, name = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
    wait_for_go(folder, name)
    with open_target(target) as store:
        listed = sorted(r.run_id for r in store.runs())
        agent = Agent(ScriptedModel([ANSWER], validate=False), checkpointer=store)
        agent.run("hello", run_id=name, metadata={"worker": name})
        state = load_record(store, name).state
    print(json.dumps({"listed": listed, "state": state}))


if __name__ == "__main__":
    main()
