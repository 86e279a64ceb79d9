"""Peak memory of the fleet view (`statemachine-agent stats`) over many audit files.

The fleet view must stream: its memory is held per run (a few numbers), never per
event, so it stays under 200 MB for 10,000 files or a 1 GB folder (issue 25). This
benchmark makes folders of audit files from a handful of real scripted runs (a
completed run, a budget salvage, a stall ended by the detector, a run paused for
approval and resumed with a person's decision), each copied under new run ids and
re-chained, and measures the peak resident set size of a fresh process that runs
`report.stats` over each folder:

- `baseline`: a process that only imports `statemachine_agent.report` (what any
  process of the package pays);
- `1,000 files` and `10,000 files`: the same runs, ten times as many;
- `1 GB`: 1,000 files of about 1 MB each (one large tool result a run, the usual
  reason an audit file is big).

The peak is the child's `VmHWM` (Linux), read as it ends: not `ru_maxrss`, which
Linux carries over `exec` from the parent. Figures and the ratio of 10,000 to
1,000 files go to `benchmarks/results/stats_memory.json`; nothing is timed.

    python -m benchmarks.stats_memory
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks import common

LIMIT_MB = 200.0
"""The issue's bound on the fleet view's peak memory."""

Event = dict[str, Any]


def copy_of(files: Sequence[Sequence[Event]], number: int, template: int) -> list[list[Event]]:
    """A copy of one run's files under new run ids (a sub-agent's and its parent's alike)."""
    ids: dict[str, str] = {}

    def new(run_id: str) -> str:
        return ids.setdefault(run_id, f"run_{template:02x}{number:06x}{len(ids):08x}")

    renamed = []
    for events in files:
        copied = []
        for event in events:
            event = dict(event)
            for key in ("run_id", "parent_run_id", "child_run_id"):
                if isinstance(event.get(key), str):
                    event[key] = new(event[key])
            copied.append(event)
        renamed.append(copied)
    return renamed


def write_chained(path: Path, events: Sequence[Event], cipher: Any = None) -> None:
    """Write events as an audit file with a fresh hash chain (sealed by its run.ended)."""
    from statemachine_agent.audit.chain import Chain

    chain = Chain(cipher=cipher)
    with path.open("w", encoding="utf-8") as out:
        for event in events:
            out.write(chain.seal(event).line + "\n")


def template_runs(folder: Path) -> list[list[Event]]:
    """One audit file's events per ending, from real scripted runs."""
    from statemachine_agent import Agent, Approve, Audit, Budget, ScriptedModel, calculate, tool
    from statemachine_agent.persistence import MemoryCheckpointer
    from statemachine_agent.policy.stall import StallPolicy
    from statemachine_agent.testing import replies

    @tool
    def search(query: str) -> str:
        """Search the web (always finds nothing)."""
        return "no results"

    @tool(requires_approval=True, side_effect=True)
    def refund(amount: int) -> str:
        """Refund an amount to the customer."""
        return f"refunded {amount}"

    def events(path: Path | None) -> list[Event]:
        assert path is not None
        return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]

    same = [replies.tool_use("search", {"query": "weather tokyo"}) for _ in range(5)]
    runs = [
        Agent(ScriptedModel([replies.text("Hi.")]), audit=Audit(dir=folder)).run("Go."),
        Agent(
            ScriptedModel(
                [replies.tool_use("calculate", {"expression": "1+1"}), replies.text("Left.")]
            ),
            tools=[calculate],
            budget=Budget(max_iterations=1),
            audit=Audit(dir=folder),
        ).run("Go."),
        Agent(
            ScriptedModel([*same, replies.text("Nothing.")]),
            tools=[search],
            stall=StallPolicy(max_interventions=2),
            audit=Audit(dir=folder),
        ).run("Go."),
    ]
    store = MemoryCheckpointer()
    script = ScriptedModel(
        [
            replies.reply(
                replies.tool_use_block("refund", {"amount": 12}, id="toolu_refund"),
                stop_reason="tool_use",
            ),
            replies.text("Done."),
        ]
    )
    agent = Agent(script, tools=[refund], checkpointer=store, audit=Audit(dir=folder))
    paused = agent.run("Refund 12.")
    decided = {"toolu_refund": Approve(by="carol", note="within policy")}
    runs.append(agent.resume(paused.run_id, decisions=decided))
    return [events(run.audit_path) for run in runs]


def padded(events: list[Event], size: int) -> list[Event]:
    """The run with its first tool result `size` characters long (or one added)."""
    out = [dict(e) for e in events]
    for event in out:
        if event["event"] == "tool.finished":
            event["content"] = "x" * size
            return out
    out.insert(1, {"event": "tool.finished", "run_id": out[0]["run_id"], "content": "x" * size})
    return out


def make_folder(folder: Path, templates: list[list[Event]], files: int, pad: int = 0) -> int:
    """`files` audit files from the templates, in turn; returns the bytes written."""
    folder.mkdir(parents=True)
    for number in range(files):
        t = number % len(templates)
        (events,) = copy_of([templates[t]], number, t)
        write_chained(folder / f"{number:06d}.jsonl", padded(events, pad) if pad else events)
    return sum(p.stat().st_size for p in folder.iterdir())


_CHILD = """
import sys
from statemachine_agent import report
counted = "0 files, 0 runs"
if sys.argv[1] != "-":
    fleet = report.stats([sys.argv[1]])
    counted = f"{fleet.files_counted:,} files, {fleet.runs:,} runs"
status = dict(line.split(":", 1) for line in open("/proc/self/status"))
print(status["VmHWM"].split()[0])
print(counted)
"""


def peak_mb(folder: Path | None) -> tuple[float, str]:
    """The peak RSS (its `VmHWM`, KiB) of a fresh process running
    `report.stats` over `folder` (None: importing the package only), and what it counted."""
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, str(folder) if folder else "-"],
        capture_output=True,
        text=True,
        check=True,
        cwd=common.ROOT,
    )
    peak, counted = done.stdout.strip().splitlines()
    return int(peak) / 1024, counted


def main() -> None:
    figures: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="bench-stats-") as tmp:
        root = Path(tmp)
        templates = template_runs(root / "templates")
        cases: list[tuple[str, Path | None, int]] = [("baseline (import only)", None, 0)]
        folder: Path | None
        for label, files, pad in (
            ("1,000 files", 1_000, 0),
            ("10,000 files", 10_000, 0),
            ("1 GB: 1,000 files of ~1 MB", 1_000, 1_000_000),
        ):
            folder = root / f"case{len(cases)}"
            size = make_folder(folder, templates, files, pad)
            cases.append((label, folder, size))
        rows = []
        for label, folder, size in cases:
            peak, counted = peak_mb(folder)
            figures[label] = {"peak_rss_mb": peak, "bytes": size, "counted_files_runs": counted}
            rows.append([label, f"{size / 1e6:,.1f} MB", counted, f"{peak:.1f} MB"])
    ratio = figures["10,000 files"]["peak_rss_mb"] / figures["1,000 files"]["peak_rss_mb"]
    worst = max(f["peak_rss_mb"] for f in figures.values())
    checks = [
        {
            "target": f"peak RSS under {LIMIT_MB:.0f} MB in every case",
            "value": worst,
            "limit": LIMIT_MB,
            "status": "met" if worst < LIMIT_MB else "missed",
        },
        {"target": "peak RSS, 10,000 files / 1,000 files", "value": ratio},
    ]
    figures["targets"] = checks
    text = common.table(["case", "folder", "files, runs counted", "peak RSS"], rows)
    text += f"\n- peak 10,000 / 1,000 files: {ratio:.2f}x"
    text += f"\n- target {checks[0]['target']}: {worst:.1f} MB -> {checks[0]['status']}"
    print(text)
    print("wrote", common.write_result("stats_memory", figures, text))


if __name__ == "__main__":
    main()
