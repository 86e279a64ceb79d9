"""Benchmark 5: scale-out across worker processes (DBOS on Postgres).

`make bench` runs `benchmarks/bench_scaleout.py` first (DBOS workers on a
PostgreSQL server it starts); this module reports its `results/scaleout.json`
in the summary, or says the figures are pending when it has not run.
"""

from __future__ import annotations

import json
from typing import Any

from benchmarks import common

PENDING = "pending: scale-out issue (run `benchmarks/bench_scaleout.py` standalone)"


def summary(data: dict[str, Any]) -> str:
    latency, throughput = data["latency_ms"], data["throughput_runs_per_s"]
    setup = data.get("setup", {})
    rows = [
        ["runs, workers", f"{setup.get('runs', '?')}, {setup.get('workers', '?')}"],
        ["latency of one run, in process (ms)", f"{latency['in_process']['median']:,.1f}"],
        ["latency of one run, DBOS on Postgres (ms)", f"{latency['dbos_postgres']['median']:,.1f}"],
        ["durability overhead per step (ms)", f"{data['per_step_overhead_ms']:,.2f}"],
        ["throughput in process (runs/s)", f"{throughput['in_process']:,.1f}"],
        ["throughput, DBOS workers (runs/s)", f"{throughput['dbos_workers']:,.1f}"],
    ]
    return (
        f"From `benchmarks/bench_scaleout.py`, run by `make bench` on {data.get('when', '?')}:"
        "\n\n" + common.table(["scale-out", "figure"], rows)
    )


def main() -> None:
    path = common.RESULTS / "scaleout.json"
    status, text = "pending", PENDING
    if path.exists():
        try:
            text, status = summary(json.loads(path.read_text(encoding="utf-8"))), "standalone"
        except (KeyError, TypeError, ValueError) as exc:
            text = f"{PENDING}; results/scaleout.json unreadable ({type(exc).__name__}: {exc})"
    print(text)
    figures = {"status": status, "source": "results/scaleout.json" if status != "pending" else None}
    print("wrote", common.write_result("scale_out", figures, text))


if __name__ == "__main__":
    main()
