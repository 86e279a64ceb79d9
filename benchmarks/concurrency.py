"""Benchmark 2: many runs at once in one process, and what an open run holds.

Part 1 (throughput): RUNS concurrent `Agent.arun` calls on one event loop, each 5
iterations (4 tool calls, then text) against a model that answers after 1 s
(`asyncio.sleep`; BENCH_MODEL_DELAY to change). The ideal wall time is 5 x 1 s;
the baseline measured in the same rounds is a bare asyncio loop doing the same
sleeps and tool calls with no engine at all.
Peak memory per run is tracemalloc's peak over a separate, traced round of
PEAK_RUNS runs, divided by PEAK_RUNS. The process's peak memory (its maximum resident
set, VmHWM) is read from a fresh interpreter that runs one round of RUNS runs (`--rss`),
with and without `gc.freeze()`, so nothing else the benchmark did counts.

Part 2 (memory per open run): OPEN runs are started and left blocked inside the
model call; tracemalloc's growth / OPEN is what one in-flight run holds (record,
context, emitter, task and frames; the history is only the prompt). The same is
measured for the peers' ways of holding a run open, in the same process.
"""

from __future__ import annotations

import asyncio
import gc
import importlib.util
import os
import resource
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Awaitable, Callable
from typing import Any

from benchmarks import common

RUNS = int(os.environ.get("BENCH_CONCURRENT_RUNS", "10000"))
ITERATIONS = 5
DELAY = float(os.environ.get("BENCH_MODEL_DELAY", "1.0"))
IDEAL = ITERATIONS * DELAY
OPEN = int(os.environ.get("BENCH_OPEN_RUNS", "2000"))
PEAK_RUNS = min(RUNS, 2000)
"""Runs in the traced round for peak memory (tracemalloc slows a round ~3x)."""
PEER_OPEN = {"pydantic_ai_iter": 200, "langgraph_paused": 100}
"""Fewer open runs for the slow-to-start peers (per-run bytes do not depend on the count)."""
REPEATS = int(os.environ.get("BENCH_CONCURRENCY_REPEATS", "5"))
"""Rounds of each throughput case (fewer while iterating)."""


class CountingSink:
    """Counts events (the run's own audit sink, as cheap as a sink can be)."""

    def __init__(self) -> None:
        self.events = 0

    def write(self, event: Any) -> None:
        self.events += 1

    def close(self) -> None:
        return None


def make_agent(delay: float, sink: CountingSink | None = None) -> Any:
    from statemachine_agent import Agent, Audit

    return Agent(
        model=common.FakeModel(common.tool_script(ITERATIONS - 1), delay=delay),
        tools=[common.lookup_tool()],
        audit=Audit(sinks=[sink] if sink else []),
    )


# -- part 1: throughput ----------------------------------------------------------------


async def _engine_round(runs: int, freeze: bool = False) -> tuple[float, float, int]:
    """Wall and CPU seconds of one round, and its events; `freeze`: `gc.freeze()` once
    the agent is built (what a host may do after its start-up), undone after the round."""
    sink = CountingSink()
    agent = make_agent(DELAY, sink)
    if freeze:
        gc.freeze()
    try:
        start, cpu = time.perf_counter(), time.process_time()
        results = await asyncio.gather(*(agent.arun("go") for _ in range(runs)))
        wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    finally:
        if freeze:
            gc.unfreeze()
    assert all(r.end_state == "completed" and r.iterations == ITERATIONS for r in results)
    return wall, cpu, sink.events


async def _frozen_round(runs: int) -> tuple[float, float, int]:
    return await _engine_round(runs, freeze=True)


async def _bare_round(runs: int) -> tuple[float, float, int]:
    async def lookup(n: int) -> str:
        return f"item {n}"

    async def one() -> list[dict[str, Any]]:
        messages: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
        for i in range(ITERATIONS):
            await asyncio.sleep(DELAY)
            messages.append({"role": "assistant", "content": f"call {i}"})
            if i < ITERATIONS - 1:
                messages.append({"role": "user", "content": await lookup(i)})
        return messages

    start, cpu = time.perf_counter(), time.process_time()
    await asyncio.gather(*(one() for _ in range(runs)))
    return time.perf_counter() - start, time.process_time() - cpu, 0


def throughput() -> dict[str, Any]:
    rounds = {"bare": _bare_round, "engine": _engine_round, "frozen": _frozen_round}
    walls: dict[str, list[float]] = {name: [] for name in rounds}
    cpus: dict[str, list[float]] = {name: [] for name in rounds}
    events = 0
    for _ in range(REPEATS):
        for name, fn in rounds.items():
            gc.collect()
            wall, cpu, count = asyncio.run(fn(RUNS))
            walls[name].append(wall)
            cpus[name].append(cpu)
            events = count or events
    gc.collect()
    tracemalloc.start()
    asyncio.run(_engine_round(PEAK_RUNS))
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    engine = common.summary(walls["engine"])
    return {
        "runs": RUNS,
        "iterations_per_run": ITERATIONS,
        "model_delay_s": DELAY,
        "ideal_s": IDEAL,
        "wall_s": engine,
        "bare_wall_s": common.summary(walls["bare"]),
        "cpu_s": common.summary(cpus["engine"]),
        "frozen_wall_s": common.summary(walls["frozen"]),
        "frozen_cpu_s": common.summary(cpus["frozen"]),
        "ratio_to_ideal": engine["median"] / IDEAL,
        "cpu_us_per_iteration": (engine["median"] - IDEAL) / (RUNS * ITERATIONS) * 1e6,
        "events_per_run": events / RUNS,
        "events_per_s": events / engine["median"],
        "iterations_per_s": RUNS * ITERATIONS / engine["median"],
        "peak_runs": PEAK_RUNS,
        "peak_bytes_per_run": peak / PEAK_RUNS,
    }


def peak_rss(freeze: bool) -> dict[str, float]:
    """The maximum resident set of a fresh process that runs one round of RUNS runs
    (MiB), and what it held before the round, with the agent built (`--rss`)."""
    args = [sys.executable, "-m", "benchmarks.concurrency", "--rss"] + (["--freeze"] * freeze)
    done = subprocess.run(args, capture_output=True, text=True, check=True, timeout=900)
    before, peak = (float(x) for x in done.stdout.split()[-2:])
    return {"before_mib": before, "peak_mib": peak}


def _rss_mib() -> float:
    """This process's peak resident set (MiB): Linux's VmHWM, which starts afresh at
    exec (`ru_maxrss` does not: a child started by a large process reports at least
    the parent's size at the fork)."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024  # kB
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def _rss_main(freeze: bool) -> None:
    """One round in this process, then its maximum resident set (run by `peak_rss`)."""
    make_agent(DELAY)  # imports and first-use caches, as a host has them after start-up
    gc.collect()
    before = _rss_mib()
    asyncio.run(_engine_round(RUNS, freeze=freeze))
    print(f"{before:.1f} {_rss_mib():.1f}")


# -- part 2: memory per open run -------------------------------------------------------


class Gate:
    """Blocks every caller until opened, counting how many are waiting."""

    def __init__(self) -> None:
        self.event = asyncio.Event()
        self.waiting = 0

    async def wait(self) -> None:
        self.waiting += 1
        await self.event.wait()


async def _held(n: int, start_one: Callable[[Gate], Awaitable[Any]]) -> float:
    """Bytes per run while `n` runs wait at the gate (measured between their start and end)."""
    gate = Gate()
    gc.collect()
    before = tracemalloc.get_traced_memory()[0]
    tasks = [asyncio.ensure_future(start_one(gate)) for _ in range(n)]
    while gate.waiting < n:
        await asyncio.sleep(0.01)
    gc.collect()
    held = tracemalloc.get_traced_memory()[0] - before
    gate.event.set()
    await asyncio.gather(*tasks)
    return held / n


def _engine_open() -> Callable[[Gate], Awaitable[Any]]:
    from statemachine_agent import Agent

    class GatedModel(common.FakeModel):
        gate: Gate

        async def acomplete(self, request: Any) -> Any:
            await self.gate.wait()
            return self.complete(request)

    model = GatedModel(common.tool_script(0))
    agent = Agent(model=model, tools=[common.lookup_tool()])

    async def start(gate: Gate) -> Any:
        model.gate = gate
        return await agent.arun("go")

    return start


def _pydantic_ai_open() -> Callable[[Gate], Awaitable[Any]]:
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelResponse, TextPart
    from pydantic_ai.models.function import FunctionModel

    holder: dict[str, Gate] = {}

    async def respond(messages: list[Any], info: Any) -> ModelResponse:
        await holder["gate"].wait()
        return ModelResponse(parts=[TextPart("done")])

    agent = Agent(FunctionModel(respond))

    @agent.tool_plain
    async def lookup(n: int) -> str:
        """Look up an item."""
        return f"item {n}"

    async def start(gate: Gate) -> Any:
        holder["gate"] = gate
        async with agent.iter("go") as run:
            async for _ in run:
                pass
        return run.result

    return start


def _transitions_per_run() -> Callable[[Gate], Awaitable[Any]]:
    from transitions import Machine

    states = ["perceive", "reason", "act", "observe", "done"]

    class Model:
        pass

    async def start(gate: Gate) -> Any:
        model = Model()
        Machine(model=model, states=states, initial="perceive", auto_transitions=False)
        await gate.wait()
        return model

    return start


def _transitions_shared() -> Callable[[Gate], Awaitable[Any]]:
    from transitions import Machine

    machine = Machine(
        model=None,
        states=["perceive", "reason", "act", "observe", "done"],
        initial="perceive",
        auto_transitions=False,
    )

    class Model:
        pass

    async def start(gate: Gate) -> Any:
        model = Model()
        machine.add_model(model)
        await gate.wait()
        machine.remove_model(model)
        return model

    return start


def _task_only() -> Callable[[Gate], Awaitable[Any]]:
    async def start(gate: Gate) -> None:
        await gate.wait()

    return start


def langgraph_paused(n: int) -> float:
    """A LangGraph thread paused before its tool node, kept in an `InMemorySaver`."""
    from langgraph.checkpoint.memory import InMemorySaver

    from benchmarks.overhead import _langgraph_agent

    saver = InMemorySaver()
    graph = _langgraph_agent(saver, sync_tool=True, interrupt_before=["tools"])
    gc.collect()
    before = tracemalloc.get_traced_memory()[0]
    for i in range(n):
        graph.invoke({"messages": [("user", "go")]}, {"configurable": {"thread_id": f"t{i}"}})
    gc.collect()
    held = tracemalloc.get_traced_memory()[0] - before
    assert graph.get_state({"configurable": {"thread_id": "t0"}}).next == ("tools",)
    return held / n


def open_runs() -> dict[str, Any]:
    """Bytes per open run; a peer that is not installed (outside benchmarks/.venv) is left out."""
    starters: dict[str, Callable[[Gate], Awaitable[Any]]] = {
        "engine": _engine_open(),
        "asyncio_task_only": _task_only(),
        "transitions_machine_per_run": _transitions_per_run(),
        "transitions_shared_add_model": _transitions_shared(),
    }
    if importlib.util.find_spec("pydantic_ai") is not None:
        starters["pydantic_ai_iter"] = _pydantic_ai_open()
    langgraph = importlib.util.find_spec("langgraph") is not None
    samples: dict[str, list[float]] = {name: [] for name in starters}
    if langgraph:
        samples["langgraph_paused"] = []
    tracemalloc.start()
    try:
        for start in starters.values():  # warm-up: imports, caches, first-call setup
            asyncio.run(_held(50, start))
        if langgraph:
            langgraph_paused(20)
        for _ in range(REPEATS):
            for name, start in starters.items():
                samples[name].append(asyncio.run(_held(PEER_OPEN.get(name, OPEN), start)))
            if langgraph:
                samples["langgraph_paused"].append(langgraph_paused(PEER_OPEN["langgraph_paused"]))
    finally:
        tracemalloc.stop()
    return {name: common.summary(values) for name, values in samples.items()}


OPEN_LABELS = {
    "engine": "this engine: run blocked in its model call",
    "asyncio_task_only": "a bare asyncio task waiting (floor)",
    "transitions_machine_per_run": "one transitions Machine per run",
    "transitions_shared_add_model": "a model added to a shared transitions Machine",
    "pydantic_ai_iter": "pydantic-ai run opened with iter(), in its model call",
    "langgraph_paused": "LangGraph thread paused before tools, InMemorySaver",
}


def ms(stat: dict[str, Any]) -> str:
    return common.fmt_range({k: stat[k] * 1000 for k in ("median", "min", "max")})


def render(part1: dict[str, Any], part2: dict[str, Any]) -> str:
    kib = 1024
    rows1 = [
        ["runs x iterations", f"{part1['runs']:,} x {ITERATIONS}"],
        ["ideal wall time", f"{IDEAL * 1000:.0f} ms"],
        ["bare asyncio loop, same sleeps (baseline)", f"{ms(part1['bare_wall_s'])} ms"],
        ["engine wall time", f"{ms(part1['wall_s'])} ms"],
        ["engine CPU time", f"{ms(part1['cpu_s'])} ms"],
        ["engine wall time, `gc.freeze()` after start-up", f"{ms(part1['frozen_wall_s'])} ms"],
        ["engine CPU time, `gc.freeze()` after start-up", f"{ms(part1['frozen_cpu_s'])} ms"],
        [
            "`gc.freeze()` / default, wall (CPU)",
            f"{part1['frozen_wall_s']['median'] / part1['wall_s']['median']:.2f}x "
            f"({part1['frozen_cpu_s']['median'] / part1['cpu_s']['median']:.2f}x)",
        ],
        ["engine / ideal (target <= 2.0x)", f"{part1['ratio_to_ideal']:.2f}x"],
        [
            "process peak memory (max RSS), default (`gc.freeze()`); before the round",
            f"{part1['rss']['default']['peak_mib']:.0f} MiB "
            f"({part1['rss']['frozen']['peak_mib']:.0f} MiB); "
            f"{part1['rss']['default']['before_mib']:.0f} MiB",
        ],
        [
            "engine / bare asyncio",
            f"{part1['wall_s']['median'] / part1['bare_wall_s']['median']:.2f}x",
        ],
        [
            "(wall - ideal) / (runs x iterations): engine time per iteration",
            f"{part1['cpu_us_per_iteration']:.0f} us",
        ],
        ["iterations/s sustained by one process", f"{part1['iterations_per_s']:,.0f}"],
        ["events per run", f"{part1['events_per_run']:.0f}"],
        ["events/s", f"{part1['events_per_s']:,.0f}"],
        [
            f"peak traced memory per run ({PEAK_RUNS:,} runs traced)",
            f"{part1['peak_bytes_per_run'] / kib:.1f} KiB",
        ],
    ]
    rows2 = [
        [
            OPEN_LABELS[name],
            f"{PEER_OPEN.get(name, OPEN):,}",
            common.fmt_range({k: v / kib for k, v in stat.items() if k != "samples"}),
        ]
        for name, stat in part2.items()
    ]
    return "\n".join(
        [
            common.table(["concurrency", "figure"], rows1),
            "",
            common.table(["memory per open run", "runs open", "KiB, median (min-max)"], rows2),
        ]
    )


def main() -> None:
    if "--rss" in sys.argv[1:]:
        _rss_main(freeze="--freeze" in sys.argv[1:])
        return
    rss = {"default": peak_rss(False), "frozen": peak_rss(True)}
    part1 = throughput()
    part1["rss"] = rss
    part2 = open_runs()
    engine_kib = part2["engine"]["median"] / 1024
    peak = part1["rss"]["default"]["peak_mib"]
    checks = [
        {
            "target": "wall <= 2.0x ideal",
            "value": part1["ratio_to_ideal"],
            "limit": 2.0,
            "status": "met" if part1["ratio_to_ideal"] <= 2.0 else "missed",
        },
        {
            "target": "process peak memory (max RSS) <= 350 MiB",
            "value": peak,
            "limit": 350,
            "status": "met" if peak <= 350 else "missed",
        },
        {
            "target": "open run <= 12 KiB",
            "value": engine_kib,
            "limit": 12,
            "status": "met" if engine_kib <= 12 else "missed",
        },
    ]
    text = render(part1, part2)
    text += "".join(f"\n- target {c['target']}: {c['value']:.3g} -> {c['status']}" for c in checks)
    print(text)
    figures = {"throughput": part1, "open_run_bytes": part2, "open_runs": OPEN, "targets": checks}
    print("wrote", common.write_result("concurrency", figures, text))


if __name__ == "__main__":
    main()
