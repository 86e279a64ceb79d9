"""The engine's cost per iteration, counted rather than timed, against a committed budget.

Timed assertions flake on shared machines; counts do not. Each workload is
benchmark 1's script (50 calls of a trivial async tool, then a text answer: 51
iterations): `engine` with no sink (benchmark 1's (b)), `sqlite` with a
`SQLiteCheckpointer` ((d)), `jsonl` with an audit folder ((c)), `stream` through
`agent.astream`, and `history`: `engine` again, but starting from an earlier
run's history of `EARLIER` tool calls, so any work over the whole history in an
iteration shows (an iteration must cost what is new in it). Each is run once to
warm up and then once measured, in this process, with:

- `calls`: Python function calls (`sys.setprofile` "call" events, which include
  each resumption of a coroutine or generator);
- `builtin_calls`: calls of C functions and methods ("c_call" events);
- `allocated_bytes`: bytes allocated and still alive at the next call boundary,
  summed (tracemalloc's traced size, read at every "return" and "c_return": a
  rise since the last reading counts, a fall does not), so a value built and
  kept for a moment (a `json.dumps` of the history) counts in full every time;
- `events`: `Emitter.emit` calls (whether or not anyone listens);
- `sql_statements` and `store_bytes` (SQLite workload): statements the store's
  connection executed (`set_trace_callback`) and bytes it stored (`RunSummary.bytes`);
- `audit_bytes` (JSONL workload): the size of the run's audit file;
- `stream_events` (stream workload): the events the stream handed out.

Every figure is per iteration (divided by 51). Clocks are fixed (a constant
wall clock, a monotonic clock that advances by a millisecond a reading) and run
ids given, so a figure is the same run after run, whatever the hash seed or the
machine's load; it does depend on the Python version (the budget names its own)
and on the versions of the libraries the engine calls.

    python -m benchmarks.cost_budget            # print every figure against the budget
    python -m benchmarks.cost_budget --write    # write benchmarks/budget.json from this run
    python -m benchmarks.cost_budget --json     # print the figures as JSON (the test reads it)

`tests/test_cost_budget.py` fails when a figure exceeds its budget by more than
`TOLERANCE`. Lowering a budget is free; raising one is a commit that says why.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import platform
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any
from unittest import mock

from benchmarks import common

CALLS = 50
ITERATIONS = CALLS + 1
TOLERANCE = 0.05
"""How far above its budget a figure may go before the test fails."""
BUDGET = Path(__file__).resolve().parent / "budget.json"
WORKLOADS = ("engine", "sqlite", "jsonl", "stream", "history")
EARLIER = 200
"""Tool calls in the history the `history` workload's run starts from."""
WALL_CLOCK = 1_800_000_000.0
"""`time.time()` during a measured run: a constant, so every timestamp has one length."""


class _SteppingEffects:
    """In-process effects whose monotonic clock advances 1 ms a reading: elapsed times
    (in events, records and checkpoints) are the same in every run."""

    def __init__(self) -> None:
        from statemachine_agent.effects.base import InProcessEffects

        self._inner = InProcessEffects()
        self.call_model = self._inner.call_model
        self.run_tools = self._inner.run_tools
        self._now = 0.0

    def monotonic(self) -> float:
        self._now += 0.001
        return self._now


@dataclass
class _Counts:
    calls: int = 0
    builtin_calls: int = 0
    allocated: int = 0
    events: int = 0
    extra: dict[str, float] = field(default_factory=dict)


@contextmanager
def _counting(counts: _Counts) -> Iterator[None]:
    """Count calls and allocations on this thread while the block runs."""
    from statemachine_agent.audit.events import Emitter

    emit = Emitter.emit.__code__
    traced = tracemalloc.get_traced_memory
    last = traced()[0]

    def hook(frame: FrameType, event: str, arg: Any) -> None:
        nonlocal last
        if event == "call":
            counts.calls += 1
            if frame.f_code is emit:
                counts.events += 1
        elif event == "c_call":
            counts.builtin_calls += 1
        else:
            now = traced()[0]
            if now > last:
                counts.allocated += now - last
            last = now

    sys.setprofile(hook)
    try:
        yield
    finally:
        sys.setprofile(None)


def _script() -> list[dict[str, Any]]:
    """Benchmark 1's script (`common.tool_script`), with fixed message and tool_use ids."""
    from statemachine_agent.testing import replies

    bodies = [
        replies.reply(
            replies.tool_use_block("lookup", {"n": i}, id=f"toolu_{i:024x}"),
            stop_reason="tool_use",
            id=f"msg_{i:024x}",
        )
        for i in range(CALLS)
    ]
    return [*bodies, replies.text("done", id=f"msg_{CALLS:024x}")]


def _history() -> list[dict[str, Any]]:
    """An earlier run's messages: a prompt, `EARLIER` tool calls with their results, an answer."""
    from statemachine_agent.testing import replies

    messages: list[dict[str, Any]] = [{"role": "user", "content": "earlier"}]
    for i in range(EARLIER):
        call = replies.tool_use_block("lookup", {"n": i}, id=f"toolu_h{i:023x}")
        result = {"type": "tool_result", "tool_use_id": call["id"], "content": f"item {i}"}
        messages += [
            {"role": "assistant", "content": [call]},
            {"role": "user", "content": [result]},
        ]
    return [*messages, {"role": "assistant", "content": [replies.text_block("done")]}]


class _Model(common.FakeModel):
    """Benchmark 1's model, answering the run's own requests after `offset` earlier messages."""

    def __init__(self, offset: int) -> None:
        super().__init__(_script())
        self.offset = offset

    def complete(self, request: Any) -> Any:
        return self._reply(self.bodies[(len(request.messages) - self.offset) // 2])


def _agent(offset: int, **options: Any) -> Any:
    from statemachine_agent import Agent, Budget

    return Agent(
        model=_Model(offset),
        tools=[common.lookup_tool("async")],
        budget=Budget(max_iterations=ITERATIONS + 10),
        effects=_SteppingEffects(),
        **options,
    )


async def _drive(
    agent: Any, run_id: str, streamed: bool, history: list[dict[str, Any]]
) -> tuple[Any, int]:
    if not streamed:
        return await agent.arun("go", run_id=run_id, history=history), 0
    from statemachine_agent.stream.events import RunEnded

    handed = 0
    result = None
    async for event in agent.astream("go", run_id=run_id):
        handed += 1
        if isinstance(event, RunEnded):
            result = event.result
    return result, handed


def measure(workload: str) -> dict[str, float]:
    """The figures of one workload, per iteration (see the module's docstring)."""
    if workload not in WORKLOADS:
        raise ValueError(f"unknown workload {workload!r}; one of {', '.join(WORKLOADS)}")
    with (
        tempfile.TemporaryDirectory() as tmp,
        mock.patch.object(time, "time", _wall),
        mock.patch.object(time, "perf_counter", _wall),
    ):
        store = None
        options: dict[str, Any] = {}
        if workload == "sqlite":
            from statemachine_agent.persistence import SQLiteCheckpointer

            store = SQLiteCheckpointer(Path(tmp) / "runs.db")
            options["checkpointer"] = store
        elif workload == "jsonl":
            options["audit"] = Path(tmp) / "audit"
        history = _history() if workload == "history" else []
        agent = _agent(len(history), **options)
        streamed = workload == "stream"
        try:
            return _measured(agent, store, workload, streamed, history, Path(tmp))
        finally:
            if store is not None:
                store.close()


def _wall() -> float:
    """The fixed clock of a measured run (tool durations read 0)."""
    return WALL_CLOCK


def _measured(
    agent: Any,
    store: Any,
    workload: str,
    streamed: bool,
    history: list[dict[str, Any]],
    tmp: Path,
) -> dict[str, float]:
    statements = [0]
    if store is not None:
        store._db.set_trace_callback(lambda _sql: statements.__setitem__(0, statements[0] + 1))
    loop = asyncio.new_event_loop()
    try:
        warm, _ = loop.run_until_complete(_drive(agent, "run_costwarmup00000", streamed, history))
        _check(warm)
        del warm
        counts = _Counts()
        statements[0] = 0
        gc.collect()
        gc.disable()
        tracemalloc.start()
        try:
            with _counting(counts):
                result, handed = loop.run_until_complete(
                    _drive(agent, "run_costmeasured000", streamed, history)
                )
        finally:
            tracemalloc.stop()
            gc.enable()
        _check(result)
    finally:
        loop.close()
    figures: dict[str, float] = {
        "calls": counts.calls,
        "builtin_calls": counts.builtin_calls,
        "allocated_bytes": counts.allocated,
        "events": counts.events,
    }
    if store is not None:
        figures["sql_statements"] = statements[0]
        summary = next(s for s in store.runs() if s.run_id == "run_costmeasured000")
        figures["store_bytes"] = summary.bytes
    if workload == "jsonl":
        figures["audit_bytes"] = (tmp / "audit" / "run_costmeasured000.jsonl").stat().st_size
    if streamed:
        figures["stream_events"] = handed
    return {name: round(value / ITERATIONS, 1) for name, value in figures.items()}


def _check(result: Any) -> None:
    if result is None or result.end_state != "completed" or result.iterations != ITERATIONS:
        raise RuntimeError(f"the workload did not run as scripted: {result!r}")


def measure_all() -> dict[str, dict[str, float]]:
    return {workload: measure(workload) for workload in WORKLOADS}


# -- the budget ------------------------------------------------------------------------


def python_version() -> str:
    return ".".join(platform.python_version_tuple()[:2])


@dataclass(frozen=True)
class Line:
    """One figure against its budget."""

    workload: str
    figure: str
    value: float
    budget: float | None

    @property
    def ratio(self) -> float | None:
        if self.budget is None:
            return None
        return self.value / self.budget if self.budget else float(self.value > 0) + 1.0

    @property
    def over(self) -> bool:
        return self.ratio is None or self.ratio > 1 + TOLERANCE


def compare(figures: Mapping[str, Mapping[str, float]], budget: Mapping[str, Any]) -> list[Line]:
    """Every measured figure with its budget (None: the budget has no such figure)."""
    limits = budget.get("workloads", {})
    return [
        Line(workload, name, value, limits.get(workload, {}).get(name))
        for workload, measured in figures.items()
        for name, value in measured.items()
    ]


def report(lines: list[Line]) -> str:
    rows = [
        (
            line.workload,
            line.figure,
            common.fmt(line.value, 4),
            common.fmt(line.budget, 4),
            "-" if line.ratio is None else f"{line.ratio:.3f}",
            "OVER" if line.over else "ok",
        )
        for line in lines
    ]
    return common.table(
        ["workload", "figure (per iteration)", "measured", "budget", "ratio", ""], rows
    )


def load_budget(path: Path = BUDGET) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return body


def write_budget(figures: Mapping[str, Mapping[str, float]], path: Path = BUDGET) -> None:
    body = {
        "python": python_version(),
        "tolerance": TOLERANCE,
        "per": f"iteration ({ITERATIONS} a run: {CALLS} tool calls and the answer)",
        "workloads": figures,
    }
    path.write_text(json.dumps(body, indent=2) + "\n", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.cost_budget")
    parser.add_argument("--write", action="store_true", help="write the budget from this run")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    figures = measure_all()
    if args.json:
        print(json.dumps({"python": python_version(), "workloads": figures}))
        return 0
    if args.write:
        write_budget(figures)
        print(f"wrote {BUDGET} (Python {python_version()})")
        return 0
    lines = compare(figures, load_budget())
    print(report(lines))
    return 1 if any(line.over for line in lines) else 0


if __name__ == "__main__":
    sys.exit(main())
