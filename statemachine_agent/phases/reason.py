"""Reason: one model call, its reply kept whole.

The assistant message is appended verbatim (every block, not only the text):
tool_use ids, thinking signatures and server-tool blocks must go back to the
API unchanged. Usage is charged here, the moment it is known.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Literal

from statemachine_agent.machine.context import PhaseContext
from statemachine_agent.machine.run import RunError
from statemachine_agent.models.base import JSON, ModelError, ModelReply, ModelRequest
from statemachine_agent.phases.perceive import build_request
from statemachine_agent.tools.base import ToolCall


class Reason:
    """Calls the model once; names `replied` or `model_failed`."""

    def interrupted(self, ctx: PhaseContext) -> Literal["model_failed"]:
        """A cancel abandoned the call in flight: its reply would be discarded anyway."""
        ctx.state.error = RunError(
            kind="Cancelled", message="the model call was cancelled by the host"
        )
        return "model_failed"

    async def run(self, ctx: PhaseContext) -> Literal["replied", "model_failed"]:
        run, _deps = ctx.state, ctx.deps
        request = ctx.request or build_request(ctx)
        ctx.emitter.emit(
            "model.requested",
            iteration=run.iteration + 1,
            model=request.model,
            message_count=len(request.messages),
            tools=[t.get("name") for t in request.tools],
            max_tokens=request.max_tokens,
        )
        try:
            reply = await call_with_fallbacks(ctx, request)
        except ModelError as exc:
            run.error = RunError(
                kind=exc.error_type or "ModelError",
                message=exc.message,
                status=exc.status,
                request_id=exc.request_id,
                context_exceeded=exc.context_exceeded,
            )
            ctx.emitter.emit(
                "model.failed",
                iteration=run.iteration + 1,
                error=run.error.describe(),
                status=exc.status,
                request_id=exc.request_id,
                retryable=exc.retryable,
            )
            return "model_failed"
        ctx.request = None
        cost = charge(ctx, reply)
        run.last_reply = reply
        append_reply(run.messages, reply)
        run.pending_calls = (
            [ToolCall.from_block(b) for b in reply.tool_uses]
            if reply.stop_reason == "tool_use"
            else []
        )
        ctx.emitter.emit(
            "model.replied",
            iteration=run.iteration,
            model=reply.model or request.model,
            stop_reason=reply.stop_reason,
            stop_details=reply.stop_details,
            content=list(reply.content),
            usage=reply.usage.to_dict(),
            cost_usd=cost,
            request_id=reply.request_id,
            message_id=reply.id,
        )
        return "replied"


async def call_with_fallbacks(ctx: PhaseContext, request: ModelRequest) -> ModelReply:
    """Call the model; on overload or rate limit, try each fallback model in turn.

    The SDK has already retried the primary model; fallbacks are for when it stays
    unavailable. Fatal errors (400, 401, 403, 404) never fall back: another model
    would reject the same request for the same reason.
    """
    deps = ctx.deps
    try:
        return await deps.effects.call_model(deps.model, request)
    except ModelError as exc:
        error = exc
    for fallback in deps.fallback_models:
        if not error.retryable:
            break
        ctx.emitter.emit(
            "model.fallback",
            iteration=ctx.state.iteration + 1,
            failed_model=request.model,
            error=error.describe(),
            model=fallback.name,
        )
        request = replace(request, model=fallback.name)
        try:
            return await deps.effects.call_model(fallback, request)
        except ModelError as exc:
            error = exc
    raise error


def append_reply(messages: list[JSON], reply: ModelReply) -> None:
    """Add the reply to the history; a continued (paused) turn extends its own message.

    After `pause_turn` the paused assistant message is sent back as the last
    message and the model continues it, so the continuation belongs to that same
    message: appending a second assistant message would break role alternation.
    A reply with no content at all is not added: the API rejects empty messages.
    """
    if not reply.content:
        return
    if messages and messages[-1].get("role") == "assistant":
        previous = messages[-1]
        content = previous.get("content")
        blocks = (
            [{"type": "text", "text": content}] if isinstance(content, str) else list(content or [])
        )
        previous["content"] = blocks + [dict(b) for b in reply.content]
        return
    messages.append(reply.to_message())


def charge(ctx: PhaseContext, reply: ModelReply, *, iteration: bool = True) -> float:
    """Count a model call against the run: its tokens and their price (and an iteration,
    for calls of the loop itself; a critic's or a salvage call costs but is not a step).
    """
    run = ctx.state
    if iteration:
        run.iteration += 1
    prices = ctx.deps.prices
    name = reply.model if reply.model and prices.get(reply.model) else ctx.deps.model.name
    cost = prices.cost(name, reply.usage)
    run.usage = run.usage + reply.usage
    run.cost_usd += cost
    return cost
