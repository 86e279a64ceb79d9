"""Benchmark 6: the engine on the real path -- the `anthropic` SDK over HTTP, another process.

A local Messages API server (`benchmarks/sdk_server.py`: the suite's
`FakeAnthropicServer`, keep-alive, answering by the history's length) runs in a
process of its own; this process is the client. What is measured is the
client's CPU (`time.process_time()`), so the server's work does not count and
the figure is what the engine adds on top of what the SDK costs anyway.

Cases, interleaved round by round (see `common.interleave`):

  bare sync / async   a `while` loop over `client.messages.create` (the SDK's sync or
                      async client, made once and kept), a plain tool: the baselines
  engine sync/async   `agent.run` / `await agent.arun` with `AnthropicModel`, an async
                      tool; then with `SQLiteCheckpointer` and with the JSONL audit sink
  short               one model call and no tool: one sync `agent.run` against one
                      bare sync `client.messages.create`

at 50 and 200 tool calls (51 and 201 model calls). Growth: the CPU of each
iteration is the process time between consecutive tool calls; iterations
181-200 against 2-21 in the 200-call runs, for the engine and the bare loop.
"""

from __future__ import annotations

import asyncio
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anthropic

from benchmarks import common
from statemachine_agent.models.base import DEFAULT_MODEL

API_KEY = "sk-ant-api03-BENCHMARK-not-a-real-key"
SIZES = (50, 200)
EARLY, LATE = range(2, 22), range(181, 201)


class Clock:
    """Process time at each tool call of the current run (iteration k calls lookup(k))."""

    def __init__(self) -> None:
        self.marks: list[float] = []
        self.series: dict[str, list[list[float]]] = {}

    def mark(self) -> None:
        self.marks.append(time.process_time())

    def keep(self, case: str) -> None:
        """Keep the last run's per-iteration CPU (seconds), index k = iteration k + 1."""
        deltas = [b - a for a, b in zip(self.marks, self.marks[1:], strict=False)]
        self.series.setdefault(case, []).append(deltas)
        self.marks = []


def start_server() -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.sdk_server"],
        cwd=common.ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    return proc, proc.stdout.readline().strip()


def tool_definition() -> dict[str, Any]:
    return {
        "name": "lookup",
        "description": "Look up an item.",
        "input_schema": {
            "type": "object",
            "properties": {"n": {"type": "integer", "description": "The item number."}},
            "required": ["n"],
        },
    }


def bare_sync(base_url: str, calls: int, clock: Clock, name: str) -> Callable[[int], float]:
    client = anthropic.Anthropic(api_key=API_KEY, base_url=base_url)
    tools = [tool_definition()]

    def lookup(n: int) -> str:
        clock.mark()
        return f"item {n}"

    def case(runs: int) -> float:
        start = time.process_time()
        for _ in range(runs):
            messages: list[dict[str, Any]] = [{"role": "user", "content": f"go {calls}"}]
            while True:
                reply = client.messages.create(
                    model=DEFAULT_MODEL, max_tokens=4096, messages=messages, tools=tools
                )
                messages.append(
                    {"role": "assistant", "content": [b.to_dict() for b in reply.content]}
                )
                if reply.stop_reason != "tool_use":
                    break
                messages.append(
                    {
                        "role": "user",
                        "content": [
                            {
                                "type": "tool_result",
                                "tool_use_id": b.id,
                                "content": lookup(**b.input),
                            }
                            for b in reply.content
                            if b.type == "tool_use"
                        ],
                    }
                )
            clock.keep(name)
        return time.process_time() - start

    return case


def bare_async(
    runner: asyncio.Runner, base_url: str, calls: int, clock: Clock, name: str
) -> Callable[[int], float]:
    client = anthropic.AsyncAnthropic(api_key=API_KEY, base_url=base_url)
    tools = [tool_definition()]

    async def lookup(n: int) -> str:
        clock.mark()
        return f"item {n}"

    async def one() -> None:
        messages: list[dict[str, Any]] = [{"role": "user", "content": f"go {calls}"}]
        while True:
            reply = await client.messages.create(
                model=DEFAULT_MODEL, max_tokens=4096, messages=messages, tools=tools
            )
            messages.append({"role": "assistant", "content": [b.to_dict() for b in reply.content]})
            if reply.stop_reason != "tool_use":
                break
            results = []
            for b in reply.content:
                if b.type == "tool_use":
                    text = await lookup(**b.input)
                    results.append({"type": "tool_result", "tool_use_id": b.id, "content": text})
            messages.append({"role": "user", "content": results})
        clock.keep(name)

    def case(runs: int) -> float:
        start = time.process_time()
        for _ in range(runs):
            runner.run(one())
        return time.process_time() - start

    return case


def engine_agent(base_url: str, clock: Clock, **options: Any) -> Any:
    from statemachine_agent import Agent, AnthropicModel, Budget, tool

    @tool
    async def lookup(n: int) -> str:
        """Look up an item.

        Args:
            n: The item number.
        """
        clock.mark()
        return f"item {n}"

    model = AnthropicModel(api_key=API_KEY, base_url=base_url)
    return Agent(model, tools=[lookup], budget=Budget(max_iterations=1000), **options)


def engine_sync(agent: Any, calls: int, clock: Clock, name: str) -> Callable[[int], float]:
    def case(runs: int) -> float:
        start = time.process_time()
        for _ in range(runs):
            result = agent.run(f"go {calls}")
            assert result.end_state == "completed", result.reason
            clock.keep(name)
        return time.process_time() - start

    return case


def engine_async(
    runner: asyncio.Runner, agent: Any, calls: int, clock: Clock, name: str
) -> Callable[[int], float]:
    async def one() -> None:
        result = await agent.arun(f"go {calls}")
        assert result.end_state == "completed", result.reason
        clock.keep(name)

    def case(runs: int) -> float:
        start = time.process_time()
        for _ in range(runs):
            runner.run(one())
        return time.process_time() - start

    return case


LABELS = {
    "bare_sync": "bare sync SDK loop (baseline)",
    "bare_async": "bare async SDK loop (baseline)",
    "engine_sync": "engine, sync `agent.run`",
    "engine_async": "engine, `await agent.arun`",
    "engine_async_sqlite": "engine async, SQLiteCheckpointer",
    "engine_async_audit": "engine async, JSONL audit sink",
    "engine_sync_sqlite": "engine sync, SQLiteCheckpointer",
    "engine_sync_audit": "engine sync, JSONL audit sink",
}
BASELINE = {
    "bare_sync": "bare_sync",
    "bare_async": "bare_async",
    "engine_sync": "bare_sync",
    "engine_async": "bare_async",
    "engine_async_sqlite": "bare_async",
    "engine_async_audit": "bare_async",
    "engine_sync_sqlite": "bare_sync",
    "engine_sync_audit": "bare_sync",
}


def build(
    runner: asyncio.Runner, base_url: str, tmp: Path, clock: Clock
) -> dict[str, Callable[[int], float]]:
    from statemachine_agent import SQLiteCheckpointer

    plain = engine_agent(base_url, clock)
    checkpointed = engine_agent(base_url, clock, checkpointer=SQLiteCheckpointer(tmp / "runs.db"))
    audited = engine_agent(base_url, clock, audit=tmp / "audit")
    built: dict[str, Callable[[int], float]] = {}
    for calls in SIZES:
        for key in LABELS:
            name = f"{key}@{calls}"
            agent = {"sqlite": checkpointed, "audit": audited}.get(key.rsplit("_", 1)[-1], plain)
            if key == "bare_sync":
                built[name] = bare_sync(base_url, calls, clock, name)
            elif key == "bare_async":
                built[name] = bare_async(runner, base_url, calls, clock, name)
            elif key.startswith("engine_sync"):
                built[name] = engine_sync(agent, calls, clock, name)
            else:
                built[name] = engine_async(runner, agent, calls, clock, name)
    built["short_bare_sync"] = bare_sync(base_url, 0, clock, "short_bare_sync")
    built["short_engine_sync"] = engine_sync(plain, 0, clock, "short_engine_sync")
    built["short_bare_async"] = bare_async(runner, base_url, 0, clock, "short_bare_async")
    built["short_engine_async"] = engine_async(runner, plain, 0, clock, "short_engine_async")
    return built


def growth(series: list[list[float]]) -> dict[str, Any]:
    """Late over early CPU per iteration, per round (deltas[k - 2] is iteration k)."""
    ratios, early, late = [], [], []
    for deltas in series:
        if len(deltas) < LATE.stop - 2:
            continue
        e = statistics.fmean(deltas[k - 2] for k in EARLY)
        la = statistics.fmean(deltas[k - 2] for k in LATE)
        early.append(e * 1e6)
        late.append(la * 1e6)
        ratios.append(la / e)
    return {
        "early_us": common.summary(early),
        "late_us": common.summary(late),
        "ratio": common.summary(ratios),
    }


def short_only() -> None:
    """`python -m benchmarks.real_sdk --short`: only the short-run cases, printed, not
    written (seconds instead of minutes, for working on the sync path)."""
    proc, base_url = start_server()
    clock = Clock()
    try:
        with asyncio.Runner() as runner:
            plain = engine_agent(base_url, clock)
            built = {
                "short_bare_sync": bare_sync(base_url, 0, clock, "short_bare_sync"),
                "short_engine_sync": engine_sync(plain, 0, clock, "short_engine_sync"),
                "short_bare_async": bare_async(runner, base_url, 0, clock, "short_bare_async"),
                "short_engine_async": engine_async(runner, plain, 0, clock, "short_engine_async"),
            }
            stats = common.interleave(built, dict.fromkeys(built, 1e6), min_seconds=0.2)
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait(timeout=30)
    for kind in ("sync", "async"):
        engine, bare = stats[f"short_engine_{kind}"], stats[f"short_bare_{kind}"]
        print(
            f"short {kind}: engine {common.fmt_range(engine)} vs bare "
            f"{common.fmt_range(bare)} us per run: {common.ratio(engine, bare):.2f}x"
        )


def main() -> None:
    if sys.argv[1:] == ["--short"]:
        short_only()
        return
    proc, base_url = start_server()
    clock = Clock()
    try:
        with (
            tempfile.TemporaryDirectory(prefix="bench-real-sdk-") as tmp,
            asyncio.Runner() as runner,
        ):
            built = build(runner, base_url, Path(tmp), clock)
            per_unit = {
                name: 1e6 / (1 if name.startswith("short") else int(name.split("@")[1]) + 1)
                for name in built
            }
            stats = common.interleave(built, per_unit, min_seconds=0.1)
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait(timeout=30)
    grown = {
        name: growth(clock.series[name])
        for name in ("bare_sync@200", "bare_async@200", "engine_sync@200", "engine_async@200")
    }
    checks = targets(stats, grown)
    text = render(stats, grown, checks)
    print(text)
    figures = {
        "unit": "client CPU us per iteration (short: per run)",
        "cases": stats,
        "growth": grown,
        "targets": checks,
    }
    print("wrote", common.write_result("real_sdk", figures, text))


def check(value: float, limit: float, text: str) -> dict[str, Any]:
    return {
        "target": text,
        "text": text,
        "value": value,
        "limit": limit,
        "status": "met" if value <= limit else "missed",
    }


def targets(stats: dict[str, Any], grown: dict[str, Any]) -> list[dict[str, Any]]:
    r = common.ratio
    engine_growth = grown["engine_async@200"]["ratio"]["median"]
    bare_growth = grown["bare_async@200"]["ratio"]["median"]
    return [
        check(
            r(stats["engine_async@50"], stats["bare_async@50"]),
            1.15,
            "engine arun, 50 calls, CPU/iteration <= 1.15x bare async SDK loop",
        ),
        check(
            r(stats["engine_async_sqlite@50"], stats["bare_async@50"]),
            1.35,
            "the same with SQLiteCheckpointer <= 1.35x",
        ),
        check(
            r(stats["short_engine_sync"], stats["short_bare_sync"]),
            1.5,
            "one short sync agent.run <= 1.5x one bare sync SDK call",
        ),
        check(
            r(stats["engine_async_audit@50"], stats["engine_async@50"]),
            1.3,
            "JSONL audit sink <= 1.3x no sink (engine arun, 50 calls)",
        ),
        check(
            engine_growth / bare_growth,
            1.2,
            "growth: iterations 181-200 / 2-21, engine over bare async loop's <= 1.2",
        ),
    ]


def render(stats: dict[str, Any], grown: dict[str, Any], checks: list[dict[str, Any]]) -> str:
    rows = []
    for calls in SIZES:
        for key, label in LABELS.items():
            name = f"{key}@{calls}"
            base = f"{BASELINE[key]}@{calls}"
            rows.append(
                [
                    f"{label}, {calls} calls",
                    common.fmt_range(stats[name]),
                    f"{common.ratio(stats[name], stats[base]):.2f}x",
                ]
            )
    for kind in ("sync", "async"):
        rows.append(
            [
                f"short run (one call), engine {kind} vs bare {kind}; us per run",
                f"{common.fmt_range(stats[f'short_engine_{kind}'])} vs "
                f"{common.fmt_range(stats[f'short_bare_{kind}'])}",
                f"{common.ratio(stats[f'short_engine_{kind}'], stats[f'short_bare_{kind}']):.2f}x",
            ]
        )
    text = common.table(["case", "client CPU us/iteration, median (min-max)", "vs bare"], rows)
    growth_rows = [
        [
            name.split("@")[0],
            common.fmt_range(g["early_us"]),
            common.fmt_range(g["late_us"]),
            f"{g['ratio']['median']:.2f} ({g['ratio']['min']:.2f}-{g['ratio']['max']:.2f})",
        ]
        for name, g in grown.items()
    ]
    text += "\n\n" + common.table(
        [
            "200-call runs",
            "us/iteration, iterations 2-21",
            "us/iteration, iterations 181-200",
            "late / early",
        ],
        growth_rows,
    )
    lines = [text, ""]
    lines += [f"- target {c['text']}: {c['value']:.3g} -> {c['status']}" for c in checks]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
