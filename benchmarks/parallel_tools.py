"""Benchmark 3: the tool calls of one reply run concurrently.

One reply asks for 5 tools at once; each takes 200 ms (a sync handler with
`time.sleep`, or an async one with `asyncio.sleep`), then the model answers.
The run's wall time should be about one tool's time, not five: target <= 1.2 x
200 ms. The baseline measured in the same rounds is the floor: 5 bare
`asyncio.sleep`s (or 5 sleeping threads) gathered, no engine.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

from benchmarks import common

CALLS = 5
SECONDS = 0.2
LIMIT = 1.2


def slow_tool(kind: str) -> Any:
    from statemachine_agent import tool

    if kind == "async":

        async def slow(n: int) -> str:
            """Wait, then answer.

            Args:
                n: The call number.
            """
            await asyncio.sleep(SECONDS)
            return f"done {n}"

    else:

        def slow(n: int) -> str:
            """Wait, then answer.

            Args:
                n: The call number.
            """
            time.sleep(SECONDS)
            return f"done {n}"

    return tool(slow)


def engine_run(kind: str) -> float:
    from statemachine_agent import Agent

    agent = Agent(
        model=common.FakeModel(common.tool_script(1, tool="slow", per_reply=CALLS)),
        tools=[slow_tool(kind)],
    )

    async def once() -> float:
        start = time.perf_counter()
        result = await agent.arun("go")
        elapsed = time.perf_counter() - start
        assert result.end_state == "completed", result.reason
        assert len(result.messages[2]["content"]) == CALLS
        return elapsed

    return asyncio.run(once())


def floor(kind: str) -> float:
    start = time.perf_counter()
    if kind == "async":

        async def gather() -> None:
            await asyncio.gather(*(asyncio.sleep(SECONDS) for _ in range(CALLS)))

        asyncio.run(gather())
    else:
        threads = [threading.Thread(target=time.sleep, args=(SECONDS,)) for _ in range(CALLS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    return time.perf_counter() - start


def main() -> None:
    samples: dict[str, list[float]] = {
        f"{who}_{kind}": [] for kind in ("sync", "async") for who in ("floor", "engine")
    }
    for kind in ("sync", "async"):  # warm-up
        engine_run(kind)
    for _ in range(max(5, common.REPEATS)):
        for kind in ("sync", "async"):
            samples[f"floor_{kind}"].append(floor(kind))
            samples[f"engine_{kind}"].append(engine_run(kind))
    stats = {name: common.summary([s * 1000 for s in values]) for name, values in samples.items()}
    rows, checks = [], []
    for kind in ("sync", "async"):
        engine, base = stats[f"engine_{kind}"], stats[f"floor_{kind}"]
        value = engine["median"] / (SECONDS * 1000)
        checks.append(
            {
                "target": f"{kind} handlers <= {LIMIT}x {SECONDS * 1000:.0f} ms",
                "value": value,
                "limit": LIMIT,
                "status": "met" if value <= LIMIT else "missed",
            }
        )
        rows.append(
            [
                f"{kind} handlers ({'time' if kind == 'sync' else 'asyncio'}.sleep)",
                common.fmt_range(base),
                common.fmt_range(engine),
                f"{value:.2f}x",
                f"{common.ratio(engine, base):.2f}x",
            ]
        )
    text = common.table(
        [
            f"{CALLS} tools x {SECONDS * 1000:.0f} ms in one reply",
            "floor: gathered sleeps, ms",
            "engine run, ms",
            f"vs {SECONDS * 1000:.0f} ms",
            "vs floor",
        ],
        rows,
    )
    text += "".join(f"\n- target {c['target']}: {c['value']:.3g} -> {c['status']}" for c in checks)
    print(text)
    figures = {
        "calls": CALLS,
        "seconds_each": SECONDS,
        "unit": "ms",
        "cases": stats,
        "targets": checks,
    }
    print("wrote", common.write_result("parallel_tools", figures, text))


if __name__ == "__main__":
    main()
