"""Cold start: time from a fresh interpreter to the first result of a scripted run.

A test, a demo or a CLI call pays for its imports once per process, and before
issue 26 a scripted run imported the `anthropic` SDK (through the request
validator): about 1 s of a 1.5-2 s first run. Each sample here starts a new
interpreter that imports the package, builds an agent with a `ScriptedModel`
(validating every request, the default) and runs it to `completed`; what is
measured is the wall time of that whole process, and of the same process that
imports only the interpreter (the floor). It also records which model SDKs the
run loaded, which must be none.

Run `python -m benchmarks.cold_start` (part of `make bench`); the figures go to
benchmarks/results/cold_start.json. There is no timed assertion anywhere: the
import-free guarantee is tests/test_testing_imports.py's, this only measures.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

SAMPLES = 7
RESULTS = Path(__file__).resolve().parent / "results" / "cold_start.json"

SCRIPTED_RUN = """
import json, sys
from statemachine_agent import Agent, ScriptedModel, calculate
from statemachine_agent.testing import replies

script = [replies.tool_use("calculate", {"expression": "6 * 7"}), replies.text("42")]
result = Agent(ScriptedModel(script), tools=[calculate]).run("6 x 7?")
assert result.end_state == "completed", result
print(json.dumps(sorted(m for m in ("anthropic", "openai") if m in sys.modules)))
"""


def _wall(code: str) -> tuple[float, str]:
    """Seconds a fresh interpreter takes to run `code`, and what it printed last."""
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    elapsed = time.perf_counter() - start
    lines = done.stdout.strip().splitlines()
    return elapsed, lines[-1] if lines else ""


def measure(samples: int = SAMPLES) -> dict[str, object]:
    """Median wall times (seconds) of the empty interpreter and of the scripted run."""
    _wall(SCRIPTED_RUN)  # warm the file system cache and the bytecode once
    floor = [_wall("pass")[0] for _ in range(samples)]
    runs = [_wall(SCRIPTED_RUN) for _ in range(samples)]
    return {
        "samples": samples,
        "interpreter_s": round(statistics.median(floor), 4),
        "first_result_s": round(statistics.median(t for t, _ in runs), 4),
        "sdks_loaded": json.loads(runs[-1][1]),
    }


def main() -> None:
    figures = measure()
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")
    print(
        f"cold start: first result of a validated scripted run in "
        f"{figures['first_result_s']:.3f} s (an empty interpreter: "
        f"{figures['interpreter_s']:.3f} s); model SDKs loaded: {figures['sdks_loaded'] or 'none'}"
    )


if __name__ == "__main__":
    main()
