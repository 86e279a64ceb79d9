"""Turn results/*.json into the plots under docs/img/ and the tables of docs/performance.md.

The doc's prose is written by hand; only the blocks between
`<!-- bench:NAME:start -->` and `<!-- bench:NAME:end -->` are replaced here.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

from benchmarks import common

DOC = common.ROOT / "docs" / "performance.md"
IMG = common.ROOT / "docs" / "img"


def load(name: str) -> dict[str, Any] | None:
    path = common.RESULTS / f"{name}.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else None


def overhead_plot(result: dict[str, Any]) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cases = result["figures"]["cases"]
    names = list(cases)[::-1]
    medians = [cases[n]["median"] for n in names]
    low = [cases[n]["median"] - cases[n]["min"] for n in names]
    high = [cases[n]["max"] - cases[n]["median"] for n in names]
    colors = [
        "#98a2b3" if n[0] in "ag" else "#1570ef" if n[0] in "bcd" else "#f79009" for n in names
    ]
    fig, ax = plt.subplots(figsize=(10, 0.45 * len(names) + 1.4))
    ax.barh([cases[n]["label"] for n in names], medians, xerr=[low, high], color=colors, capsize=3)
    ax.set_xscale("log")
    ax.set_xlabel("microseconds per iteration (median, min-max), log scale")
    ax.set_title("Overhead per iteration (51 model calls, zero-latency model)")
    for y, name in enumerate(names):
        ax.text(
            cases[name]["max"] * 1.25, y, common.fmt(cases[name]["median"]), va="center", fontsize=8
        )
    ax.set_xlim(right=max(cases[n]["max"] for n in names) * 4)
    fig.tight_layout()
    path = IMG / "overhead.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def checkpoint_plot(result: dict[str, Any] | None) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    figures = (result or {}).get("figures", {})
    if figures.get("status") != "measured":
        ax.text(
            0.5,
            0.5,
            "pending: statemachine_agent.persistence not there yet",
            ha="center",
            va="center",
            transform=ax.transAxes,
        )
        ax.set_axis_off()
    else:
        data = sorted(figures["steps"].values(), key=lambda d: d["steps"])
        steps = [d["steps"] for d in data]
        ax.plot(steps, [d["payload_bytes"] for d in data], "o-", label="checkpoint payload")
        ax.plot(steps, [d["file_bytes"] for d in data], "s--", label="SQLite file (closed)")
        ax.plot(steps, [d["transcript_bytes"] for d in data], "^-", label="final transcript")
        ax.plot(
            steps,
            [2 * d["transcript_bytes"] for d in data],
            ":",
            color="grey",
            label="target: 2x transcript",
        )
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("steps (tool calls) in the run")
        ax.set_ylabel("bytes")
        ax.legend()
    ax.set_title("Checkpoint bytes vs run length (SQLite checkpointer)")
    fig.tight_layout()
    path = IMG / "checkpoint_growth.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def targets_block(results: dict[str, dict[str, Any] | None]) -> str:
    rows = []
    for name, result in results.items():
        figures = (result or {}).get("figures", {})
        for check in figures.get("targets", []):
            value = check.get("value")
            rows.append(
                [
                    name,
                    check.get("text") or check["target"],
                    "-" if value is None else f"{value:.3g}",
                    check["status"],
                ]
            )
        if figures.get("status") == "pending":
            rows.append([name, "all", "-", result["table"] if result else "pending"])
        elif figures.get("status") == "standalone":
            rows.append([name, "(no target)", "-", "figures in its section"])
    return common.table(["benchmark", "target", "measured", "status"], rows)


def machine_block(result: dict[str, Any] | None) -> str:
    if result is None:
        return "(no results yet: run `make bench`)"
    m, v = result["machine"], result["versions"]
    peers = ", ".join(f"{k} {val}" for k, val in v.items() if val)
    return (
        f"Last run {result['when']} on {m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB, "
        f"Python {m['python']} ({m['platform']}); load average at start "
        f"{', '.join(f'{x:.2f}' for x in m['load_avg'] or [])}.\n\nVersions: {peers}."
    )


def fill(doc: str, name: str, body: str) -> str:
    pattern = re.compile(rf"(<!-- bench:{name}:start -->\n).*?(<!-- bench:{name}:end -->)", re.S)
    if not pattern.search(doc):
        raise SystemExit(f"docs/performance.md has no bench:{name} block")
    return pattern.sub(lambda m: m.group(1) + body.rstrip() + "\n" + m.group(2), doc)


def main() -> None:
    IMG.mkdir(parents=True, exist_ok=True)
    names = [
        "real_sdk",
        "overhead",
        "concurrency",
        "parallel_tools",
        "checkpoint_growth",
        "scale_out",
        "profile",
    ]
    results = {name: load(name) for name in names}
    if "--tables" not in sys.argv:  # `--tables`: the doc's tables only (no matplotlib needed)
        if results["overhead"]:
            print("wrote", overhead_plot(results["overhead"]))
        print("wrote", checkpoint_plot(results["checkpoint_growth"]))
    doc = DOC.read_text(encoding="utf-8")
    doc = fill(doc, "machine", machine_block(results["overhead"]))
    doc = fill(doc, "targets", targets_block({k: v for k, v in results.items() if k != "profile"}))
    for name in names:
        result = results[name]
        doc = fill(doc, name, result["table"] if result else "(not run yet: `make bench`)")
    DOC.write_text(doc, encoding="utf-8")
    print("wrote", DOC)


if __name__ == "__main__":
    main()
