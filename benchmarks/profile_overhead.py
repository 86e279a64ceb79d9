"""Where the engine's time per iteration goes, and what the proposed changes would save.

1. pyinstrument samples benchmark 1's (b) (null sink) and (c) (JSONL sink) runs,
   plus short 5-iteration runs (benchmark 2's shape). The full reports go to
   results/profile_<case>.txt; the JSON splits the time into areas (stall
   detector, audit, transitions, ...), each frame charged to the innermost area
   it runs in, so json.dumps called by the token estimate counts as the estimate.
2. What-ifs: the proposed engine changes, applied as temporary patches in this
   process only (the package is not edited), timed against the unpatched engine
   in the same interleaved rounds (P3 is a setting, so an upper bound). A what-if
   whose target has moved is reported as "n/a" rather than failing the benchmark.
"""

from __future__ import annotations

import asyncio
import re
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks import common
from benchmarks.overhead import CALLS, ITERATIONS

AREAS: list[tuple[str, re.Pattern[str]]] = [
    # (area, pattern on "file_path:function"); the innermost frame that matches wins.
    ("stall detector", re.compile(r"policy/stall\.py")),
    ("token estimate (new messages only)", re.compile(r"compaction\.py:estimate")),
    ("audit: redaction", re.compile(r"audit/redact\.py")),
    ("audit: structlog + logging", re.compile(r"/structlog/|/logging/")),
    ("audit: JSONL sink (json + write + flush)", re.compile(r"audit/sink\.py")),
    ("audit: emitter", re.compile(r"audit/events\.py")),
    ("checkpointing", re.compile(r"statemachine_agent/persistence/")),
    ("tool input validation (jsonschema)", re.compile(r"/jsonschema/|registry\.py:_validate")),
    ("tool call plumbing (registry, threads)", re.compile(r"tools/registry\.py|/threading\.py")),
    ("transitions library", re.compile(r"/transitions/")),
    (
        "request building (copies, cache marks)",
        re.compile(r"perceive\.py:build_request|caching\.py"),
    ),
    ("engine and phases (the rest)", re.compile(r"statemachine_agent/")),
    ("asyncio event loop", re.compile(r"/asyncio/")),
]


def area_of(frame: Any, inherited: str) -> str:
    key = f"{frame.file_path}:{frame.function}"
    for name, pattern in AREAS:
        if pattern.search(key):
            return name
    return inherited


def split(
    frame: Any, inherited: str = "other", out: dict[str, float] | None = None
) -> dict[str, float]:
    out = {} if out is None else out
    here = area_of(frame, inherited) if frame.file_path else inherited
    children_time = sum(child.time for child in frame.children)
    out[here] = out.get(here, 0.0) + max(frame.time - children_time, 0.0)
    for child in frame.children:
        split(child, here, out)
    return out


def engine_runs(
    runs: int, calls: int, tool_kind: str = "async", **options: Any
) -> Callable[[], Any]:
    from statemachine_agent import Agent, Budget

    agent = Agent(
        model=common.FakeModel(common.tool_script(calls)),
        tools=[common.lookup_tool(tool_kind)],
        budget=Budget(max_iterations=calls + 10),
        **options,
    )

    async def many() -> None:
        for _ in range(runs):
            result = await agent.arun("go")
        assert result.end_state == "completed"

    return lambda: asyncio.run(many())


def profile(name: str, work: Callable[[], Any], iterations: int) -> dict[str, Any]:
    from pyinstrument import Profiler

    work()  # warm-up
    profiler = Profiler(interval=0.0002)
    profiler.start()
    work()
    session = profiler.stop()
    root = session.root_frame()
    common.RESULTS.mkdir(parents=True, exist_ok=True)
    (common.RESULTS / f"profile_{name}.txt").write_text(
        profiler.output_text(unicode=False, color=False, show_all=False), encoding="utf-8"
    )
    total = root.time if root else 0.0
    areas = split(root) if root else {}
    return {
        "seconds": total,
        "us_per_iteration_profiled": total / iterations * 1e6,
        "areas": dict(sorted(((k, v / total) for k, v in areas.items()), key=lambda kv: -kv[1])),
    }


# -- breakdown: the same workload with one part of the engine switched off ----------------
# (The earlier what-ifs patched in the proposed changes P1-P6; those changes are now in
# the engine, see docs/performance.md, so what is left to show is where the rest goes.)


def what_ifs(tmp: Path) -> dict[str, Any]:
    from statemachine_agent.policy.context import ContextPolicy

    variants: dict[str, dict[str, Any]] = {
        "b_as_is": {},
        "b_no_stall": {"stall": None},
        "b_no_token_estimate": {"context": ContextPolicy(compact_at_tokens=None)},
        "s_as_is": {"tool_kind": "sync"},
    }
    if common.persistence_ready():
        from statemachine_agent.persistence import MemoryCheckpointer

        variants["d_memory_store"] = {"checkpointer": MemoryCheckpointer()}
    cases: dict[str, Callable[[int], float]] = {}
    for name, options in variants.items():
        run = engine_runs(1, CALLS, **options)

        def case(n: int, run: Callable[[], Any] = run) -> float:
            start = time.perf_counter()
            for _ in range(n):
                run()
            return time.perf_counter() - start

        cases[name] = case
    stats = common.interleave(cases, dict.fromkeys(cases, 1000000.0 / ITERATIONS), min_seconds=0.3)
    return {"cases": stats, "notes": {}}


LABELS = {
    "b_as_is": "(b) engine, null sink",
    "b_no_stall": "(b) with the stall detector off",
    "b_no_token_estimate": "(b) with the context size estimate off",
    "s_as_is": "(b) with a sync tool (pooled daemon threads)",
    "d_memory_store": "(b) checkpointing into memory (delta encoding, no SQLite)",
}


def render(profiles: dict[str, Any], whatif: dict[str, Any]) -> str:
    names = list(profiles)
    all_areas = sorted(
        {a for p in profiles.values() for a in p["areas"]},
        key=lambda a: -max(p["areas"].get(a, 0.0) for p in profiles.values()),
    )
    rows = [
        [a, *(f"{profiles[n]['areas'].get(a, 0.0) * 100:.1f}%" for n in names)] for a in all_areas
    ]
    text = common.table(["area (share of sampled time)", *names], rows)
    stats = whatif["cases"]
    rows2 = []
    for key, label in LABELS.items():
        base = "b_as_is"
        if key not in stats:
            rows2.append([label, whatif["notes"].get(key, "n/a"), "-"])
            continue
        saved = 1 - stats[key]["median"] / stats[base]["median"] if base in stats else 0.0
        rows2.append([label, common.fmt_range(stats[key]), f"{-saved * 100:+.0f}%"])
    text += "\n\n" + common.table(
        ["breakdown (same process, interleaved)", "us/iteration, median (min-max)", "vs (b)"],
        rows2,
    )
    return text


def main() -> None:
    profiles = {
        "b_null_sink": profile("b", engine_runs(10, CALLS), 10 * ITERATIONS),
        "b_no_stall": profile("b_no_stall", engine_runs(10, CALLS, stall=None), 10 * ITERATIONS),
    }
    with tempfile.TemporaryDirectory(prefix="bench-profile-") as tmp:
        profiles["c_jsonl_sink"] = profile(
            "c", engine_runs(10, CALLS, audit=Path(tmp) / "p"), 10 * ITERATIONS
        )
        if common.persistence_ready():
            from statemachine_agent.persistence import SQLiteCheckpointer

            store = SQLiteCheckpointer(Path(tmp) / "runs.db")
            profiles["d_sqlite"] = profile(
                "d", engine_runs(10, CALLS, checkpointer=store), 10 * ITERATIONS
            )
        profiles["short_runs_5_iter"] = profile("short", engine_runs(200, 4), 200 * 5)
        whatif = what_ifs(Path(tmp))
    text = render(profiles, whatif)
    print(text)
    print("wrote", common.write_result("profile", {"profiles": profiles, "what_ifs": whatif}, text))


if __name__ == "__main__":
    main()
