"""Start worker processes at once: each says it is ready, then waits for the word to go.

A worker calls `wait_for_go(folder, name)` once it has imported and built what it
needs; the test calls `start_together(processes, folder)`, which writes FOLDER/go
when every worker is ready, so they all reach the contested step together.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path


def wait_for_go(folder: Path, name: str) -> None:
    """In a worker: say this one is ready (FOLDER/ready.NAME), then wait for FOLDER/go."""
    (folder / f"ready.{name}").write_text("")
    while not (folder / "go").exists():
        time.sleep(0.005)


def start_together(processes: list[subprocess.Popen[str]], folder: Path) -> None:
    """In the test: let the workers go once every one of them is ready."""
    deadline = time.monotonic() + 120
    while len(list(folder.glob("ready.*"))) < len(processes):
        assert time.monotonic() < deadline, "workers did not get ready"
        died = [p for p in processes if p.poll() is not None]
        assert not died, [p.communicate() for p in died]
        time.sleep(0.02)
    (folder / "go").write_text("")
