"""`Agent`: the public face of the engine.

An agent is configuration plus services (model, tools, budget, sinks); each call
of `run`/`arun` creates a fresh run record and drives it through the shared
machine. Agents hold no per-run state, so one agent serves many concurrent runs.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from statemachine_agent.audit.events import Emitter
from statemachine_agent.audit.redact import Redactor
from statemachine_agent.audit.sink import AuditSink, JsonlSink
from statemachine_agent.effects.base import Effects, InProcessEffects
from statemachine_agent.machine.context import AgentDeps, RunContext
from statemachine_agent.machine.engine import CancelToken, Engine
from statemachine_agent.machine.result import RunResult
from statemachine_agent.machine.run import RunRecord
from statemachine_agent.machine.settings import RunSettings
from statemachine_agent.models.base import DEFAULT_MAX_TOKENS, JSON, Model
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
        self.audit_dir = Path(audit_dir) if audit_dir is not None else None
        self.sinks = list(sinks)
        self.prices = PriceTable({**DEFAULT_PRICES, **(prices or {})})
        if self.budget.max_cost_usd is not None:
            for priced in (model, *fallbacks, *([critic_model] if critic_model else [])):
                self.prices.require(priced.name)
        secrets = [getattr(m, "api_key", None) or "" for m in (model, *fallbacks)]
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
        )
        self._engine = Engine()

    def __repr__(self) -> str:
        return f"<Agent {self.name} model={self.model.name} tools={list(self.tools.names)}>"

    def run(
        self,
        prompt: str | Sequence[JSON],
        *,
        history: Sequence[JSON] = (),
        cancel: CancelToken | None = None,
        run_id: str | None = None,
    ) -> RunResult:
        """Run to an end state and return its result (blocking).

        Safe to call where an event loop is already running (a notebook, a
        framework callback): the run then happens on a worker thread.
        """
        coro = self.arun(prompt, history=history, cancel=cancel, run_id=run_id)
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(coro)
        with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
            return pool.submit(asyncio.run, coro).result()

    async def arun(
        self,
        prompt: str | Sequence[JSON],
        *,
        history: Sequence[JSON] = (),
        cancel: CancelToken | None = None,
        run_id: str | None = None,
    ) -> RunResult:
        """Run to an end state and return its result."""
        run_id = run_id or new_run_id()
        content: Any = prompt if isinstance(prompt, str) else [dict(b) for b in prompt]
        record = RunRecord(
            run_id=run_id,
            settings=self.settings,
            model_name=self.model.name,
            messages=[*(dict(m) for m in history), {"role": "user", "content": content}],
            turn=1 + sum(1 for m in history if _is_user_prompt(m)),
        )
        sinks: list[AuditSink] = list(self.sinks)
        if self.audit_dir is not None:
            record.audit_path = self.audit_dir / f"{run_id}.jsonl"
            sinks.append(JsonlSink(record.audit_path))
        emitter = Emitter(run_id, sinks=sinks, redactor=self.redactor, logger=self.logger)
        ctx = RunContext(state=record, deps=self._deps, emitter=emitter)
        try:
            return await self._engine.drive(ctx, cancel=cancel)
        finally:
            if self.audit_dir is not None:
                sinks[-1].close()


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
