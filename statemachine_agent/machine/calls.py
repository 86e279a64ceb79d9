"""The one model-call path: every call to a model goes through `call_model`.

The loop's own call, the critic's, the salvage call (and any later caller: a
summary, a model-based verifier) are alike in what the run owes them: a
`model.requested` event before, a `model.replied` or `model.failed` event after,
their usage and cost charged to the run exactly once, fallbacks tried the same
way, and a budget that is checked before anything but the loop's call (which its
own row guards) and the one salvage call is allowed to start. Writing that once
is what keeps those promises true for every caller.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Literal

from statemachine_agent.machine.failures import ComponentError
from statemachine_agent.machine.guards import budget_reason
from statemachine_agent.machine.phase_env import PhaseEnv
from statemachine_agent.models.base import Model, ModelError, ModelReply, ModelRequest
from statemachine_agent.models.streaming import muted
from statemachine_agent.models.waiting import wait_limit, wait_limited

Purpose = Literal["loop", "critic", "salvage", "summary", "verifier"]
"""Why a model is called. Only `loop` calls count as iterations; every call costs."""

UNGUARDED: frozenset[Purpose] = frozenset({"loop", "salvage"})
"""Purposes whose budget check is elsewhere: the loop's by its `perceive` row, and the
salvage call is the one call allowed past a limit (to say what was found)."""

STREAMED: frozenset[Purpose] = frozenset({"loop", "salvage"})
"""Purposes whose reply a run's stream shows as it is written: the answer. A critic's,
a summary's or a verifier's reply is made with nobody listening: the stream shows the
transitions around it, not its text."""


class BudgetSpentError(ModelError):
    """A model call was not made because a budget limit is already reached."""

    def __init__(self, why: str) -> None:
        super().__init__(
            f"not called: the budget is exhausted ({why})", error_type="BudgetSpentError"
        )


async def call_model(
    ctx: PhaseEnv,
    request: ModelRequest,
    *,
    purpose: Purpose = "loop",
    model: Model | None = None,
    fallbacks: bool = False,
) -> ModelReply:
    """Make one model call with its events and its charge; raises `ModelError`.

    `model` defaults to the agent's model; `fallbacks` tries the agent's fallback
    models in turn when the call stays overloaded or rate-limited. A model adapter
    that raises anything but `ModelError` raises `ComponentError` naming it.
    """
    run, deps = ctx.state, ctx.deps
    model = model or deps.model
    step = run.iteration + 1 if purpose == "loop" else run.iteration
    tag = {} if purpose == "loop" else {"purpose": purpose}
    if purpose not in UNGUARDED:
        try:
            why = budget_reason(run)
        except Exception as exc:
            raise ComponentError("budget", exc) from exc
        if why is not None:
            error = BudgetSpentError(why)
            ctx.emitter.emit("model.failed", iteration=step, **tag, error=error.describe(),
                             status=None, request_id=None, retryable=False)  # fmt: skip
            raise error
    listened = ctx.emitter.listened()  # the payloads are built only for a receiver
    if listened:
        ctx.emitter.emit("model.requested", iteration=step, **tag, model=request.model,
                         message_count=len(request.messages),
                         tools=[t.get("name") for t in request.tools],
                         max_tokens=request.max_tokens)  # fmt: skip
    # The primary model alone is awaited without the fallback loop's frame (a frame is
    # resumed at every wait inside the call).
    call = (
        _with_fallbacks(ctx, model, request, step)
        if fallbacks and ctx.deps.fallback_models
        else _call(ctx, model, request)
    )
    try:
        if purpose in STREAMED:
            reply = await call
        else:
            with muted():
                reply = await call
    except ModelError as exc:
        ctx.emitter.emit("model.failed", iteration=step, **tag, error=exc.describe(),
                         status=exc.status, request_id=exc.request_id,
                         retryable=exc.retryable)  # fmt: skip
        raise
    cost = charge(ctx, reply, model, iteration=purpose == "loop")
    if listened:
        ctx.emitter.emit("model.replied", iteration=run.iteration, **tag,
                         model=reply.model or request.model, stop_reason=reply.stop_reason,
                         stop_details=reply.stop_details, content=list(reply.content),
                         usage=reply.usage.to_dict(), cost_usd=cost,
                         request_id=reply.request_id, message_id=reply.id)  # fmt: skip
    return reply


async def _with_fallbacks(
    ctx: PhaseEnv, model: Model, request: ModelRequest, step: int
) -> ModelReply:
    """Call the model; on overload or rate limit, try each fallback model in turn.

    The SDK has already retried the primary model; fallbacks are for when it stays
    unavailable. Fatal errors (400, 401, 403, 404) never fall back: another model
    would reject the same request for the same reason.
    """
    try:
        return await _call(ctx, model, request)
    except ModelError as exc:
        error = exc
    for fallback in ctx.deps.fallback_models:
        if not error.retryable:
            break
        ctx.emitter.emit("model.fallback", iteration=step, failed_model=request.model,
                         error=error.describe(), model=fallback.name)  # fmt: skip
        request = replace(request, model=fallback.name)
        try:
            return await _call(ctx, fallback, request)
        except ModelError as exc:
            error = exc
    raise error


async def _call(ctx: PhaseEnv, model: Model, request: ModelRequest) -> ModelReply:
    try:
        limit = _time_left(ctx)
        if limit is None and wait_limited() is None:  # no limit to set, none to lift
            return await ctx.deps.effects.call_model(model, request)
        with wait_limit(limit):
            return await ctx.deps.effects.call_model(model, request)
    except ModelError:
        raise
    except Exception as exc:
        raise ComponentError(f"model adapter {type(model).__name__} ({model.name})", exc) from exc


def _time_left(ctx: PhaseEnv) -> float | None:
    """Seconds the run has left under `Budget.max_seconds` (None without that limit):
    no retry wait inside the call may pass it."""
    limit = ctx.state.budget.max_seconds
    return None if limit is None else limit - ctx.state.elapsed_s


def charge(ctx: PhaseEnv, reply: ModelReply, model: Model, *, iteration: bool) -> float:
    """Count a model call against the run: its tokens and their price (and an iteration,
    for calls of the loop itself; a critic's or a salvage call costs but is not a step).
    """
    run = ctx.state
    if iteration:
        run.iteration += 1
    cost = price_of(ctx, reply, model)
    run.usage = run.usage + reply.usage
    run.cost_usd += cost
    return cost


def price_of(ctx: PhaseEnv, reply: ModelReply, model: Model) -> float:
    """What a reply cost, at the price of the model that answered (when it is priced)."""
    prices = ctx.deps.prices
    price = prices.get(reply.model) if reply.model else None
    if price is None:
        price = prices.get(model.name)
    return price.cost(reply.usage) if price else 0.0
