"""Scale-out: 1,000 scripted runs across 2 DBOS workers on Postgres, against the in-process engine.

Run it standalone (it needs the `[dbos]` extra and PostgreSQL's server binaries):

    .venv/bin/python benchmarks/bench_scaleout.py [--runs 1000] [--workers 2]

It starts a throwaway PostgreSQL on 127.0.0.1 (fsync off), then measures:

- latency: one run at a time, in process with the default effects, and as a DBOS
  workflow on Postgres in this process; the difference divided by the steps
  DBOS records per run is the *per-step overhead* of durability;
- throughput: the runs enqueued by a `DBOSClient` and shared out by the queue
  between worker processes, against the same runs with the same total
  concurrency in one process without DBOS.

The scripted run is the shape of the tests' payments scenario: three model
calls, two concurrent lookups and two sequential payments (7 effects, 8 DBOS
steps with the run's clock). Results go to benchmarks/results/scaleout.json and
a table is printed. Not a test: figures depend on the machine and its load.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.metadata
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

from statemachine_agent import Agent, tool
from statemachine_agent.durable import ProgressModel, build_agent, register_agent
from statemachine_agent.effects.base import Effects, InProcessEffects
from statemachine_agent.testing import replies

AGENT = "bench-scaleout"
RESULTS = Path(__file__).resolve().parent / "results"
EFFECTS_PER_RUN = 7
DBOS_STEPS_PER_RUN = EFFECTS_PER_RUN + 1
"""The effects plus the step that records the run's start time."""


def script() -> list[dict[str, Any]]:
    return [
        replies.tool_uses(
            ("lookup", {"key": "a"}), ("lookup", {"key": "b"}), ids=("toolu_look_a", "toolu_look_b")
        ),
        replies.tool_uses(
            ("pay", {"amount": 5}), ("pay", {"amount": 7}), ids=("toolu_pay5", "toolu_pay7")
        ),
        replies.text("Paid 12 in total; a=A, b=B."),
    ]


@register_agent(AGENT)
def bench_agent(effects: Effects) -> Agent:
    """Cheap tools and a scripted model: what is measured is the engine, not the work."""

    @tool
    def lookup(key: str) -> str:
        """Read a value."""
        return key.upper()

    @tool(side_effect=True, sequential=True)
    def pay(amount: int, idempotency_key: str) -> str:
        """Pay an amount once per idempotency key."""
        return f"paid {amount}"

    return Agent(
        ProgressModel(script(), validate=False),
        tools=[lookup, pay],
        system="Pay the user's bills.",
        stall=None,
        effects=effects,
    )


# -- a worker process --------------------------------------------------------------


def worker(url: str, executor: str, concurrency: int) -> None:
    """Serve the default queue until SIGTERM."""
    from statemachine_agent.effects import dbos

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    dbos.launch(
        dbos.dbos_config(url, executor_id=executor, application_version="bench-scaleout"),
        worker_concurrency=concurrency,
        polling_interval_sec=0.05,
    )
    print(json.dumps({"ready": executor}), flush=True)
    stop.wait()
    dbos.shutdown()


# -- the measurements ------------------------------------------------------------------


def in_process_latency(runs: int) -> list[float]:
    agent = build_agent(AGENT, InProcessEffects())

    async def measure() -> list[float]:
        times = []
        for i in range(runs):
            started = time.perf_counter()
            result = await agent.arun("Pay my bills.", run_id=f"lat_inproc_{i}")
            times.append(time.perf_counter() - started)
            assert result.end_state == "completed", result.reason
        return times

    return asyncio.run(measure())


def in_process_throughput(runs: int, concurrency: int) -> float:
    agent = build_agent(AGENT, InProcessEffects())

    async def measure() -> float:
        gate = asyncio.Semaphore(concurrency)

        async def one(i: int) -> None:
            async with gate:
                result = await agent.arun("Pay my bills.", run_id=f"thr_inproc_{i}")
                assert result.end_state == "completed", result.reason

        started = time.perf_counter()
        await asyncio.gather(*(one(i) for i in range(runs)))
        return time.perf_counter() - started

    return asyncio.run(measure())


def dbos_latency(url: str, runs: int) -> list[float]:
    from statemachine_agent.effects import dbos

    dbos.launch(dbos.dbos_config(url, executor_id="latency"), queues=())
    try:

        async def measure() -> list[float]:
            times = []
            for i in range(runs):
                started = time.perf_counter()
                result = await dbos.run_agent(AGENT, "Pay my bills.", run_id=f"lat_dbos_{i}")
                times.append(time.perf_counter() - started)
                assert result.end_state == "completed", result.reason
            return times

        return asyncio.run(measure())
    finally:
        dbos.shutdown()


def dbos_throughput(url: str, runs: int, workers: int, concurrency: int) -> dict[str, Any]:
    from dbos import DBOSClient

    from statemachine_agent.effects import dbos

    processes = [
        subprocess.Popen(
            [sys.executable, __file__, "--worker", url, f"w{k + 1}", str(concurrency)],
            stdout=subprocess.PIPE,
            text=True,
        )
        for k in range(workers)
    ]
    try:
        for process in processes:
            assert process.stdout is not None
            ready = json.loads(process.stdout.readline() or "{}")
            assert "ready" in ready, "a worker did not start"
        client = DBOSClient(system_database_url=url)
        try:
            started = time.perf_counter()
            ids = [
                dbos.enqueue_run(client, AGENT, "Pay my bills.", run_id=f"thr_dbos_{i}")
                for i in range(runs)
            ]
            enqueued = time.perf_counter() - started
            ends = Counter(
                dbos.wait_result(client, run_id, polling_interval_sec=0.05).end_state
                for run_id in ids
            )
            elapsed = time.perf_counter() - started
            executors = Counter(
                client.retrieve_workflow(run_id).get_status().executor_id for run_id in ids
            )
        finally:
            client.destroy()
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            process.wait(timeout=60)
    return {
        "seconds": elapsed,
        "enqueue_seconds": enqueued,
        "end_states": dict(ends),
        "runs_per_executor": dict(sorted(executors.items(), key=lambda kv: str(kv[0]))),
    }


def machine() -> dict[str, Any]:
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cores": os.cpu_count(),
        "load_avg": list(os.getloadavg()),
    }


def versions() -> dict[str, str]:
    found = {}
    for name in ("statemachine-agent", "dbos", "sqlalchemy", "psycopg"):
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found[name] = "not installed"
    return found


def ms(seconds: float) -> float:
    return round(seconds * 1000, 3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--worker-concurrency", type=int, default=16)
    parser.add_argument("--latency-runs", type=int, default=50)
    parser.add_argument("--output", type=Path, default=RESULTS / "scaleout.json")
    parser.add_argument("--worker", nargs=3, metavar=("URL", "EXECUTOR", "CONCURRENCY"))
    args = parser.parse_args()
    if args.worker:
        url, executor, concurrency = args.worker
        worker(url, executor, int(concurrency))
        return

    from statemachine_agent.testing.postgres import LocalPostgres

    total_concurrency = args.workers * args.worker_concurrency
    with LocalPostgres() as server:
        base = server.dsn.rsplit("/", 1)[0]
        lat_inproc = in_process_latency(args.latency_runs)
        lat_dbos = dbos_latency(f"{base}/bench_latency", args.latency_runs)
        thr_inproc = in_process_throughput(args.runs, total_concurrency)
        thr_dbos = dbos_throughput(
            f"{base}/bench_queue", args.runs, args.workers, args.worker_concurrency
        )

    inproc_ms = statistics.median(lat_inproc)
    dbos_ms = statistics.median(lat_dbos)
    overhead_ms = ms((dbos_ms - inproc_ms) / DBOS_STEPS_PER_RUN)
    inproc_rate = round(args.runs / thr_inproc, 1)
    dbos_rate = round(args.runs / thr_dbos["seconds"], 1)
    result = {
        "benchmark": "scaleout",
        "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": machine(),
        "versions": versions(),
        "setup": {
            "runs": args.runs,
            "workers": args.workers,
            "worker_concurrency": args.worker_concurrency,
            "effects_per_run": EFFECTS_PER_RUN,
            "dbos_steps_per_run": DBOS_STEPS_PER_RUN,
            "database": "PostgreSQL on 127.0.0.1, fsync=off (LocalPostgres)",
        },
        "latency_ms": {
            "in_process": {"median": ms(inproc_ms), "min": ms(min(lat_inproc))},
            "dbos_postgres": {"median": ms(dbos_ms), "min": ms(min(lat_dbos))},
        },
        "per_step_overhead_ms": overhead_ms,
        "throughput_runs_per_s": {"in_process": inproc_rate, "dbos_workers": dbos_rate},
        "dbos": thr_dbos,
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")

    cluster = f"DBOS on Postgres ({args.workers} workers x {args.worker_concurrency})"
    rows = [
        ("in process (one process, no durability)", ms(inproc_ms), inproc_rate),
        (cluster, ms(dbos_ms), dbos_rate),
    ]
    print(f"\nscale-out: {args.runs} scripted runs, {EFFECTS_PER_RUN} effects each\n")
    print(f"{'engine':<48} {'latency ms':>11} {'runs/s':>9}")
    for name, latency, rate in rows:
        print(f"{name:<48} {latency:>11.2f} {rate:>9.1f}")
    print(
        f"\nper-step overhead of DBOS: {overhead_ms:.2f} ms "
        f"({DBOS_STEPS_PER_RUN} recorded steps a run)"
    )
    print(f"runs per worker: {thr_dbos['runs_per_executor']}; end states: {thr_dbos['end_states']}")
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
