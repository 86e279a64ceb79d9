"""The salvage call: one last answer when a run is stopped before it finished.

Twenty steps of work should not vanish because the twenty-first would cost too
much. The model is told why the run stops and asked, with tool use forbidden,
what it found and what is left. `tools` are still sent (the history holds
tool_use blocks, and a request with those must define tools) with
`tool_choice={"type": "none"}`, and the same system prompt, so the cached prefix
is reused. Its cost is reported on its own.
"""

from __future__ import annotations

from typing import Any

from statemachine_agent.context.notices import add_user_text
from statemachine_agent.machine.context import PhaseContext
from statemachine_agent.models.base import ModelError
from statemachine_agent.phases.perceive import build_request
from statemachine_agent.phases.reason import append_reply, charge


def salvage_notice(why: str) -> str:
    return (
        f"[system notice] The run is stopping now: {why}. Do not call any tools. "
        "Summarise briefly what you found so far and what is still left to do."
    )


async def salvage(ctx: PhaseContext, why: str) -> tuple[str, dict[str, Any]]:
    """Make the salvage call; returns its text and the facts to report (usage, cost)."""
    run, deps = ctx.state, ctx.deps
    add_user_text(run.messages, salvage_notice(why))
    request = build_request(
        ctx, tool_choice={"type": "none"} if request_has_tools(ctx) else None,
        max_tokens=run.budget.salvage_max_tokens,
    )  # fmt: skip
    ctx.emitter.emit("model.requested", iteration=run.iteration, purpose="salvage",
                     model=request.model, message_count=len(request.messages),
                     tools=[t.get("name") for t in request.tools],
                     max_tokens=request.max_tokens)  # fmt: skip
    try:
        reply = await deps.effects.call_model(deps.model, request)
    except ModelError as exc:
        ctx.emitter.emit("model.failed", iteration=run.iteration, purpose="salvage",
                         error=exc.describe(), status=exc.status, request_id=exc.request_id,
                         retryable=exc.retryable)  # fmt: skip
        return "", {"salvage": {"error": exc.describe()}}
    cost = charge(ctx, reply, iteration=False)
    append_reply(run.messages, reply)
    ctx.emitter.emit("model.replied", iteration=run.iteration, purpose="salvage",
                     model=reply.model or request.model,
            stop_reason=reply.stop_reason, content=list(reply.content),
                     usage=reply.usage.to_dict(), cost_usd=cost, request_id=reply.request_id,
                     message_id=reply.id)  # fmt: skip
    return reply.text, {"salvage": {"usage": reply.usage.to_dict(), "cost_usd": cost}}


def request_has_tools(ctx: PhaseContext) -> bool:
    return len(ctx.deps.tools) > 0
