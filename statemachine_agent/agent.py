"""`Agent`: the public face of the engine.

An agent is configuration plus services (model, tools, budget, sinks); each call
of `run`/`arun` creates a fresh run record and drives it through the shared
machine. Agents hold no per-run state, so one agent serves many concurrent runs.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from statemachine_agent.audit.events import Emitter
from statemachine_agent.audit.redact import Redactor
from statemachine_agent.audit.sink import AuditSink, JsonlSink
from statemachine_agent.context.notices import add_user_text
from statemachine_agent.effects.base import Effects, InProcessEffects
from statemachine_agent.machine.context import AgentDeps, PhaseContext
from statemachine_agent.machine.engine import CancelToken, Engine
from statemachine_agent.machine.result import RunResult
from statemachine_agent.machine.resume import prepare_resume
from statemachine_agent.machine.run import RunRecord
from statemachine_agent.machine.settings import RunSettings
from statemachine_agent.models.base import DEFAULT_MAX_TOKENS, JSON, Model
from statemachine_agent.persistence.base import Checkpointer, MemoryCheckpointer, load_record
from statemachine_agent.persistence.delta import CheckpointWriter
from statemachine_agent.persistence.sqlite import SQLiteCheckpointer
from statemachine_agent.policy.approval import ApprovalPolicy, Decision
from statemachine_agent.policy.budget import Budget
from statemachine_agent.policy.context import ContextPolicy
from statemachine_agent.policy.pricing import DEFAULT_PRICES, Price, PriceTable
from statemachine_agent.policy.stall import StallPolicy
from statemachine_agent.policy.verify import Claim, Verdict
from statemachine_agent.tools.base import Tool
from statemachine_agent.tools.decorator import tool as make_tool
from statemachine_agent.tools.registry import ToolRegistry

DEFAULT_STALL = StallPolicy()


class Agent:
    """An agent loop with its model, tools, limits and audit trail."""

    def __init__(
        self,
        model: Model | str,
        tools: Iterable[Tool | Callable[..., Any]] | ToolRegistry = (),
        system: str | None = None,
        *,
        budget: Budget | None = None,
        stall: StallPolicy | None = DEFAULT_STALL,
        reflection_interval: int | None = None,
        critic: Model | str | None = None,
        verifier: Callable[[Claim], Verdict | Awaitable[Verdict]] | None = None,
        max_rejections: int = 2,
        context: ContextPolicy | None = None,
        max_continuations: int = 0,
        fallback_models: Sequence[Model | str] = (),
        approval: ApprovalPolicy | None = None,
        checkpointer: Checkpointer | Literal[False] | None = None,
        state_dir: str | Path | None = None,
        max_tokens: int = DEFAULT_MAX_TOKENS,
        audit_dir: str | Path | None = None,
        sinks: Sequence[AuditSink] = (),
        prices: Mapping[str, Price] | None = None,
        redact: Iterable[str] = (),
        logger: Any = None,
        effects: Effects | None = None,
        cache_prompt: bool = True,
        request_options: Mapping[str, Any] | None = None,
        name: str = "agent",
    ) -> None:
        """
        Args:
            model: a `Model` (`AnthropicModel`, `ScriptedModel`, ...) or a Claude
                model name, which builds an `AnthropicModel`.
            tools: `Tool`s, plain functions (wrapped with `@tool`) or a registry.
            system: the system prompt, sent (and cached) with every call.
            budget: the run's limits; defaults to `Budget()` (15 iterations).
            stall: how repetition is detected and answered (`None` switches it off).
            reflection_interval: pass through `reflect` every N iterations.
            critic: a model asked for a critique at each reflection (its usage is
                charged to the budget); without one, a progress-check prompt is used.
            verifier: checks a claimed completion; returns `Verdict(ok, feedback)`.
            max_rejections: verifier rejections before the run ends in `failed`.
            context: context management (result size, compaction, caching).
            max_continuations: times a text reply cut at max_tokens is continued.
            fallback_models: tried in order on overload or rate limit.
            approval: decides on calls of tools with `requires_approval=True`
                (`Approve`, `Deny`, `Edit` or `Defer`); without one they are deferred.
            checkpointer: where each transition is checkpointed, so `resume` works;
                `False` for none at all (not even the in-memory one an agent with
                approval tools otherwise gets), e.g. when a durable engine records runs.
            state_dir: a folder for the default store (`<state_dir>/runs.sqlite3`).
            audit_dir: when given, each run's events go to `<audit_dir>/<run_id>.jsonl`.
            sinks: further audit sinks that receive every event of every run.
            prices: per-model prices, merged over the documented defaults.
            redact: extra event keys whose values are never written.
            logger: a structlog logger; by default the application's structlog
                pipeline if configured, else the stdlib `statemachine_agent` logger.
            effects: how effects run (in-process unless a durable engine is used).
            request_options: further Messages API parameters (temperature, ...).
        """
        model = _model(model)
        fallbacks = [_model(m) for m in fallback_models]
        critic_model = _model(critic) if critic is not None else None
        self.name = name
        self.model = model
        self.context = context or ContextPolicy()
        self.tools = (
            tools
            if isinstance(tools, ToolRegistry)
            else _registry(tools, self.context.max_tool_result_chars)
        )
        self.system = system
        self.budget = budget or Budget()
        self.settings = RunSettings(
            budget=self.budget,
            stall=stall,
            context=self.context,
            reflection_interval=reflection_interval,
            has_critic=critic_model is not None,
            has_verifier=verifier is not None,
            max_rejections=max_rejections,
            max_continuations=max_continuations,
        )
        if checkpointer is None and state_dir is not None:
            checkpointer = SQLiteCheckpointer(Path(state_dir) / "runs.sqlite3")
        in_process = effects is None or isinstance(effects, InProcessEffects)
        if checkpointer is None and in_process and any(t.requires_approval for t in self.tools):
            # A run paused for approval must be resumable: in this process at least.
            # (On a durable engine, supplying its own effects, the engine records runs.)
            checkpointer = MemoryCheckpointer()
        self.checkpointer: Checkpointer | None = checkpointer or None
        self.audit_dir = Path(audit_dir) if audit_dir is not None else None
        self.sinks = list(sinks)
        self.prices = PriceTable({**DEFAULT_PRICES, **(prices or {})})
        if self.budget.max_cost_usd is not None:
            for priced in (model, *fallbacks, *([critic_model] if critic_model else [])):
                self.prices.require(priced.name)
        keyed = (model, *fallbacks, *([critic_model] if critic_model else []))
        secrets = [getattr(m, "api_key", None) or "" for m in keyed]
        self.redactor = Redactor(secrets=secrets, keys=redact)
        self.logger = logger
        self._deps = AgentDeps(
            model=model,
            tools=self.tools,
            effects=effects or InProcessEffects(),
            prices=self.prices,
            system=system,
            max_tokens=max_tokens,
            cache_prompt=cache_prompt,
            request_options=dict(request_options or {}),
            context=self.context,
            fallback_models=tuple(fallbacks),
            critic=critic_model,
            verifier=verifier,
            approval=approval,
            checkpointer=self.checkpointer,
        )
        self._engine = Engine()

    def __repr__(self) -> str:
        return f"<Agent {self.name} model={self.model.name} tools={list(self.tools.names)}>"

    @property
    def effects(self) -> Effects:
        """How this agent's effects run (in-process unless a durable engine supplied them)."""
        return self._deps.effects

    @property
    def models(self) -> list[Model]:
        """Every model the agent may call: the model, its fallbacks and the critic."""
        deps = self._deps
        return [deps.model, *deps.fallback_models, *([deps.critic] if deps.critic else [])]

    def run(
        self,
        prompt: str | Sequence[JSON],
        *,
        history: Sequence[JSON] = (),
        cancel: CancelToken | None = None,
        deadline: float | None = None,
        run_id: str | None = None,
    ) -> RunResult:
        """Run to an end state and return its result (blocking).

        Safe to call where an event loop is already running (a notebook, a
        framework callback): the run then happens on a worker thread.
        """
        return _blocking(
            self.arun(prompt, history=history, cancel=cancel, deadline=deadline, run_id=run_id)
        )

    async def arun(
        self,
        prompt: str | Sequence[JSON],
        *,
        history: Sequence[JSON] = (),
        cancel: CancelToken | None = None,
        deadline: float | None = None,
        run_id: str | None = None,
    ) -> RunResult:
        """Run to an end state and return its result.

        `deadline` (seconds) cancels the run at the next boundary once it passes;
        `cancel` lets the host cancel it from anywhere (`CancelToken.cancel()`).
        """
        run_id = run_id or new_run_id()
        if self.checkpointer is not None and self.checkpointer.bodies(run_id):
            raise ValueError(f"run id {run_id!r} is already stored; resume it or use a new id")
        record = RunRecord(
            run_id=run_id,
            settings=self.settings,
            model_name=self.model.name,
            messages=with_prompt(history, prompt),
            turn=1 + sum(1 for m in history if _is_user_prompt(m)),
        )
        return await self._drive(record, cancel=cancel, deadline=deadline)

    def start(
        self,
        prompt: str | Sequence[JSON],
        *,
        history: Sequence[JSON] = (),
        run_id: str | None = None,
    ) -> RunHandle:
        """Start a run as an asyncio task and return a handle to cancel or await it."""
        handle_id = run_id or new_run_id()
        token = CancelToken()
        task = asyncio.ensure_future(
            self.arun(prompt, history=history, cancel=token, run_id=handle_id)
        )
        return RunHandle(handle_id, token, task)

    def resume(
        self,
        run_id: str,
        *,
        decisions: Mapping[str, Decision] | None = None,
        cancel: CancelToken | None = None,
    ) -> RunResult:
        """Continue a checkpointed run (blocking); see `aresume`."""
        return _blocking(self.aresume(run_id, decisions=decisions, cancel=cancel))

    async def aresume(
        self,
        run_id: str,
        *,
        decisions: Mapping[str, Decision] | None = None,
        cancel: CancelToken | None = None,
    ) -> RunResult:
        """Continue a run from its last checkpoint, in this process or any other.

        A run that crashed carries on from the state it was in; one waiting for
        approval continues at `act` with `decisions` (`Approve()`, `Deny(msg)`,
        `Edit(input)` by tool_use id); a cancelled one carries on from where it
        was cancelled. Recorded tool results are never executed again.
        """
        if self.checkpointer is None:
            raise ValueError("resume needs a checkpointer: Agent(checkpointer=...) or state_dir=")
        record = load_record(self.checkpointer, run_id)
        writer = CheckpointWriter.resumed(record)  # before the record is set up to go on,
        prepare_resume(record, decisions or {})  # so that setup is checkpointed too
        return await self._drive(record, cancel=cancel, writer=writer)

    async def _drive(
        self,
        record: RunRecord,
        *,
        cancel: CancelToken | None,
        deadline: float | None = None,
        writer: CheckpointWriter | None = None,
    ) -> RunResult:
        """Drive a record to its end; `writer` (of its checkpoints so far) means a resume."""
        if deadline is not None:
            cancel = cancel or CancelToken()
            cancel.cancel_after(deadline)
        sinks: list[AuditSink] = list(self.sinks)
        own: JsonlSink | None = None
        if self.audit_dir is not None:
            record.audit_path = self.audit_dir / f"{record.run_id}.jsonl"
            own = JsonlSink(record.audit_path)
            sinks.append(own)
        emitter = Emitter(record.run_id, sinks=sinks, redactor=self.redactor, logger=self.logger)
        ctx = PhaseContext(state=record, deps=self._deps, emitter=emitter)
        ctx.writer = writer
        try:
            return await self._engine.drive(
                ctx,
                cancel=cancel,
                resumed=writer is not None,
            )
        finally:
            if own is not None:
                own.close()


class RunHandle:
    """A run started with `Agent.start`: cancel it, or await its result."""

    def __init__(self, run_id: str, token: CancelToken, task: asyncio.Future[RunResult]) -> None:
        self.run_id = run_id
        self._token = token
        self._task = task

    def cancel(self) -> None:
        """Stop at the next transition boundary; the result ends in `cancelled`."""
        self._token.cancel()

    async def result(self) -> RunResult:
        return await self._task

    def __await__(self) -> Any:
        return self._task.__await__()


def _blocking(coro: Coroutine[Any, Any, RunResult]) -> RunResult:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coro).result()


def with_prompt(history: Sequence[JSON], prompt: str | Sequence[JSON]) -> list[JSON]:
    """The history with the new prompt as the last user message.

    A history ending with a user message (a turn cancelled after its tool
    results) gets the prompt added to that message, so roles keep alternating.
    """
    messages = [dict(m) for m in history]
    if isinstance(prompt, str):
        if not messages or messages[-1].get("role") != "user":
            return [*messages, {"role": "user", "content": prompt}]
        add_user_text(messages, prompt)
        return messages
    blocks = [dict(b) for b in prompt]
    if messages and messages[-1].get("role") == "user":
        last = messages[-1]
        content = last.get("content")
        earlier = [{"type": "text", "text": content}] if isinstance(content, str) else content
        last["content"] = [*list(earlier or []), *blocks]
        return messages
    return [*messages, {"role": "user", "content": blocks}]


def new_run_id() -> str:
    return f"run_{uuid.uuid4().hex[:16]}"


def _model(model: Model | str) -> Model:
    """A model name means a Claude model through the Anthropic SDK."""
    if isinstance(model, str):
        from statemachine_agent.models.anthropic import AnthropicModel

        return AnthropicModel(model)
    return model


def _registry(tools: Iterable[Tool | Callable[..., Any]], max_result_chars: int) -> ToolRegistry:
    registry = ToolRegistry(max_result_chars=max_result_chars)
    for item in tools:
        registry.register(item if isinstance(item, Tool) else make_tool(item))
    return registry


def _is_user_prompt(message: Mapping[str, Any]) -> bool:
    """A user message that asks something (not one that only carries tool results)."""
    if message.get("role") != "user":
        return False
    content = message.get("content")
    if isinstance(content, str):
        return True
    return any(isinstance(b, Mapping) and b.get("type") != "tool_result" for b in content or ())
