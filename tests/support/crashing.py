"""What the SIGKILL tests share: the store a child process writes to (SQLite or a
PostgreSQL URL, with a short lease so the resuming process takes over soon) and the
call that runs a child module and reads the JSON line it prints last."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from statemachine_agent.persistence import Checkpointer, PostgresCheckpointer, SQLiteCheckpointer

LEASE_SECONDS = 1.0
"""Short, so the resuming process takes over the killed one's lease soon."""

ROOT = Path(__file__).resolve().parent.parent.parent


def store(where: str) -> Checkpointer:
    """The checkpointer at `where`: a PostgreSQL URL, else a SQLite file."""
    if where.startswith("postgresql://"):
        return PostgresCheckpointer(where, lease_seconds=LEASE_SECONDS)
    return SQLiteCheckpointer(Path(where), lease_seconds=LEASE_SECONDS)


def run_child(module: str, *args: str) -> dict[str, Any]:
    """Run `python -m module args...`; the JSON it printed last, or how it died."""
    done = subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        return {"returncode": done.returncode, "stderr": done.stderr[-2000:]}
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))
