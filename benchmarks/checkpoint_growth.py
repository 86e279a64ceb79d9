"""Benchmark 4: how checkpoints grow with a run's length, and what each one costs.

Runs of 10, 50, 200 and 1,000 steps (tool calls, then a final text; the tool
answers "item n", and once more at 200 steps with 1 KiB results) are made with
`Agent(..., checkpointer=SQLiteCheckpointer(path))`, a fresh file each, and
without a checkpointer, interleaved. Per length it reports:

- payload: the checkpoint bodies' total size (what the store keeps, `runs()`: packed
  rows, see `persistence/packing.py`), the same bodies as JSON text (what a
  `compress=False` store keeps), and how the JSON splits between the bodies' keys
  (messages, trail, state diff),
- file: the SQLite file once closed, and I/O: bytes handed to write() (WAL pages),
- the final transcript (`result.messages` as compact JSON), and payload / transcript,
- time per checkpoint: the time spent in `PhaseEnv.checkpoint()` (delta and
  store, timed by a wrapper patched in this process) / checkpoints,
- and the engine's own time per iteration without a checkpointer, which shows
  what grows with the run's length apart from the checkpoints.

Target: linear growth, payload <= 2x the transcript at 200 steps. The stall
detector is off here: its cost grows with the square of the history it keeps
(benchmark 1 shows it), which would swamp the checkpoint figures at 1,000 steps.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks import common

STEPS = (10, 50, 200, 1000)
REPEATS = 5
CASES: tuple[tuple[str, int, int], ...] = (
    *((f"{n:,}", n, 0) for n in STEPS),
    ("200, 1 KiB results", 200, 1024),
)
"""(label, steps, tool result size): the trivial "item n" results, and one realistic size."""


def wchar() -> int | None:
    """Bytes this process has passed to write() so far (Linux)."""
    try:
        for line in Path("/proc/self/io").read_text().splitlines():
            if line.startswith("wchar:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


class CheckpointClock:
    """Times every `PhaseEnv.checkpoint()` call (delta and store), in this process only."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.calls = 0

    def __enter__(self) -> CheckpointClock:
        from statemachine_agent.machine.phase_env import PhaseEnv

        self.original = original = getattr(PhaseEnv, "checkpoint", None)
        if original is not None:

            def timed(ctx: Any) -> Any:
                start = time.perf_counter()
                try:
                    return original(ctx)
                finally:
                    self.seconds += time.perf_counter() - start
                    self.calls += 1

            PhaseEnv.checkpoint = timed  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc: object) -> None:
        from statemachine_agent.machine.phase_env import PhaseEnv

        if self.original is not None:
            PhaseEnv.checkpoint = self.original  # type: ignore[method-assign]


def one_run(steps: int, path: Path | None, size: int = 0) -> dict[str, Any]:
    from statemachine_agent import Agent, Budget

    options: dict[str, Any] = {}
    store: Any = None
    if path is not None:
        from statemachine_agent.persistence import SQLiteCheckpointer

        store = SQLiteCheckpointer(path)
        options["checkpointer"] = store
    agent = Agent(
        model=common.FakeModel(common.tool_script(steps)),
        tools=[common.lookup_tool(size=size)],
        budget=Budget(max_iterations=steps + 10),
        stall=None,
        **options,
    )

    async def timed() -> tuple[float, Any]:
        start = time.perf_counter()
        result = await agent.arun("go")
        return time.perf_counter() - start, result

    written = wchar()
    with CheckpointClock() as clock:
        seconds, result = asyncio.run(timed())
    assert result.end_state == "completed", result.reason
    assert result.iterations == steps + 1, result.iterations
    figures: dict[str, Any] = {
        "seconds": seconds,
        "transcript_bytes": len(
            json.dumps(result.messages, ensure_ascii=False, separators=(",", ":")).encode()
        ),
    }
    if store is not None:
        summary = store.runs()[0]
        parts: dict[str, int] = {}
        json_bytes = 0
        for body in store.bodies(summary.run_id):
            json_bytes += len(json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode())
            for key, value in body.items():
                size = len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode())
                parts[key] = parts.get(key, 0) + size
        store.close()
        after = wchar()
        figures.update(
            checkpoints=summary.checkpoints,
            payload_bytes=summary.bytes,
            json_bytes=json_bytes,
            file_bytes=path.stat().st_size if path else 0,
            parts=parts,
            checkpoint_s=clock.seconds if clock.calls else None,
            io_bytes=(after - written) if after is not None and written is not None else None,
        )
    return figures


def measure(tmp: Path) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for label, steps, size in CASES:
        one_run(steps, tmp / f"warm-{steps}-{size}.db", size)
        plain, saved = [], []
        for i in range(REPEATS):
            plain.append(one_run(steps, None, size))
            saved.append(one_run(steps, tmp / f"{steps}-{size}-{i}.db", size))
        per_checkpoint = [  # timed inside checkpoint(); else the difference of the runs
            (s["checkpoint_s"] if s["checkpoint_s"] is not None else s["seconds"] - p["seconds"])
            / s["checkpoints"]
            * 1e6
            for s, p in zip(saved, plain, strict=True)
        ]
        last = saved[-1]
        out[label] = {
            "steps": steps,
            "result_chars": size,
            "checkpoints": last["checkpoints"],
            "payload_bytes": last["payload_bytes"],
            "file_bytes": last["file_bytes"],
            "io_bytes": common.summary([s["io_bytes"] or 0 for s in saved]),
            "transcript_bytes": last["transcript_bytes"],
            "payload_per_step": last["payload_bytes"] / steps,
            "payload_vs_transcript": last["payload_bytes"] / last["transcript_bytes"],
            "json_bytes": last["json_bytes"],
            "json_vs_transcript": last["json_bytes"] / last["transcript_bytes"],
            "payload_parts": last["parts"],
            "us_per_checkpoint": common.summary(per_checkpoint),
            "run_s_with": common.summary([s["seconds"] for s in saved]),
            "run_s_without": common.summary([p["seconds"] for p in plain]),
        }
    return out


def render(data: dict[str, dict[str, Any]]) -> str:
    rows = [
        [
            label,
            f"{d['checkpoints']:,}",
            f"{d['payload_bytes']:,}",
            f"{d['payload_per_step']:,.0f}",
            f"{d['transcript_bytes']:,}",
            f"{d['payload_vs_transcript']:.2f}x",
            f"{d['json_bytes']:,} ({d['json_vs_transcript']:.2f}x)",
            f"{d['file_bytes']:,}",
            f"{d['io_bytes']['median']:,.0f}",
            common.fmt_range(d["us_per_checkpoint"]),
            f"{d['run_s_without']['median'] / (d['steps'] + 1) * 1e6:,.0f}",
        ]
        for label, d in data.items()
    ]
    return (
        common.table(
            [
                "steps",
                "checkpoints",
                "payload bytes",
                "payload/step",
                "transcript bytes",
                "payload/transcript",
                "bodies as JSON (/transcript)",
                "file bytes",
                "write() bytes",
                "us/checkpoint, median (min-max)",
                "engine us/iteration without checkpointer",
            ],
            rows,
        )
        + "\n\n"
        + common.table(
            ["steps", "bodies as JSON, split by checkpoint key (bytes, share)"],
            [
                [
                    label,
                    ", ".join(
                        f"{k} {v:,} ({v / sum(d['payload_parts'].values()):.0%})"
                        for k, v in sorted(d["payload_parts"].items(), key=lambda kv: -kv[1])
                    ),
                ]
                for label, d in data.items()
            ],
        )
    )


def main() -> None:
    if not common.persistence_ready():
        text = f"checkpoint growth: {common.PENDING_PERSISTENCE}"
        print(text)
        common.write_result("checkpoint_growth", {"status": "pending", "steps": STEPS}, text)
        return
    with tempfile.TemporaryDirectory(prefix="bench-checkpoints-") as tmp:
        data = measure(Path(tmp))
    at200 = data["200"]["payload_vs_transcript"]
    at200_kib = data["200, 1 KiB results"]["payload_vs_transcript"]
    per_step = [data[f"{s:,}"]["payload_per_step"] for s in STEPS]
    growth = max(per_step) / min(per_step)
    checks = [
        {
            "target": "payload <= 2x transcript at 200 steps",
            "value": at200,
            "limit": 2.0,
            "status": "met" if at200 <= 2.0 else "missed",
        },
        {
            "target": "payload <= 2x transcript at 200 steps, 1 KiB tool results",
            "value": at200_kib,
            "limit": 2.0,
            "status": "met" if at200_kib <= 2.0 else "missed",
        },
        {
            "target": "linear: payload/step varies <= 1.5x from 10 to 1,000 steps",
            "value": growth,
            "limit": 1.5,
            "status": "met" if growth <= 1.5 else "missed",
        },
    ]
    text = render(data)
    text += "".join(f"\n- target {c['target']}: {c['value']:.3g} -> {c['status']}" for c in checks)
    print(text)
    figures = {
        "status": "measured",
        "steps": {k: v for k, v in data.items() if v["result_chars"] == 0},
        "realistic": {k: v for k, v in data.items() if v["result_chars"]},
        "targets": checks,
    }
    print("wrote", common.write_result("checkpoint_growth", figures, text))


if __name__ == "__main__":
    main()
