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
import json
import logging
import re
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
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


# -- what-ifs: temporary patches of the proposed changes -----------------------------------


@contextmanager
def patch(obj: Any, name: str, value: Any) -> Iterator[None]:
    original = getattr(obj, name)
    setattr(obj, name, value)
    try:
        yield
    finally:
        setattr(obj, name, original)


def _grouped_near_duplicate() -> Callable[[Any], Any]:
    """Proposal 1: near-duplicates grouped by a normalized key computed once per call."""
    from statemachine_agent.policy import stall

    original = stall.StallDetector._near_duplicate
    keys: dict[str, str] = {}

    def norm(value: Any) -> Any:
        if isinstance(value, str):
            return ["s", stall.normalize_text(value)]
        if isinstance(value, dict):
            return ["d", sorted((k, norm(v)) for k, v in value.items())]
        if isinstance(value, list):
            return ["l", [norm(v) for v in value]]
        return [type(value).__name__, value]

    def key(args: str) -> str:  # stands for a key stored on the observation at record()
        found = keys.get(args)
        if found is None:
            found = keys[args] = json.dumps(norm(json.loads(args)))
        return found

    def near_duplicate(self: Any) -> Any:
        if self._policy.similarity is not None:
            return original(self)
        clusters: dict[tuple[str, str], list[Any]] = {}
        for o in self._observations:
            clusters.setdefault((o.tool, key(o.args)), []).append(o)
        calls = self._pick(
            m
            for m in clusters.values()
            if len(m) >= self._policy.threshold and len({x.args for x in m}) >= 2
        )
        if calls is None:
            return None
        return original(self)  # a finding: let the original word it (rare, off the hot path)

    return near_duplicate


def _quiet_emit() -> Callable[..., None]:
    """Proposal 2: an emitter with no sink and a logger that drops INFO does nothing."""
    from statemachine_agent.audit.events import LOGGER_NAME, Emitter

    original = Emitter.emit
    stdlib = logging.getLogger(LOGGER_NAME)

    def emit(self: Any, event: str, **payload: Any) -> None:
        if not self.sinks and not stdlib.isEnabledFor(logging.INFO):
            return
        original(self, event, **payload)

    return emit


def _pooled_threads() -> Callable[..., Any]:
    """Proposal 5: sync handlers run on reused daemon threads, one started only when none idles.

    Keeps what the thread-per-call design wants (nothing ever joins a hung
    handler: it keeps its own daemon worker) without a thread start per call.
    """
    import contextvars
    import queue
    import threading

    jobs: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
    lock = threading.Lock()
    idle = [0]

    def worker() -> None:
        while True:
            jobs.get()()
            with lock:
                idle[0] += 1

    async def run_in_thread(name: str, fn: Callable[..., Any], kwargs: dict[str, Any]) -> Any:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        context = contextvars.copy_context()

        def settle(error: BaseException | None, value: Any) -> None:
            if not future.done():
                future.set_exception(error) if error else future.set_result(value)

        def work() -> None:
            error, value = None, None
            try:
                value = context.run(fn, **kwargs)
            except BaseException as exc:
                error = exc
            loop.call_soon_threadsafe(settle, error, value)

        with lock:
            if idle[0]:
                idle[0] -= 1
            else:
                threading.Thread(target=worker, name="tool-worker", daemon=True).start()
        jobs.put(work)
        return await future

    return run_in_thread


def _memo_state_plain() -> Callable[[Any], Any]:
    """Proposal 6: a field value that did not change keeps its plain form between checkpoints.

    Frozen dataclasses (settings, usage, last reply) and `stall_state` (replaced
    whole by every observe, never changed in place) are converted once per
    object instead of at every checkpoint.
    """
    from dataclasses import fields, is_dataclass

    from statemachine_agent.persistence import delta

    to_plain = delta.to_plain
    memo: dict[int, tuple[Any, Any]] = {}

    def state_plain(record: Any) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in fields(record):
            if not f.init or f.name in delta._LIST_FIELDS:
                continue
            value = getattr(record, f.name)
            frozen = is_dataclass(value) and value.__dataclass_params__.frozen  # type: ignore[union-attr]
            if frozen or f.name == "stall_state":
                hit = memo.get(id(value))
                if hit is None or hit[0] is not value:
                    hit = memo[id(value)] = (value, to_plain(value, f.name))
                out[f.name] = hit[1]
            else:
                out[f.name] = to_plain(value, f.name)
        return out

    return state_plain


def what_ifs(tmp: Path) -> dict[str, Any]:
    from statemachine_agent.audit.events import Emitter
    from statemachine_agent.policy.context import ContextPolicy
    from statemachine_agent.policy.stall import StallDetector
    from statemachine_agent.tools import registry

    no_estimate = {"context": ContextPolicy(compact_at_tokens=None)}
    variants: dict[str, tuple[dict[str, Any], list[tuple[Any, str, Callable[[], Any]]]]] = {
        "b_as_is": ({}, []),
        "b_p1_grouped_near_duplicates": (
            {},
            [(StallDetector, "_near_duplicate", _grouped_near_duplicate)],
        ),
        "b_p2_quiet_emitter": ({}, [(Emitter, "emit", _quiet_emit)]),
        "b_p3_no_token_estimate": (no_estimate, []),
        "b_p1_p2_p3": (
            no_estimate,
            [
                (StallDetector, "_near_duplicate", _grouped_near_duplicate),
                (Emitter, "emit", _quiet_emit),
            ],
        ),
        "s_as_is": ({"tool_kind": "sync"}, []),
        "s_p5_reused_threads": (
            {"tool_kind": "sync"},
            [(registry, "_run_in_thread", _pooled_threads)],
        ),
    }
    if common.persistence_ready():
        from statemachine_agent.persistence import SQLiteCheckpointer, delta

        variants["d_as_is"] = ({"checkpointer": SQLiteCheckpointer(tmp / "d.db")}, [])
        variants["d_p6_memo_state_plain"] = (
            {"checkpointer": SQLiteCheckpointer(tmp / "d7.db")},
            [(delta, "state_plain", _memo_state_plain)],
        )
    cases: dict[str, Callable[[int], float]] = {}
    notes: dict[str, str] = {}
    for name, (options, patches) in variants.items():
        run = engine_runs(1, CALLS, **options)
        try:
            built = [(obj, attr, make()) for obj, attr, make in patches]
        except Exception as exc:  # the engine moved on: report, don't fail
            notes[name] = f"n/a ({type(exc).__name__}: {exc})"
            continue

        def case(n: int, run: Callable[[], Any] = run, built: list[Any] = built) -> float:
            with ExitStack() as stack:
                for obj, attr, value in built:
                    stack.enter_context(patch(obj, attr, value))
                start = time.perf_counter()
                for _ in range(n):
                    run()
                return time.perf_counter() - start

        cases[name] = case
    stats = common.interleave(cases, dict.fromkeys(cases, 1000000.0 / ITERATIONS), min_seconds=0.3)
    return {"cases": stats, "notes": notes}


LABELS = {
    "b_as_is": "(b) engine, null sink, as it is",
    "b_p1_grouped_near_duplicates": "(b) + P1 near-duplicates grouped by normalized key",
    "b_p2_quiet_emitter": "(b) + P2 emitter skips work nobody receives",
    "b_p3_no_token_estimate": "(b) + P3 no per-iteration token estimate (upper bound)",
    "b_p1_p2_p3": "(b) + P1 + P2 + P3",
    "s_as_is": "(b) with a sync tool, as it is",
    "s_p5_reused_threads": "(b) with a sync tool + P5 reused daemon worker threads",
    "d_as_is": "(d) engine, SQLite checkpointer, as it is",
    "d_p6_memo_state_plain": "(d) + P6 unchanged fields keep their plain form between checkpoints",
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
        base = {"b": "b_as_is", "s": "s_as_is", "d": "d_as_is"}[key[0]]
        if key not in stats:
            rows2.append([label, whatif["notes"].get(key, "n/a"), "-"])
            continue
        saved = 1 - stats[key]["median"] / stats[base]["median"] if base in stats else 0.0
        rows2.append([label, common.fmt_range(stats[key]), f"{saved * 100:.0f}%"])
    text += "\n\n" + common.table(
        ["what-if (patched in this process only)", "us/iteration, median (min-max)", "saved"], rows2
    )
    return text


def main() -> None:
    profiles = {
        "b_null_sink": profile("b", engine_runs(10, CALLS), 10 * ITERATIONS),
        "b_no_stall": profile("b_no_stall", engine_runs(10, CALLS, stall=None), 10 * ITERATIONS),
    }
    with tempfile.TemporaryDirectory(prefix="bench-profile-") as tmp:
        profiles["c_jsonl_sink"] = profile(
            "c", engine_runs(10, CALLS, audit_dir=Path(tmp) / "p"), 10 * ITERATIONS
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
