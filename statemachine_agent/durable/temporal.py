"""Run agents as Temporal workflows: the machine in the workflow, effects as activities.

Temporal (`pip install 'statemachine-agent[temporal]'`) keeps each workflow's
history on its server and rebuilds a workflow's state on any worker by
replaying that history through the workflow code. The machine can be that code
because it is deterministic: it does no I/O, its clock is `workflow.time()`,
its run id is the workflow id, and everything that touches the world goes
through `TemporalEffects` as an activity:

- a model call is the activity `statemachine_agent.model`: a short
  start-to-close timeout, a heartbeat so a dead worker is noticed in seconds,
  and a retry policy read from the engine's own error classes: a `ModelError`
  that is not `retryable` (400, 401, 403, 404) fails at once, an overload or
  rate limit is tried again with backoff;
- a tool call is the activity `statemachine_agent.tool`, with a timeout sized
  from the tool's own `timeout` and retry policy; the registry never raises, so
  Temporal retries it only when a worker died or the activity timed out;
- an approval wait is a signal (`send_decision`), waited for durably;
- audit sinks and the logger write only when the workflow is not replaying;
- the trace context of whoever started the run (`traceparent`) travels in the
  workflow's input, so the worker's spans of the run (`otel` extra) are children of
  the caller's span.

Workers rebuild agents by name (`register_agent`); clients start runs with
`start_run` / `run_agent`. See docs/scaling.md.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from temporalio import activity, workflow
from temporalio.client import Client, WorkflowHandle
from temporalio.common import RetryPolicy, WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.exceptions import ActivityError, ApplicationError, WorkflowAlreadyStartedError
from temporalio.exceptions import TimeoutError as ActivityTimeoutError
from temporalio.worker import Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

with workflow.unsafe.imports_passed_through():
    from statemachine_agent.agent import Agent, new_run_id
    from statemachine_agent.audit.telemetry import continued, trace_carrier
    from statemachine_agent.durable.audit import RunFiles, gate_agent
    from statemachine_agent.durable.batches import run_in_batches
    from statemachine_agent.durable.codec import (
        call_from_plain,
        call_to_plain,
        model_error_from_plain,
        model_error_to_plain,
        outcome_from_plain,
        outcome_to_plain,
        prompt_to_plain,
        reply_from_plain,
        reply_to_plain,
        request_from_plain,
        request_to_plain,
        result_from_plain,
        result_to_plain,
    )
    from statemachine_agent.durable.registry import AgentCache, UnknownAgentError
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
    from statemachine_agent.tools.base import Tool, ToolCall, ToolOutcome
    from statemachine_agent.tools.registry import ToolRegistry

__all__ = [
    "DEFAULT_TASK_QUEUE",
    "FATAL_MODEL_ERROR",
    "MODEL_ACTIVITY",
    "MODEL_ERROR",
    "PASSTHROUGH_MODULES",
    "TOOL_ACTIVITY",
    "WORKFLOW_NAME",
    "AgentWorkflow",
    "TemporalEffects",
    "TemporalOptions",
    "awaiting_approval",
    "call_model_activity",
    "create_worker",
    "get_result",
    "run_agent",
    "run_tool_activity",
    "sandbox_runner",
    "send_decision",
    "start_run",
]

WORKFLOW_NAME = "statemachine_agent.run"
MODEL_ACTIVITY = "statemachine_agent.model"
TOOL_ACTIVITY = "statemachine_agent.tool"
MODEL_ERROR = "ModelError"
"""The `ApplicationError.type` of a model call failing in a way that may pass (overload,
rate limit, 5xx); its details hold the error."""
FATAL_MODEL_ERROR = "FatalModelError"
"""The type of a model call failing in a way no retry fixes (400, 401, 403, 404): the
retry policy names it non-retryable, and the error is marked so as well."""
DEFAULT_TASK_QUEUE = "statemachine_agent"

PASSTHROUGH_MODULES = (
    "statemachine_agent",
    "transitions",
    "structlog",
    "jsonschema",
    "referencing",
    "pydantic",
    "pydantic_core",
    "docstring_parser",
    "anthropic",
    "httpx",
    "openai",
    "opentelemetry",
)
"""Modules the workflow sandbox shares with the worker instead of re-importing per run.

The engine is deterministic by construction, and the agents a worker builds
(by name, from factories of the real modules) must be the same objects its
activities use, so the engine and its libraries are passed through.
"""


@dataclass(frozen=True, slots=True)
class TemporalOptions:
    """Timeouts and retries of the activities a worker's runs schedule.

    Kept per task queue by `create_worker`: every worker of a queue must use
    the same options, since replay re-issues the same activities.
    """

    model_timeout: timedelta = timedelta(minutes=2)
    """Start-to-close timeout of one model call attempt."""
    model_attempts: int = 4
    """Attempts of a model call failing with a retryable error (on top of the SDK's retries)."""
    tool_timeout: timedelta = timedelta(minutes=10)
    """Per-attempt timeout of a tool without its own `timeout`."""
    tool_timeout_margin: timedelta = timedelta(seconds=10)
    """Added to a tool's own time limits (all its attempts and backoff) for the activity."""
    tool_attempts: int = 3
    """Attempts of a tool activity whose worker died or that timed out."""
    heartbeat_timeout: timedelta = timedelta(seconds=10)
    """How soon a silent (dead) worker's activity is retried elsewhere; activities
    heartbeat three times per timeout while they work."""
    retry_initial_interval: timedelta = timedelta(seconds=1)
    retry_backoff: float = 2.0
    retry_maximum_interval: timedelta = timedelta(seconds=60)

    def retry_policy(self, attempts: int, non_retryable: Sequence[str] = ()) -> RetryPolicy:
        return RetryPolicy(
            initial_interval=self.retry_initial_interval,
            backoff_coefficient=self.retry_backoff,
            maximum_interval=self.retry_maximum_interval,
            maximum_attempts=attempts,
            non_retryable_error_types=list(non_retryable),
        )

    def tool_activity_timeout(self, tool: Tool | None) -> timedelta:
        """All the time the registry may spend on one call of `tool`, plus the margin."""
        if tool is None:
            return self.tool_timeout_margin
        per_attempt = (
            tool.timeout if tool.timeout is not None else self.tool_timeout.total_seconds()
        )
        retries = tool.retries if tool.on_error == "retry" else 0
        backoff = tool.retry_backoff * (2**retries - 1)
        seconds = per_attempt * (retries + 1) + backoff
        return timedelta(seconds=seconds) + self.tool_timeout_margin


_options_by_queue: dict[str, TemporalOptions] = {}


def _options() -> TemporalOptions:
    return _options_by_queue.get(workflow.info().task_queue) or TemporalOptions()


# -- audit under replay ------------------------------------------------------------


class _ReplayGate:
    """Lets an event through unless the workflow that emits it is replaying history."""

    def admit(self, run_id: str | None, deliver: Callable[[], None]) -> None:
        if workflow.in_workflow() and workflow.unsafe.is_replaying():
            return
        deliver()


_GATE = _ReplayGate()
_files: dict[int, RunFiles] = {}


def _prepare(agent: Agent) -> Agent:
    gated, files = gate_agent(agent, _GATE)
    if files is not None:
        _files[id(gated)] = files
    return gated


# -- the effects (workflow side) ----------------------------------------------------


class TemporalEffects:
    """Effects of an agent running inside `AgentWorkflow`: every call is an activity."""

    def __init__(self, agent: str) -> None:
        self.agent = agent

    def __repr__(self) -> str:
        return f"<TemporalEffects {self.agent}>"

    async def call_model(self, model: Model, request: ModelRequest) -> ModelReply:
        options = _options()
        payload = {"agent": self.agent, "model": model.name, "request": request_to_plain(request)}
        try:
            plain: JSON = await workflow.execute_activity(
                call_model_activity,
                payload,
                start_to_close_timeout=options.model_timeout,
                heartbeat_timeout=options.heartbeat_timeout,
                retry_policy=options.retry_policy(options.model_attempts, [FATAL_MODEL_ERROR]),
                summary=f"{self.agent}:model:{model.name}",
            )
        except ActivityError as exc:
            raise _model_failure(exc) from None
        return reply_from_plain(plain)

    async def run_tools(
        self,
        registry: ToolRegistry,
        calls: Sequence[ToolCall],
        on_outcome: Callable[[ToolCall, ToolOutcome], None] | None = None,
    ) -> list[ToolOutcome]:
        options = _options()

        def start(call: ToolCall) -> Awaitable[ToolOutcome]:
            # Scheduled now, in the calls' order: replay matches activities by order.
            handle = workflow.start_activity(
                run_tool_activity,
                {"agent": self.agent, "call": call_to_plain(call)},
                start_to_close_timeout=options.tool_activity_timeout(registry.get(call.name)),
                heartbeat_timeout=options.heartbeat_timeout,
                retry_policy=options.retry_policy(options.tool_attempts),
                summary=f"{self.agent}:tool:{call.name}",
            )
            return _outcome(call, handle)

        return await run_in_batches(registry, calls, start, on_outcome)

    def monotonic(self) -> float:
        """Workflow time: the same on every replay of the same history."""
        return workflow.time() if workflow.in_workflow() else time.monotonic()

    def approval(self, timeout_seconds: float) -> ApprovalPolicy:
        """A policy that waits for a `decide` signal (`send_decision`) about the call.

        The wait is a durable timer: the workflow can move to another worker
        while it waits, and a decision sent before the wait began is kept.
        With none within `timeout_seconds` the call is deferred and the run
        ends in `awaiting_approval`.
        """

        async def wait(call: ToolCall) -> PolicyAnswer:
            run = _workflow()
            run.waiting.append(call.id)
            try:
                await workflow.wait_condition(
                    lambda: call.id in run.decisions, timeout=timeout_seconds
                )
            except TimeoutError:
                return Defer()
            finally:
                run.waiting.remove(call.id)
            return decision_from_plain(run.decisions.pop(call.id))

        return wait


async def _outcome(call: ToolCall, pending: Awaitable[JSON]) -> ToolOutcome:
    """The activity's outcome, or an error outcome once Temporal gave up on it."""
    try:
        return outcome_from_plain(await pending)
    except ActivityError as exc:
        timed_out = isinstance(exc.cause, ActivityTimeoutError)
        return ToolOutcome(
            tool_use_id=call.id,
            name=call.name,
            content=f"{call.name} could not be run: {_describe(exc)}",
            is_error=True,
            error_kind="timeout" if timed_out else "raised",
        )


def _model_failure(exc: ActivityError) -> Exception:
    """The error a failed model activity means for the run."""
    cause = exc.cause
    if (
        isinstance(cause, ApplicationError)
        and cause.type in (MODEL_ERROR, FATAL_MODEL_ERROR)
        and cause.details
    ):
        details = cause.details[0]
        if isinstance(details, Mapping):
            return model_error_from_plain(details)
    if isinstance(cause, ActivityTimeoutError):
        return ModelError(
            f"the model call timed out: {_describe(exc)}", error_type="timeout", retryable=True
        )
    return RuntimeError(f"the model activity failed: {_describe(exc)}")


def _describe(exc: BaseException) -> str:
    cause = exc.__cause__ or getattr(exc, "cause", None)
    return f"{exc}: {cause}" if cause is not None else str(exc)


# -- the activities (worker side) -------------------------------------------------

_agents: AgentCache[TemporalEffects] = AgentCache(TemporalEffects, _prepare)


def _models(agent: Agent) -> list[Model]:
    return agent.models


async def _heartbeating(work: Coroutine[Any, Any, JSON]) -> JSON:
    """Await `work`, heartbeating meanwhile so a worker that dies is noticed quickly.

    A model or tool that blocks the event loop cannot heartbeat: it must end
    within the heartbeat timeout, or its activity is retried elsewhere.
    """
    timeout = activity.info().heartbeat_timeout
    task = asyncio.ensure_future(work)
    if timeout is None:
        return await task
    interval = max(timeout.total_seconds() / 3, 0.05)
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=interval)
            if done:
                return task.result()
            activity.heartbeat()
    finally:
        if not task.done():
            task.cancel()


def _agent(name: str) -> Agent:
    """The worker's agent `name`; a name no factory answers fails for good, not in a loop.

    An ordinary exception out of workflow code fails the workflow *task*, which
    Temporal retries forever; an unknown or broken agent will not get better.
    """
    try:
        agent, _ = _agents.get(name)
    except (UnknownAgentError, TypeError, ValueError) as exc:
        raise ApplicationError(str(exc), type=type(exc).__name__, non_retryable=True) from exc
    return agent


@activity.defn(name=MODEL_ACTIVITY)
async def call_model_activity(payload: JSON) -> JSON:
    """One model call of a run; a `ModelError` keeps its retry class across the wire."""
    agent = _agent(str(payload["agent"]))
    wanted = str(payload["model"])
    model = next((m for m in _models(agent) if m.name == wanted), None)
    if model is None:
        raise ApplicationError(
            f"agent {payload['agent']!r} has no model {wanted!r}", non_retryable=True
        )
    request = request_from_plain(payload["request"])

    async def call() -> JSON:
        return reply_to_plain(await model.acomplete(request))

    try:
        return await _heartbeating(call())
    except ModelError as exc:
        raise ApplicationError(
            exc.describe(),
            model_error_to_plain(exc),
            type=MODEL_ERROR if exc.retryable else FATAL_MODEL_ERROR,
            non_retryable=not exc.retryable,
        ) from exc


@activity.defn(name=TOOL_ACTIVITY)
async def run_tool_activity(payload: JSON) -> JSON:
    """One tool call of a run, under the tool's own policy; never raises for the tool."""
    agent = _agent(str(payload["agent"]))
    call = call_from_plain(payload["call"])

    async def execute() -> JSON:
        return outcome_to_plain(await agent.tools.execute(call))

    return await _heartbeating(execute())


# -- the workflow --------------------------------------------------------------------


@workflow.defn(name=WORKFLOW_NAME)
class AgentWorkflow:
    """One run of a registered agent; the workflow id is the run id."""

    def __init__(self) -> None:
        self.decisions: dict[str, JSON] = {}
        self.waiting: list[str] = []

    @workflow.run
    async def run(self, request: JSON) -> JSON:
        agent = _agent(str(request["agent"]))
        run_id = workflow.info().workflow_id
        with continued(request.get("trace")):
            result = await agent.arun(
                request["prompt"], history=list(request.get("history") or ()), run_id=run_id
            )
        files = _files.get(id(agent))
        if files is not None:
            result = dataclasses.replace(result, audit_path=files.path(run_id))
        return result_to_plain(result)

    @workflow.signal(name="decide")
    def decide(self, message: JSON) -> None:
        """A human's decision about one tool call: `{"tool_use_id": ..., "decision": {...}}`."""
        self.decisions[str(message["tool_use_id"])] = dict(message["decision"])

    @workflow.query(name="awaiting")
    def awaiting(self) -> list[str]:
        """The tool_use ids the run is waiting for a decision on."""
        return list(self.waiting)


def _workflow() -> AgentWorkflow:
    instance = workflow.instance()
    if not isinstance(instance, AgentWorkflow):
        raise RuntimeError("the Temporal approval policy only works inside AgentWorkflow")
    return instance


# -- workers and clients ---------------------------------------------------------


def sandbox_runner(*passthrough: str) -> SandboxedWorkflowRunner:
    """Temporal's sandbox, sharing the engine (and `passthrough` modules) with the worker."""
    restrictions = SandboxRestrictions.default.with_passthrough_modules(
        *PASSTHROUGH_MODULES, *passthrough
    )
    return SandboxedWorkflowRunner(restrictions=restrictions)


def create_worker(
    client: Client,
    *,
    task_queue: str = DEFAULT_TASK_QUEUE,
    options: TemporalOptions | None = None,
    **worker_options: Any,
) -> Worker:
    """A worker running agent workflows and their activities on `task_queue`.

    Import the modules that register agents first: each is built now, so a
    broken factory fails here rather than in a workflow task. `worker_options`
    go to `temporalio.worker.Worker` (e.g. `identity`, `max_concurrent_activities`).
    """
    _options_by_queue[task_queue] = options or TemporalOptions()
    _agents.build_all()
    worker_options.setdefault("workflow_runner", sandbox_runner())
    return Worker(
        client,
        task_queue=task_queue,
        workflows=[AgentWorkflow],
        activities=[call_model_activity, run_tool_activity],
        **worker_options,
    )


async def start_run(
    client: Client,
    agent: str,
    prompt: str | Sequence[Mapping[str, Any]],
    *,
    history: Sequence[Mapping[str, Any]] = (),
    run_id: str | None = None,
    task_queue: str = DEFAULT_TASK_QUEUE,
    **start_options: Any,
) -> WorkflowHandle[AgentWorkflow, JSON]:
    """Start a run of the registered agent and return its handle.

    A run id names one run: starting it again while it runs, or after it
    ended, returns the handle of that run instead of running it twice.
    """
    request = {
        "agent": agent,
        "prompt": prompt_to_plain(prompt),
        "history": [dict(message) for message in history],
        "trace": trace_carrier(),
    }
    run_id = run_id or new_run_id()
    start_options.setdefault("id_conflict_policy", WorkflowIDConflictPolicy.USE_EXISTING)
    start_options.setdefault("id_reuse_policy", WorkflowIDReusePolicy.REJECT_DUPLICATE)
    try:
        return await client.start_workflow(
            AgentWorkflow.run, request, id=run_id, task_queue=task_queue, **start_options
        )
    except WorkflowAlreadyStartedError:
        return client.get_workflow_handle_for(AgentWorkflow.run, run_id)


async def get_result(handle: WorkflowHandle[Any, JSON]) -> RunResult:
    """Wait for a run started with `start_run` (or fetched by id) and decode its result."""
    return result_from_plain(await handle.result())


async def run_agent(
    client: Client,
    agent: str,
    prompt: str | Sequence[Mapping[str, Any]],
    *,
    history: Sequence[Mapping[str, Any]] = (),
    run_id: str | None = None,
    task_queue: str = DEFAULT_TASK_QUEUE,
) -> RunResult:
    """Run the registered agent as a workflow on `task_queue` and return its result."""
    handle = await start_run(
        client, agent, prompt, history=history, run_id=run_id, task_queue=task_queue
    )
    return await get_result(handle)


async def send_decision(client: Client, run_id: str, tool_use_id: str, decision: Decision) -> None:
    """Answer a run waiting in `TemporalEffects.approval` (a `decide` signal)."""
    handle: WorkflowHandle[AgentWorkflow, JSON] = client.get_workflow_handle(run_id)
    await handle.signal(
        AgentWorkflow.decide,
        {"tool_use_id": tool_use_id, "decision": decision_to_plain(decision)},
    )


async def awaiting_approval(client: Client, run_id: str) -> list[str]:
    """The tool_use ids a run is waiting for a decision on, right now."""
    handle: WorkflowHandle[AgentWorkflow, JSON] = client.get_workflow_handle(run_id)
    return await handle.query(AgentWorkflow.awaiting)
