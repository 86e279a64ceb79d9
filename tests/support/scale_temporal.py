"""A Temporal worker or client in a child process, for the scale-out tests.

Usage:
    python -m tests.support.scale_temporal worker ADDRESS QUEUE IDENTITY
    python -m tests.support.scale_temporal run ADDRESS QUEUE AGENT RUN_ID PROMPT
    python -m tests.support.scale_temporal approve ADDRESS QUEUE RUN_ID [AGENT CALL_ID...]
    python -m tests.support.scale_temporal traced ADDRESS QUEUE AGENT RUN_ID PROMPT

The Temporal SDK's Rust core keeps threads that can abort the interpreter at
exit (temporalio/sdk-python#300, "PyGILState_Release ... finalizing"), so the
test process never connects to Temporal itself: every client and worker runs
here, prints its answer as one JSON line and leaves with `os._exit`, skipping
the interpreter teardown where the abort happens. A worker runs until SIGTERM
(then shuts down cleanly) or until it SIGKILLs itself in a crash test.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
import traceback
from datetime import timedelta
from typing import Any

from opentelemetry import trace
from temporalio.client import Client

import tests.support.scale_agents as agents
from statemachine_agent import Approve
from statemachine_agent.durable.codec import result_to_plain
from statemachine_agent.effects import temporal
from statemachine_agent.models.base import JSON

TEST_OPTIONS = temporal.TemporalOptions(
    model_timeout=timedelta(seconds=20),
    model_attempts=3,
    heartbeat_timeout=timedelta(seconds=2),
    retry_initial_interval=timedelta(milliseconds=200),
    retry_maximum_interval=timedelta(seconds=1),
)
"""Short enough that a dead worker's activity moves on within a test's patience."""


async def connect(address: str) -> Client:
    """Connect, retrying while a just-started dev server comes up."""
    deadline = time.monotonic() + 30
    while True:
        try:
            return await Client.connect(address)
        except RuntimeError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.2)


async def work(address: str, queue: str, identity: str) -> None:
    agents.export_spans()
    client = await connect(address)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    worker = temporal.create_worker(
        client,
        task_queue=queue,
        options=TEST_OPTIONS,
        identity=identity,
        sticky_queue_schedule_to_start_timeout=timedelta(seconds=1),
    )
    async with worker:
        print(json.dumps({"ready": identity}), flush=True)
        await stop.wait()


async def run(address: str, queue: str, agent: str, run_id: str, prompt: str) -> dict[str, Any]:
    client = await connect(address)
    result = await temporal.run_agent(client, agent, prompt, run_id=run_id, task_queue=queue)
    return {"result": result_to_plain(result)}


async def traced(address: str, queue: str, agent: str, run_id: str, prompt: str) -> JSON:
    """`run` inside a span of this process (a service handling a request): returns the
    result and that span's trace and span ids."""
    agents.export_spans()
    tracer = trace.get_tracer("scale-tests")
    with tracer.start_as_current_span("handle request") as span:
        answer = await run(address, queue, agent, run_id, prompt)
    context = span.get_span_context()
    return {**answer, "trace_id": f"{context.trace_id:032x}", "span_id": f"{context.span_id:016x}"}


async def approve(
    address: str,
    queue: str,
    run_id: str,
    agent: str = agents.APPROVAL,
    calls: tuple[str, ...] = ("toolu_mail",),
) -> dict[str, Any]:
    """Start `agent` (the e-mail approval agent by default), approve each of `calls` once
    the run waits for a decision, and return the result and what it first waited for."""
    client = await connect(address)
    handle = await temporal.start_run(
        client, agent, "Mail the boss.", run_id=run_id, task_queue=queue
    )
    waited: list[str] = []
    for _ in range(200):
        waited = await temporal.awaiting_approval(client, run_id)
        if waited:
            break
        await asyncio.sleep(0.05)
    for call in calls:
        await temporal.send_decision(client, run_id, call, Approve())
    result = await temporal.get_result(handle)
    return {"waited": waited, "result": result_to_plain(result)}


def main(argv: list[str]) -> None:
    mode, address, queue = argv[0], argv[1], argv[2]
    if mode == "worker":
        asyncio.run(work(address, queue, argv[3]))
        answer: dict[str, Any] = {"stopped": argv[3]}
    elif mode == "run":
        answer = asyncio.run(run(address, queue, argv[3], argv[4], argv[5]))
    elif mode == "traced":
        answer = asyncio.run(traced(address, queue, argv[3], argv[4], argv[5]))
    elif mode == "approve":
        calls = tuple(argv[5:]) or ("toolu_mail",)
        agent = argv[4] if len(argv) > 4 else agents.APPROVAL
        answer = asyncio.run(approve(address, queue, argv[3], agent, calls))
    else:
        raise SystemExit(f"unknown mode {mode!r}")
    print(json.dumps(answer), flush=True)


if __name__ == "__main__":
    code = 0
    try:
        main(sys.argv[1:])
    except BaseException as exc:
        traceback.print_exc()
        print(json.dumps({"error": f"{type(exc).__name__}: {exc}"}), flush=True)
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
