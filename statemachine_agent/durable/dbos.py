"""Run agents as DBOS workflows: one run is one workflow, each effect one step.

DBOS (`pip install 'statemachine-agent[dbos]'`) makes a Python function durable
by recording each step's result in a *system database* (SQLite for one machine,
Postgres for many). When a process dies, the workflow is executed again from
the top and every recorded step answers from the record, so finished model and
tool calls are never made twice; only the step in flight at the crash runs
again. The machine can be replayed like this because it does no I/O itself: its
model calls, tool calls and clock readings all come through `DBOSEffects`.

- the workflow id is the run id, so a run can be started, awaited or enqueued
  twice without running twice;
- a model call is the step `<agent>:model:<model name>`, a tool call the step
  `<agent>:tool:<tool name>`; recovery matches recorded steps by position and
  checks these names, so they must not change while runs are in flight;
- the run's clock is the wall time recorded by its last step, so elapsed times
  (and `Budget.max_seconds`) read the same on replay as they did the first time;
- approval waits are DBOS messages (`approval()`, `send_decision()`);
- the trace context of whoever started or enqueued the run (`traceparent`) is a
  workflow argument, so the worker's spans of the run (`otel` extra) are children
  of the caller's span, on recovery too.

A worker is any process that registered its agents (`register_agent`), called
`launch()` and stays alive; other processes enqueue runs with a `DBOSClient`.
Recovery after a crash is per *executor id*: a worker restarted with the same
`executor_id` picks up the runs it had in flight. See docs/scaling.md.
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from dbos import (
    DBOS,
    DBOSClient,
    DBOSConfig,
    EnqueueOptions,
    SetWorkflowID,
    StepOptions,
    WorkflowHandle,
    WorkflowHandleAsync,
)
from dbos import error as dbos_error

from statemachine_agent.agent import Agent, new_run_id
from statemachine_agent.audit.telemetry import continued, trace_carrier
from statemachine_agent.durable.audit import RunFiles, gate_agent
from statemachine_agent.durable.batches import run_in_batches
from statemachine_agent.durable.codec import (
    Prompt,
    outcome_from_plain,
    outcome_to_plain,
    prompt_to_plain,
    reply_from_plain,
    reply_to_plain,
    result_from_plain,
    result_to_plain,
)
from statemachine_agent.durable.registry import AgentCache
from statemachine_agent.machine.result import RunResult
from statemachine_agent.models.base import JSON, Model, ModelError, ModelReply, ModelRequest
from statemachine_agent.policy.approval import (
    ApprovalPolicy,
    Decision,
    Defer,
    PolicyAnswer,
    decision_from_plain,
    decision_to_plain,
)
from statemachine_agent.tools.base import ToolCall, ToolOutcome
from statemachine_agent.tools.registry import ToolRegistry

__all__ = [
    "DEFAULT_APP_NAME",
    "DEFAULT_QUEUE",
    "WORKFLOW_NAME",
    "DBOSEffects",
    "agent_workflow",
    "approval_topic",
    "dbos_config",
    "enqueue_run",
    "get_result",
    "launch",
    "run_agent",
    "send_decision",
    "shutdown",
    "sqlite_url",
    "start_run",
    "wait_result",
]

WORKFLOW_NAME = "statemachine_agent.run"
"""The one workflow every run is: its arguments name the agent, so workers need no per-agent
code."""

DEFAULT_QUEUE = "statemachine_agent"
DEFAULT_APP_NAME = "statemachine-agent"
TERMINAL_STATUSES = frozenset({"SUCCESS", "ERROR", "CANCELLED", "MAX_RECOVERY_ATTEMPTS_EXCEEDED"})


# -- one run in flight: its clock and whether it is replaying ------------------


@dataclass
class _Run:
    """What the effects keep per run while its workflow executes in this process.

    `live` turns true at the first step whose body really runs; until then the
    run is replaying and its events are held back, then dropped when the next
    step also answers from the record (they were written the first time) or
    written when it does not (they may have been lost with the crash).
    """

    run_id: str
    now: float = 0.0
    live: bool = False
    held: list[Callable[[], None]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def admit(self, deliver: Callable[[], None]) -> None:
        with self.lock:
            if not self.live:
                self.held.append(deliver)
                return
        deliver()

    def resolved(self, executed: bool) -> None:
        """A step returned: from its body (`executed`) or from the record."""
        with self.lock:
            if self.live:
                return
            held, self.held = self.held, []
            self.live = executed
        if executed:
            for deliver in held:
                deliver()

    def advance(self, at: Any) -> None:
        if isinstance(at, int | float):
            self.now = max(self.now, float(at))

    def finish(self) -> None:
        """The workflow is done: whatever is still held may never have been written."""
        with self.lock:
            held, self.held, self.live = self.held, [], True
        for deliver in held:
            deliver()


_current: contextvars.ContextVar[_Run | None] = contextvars.ContextVar(
    "statemachine_agent_dbos_run", default=None
)
_runs: dict[str, _Run] = {}


class _ReplayGate:
    """Holds a run's audit events while its workflow replays (see `_Run`)."""

    def admit(self, run_id: str | None, deliver: Callable[[], None]) -> None:
        run = _runs.get(run_id) if run_id is not None else None
        if run is None:
            deliver()
        else:
            run.admit(deliver)


_GATE = _ReplayGate()


def _wall_clock() -> JSON:
    return {"at": time.time()}


def _is_transient(error: BaseException) -> bool:
    """Retry a model step only when trying later can help (overload, rate limit, 5xx)."""
    return isinstance(error, ModelError) and error.retryable


# -- the effects ---------------------------------------------------------------


class DBOSEffects:
    """Effects whose model and tool calls are DBOS steps of the current workflow.

    Outside a workflow (an agent built on these effects but run directly) the
    calls run as plain function calls, as DBOS does with steps.
    """

    def __init__(
        self,
        agent: str,
        *,
        model_attempts: int = 3,
        retry_interval_seconds: float = 1.0,
        backoff_rate: float = 2.0,
    ) -> None:
        """
        Args:
            agent: the registered agent name; it prefixes every step name.
            model_attempts: tries of a model call failing with a retryable
                `ModelError` (overload, rate limit), on top of the SDK's own
                retries; 400/401/403/404 are never retried.
            retry_interval_seconds: wait before the first retry, multiplied by
                `backoff_rate` before each next one.
        """
        if model_attempts < 1:
            raise ValueError(f"model_attempts must be >= 1, got {model_attempts}")
        self.agent = agent
        self.model_attempts = model_attempts
        self.retry_interval_seconds = retry_interval_seconds
        self.backoff_rate = backoff_rate

    def __repr__(self) -> str:
        return f"<DBOSEffects {self.agent}>"

    def step_name(self, kind: str, name: str | None = None) -> str:
        """`<agent>:model:<model>`, `<agent>:tool:<tool>` or `<agent>:clock`."""
        return f"{self.agent}:{kind}" if name is None else f"{self.agent}:{kind}:{name}"

    async def call_model(self, model: Model, request: ModelRequest) -> ModelReply:
        options: StepOptions = {
            "name": self.step_name("model", model.name),
            "retries_allowed": self.model_attempts > 1,
            "max_attempts": self.model_attempts,
            "interval_seconds": self.retry_interval_seconds,
            "backoff_rate": self.backoff_rate,
            "should_retry": _is_transient,
        }

        async def call() -> JSON:
            reply = await model.acomplete(request)
            return {"reply": reply_to_plain(reply), "at": time.time()}

        try:
            done = await self._step(lambda body: DBOS.run_step_async(options, body), call)
        except dbos_error.DBOSMaxStepRetriesExceeded as exc:
            last = exc.errors[-1] if exc.errors else None
            if isinstance(last, ModelError):
                raise last from exc
            raise
        return reply_from_plain(done["reply"])

    async def run_tools(
        self,
        registry: ToolRegistry,
        calls: Sequence[ToolCall],
        on_outcome: Callable[[ToolCall, ToolOutcome], None] | None = None,
    ) -> list[ToolOutcome]:
        if DBOS.workflow_id is None:
            return await registry.execute_all(calls, on_outcome)

        def start(call: ToolCall) -> Awaitable[ToolOutcome]:
            # Reserved now, in the calls' order: concurrent steps keep their ids on replay.
            reservation = DBOS.reserve_step()
            options: StepOptions = {"name": self.step_name("tool", call.name)}

            async def execute() -> JSON:
                outcome = await registry.execute(call)
                return {"outcome": outcome_to_plain(outcome), "at": time.time()}

            async def step() -> ToolOutcome:
                done = await self._step(lambda body: reservation.run_async(options, body), execute)
                return outcome_from_plain(done["outcome"])

            return step()

        return await run_in_batches(registry, calls, start, on_outcome)

    def monotonic(self) -> float:
        """The run's logical clock: the wall time its latest step recorded."""
        run = _current.get()
        return run.now if run is not None else time.time()

    def approval(self, timeout_seconds: float) -> ApprovalPolicy:
        """A policy that waits for a decision sent with `send_decision` (a DBOS message).

        The wait is durable: a worker that dies while waiting resumes waiting
        after recovery, and a decision sent meanwhile is kept. With no decision
        within `timeout_seconds` the call is deferred and the run ends in
        `awaiting_approval`, to be resumed by a new run or by `Agent.resume`.
        """

        async def wait(call: ToolCall) -> PolicyAnswer:
            message = await DBOS.recv_async(approval_topic(call.id), timeout_seconds)
            if not isinstance(message, Mapping):
                return Defer()
            return decision_from_plain(message)

        return wait

    async def _step(
        self,
        launch: Callable[[Callable[[], Coroutine[Any, Any, JSON]]], Awaitable[JSON]],
        func: Callable[[], Awaitable[JSON]],
    ) -> JSON:
        """Run `func` as a step, noting whether its body ran (live) or the record answered."""
        run = _current.get()
        executed = False

        async def body() -> JSON:
            nonlocal executed
            executed = True
            return await func()

        try:
            done = await launch(body)
        finally:
            if run is not None:
                run.resolved(executed)
        if run is not None:
            run.advance(done.get("at"))
        return done


# -- the workflow ----------------------------------------------------------------

_effects_options: dict[str, Any] = {}
_files: dict[int, RunFiles] = {}


def _make_effects(name: str) -> DBOSEffects:
    return DBOSEffects(name, **_effects_options)


def _prepare(agent: Agent) -> Agent:
    gated, files = gate_agent(agent, _GATE)
    if files is not None:
        _files[id(gated)] = files
    return gated


_agents: AgentCache[DBOSEffects] = AgentCache(_make_effects, _prepare)


@DBOS.workflow(name=WORKFLOW_NAME)
async def agent_workflow(
    agent: str, prompt: Prompt, history: list[JSON], trace: dict[str, str] | None = None
) -> JSON:
    """One run of the registered agent `agent`; the workflow id is the run id; `trace` the
    starter's trace context (`telemetry.trace_carrier`)."""
    run_id = DBOS.workflow_id
    if run_id is None:
        raise RuntimeError("agent_workflow must run as a DBOS workflow")
    built, effects = _agents.get(agent)
    with continued(trace):
        result = await _drive(built, effects, run_id, prompt, history)
    files = _files.get(id(built))
    if files is not None:
        result = dataclasses.replace(result, audit_path=files.path(run_id))
    return result_to_plain(result)


async def _drive(
    built: Agent, effects: DBOSEffects, run_id: str, prompt: Prompt, history: list[JSON]
) -> RunResult:
    run = _Run(run_id)
    _runs[run_id] = run
    token = _current.set(run)
    try:
        clock: StepOptions = {"name": effects.step_name("clock")}
        started = await effects._step(
            lambda body: DBOS.run_step_async(clock, body), _async(_wall_clock)
        )
        run.now = float(started["at"])
        return await built.arun(prompt, history=history, run_id=run_id)
    finally:
        run.finish()
        _current.reset(token)
        _runs.pop(run_id, None)


def _async(func: Callable[[], JSON]) -> Callable[[], Awaitable[JSON]]:
    async def call() -> JSON:
        return func()

    return call


# -- starting workers and runs ---------------------------------------------------


def sqlite_url(path: str | Path) -> str:
    """The system database URL of a SQLite file (one machine, no server)."""
    return f"sqlite:///{Path(path).resolve()}"


def dbos_config(
    database_url: str,
    *,
    name: str = DEFAULT_APP_NAME,
    executor_id: str | None = None,
    application_version: str | None = None,
    log_level: str = "WARNING",
    **extra: Any,
) -> DBOSConfig:
    """A DBOS configuration for a worker (or for running runs in this process).

    Args:
        database_url: the system database: `sqlite_url(path)` on one machine,
            `postgresql://...` when several processes or machines share runs.
        executor_id: this worker's identity. Recovery is per executor: a worker
            restarted with the same id resumes the runs it had in flight, so
            give each worker a stable, unique id (a host name, a pod ordinal).
        application_version: pin the version all workers of a deployment share;
            by default DBOS hashes the workflow code. Workers only dequeue and
            recover runs of their own version.
        extra: any further `DBOSConfig` key.
    """
    config: dict[str, Any] = {
        "name": name,
        "system_database_url": database_url,
        "log_level": log_level,
        **extra,
    }
    if executor_id is not None:
        config["executor_id"] = executor_id
    if application_version is not None:
        config["application_version"] = application_version
    return cast(DBOSConfig, config)


def launch(
    config: DBOSConfig,
    *,
    queues: Sequence[str] = (DEFAULT_QUEUE,),
    worker_concurrency: int | None = None,
    polling_interval_sec: float = 1.0,
    model_attempts: int = 3,
    retry_interval_seconds: float = 1.0,
) -> None:
    """Start DBOS in this process: recover this executor's runs, then serve `queues`.

    Call it once, after importing the modules that register agents (each is
    built now, so a broken factory fails here), and outside a running event
    loop. `worker_concurrency` caps the runs of each queue this process runs at
    once, which is what spreads a batch over workers; `model_attempts` and
    `retry_interval_seconds` configure every agent's `DBOSEffects`.
    """
    _effects_options.update(
        model_attempts=model_attempts, retry_interval_seconds=retry_interval_seconds
    )
    _agents.clear()
    _files.clear()
    _agents.build_all()
    DBOS(config=config)
    DBOS.launch()
    for queue in queues:
        DBOS.register_queue(
            queue,
            worker_concurrency=worker_concurrency,
            polling_interval_sec=polling_interval_sec,
            on_conflict="always_update",
        )


def shutdown(workflow_completion_timeout_sec: int = 0) -> None:
    """Stop DBOS in this process (runs in flight are recovered by a later launch)."""
    DBOS.destroy(workflow_completion_timeout_sec=workflow_completion_timeout_sec)
    _agents.clear()
    _files.clear()


def _arguments(
    agent: str, prompt: str | Sequence[Mapping[str, Any]], history: Sequence[Mapping[str, Any]]
) -> tuple[str, Prompt, list[JSON], dict[str, str] | None]:
    """The workflow's arguments, with the caller's trace context (None when not traced)."""
    history_plain = [dict(message) for message in history]
    return agent, prompt_to_plain(prompt), history_plain, trace_carrier()


async def _start(
    agent: str,
    prompt: str | Sequence[Mapping[str, Any]],
    history: Sequence[Mapping[str, Any]],
    run_id: str,
    queue: str | None,
) -> WorkflowHandleAsync[JSON]:
    arguments = _arguments(agent, prompt, history)
    with SetWorkflowID(run_id):
        if queue is None:
            return await DBOS.start_workflow_async(agent_workflow, *arguments)
        return await DBOS.enqueue_workflow_async(queue, agent_workflow, *arguments)


async def start_run(
    agent: str,
    prompt: str | Sequence[Mapping[str, Any]],
    *,
    history: Sequence[Mapping[str, Any]] = (),
    run_id: str | None = None,
    queue: str | None = None,
) -> str:
    """Start a run as a workflow of this process (or on `queue`) and return its run id.

    A run id already started names the same run: it is not started again.
    """
    run_id = run_id or new_run_id()
    await _start(agent, prompt, history, run_id, queue)
    return run_id


async def get_result(run_id: str, *, polling_interval_sec: float = 0.1) -> RunResult:
    """Wait for a run started from this process (or any other on the same database)."""
    handle: WorkflowHandleAsync[JSON] = await DBOS.retrieve_workflow_async(run_id)
    plain: JSON = await handle.get_result(polling_interval_sec=polling_interval_sec)
    return result_from_plain(plain)


async def run_agent(
    agent: str,
    prompt: str | Sequence[Mapping[str, Any]],
    *,
    history: Sequence[Mapping[str, Any]] = (),
    run_id: str | None = None,
) -> RunResult:
    """Run the registered agent as a durable workflow in this process and return its result."""
    handle = await _start(agent, prompt, history, run_id or new_run_id(), None)
    plain: JSON = await handle.get_result()
    return result_from_plain(plain)


def enqueue_run(
    client: DBOSClient,
    agent: str,
    prompt: str | Sequence[Mapping[str, Any]],
    *,
    history: Sequence[Mapping[str, Any]] = (),
    run_id: str | None = None,
    queue: str = DEFAULT_QUEUE,
) -> str:
    """Put a run on a queue from any process (no DBOS launch needed); returns its run id.

    The workers serving `queue` share it out; enqueuing a run id again is a no-op.
    """
    run_id = run_id or new_run_id()
    options: EnqueueOptions = {
        "workflow_name": WORKFLOW_NAME,
        "queue_name": queue,
        "workflow_id": run_id,
    }
    client.enqueue(options, *_arguments(agent, prompt, history))
    return run_id


def wait_result(
    client: DBOSClient,
    run_id: str,
    *,
    timeout_seconds: float | None = None,
    polling_interval_sec: float = 0.2,
) -> RunResult:
    """Wait for a run through a client; `TimeoutError` if it has not ended in time."""
    deadline = None if timeout_seconds is None else time.monotonic() + timeout_seconds
    handle: WorkflowHandle[JSON] = client.retrieve_workflow(run_id)
    while handle.get_status().status not in TERMINAL_STATUSES:
        if deadline is not None and time.monotonic() > deadline:
            raise TimeoutError(f"run {run_id} has not ended after {timeout_seconds} s")
        time.sleep(polling_interval_sec)
    plain: JSON = handle.get_result()
    return result_from_plain(plain)


def approval_topic(tool_use_id: str) -> str:
    """The message topic a run waits on for the decision about one tool call."""
    return f"approval:{tool_use_id}"


async def send_decision(
    run_id: str,
    tool_use_id: str,
    decision: Decision,
    *,
    client: DBOSClient | None = None,
) -> None:
    """Answer a run waiting in `DBOSEffects.approval` (from a DBOS process, or via `client`)."""
    message = decision_to_plain(decision)
    topic = approval_topic(tool_use_id)
    if client is None:
        await DBOS.send_async(run_id, message, topic)
    else:
        await asyncio.to_thread(client.send, run_id, message, topic)
