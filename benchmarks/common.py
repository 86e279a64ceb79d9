"""What every benchmark shares: timing, medians, machine info, results, the engine's fake model.

Machines here are shared and noisy, so a figure is only read against a baseline
measured in the same process: `interleave` runs every case once per round, round
after round, so a burst of noise hits all cases alike, and each case reports the
median (with min and max) of its rounds.
"""

from __future__ import annotations

import gc
import importlib.metadata
import importlib.util
import inspect
import json
import os
import platform
import random
import statistics
import string
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).resolve().parent / "results"
REPEATS = int(os.environ.get("BENCH_REPEATS", "7"))
"""Rounds per case (the issue asks for at least 5)."""
PEERS = (
    "statemachine-agent",
    "transitions",
    "structlog",
    "langgraph",
    "langgraph-checkpoint",
    "langgraph-checkpoint-sqlite",
    "langgraph-prebuilt",
    "langchain-core",
    "pydantic-ai-slim",
    "pydantic",
    "jsonschema",
    "pyinstrument",
    "matplotlib",
)


# -- figures ---------------------------------------------------------------------------


def summary(samples: Sequence[float]) -> dict[str, Any]:
    """Median, min and max of a case's rounds (and the rounds themselves)."""
    return {
        "median": statistics.median(samples),
        "min": min(samples),
        "max": max(samples),
        "n": len(samples),
        "samples": list(samples),
    }


def ratio(a: Mapping[str, Any], b: Mapping[str, Any]) -> float:
    return float(a["median"]) / float(b["median"])


def calibrate(case: Callable[[int], float], min_seconds: float = 0.15) -> int:
    """Units per round so one round lasts at least `min_seconds` (after a warm-up)."""
    case(1)
    elapsed = case(1)
    return max(1, min(10_000, int(min_seconds / max(elapsed, 1e-9)) + 1))


def interleave(
    cases: Mapping[str, Callable[[int], float]],
    per_unit: Mapping[str, float],
    repeats: int = REPEATS,
    min_seconds: float = 0.15,
) -> dict[str, dict[str, Any]]:
    """Run each case `repeats` times, round-robin; return per-unit figures per case.

    A case is `fn(n) -> seconds spent doing n units`; `per_unit[name]` divides the
    time of one unit into the reported figure (e.g. 51 iterations a run, in us).
    """
    units = {name: calibrate(fn, min_seconds) for name, fn in cases.items()}
    samples: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(repeats):
        for name, fn in cases.items():
            gc.collect()
            seconds = fn(units[name])
            samples[name].append(seconds / units[name] * per_unit[name])
    return {
        name: {**summary(values), "units_per_round": units[name]}
        for name, values in samples.items()
    }


def fmt(value: float | None, digits: int = 3) -> str:
    """A figure with `digits` significant digits, thousands separated."""
    if value is None:
        return "-"
    if value == 0:
        return "0"
    magnitude = len(str(int(abs(value)))) if abs(value) >= 1 else 0
    decimals = max(0, digits - magnitude)
    return f"{value:,.{decimals}f}"


def fmt_range(stat: Mapping[str, Any], digits: int = 3) -> str:
    return f"{fmt(stat['median'], digits)} ({fmt(stat['min'], digits)}-{fmt(stat['max'], digits)})"


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A Markdown table (readable as plain text too)."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


# -- where and what ran ----------------------------------------------------------------


def machine_info() -> dict[str, Any]:
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        mem = 0
    return {
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "cpu": cpu or platform.processor(),
        "cores": os.cpu_count(),
        "memory_gib": round(mem / 2**30, 1),
        "load_avg": os.getloadavg() if hasattr(os, "getloadavg") else None,
    }


def versions(names: Sequence[str] = PEERS) -> dict[str, str | None]:
    found: dict[str, str | None] = {}
    for name in names:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found[name] = None
    return found


def write_result(name: str, figures: Mapping[str, Any], text: str) -> Path:
    """Write results/<name>.json (machine, versions, figures, the printed table)."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    body = {
        "benchmark": name,
        "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": machine_info(),
        "versions": versions(),
        "figures": figures,
        "table": text,
    }
    path.write_text(json.dumps(body, indent=2, default=str) + "\n", encoding="utf-8")
    return path


def persistence_ready() -> bool:
    """The durable-runs API is there: `SQLiteCheckpointer` and `Agent(checkpointer=...)`."""
    if importlib.util.find_spec("statemachine_agent.persistence") is None:
        return False
    try:
        from statemachine_agent import Agent
        from statemachine_agent.persistence import SQLiteCheckpointer  # noqa: F401
    except ImportError:
        return False
    return "checkpointer" in inspect.signature(Agent).parameters


PENDING_PERSISTENCE = "pending: statemachine_agent.persistence (SQLiteCheckpointer) not there yet"


# -- the engine's model and tool -------------------------------------------------------


class FakeModel:
    """A zero-latency (or `delay`-second) model answering from a fixed script.

    Stateless, so one agent serves every run: the reply to a request is chosen by
    the request's length (user prompt, then one assistant and one user message
    per iteration), the way the peers' fake models do it.
    """

    def __init__(self, bodies: Sequence[Mapping[str, Any]], delay: float = 0.0) -> None:
        from statemachine_agent.models.base import DEFAULT_MODEL, ModelReply

        self.name = DEFAULT_MODEL
        self._reply = ModelReply.from_api
        self.bodies = list(bodies)
        self.delay = delay

    def complete(self, request: Any) -> Any:
        return self._reply(self.bodies[len(request.messages) // 2])

    async def acomplete(self, request: Any) -> Any:
        if self.delay:
            import asyncio

            await asyncio.sleep(self.delay)
        return self.complete(request)


def tool_script(calls: int, tool: str = "lookup", per_reply: int = 1) -> list[dict[str, Any]]:
    """`calls` replies asking for `tool` (distinct arguments), then a final text."""
    from statemachine_agent.testing import replies

    bodies = [
        replies.reply(
            *(replies.tool_use_block(tool, {"n": i * per_reply + j}) for j in range(per_reply)),
            stop_reason="tool_use",
        )
        for i in range(calls)
    ]
    return [*bodies, replies.text("done")]


def lookup_tool(kind: str = "async", size: int = 0) -> Any:
    """The trivial tool every system gets: `lookup(n) -> "item n"` (padded to `size` chars
    of random letters and digits, which compression cannot shrink much)."""
    from statemachine_agent import tool

    def answer(n: int) -> str:
        text = f"item {n}"
        if not size:
            return text
        pad = random.Random(n).choices(string.ascii_letters + string.digits, k=size)
        return f"{text} " + "".join(pad[: max(0, size - len(text) - 1)])

    if kind == "async":

        async def lookup(n: int) -> str:
            """Look up an item.

            Args:
                n: The item number.
            """
            return answer(n)

    else:

        def lookup(n: int) -> str:
            """Look up an item.

            Args:
                n: The item number.
            """
            return answer(n)

    return tool(lookup)
