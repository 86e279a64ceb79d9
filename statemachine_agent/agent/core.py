"""`Agent`: the public face of the engine.

An agent is configuration plus services (model, tools, budget, sinks); each call
of `run`/`arun` creates a fresh run record and drives it through the shared
machine. Agents hold no per-run state, so one agent serves many concurrent runs.

This module is the public surface; the private modules beside it do the work:
`_building` makes the constructor's arguments into services, `_records` a fresh
run's record, `_resume` a stored run ready to go on, and `_driving` drives a run
(its lease, its audit trail, the engine). They take the agent's `AgentParts`
(`_parts`), built once here, never the agent. The per-run keywords of every entry
point are declared once, in `options` (`RunOptions`, `ResumeOptions`).

An agent is generic in its output type, for the type checker only (nothing
changes at run time): `Agent(model, output_type=Decision)` is an
`Agent[Decision]`, whose runs return `RunResult[Decision]` (and whose streams end
with one); `Agent(model)` is an `Agent[None]`, whose results' `output` is `None`;
a JSON schema dict gives an `Agent[dict[str, Any]]`, any other output type (a
union, `list[int]`) an `Agent[Any]`. The agent's own `output_type` drives the
static type; a per-run `output_type=` override types that run's result by the
override instead (a class `U`: `RunResult[U]`; anything else: `RunResult[Any]`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import inspect
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping, Sequence
from os import PathLike
from types import MappingProxyType
from typing import Any, Generic, Literal, Self, TypedDict, TypeVar, Unpack, overload

from statemachine_agent.agent import _driving, _fork, _steering
from statemachine_agent.agent._building import (
    check_arguments,
    model_of,
    registry_of,
    storage_option,
    tool_of,
    with_output,
)
from statemachine_agent.agent._parts import AgentParts, deps_for
from statemachine_agent.agent._records import new_record
from statemachine_agent.agent._records import new_run_id as new_run_id
from statemachine_agent.agent._records import with_prompt as with_prompt
from statemachine_agent.agent._resume import resumed
from statemachine_agent.agent.options import ResumeOptions, RunOptions, documented, given
from statemachine_agent.agent.subagents import agent_tool, may_pause, may_pause_for_taint
from statemachine_agent.audit.config import Audit
from statemachine_agent.audit.redact import Redactor
from statemachine_agent.blocking import run_blocking
from statemachine_agent.effects.base import Effects, InProcessEffects
from statemachine_agent.machine.cancel import CancelToken
from statemachine_agent.machine.engine import Engine
from statemachine_agent.machine.phase_env import AgentDeps
from statemachine_agent.machine.result import OutputT, RunResult
from statemachine_agent.machine.settings import RunSettings
from statemachine_agent.models.base import DEFAULT_MAX_TOKENS, JSON, Model
from statemachine_agent.persistence.base import Checkpointer, MemoryCheckpointer
from statemachine_agent.policy.approval import ApprovalPolicy, check_decisions
from statemachine_agent.policy.budget import Budget
from statemachine_agent.policy.commit import CommitPolicy
from statemachine_agent.policy.context import ContextPolicy
from statemachine_agent.policy.pricing import DEFAULT_PRICES, Price, PriceTable
from statemachine_agent.policy.reflection import ReflectionPolicy
from statemachine_agent.policy.stall import StallPolicy
from statemachine_agent.policy.taint import DEFAULT_TAINT, TaintPolicy
from statemachine_agent.policy.verify import Verifier, VerifyPolicy
from statemachine_agent.stream.events import StreamEvent
from statemachine_agent.stream.run import RunStream, iter_sync
from statemachine_agent.tools.base import Tool
from statemachine_agent.tools.output import DEFAULT_OUTPUT_RETRIES
from statemachine_agent.tools.registry import ToolRegistry
from statemachine_agent.tools.toolset import Toolset

DEFAULT_STALL = StallPolicy()

Storage = Checkpointer | str | PathLike[str] | Literal[False] | None
"""What `Agent(checkpointer=...)` takes; `resolve_checkpointer` says what each form means."""

Tools = Iterable[Tool | Toolset | Callable[..., Any]] | ToolRegistry
"""What `Agent(tools=...)` takes."""

Prompt = str | Sequence[JSON]
"""What a run starts from: a user message's text, or its content blocks."""

U = TypeVar("U")


class _Settings(TypedDict, total=False):
    """The constructor's keyword-only settings but `output_type`, for its overloads
    (which differ only in `output_type`); a test keeps it equal to the signature."""

    name: str
    budget: Budget | None
    stall: StallPolicy | None
    context: ContextPolicy | None
    reflection: ReflectionPolicy | None
    verify: VerifyPolicy | Verifier | None
    approval: ApprovalPolicy | None
    commit: CommitPolicy | None
    taint: TaintPolicy | None
    checkpointer: Storage
    audit: Audit | str | PathLike[str] | None
    max_tokens: int
    max_continuations: int
    output_retries: int
    fallback_models: Sequence[Model | str]
    summary_model: Model | str | None
    request_options: Mapping[str, Any] | None
    cache_prompt: bool
    prices: Mapping[str, Price] | None
    effects: Effects | None


class Agent(Generic[OutputT]):
    """An agent loop with its model, tools, limits and audit trail.

    Every setting is stored once and read through a read-only property named as
    the constructor's parameter (`agent.system`, `agent.budget`, ...). An agent
    never changes after it is built, so its runs cannot see a half-made change;
    `agent.replace(system=...)` returns a new agent with the change applied.
    """

    __slots__ = (
        "_parts",
        "_reflection",
        "_storage",
        "_tools_given",
        "_verify",
    )

    @overload
    def __init__(
        self: Agent[None],
        model: Model | str,
        tools: Tools = (),
        system: str | None = None,
        *,
        output_type: None = None,
        **settings: Unpack[_Settings],
    ) -> None: ...
    @overload
    def __init__(
        self: Agent[U],
        model: Model | str,
        tools: Tools = (),
        system: str | None = None,
        *,
        output_type: type[U],
        **settings: Unpack[_Settings],
    ) -> None: ...
    @overload
    def __init__(
        self: Agent[dict[str, Any]],
        model: Model | str,
        tools: Tools = (),
        system: str | None = None,
        *,
        output_type: Mapping[str, Any],
        **settings: Unpack[_Settings],
    ) -> None: ...
    @overload
    def __init__(
        self: Agent[Any],
        model: Model | str,
        tools: Tools = (),
        system: str | None = None,
        *,
        output_type: object,
        **settings: Unpack[_Settings],
    ) -> None: ...
    def __init__(
        self,
        model: Model | str,
        tools: Tools = (),
        system: str | None = None,
        *,
        name: str = "agent",
        budget: Budget | None = None,
        stall: StallPolicy | None = DEFAULT_STALL,
        context: ContextPolicy | None = None,
        reflection: ReflectionPolicy | None = None,
        verify: VerifyPolicy | Verifier | None = None,
        approval: ApprovalPolicy | None = None,
        commit: CommitPolicy | None = None,
        taint: TaintPolicy | None = DEFAULT_TAINT,
        checkpointer: Storage = None,
        audit: Audit | str | PathLike[str] | None = None,
        max_tokens: int = DEFAULT_MAX_TOKENS,
        max_continuations: int = 0,
        output_type: Any = None,
        output_retries: int = DEFAULT_OUTPUT_RETRIES,
        fallback_models: Sequence[Model | str] = (),
        summary_model: Model | str | None = None,
        request_options: Mapping[str, Any] | None = None,
        cache_prompt: bool = True,
        prices: Mapping[str, Price] | None = None,
        effects: Effects | None = None,
    ) -> None:
        """
        Args:
            model: a `Model` (`AnthropicModel`, `ScriptedModel`, ...) or a Claude
                model name, which builds an `AnthropicModel`.
            tools: `Tool`s, plain functions (wrapped with `@tool`), toolsets (an
                `MCPToolset`: a server's tools, listed when a run starts) or a registry.
            system: the system prompt, sent (and cached) with every call.
            name: a label, shown in `repr(agent)`.
            budget: the run's limits; defaults to `Budget()` (15 iterations).
            stall: how repetition is detected and answered (`None` switches it off).
            context: context management (result size, compaction, caching).
            reflection: pass through `reflect` every N model calls, optionally with a
                critic model (`ReflectionPolicy(interval, critic=...)`).
            verify: checks a claimed completion: a `VerifyPolicy(verifier,
                max_rejections=2)`, or just the verifier (a callable returning `Verdict`).
            approval: decides on calls of tools with `requires_approval=True`
                (`Approve`, `Deny`, `Edit` or `Defer`); without one they are deferred.
            commit: side effects last: calls of `deferrable` tools are staged and run
                in the `commit` state once the run would end successfully; a
                `CommitPolicy(on_failure="fail" | "retry")` says what a failed staged
                call does. Switched on by the first deferrable tool even without one.
            taint: what a call of a `side_effect=True` tool gets once untrusted text
                (an `untrusted` tool's result) entered the run: `TaintPolicy()` sends it
                to `approval` (the default), `side_effects="deny"` refuses it; `None`
                switches the gate off. See docs/security.md.
            checkpointer: where the run is checkpointed (each reply, outcome, pause and
                end), so `resume` works; see `resolve_checkpointer` for the forms and
                the default.
            audit: where the events go: an `Audit(dir, sinks, redact, logger)`, or a
                folder (`Audit(dir=folder)`: each run to `<folder>/<run_id>.jsonl`).
            max_tokens: the output limit of each model call of the loop.
            max_continuations: times a text reply cut at max_tokens is continued.
            output_type: the type the answer must validate against (a pydantic model,
                a dataclass, a `TypedDict`, or a JSON schema dict): the model answers
                by calling a `final_result` tool, and `result.output` is the typed value.
            output_retries: invalid final answers tolerated before the run fails.
            fallback_models: tried in order on overload or rate limit.
            summary_model: writes the summaries of `summarize` (when
                `ContextPolicy.summarize_at_tokens` is set); defaults to `model`.
            request_options: further Messages API parameters (temperature, ...).
            cache_prompt: put `cache_control` breakpoints on the prompt.
            prices: per-model prices, merged over the documented defaults.
            effects: how effects run (in-process unless a durable engine is used).
        """
        check_arguments(locals())  # a wrong argument fails here, by name
        model = model_of(model)
        fallbacks = tuple(model_of(m) for m in fallback_models)
        summarizer = model_of(summary_model) if summary_model is not None else None
        if reflection is not None and isinstance(reflection.critic, str):
            reflection = dataclasses.replace(reflection, critic=model_of(reflection.critic))
        critic = model_of(reflection.critic) if reflection and reflection.critic else None
        if verify is not None and not isinstance(verify, VerifyPolicy):
            verify = VerifyPolicy(verify)
        if not isinstance(audit, Audit):
            audit = Audit(dir=audit)
        context = context or ContextPolicy()
        self._reflection = reflection
        self._verify = verify
        self._tools_given: ToolRegistry | tuple[Tool | Toolset, ...] = (
            tools if isinstance(tools, ToolRegistry) else tuple(tool_of(t) for t in tools)
        )
        registry = (
            tools
            if isinstance(tools, ToolRegistry)
            else registry_of(self._tools_given, context.max_tool_result_chars)
        )
        budget = budget or Budget()
        settings = RunSettings(
            budget=budget,
            stall=stall,
            context=context,
            reflection_interval=reflection.interval if reflection is not None else None,
            has_critic=critic is not None,
            max_continuations=max_continuations,
            output_retries=output_retries,
            taint=taint,
        )
        if verify is not None:
            settings = dataclasses.replace(
                settings, has_verifier=True, max_rejections=verify.max_rejections
            )
        if commit is None and (
            any(t.deferrable for t in registry) or any(ts.may_defer for ts in registry.toolsets)
        ):
            commit = CommitPolicy()
        if commit is not None:
            settings = dataclasses.replace(settings, commit=commit)
        effects = effects or InProcessEffects()
        self._storage: Storage = storage_option(checkpointer)
        store = resolve_checkpointer(self._storage, tools=registry, effects=effects, taint=taint)
        price_table = PriceTable({**DEFAULT_PRICES, **(prices or {})})
        keyed = (model, *fallbacks, *([critic] if critic else []),
                 *([summarizer] if summarizer else []))  # fmt: skip
        if budget.max_cost_usd is not None:
            for priced in keyed:
                price_table.require(priced.name)
        secrets = [getattr(m, "api_key", None) or "" for m in keyed]
        secrets += [value for ts in registry.toolsets for value in getattr(ts, "secrets", ())]
        if isinstance(audit.audit_key, str):
            secrets.append(audit.audit_key)
        services = AgentDeps(
            model=model,
            tools=registry,
            effects=effects,
            prices=price_table,
            system=system,
            max_tokens=max_tokens,
            cache_prompt=cache_prompt,
            request_options=MappingProxyType(dict(request_options or {})),
            context=context,
            fallback_models=fallbacks,
            critic=critic,
            summary_model=summarizer,
            verifier=verify.verifier if verify is not None else None,
            approval=approval,
            checkpointer=store,
        )
        self._parts = AgentParts(
            name=name,
            settings=settings,
            deps=with_output(services, output_type) if output_type is not None else services,
            audit=audit,
            redactor=Redactor(secrets=[*secrets, *audit.secrets], keys=audit.redact),
            engine=Engine(),
        )

    def __repr__(self) -> str:
        return f"<Agent {self.name} model={self.model.name} tools={list(self.tools.names)}>"

    def __setattr__(self, name: str, value: Any) -> None:
        if not name.startswith("_"):
            raise AttributeError(_read_only(name))
        object.__setattr__(self, name, value)

    def __delattr__(self, name: str) -> None:
        raise AttributeError(_read_only(name))

    def replace(self, **changes: Any) -> Agent[Any]:
        """A new agent with `changes` applied to this one's settings (like
        `dataclasses.replace`); this agent is left as it was.

        Unchanged settings are shared, not copied: the same model, tool registry,
        sinks and checkpointer (so the new agent can resume this one's runs).
        Unknown names raise `TypeError`, naming them. The new agent is an `Agent[Any]`
        to a type checker (`changes` may hold a new `output_type`): annotate it.
        """
        unknown = sorted(set(changes) - set(SETTINGS))
        if unknown:
            raise TypeError(
                f"Agent.replace() got unknown setting(s): {', '.join(unknown)}; "
                f"the settings are: {', '.join(SETTINGS)}"
            )
        current: dict[str, Any] = {name: getattr(self, name) for name in SETTINGS}
        current["tools"] = self._tools_given  # re-registered, so a new `context` applies
        if self.checkpointer is not None:  # the store in use, even a default in-memory one
            current["checkpointer"] = self.checkpointer
        else:  # none in use: `False` stays off, the default stays the default
            current["checkpointer"] = self._storage
        return Agent(**{**current, **changes})

    __replace__ = replace  # `copy.replace(agent, ...)` (Python 3.13) does the same

    async def aclose(self) -> None:
        """Close what the agent's tools hold open: each toolset's session (and server).

        A later run opens them again. `async with agent:` closes them on leaving.
        """
        await self.tools.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def close(self) -> None:
        """`aclose` for the blocking API (`with agent:` closes on leaving).

        Blocking runs keep a toolset's session open on the thread's kept loop
        between calls; it is also closed when the thread ends, or at exit.
        """
        run_blocking(self.aclose())

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def model(self) -> Model:
        """The model of the loop (a model name given was built into an `AnthropicModel`)."""
        return self._parts.deps.model

    @property
    def tools(self) -> ToolRegistry:
        """The tool registry the agent's runs call."""
        return self._parts.deps.tools

    @property
    def system(self) -> str | None:
        """The system prompt."""
        return self._parts.deps.system

    @property
    def name(self) -> str:
        return self._parts.name

    @property
    def budget(self) -> Budget:
        return self._parts.settings.budget

    @property
    def stall(self) -> StallPolicy | None:
        return self._parts.settings.stall

    @property
    def context(self) -> ContextPolicy:
        return self._parts.settings.context

    @property
    def taint(self) -> TaintPolicy | None:
        return self._parts.settings.taint

    @property
    def reflection(self) -> ReflectionPolicy | None:
        """The reflection policy, its critic (if any) a `Model`."""
        return self._reflection

    @property
    def verify(self) -> VerifyPolicy | None:
        """The verification policy (a bare verifier given is wrapped in one)."""
        return self._verify

    @property
    def approval(self) -> ApprovalPolicy | None:
        return self._parts.deps.approval

    @property
    def commit(self) -> CommitPolicy | None:
        """How staged calls are committed (None: the agent stages nothing)."""
        return self._parts.settings.commit

    @property
    def checkpointer(self) -> Checkpointer | None:
        """The store the agent's runs are checkpointed to, if any (see `resolve_checkpointer`)."""
        return self._parts.deps.checkpointer

    @property
    def audit(self) -> Audit:
        return self._parts.audit

    @property
    def max_tokens(self) -> int:
        return self._parts.deps.max_tokens

    @property
    def max_continuations(self) -> int:
        return self._parts.settings.max_continuations

    @property
    def output_type(self) -> Any:
        """The type the answer must validate against (None: a free-text answer)."""
        output = self._parts.deps.output
        return output.output_type if output is not None else None

    @property
    def output_retries(self) -> int:
        return self._parts.settings.output_retries

    @property
    def fallback_models(self) -> tuple[Model, ...]:
        return tuple(self._parts.deps.fallback_models)

    @property
    def summary_model(self) -> Model | None:
        """The model that writes summaries, when not the agent's own model."""
        return self._parts.deps.summary_model

    @property
    def request_options(self) -> Mapping[str, Any]:
        """The extra request parameters, as a read-only mapping."""
        return self._parts.deps.request_options

    @property
    def cache_prompt(self) -> bool:
        return self._parts.deps.cache_prompt

    @property
    def prices(self) -> Mapping[str, Price]:
        """Every model's price: the defaults with the agent's own merged over them."""
        return self._parts.deps.prices.prices

    @property
    def effects(self) -> Effects:
        """How this agent's effects run (in-process unless a durable engine supplied them)."""
        return self._parts.deps.effects

    @property
    def models(self) -> list[Model]:
        """Every model the agent may call: the model, its fallbacks, the critic and the
        summary model."""
        deps = self._parts.deps
        extra = [m for m in (deps.critic, deps.summary_model) if m is not None]
        return [deps.model, *deps.fallback_models, *extra]

    def redact(self, value: Any) -> Any:
        """`value` with this agent's secrets masked, exactly as in its audit events: for
        anything shown or written outside the audit trail (a CLI's answer, a UI)."""
        return self._parts.redactor.redact(value)

    def diagram(self, format: str = "mermaid", *, full: bool = False) -> str | bytes:
        """This agent's machine: only the rows its configuration can reach (its tools,
        policies and sub-agents, as `testing.reachable_rows` finds them), so the review
        diagram of this service rather than of the library. `format` is `mermaid`,
        `dot`, `svg` (text) or `png` (bytes); the last two need a Graphviz renderer.
        `full` draws every row as its own edge; by default the rows between the same
        two states are drawn once."""
        from statemachine_agent import diagrams
        from statemachine_agent.agent.reachability import reachable_rows

        rows = reachable_rows(self).reachable
        title = f"The rows agent {self.name!r} can reach"
        return diagrams.subset_diagram(format, rows, full=full, title=title)

    @overload
    def run(self, prompt: Prompt, **options: Unpack[RunOptions[None]]) -> RunResult[OutputT]: ...
    @overload
    def run(self, prompt: Prompt, **options: Unpack[RunOptions[type[U]]]) -> RunResult[U]: ...
    @overload
    def run(self, prompt: Prompt, **options: Unpack[RunOptions]) -> RunResult[Any]: ...
    @documented(RunOptions)
    def run(self, prompt: Prompt, **options: Unpack[RunOptions]) -> RunResult[Any]:
        """Run to an end state and return its result (blocking); see `arun`.

        Safe to call where an event loop is already running (a notebook, a
        framework callback): the run then happens on a worker thread.
        """
        given("Agent.run", options, RunOptions)
        return run_blocking(self.arun(prompt, **options))

    @overload
    async def arun(
        self, prompt: Prompt, **options: Unpack[RunOptions[None]]
    ) -> RunResult[OutputT]: ...
    @overload
    async def arun(
        self, prompt: Prompt, **options: Unpack[RunOptions[type[U]]]
    ) -> RunResult[U]: ...
    @overload
    async def arun(self, prompt: Prompt, **options: Unpack[RunOptions]) -> RunResult[Any]: ...
    @documented(RunOptions)
    async def arun(self, prompt: Prompt, **options: Unpack[RunOptions]) -> RunResult[Any]:
        """Run to an end state and return its result.

        A given `run_id` is leased in the store while the run is driven: another
        driver of it gets `RunLockedError`, or waits for the lease up to `wait` seconds.
        """
        opts = given("Agent.arun", options, RunOptions)
        lease = await _driving.lease_for(self.checkpointer, opts.run_id, opts.wait)
        try:
            record = new_record(self._parts, prompt, opts.history, opts.run_id, opts.metadata)
            return await _driving.drive(self._parts, record, cancel=opts.cancel,
                                        deadline=opts.deadline, lease=lease,
                                        deps=deps_for(self._parts, opts.output_type),
                                        host_deps=opts.deps)  # fmt: skip
        finally:
            _driving.release(self.checkpointer, lease)

    @overload
    def astream(
        self, prompt: Prompt, **options: Unpack[RunOptions[None]]
    ) -> RunStream[OutputT]: ...
    @overload
    def astream(self, prompt: Prompt, **options: Unpack[RunOptions[type[U]]]) -> RunStream[U]: ...
    @overload
    def astream(self, prompt: Prompt, **options: Unpack[RunOptions]) -> RunStream[Any]: ...
    @documented(RunOptions)
    def astream(self, prompt: Prompt, **options: Unpack[RunOptions]) -> RunStream[Any]:
        """Run, handing out its events as they happen (`async for event in agent.astream(...)`).

        The events (`statemachine_agent.stream.events`, JSON forms in docs/events.md):
        text and thinking deltas, tool call started and its input complete, tool
        results, every transition, and last `RunEnded` with the `RunResult`. The
        model's reply is streamed for this (an `AnthropicModel` streams whenever
        someone listens). Leaving the loop early cancels the run (it ends in
        `cancelled`, the streamed text kept); `async with` or `aclose()` waits for
        that end. Takes `arun`'s options.
        """
        return self._streamer("Agent.astream", prompt, options)()

    @overload
    def stream(
        self, prompt: Prompt, **options: Unpack[RunOptions[None]]
    ) -> Iterator[StreamEvent[OutputT]]: ...
    @overload
    def stream(
        self, prompt: Prompt, **options: Unpack[RunOptions[type[U]]]
    ) -> Iterator[StreamEvent[U]]: ...
    @overload
    def stream(
        self, prompt: Prompt, **options: Unpack[RunOptions]
    ) -> Iterator[StreamEvent[Any]]: ...
    @documented(RunOptions)
    def stream(self, prompt: Prompt, **options: Unpack[RunOptions]) -> Iterator[StreamEvent[Any]]:
        """`astream` for synchronous code: the run goes on a worker thread's event loop."""
        token = options.get("cancel") or CancelToken()
        return iter_sync(
            self._streamer("Agent.stream", prompt, {**options, "cancel": token}), token
        )

    def _streamer(
        self, where: str, prompt: Prompt, options: Mapping[str, Any]
    ) -> Callable[[], RunStream[Any]]:
        """What makes the run's stream, its record made (and checked) already: a bad
        option or id raises here, in the caller, before anything streams."""
        opts = given(where, options, RunOptions)
        record = new_record(self._parts, prompt, opts.history, opts.run_id, opts.metadata)
        return functools.partial(_driving.stream, self._parts, record, cancel=opts.cancel,
                                 deadline=opts.deadline, leased=opts.run_id is not None,
                                 wait=opts.wait, deps=deps_for(self._parts, opts.output_type),
                                 host_deps=opts.deps)  # fmt: skip

    @overload
    def start(self, prompt: Prompt, **options: Unpack[RunOptions[None]]) -> RunHandle[OutputT]: ...
    @overload
    def start(self, prompt: Prompt, **options: Unpack[RunOptions[type[U]]]) -> RunHandle[U]: ...
    @overload
    def start(self, prompt: Prompt, **options: Unpack[RunOptions]) -> RunHandle[Any]: ...
    @documented(RunOptions)
    def start(self, prompt: Prompt, **options: Unpack[RunOptions]) -> RunHandle[Any]:
        """Start a run as an asyncio task and return a handle to cancel or await it.

        The handle cancels through the run's `cancel` token (a new one unless given)
        and names its `run_id` (a fresh one unless given).
        """
        opts = given("Agent.start", options, RunOptions)
        handle_id = opts.run_id or new_run_id()
        token = opts.cancel or CancelToken()
        started: RunOptions = {**options, "run_id": handle_id, "cancel": token}
        task = asyncio.ensure_future(self.arun(prompt, **started))
        return RunHandle(handle_id, token, task)

    @overload
    def resume(self, run_id: str, **options: Unpack[ResumeOptions[None]]) -> RunResult[OutputT]: ...
    @overload
    def resume(self, run_id: str, **options: Unpack[ResumeOptions[type[U]]]) -> RunResult[U]: ...
    @overload
    def resume(self, run_id: str, **options: Unpack[ResumeOptions]) -> RunResult[Any]: ...
    @documented(ResumeOptions)
    def resume(self, run_id: str, **options: Unpack[ResumeOptions]) -> RunResult[Any]:
        """Continue a checkpointed run (blocking); see `aresume`."""
        check_decisions(given("Agent.resume", options, ResumeOptions).decisions)
        return run_blocking(self.aresume(run_id, **options))

    @overload
    async def aresume(
        self, run_id: str, **options: Unpack[ResumeOptions[None]]
    ) -> RunResult[OutputT]: ...
    @overload
    async def aresume(
        self, run_id: str, **options: Unpack[ResumeOptions[type[U]]]
    ) -> RunResult[U]: ...
    @overload
    async def aresume(self, run_id: str, **options: Unpack[ResumeOptions]) -> RunResult[Any]: ...
    @documented(ResumeOptions)
    async def aresume(self, run_id: str, **options: Unpack[ResumeOptions]) -> RunResult[Any]:
        """Continue a run from its last checkpoint, in this process or any other.

        A run that crashed carries on from the state it was in; one waiting for
        approval continues at `act` with `decisions` (`Approve()`, `Deny(msg)`,
        `Edit(input)` by tool_use id, each optionally with `by=` and `note=` for the
        audit trail; anything else raises `DecisionTypeError` before the lease is
        taken); a cancelled one carries on from where it
        was cancelled. Recorded tool results are never executed again. The run
        keeps the metadata it was started with (`metadata` given here is merged
        over it); `deps` are never stored, so pass them again.

        The run's lease is taken first: while another worker drives it this raises
        `RunLockedError` (or waits up to `wait` seconds for the lease).
        """
        opts = given("Agent.aresume", options, ResumeOptions)
        check_decisions(opts.decisions)  # before the lease and the load: nothing runs
        if self.checkpointer is None:
            raise ValueError(
                "resume needs a checkpointer: Agent(checkpointer=<a Checkpointer or a "
                "SQLite file path>)"
            )
        lease = await _driving.lease_for(self.checkpointer, run_id, opts.wait)
        try:
            record, writer, services = await resumed(
                self._parts,
                self.checkpointer,
                run_id,
                decisions=opts.decisions or {},
                output_type=opts.output_type,
                metadata=opts.metadata,
            )
            return await _driving.drive(self._parts, record, cancel=opts.cancel,
                                        deadline=opts.deadline, writer=writer, lease=lease,
                                        deps=services, host_deps=opts.deps)  # fmt: skip
        finally:
            _driving.release(self.checkpointer, lease)

    def steer(self, run_id: str, text: str, *, by: str | None = None) -> int:
        """Add a user message to a run that is going: running (here or in any process
        sharing the store), paused for approval, or cancelled.

        The message is delivered at the run's next `perceive` (its `perceive` to
        `perceive` row, a `run.steered` event naming `by`), added to the latest user
        turn after any tool results, so no request ever splits a tool_use from its
        result; several are delivered together, in order. With a store the queue is
        the store's: durable, and delivered exactly once across a crash and resume.
        Returns the message's number in the run's queue. An ended run raises
        `RunAlreadyEndedError`; a run unknown here and in the store, `RunNotFoundError`.
        """
        return _steering.steer(self._parts, run_id, text, by)

    async def asteer(self, run_id: str, text: str, *, by: str | None = None) -> int:
        """`steer` from async code (the store is written on a worker thread)."""
        return await asyncio.to_thread(_steering.steer, self._parts, run_id, text, by)

    def fork(
        self,
        run_id: str,
        at: int,
        *,
        new_run_id: str | None = None,
        prompt: str | None = None,
        start: bool = True,
        **changes: Any,
    ) -> RunResult[Any] | str:
        """Start a new run from transition `at` of a recorded run (blocking); see `afork`."""
        return run_blocking(self.afork(run_id, at, new_run_id=new_run_id, prompt=prompt,
                                       start=start, **changes))  # fmt: skip

    async def afork(
        self,
        run_id: str,
        at: int,
        *,
        new_run_id: str | None = None,
        prompt: str | None = None,
        start: bool = True,
        **changes: Any,
    ) -> RunResult[Any] | str:
        """A new run whose history is run `run_id`'s up to its transition `at` (the
        `seq` of `result.trail`, from 1), in the state that transition entered, with
        settings changed as `agent.replace(**changes)` changes them.

        `prompt` replaces the history's last user prompt (refused where the last user
        message holds tool results). The original is not touched; the fork's record
        and audit name it (`forked_from`, `forked_at`), and its audit file begins with
        the original's events up to `at`. A point entering `act` (between tools' calls
        and their recorded results), or an end state no resume leaves, raises
        `ForkPointError` naming the nearest points that can fork, and makes no run.
        With `start` (the default) the fork is driven to its end and its `RunResult`
        returned; otherwise it is only stored and its id returned (`resume` drives it).
        """
        target = self.replace(**changes) if changes else self
        new_id = await asyncio.to_thread(
            _fork.create_fork, self._parts, target._parts, run_id, at,
            new_run_id_=new_run_id, prompt=prompt, changed=tuple(changes),
        )  # fmt: skip
        if not start:
            return new_id
        return await target.aresume(new_id)

    def as_tool(self, *, name: str | None = None, description: str | None = None) -> Tool:
        """This agent as a tool of another agent: a sub-agent.

        A call of the tool (input: `{"task": "..."}`) starts a run of this agent, linked
        to the calling run (`parent_run_id` and the tool_use id on its record, its
        checkpoints and its events, which join the caller's audit trail). What the caller
        has left of its cost, token and time limits caps this agent's own; what the run
        spends is charged to the caller; cancelling the caller cancels it; and if it
        pauses for approval, the caller pauses too, listing its pending calls (keyed
        `<caller's tool_use id>/<tool_use id>`): resuming the caller with decisions for
        them resumes it. Its answer (or, when a limit stopped it, its salvage summary)
        is the tool's result. See docs/subagents.md.
        """
        name = self.name if name is None else name
        if description is None:
            description = (
                f"Delegate a self-contained task to the {name} agent; it works on its own "
                "and answers with its result."
            )
        return agent_tool(self, self._parts, _driving.drive, name=name, description=description)


class RunHandle(Generic[OutputT]):
    """A run started with `Agent.start`: cancel it, or await its result (a
    `RunResult[OutputT]`, typed as the run's)."""

    def __init__(
        self, run_id: str, token: CancelToken, task: asyncio.Future[RunResult[OutputT]]
    ) -> None:
        self.run_id = run_id
        self._token = token
        self._task = task

    def cancel(self) -> None:
        """Stop at the next transition boundary; the result ends in `cancelled`."""
        self._token.cancel()

    async def result(self) -> RunResult[OutputT]:
        return await self._task

    def __await__(self) -> Generator[Any, None, RunResult[OutputT]]:
        return self._task.__await__()


def resolve_checkpointer(
    checkpointer: Storage,
    *,
    tools: ToolRegistry,
    effects: Effects,
    taint: TaintPolicy | None = None,
) -> Checkpointer | None:
    """The store an agent's runs are checkpointed to, from its `checkpointer=` argument.

    This is the one place that says what the argument means:

    - a `Checkpointer` (`SQLiteCheckpointer`, `PostgresCheckpointer`,
      `MemoryCheckpointer`, your own): that store;
    - a path (`str` or `Path`): a `SQLiteCheckpointer` in that file, created with its
      folders if missing (`checkpointer="state/runs.sqlite3"`);
    - `False`: no store at all, e.g. when a durable engine records the runs;
    - `None`, the default: no store, except for an agent with tools that require
      approval (or sub-agents with such tools) and in-process effects, which gets a
      `MemoryCheckpointer` so that a run paused for approval can be resumed in this
      process; so does one whose `taint` policy can pause a run (`"approve"`, an
      untrusted source and a side-effect tool, see `may_pause_for_taint`).
    """
    if checkpointer is False:
        return None
    if checkpointer is not None:
        return storage_option(checkpointer)  # type: ignore[return-value]
    in_process = isinstance(effects, InProcessEffects)
    approvals = any(may_pause(t) for t in tools) or any(
        t.may_require_approval for t in tools.toolsets
    )
    if in_process and (approvals or may_pause_for_taint(tools, taint)):
        return MemoryCheckpointer()
    return None


def _read_only(name: str) -> str:
    if name in SETTINGS:
        return (
            f"Agent.{name} is read-only: agent.replace({name}=...) returns an agent with it changed"
        )
    if isinstance(getattr(Agent, name, None), property):
        return f"Agent.{name} is read-only: it is derived from the agent's settings"
    return (
        f"Agent has no setting {name!r} (and its settings are read-only; "
        f"agent.replace(...) takes: {', '.join(SETTINGS)})"
    )


SETTINGS: tuple[str, ...] = tuple(inspect.signature(Agent.__init__).parameters)[1:]
"""The agent's settings: its constructor's parameters, each a read-only property."""
