"""The salvage call: one last answer when a run is stopped before it finished.

Twenty steps of work should not vanish because the twenty-first would cost too
much. The model is told why the run stops and asked, with tool use forbidden,
what it found and what is left. `tools` are still sent (the history holds
tool_use blocks, and a request with those must define tools) with
`tool_choice={"type": "none"}`, and the same system prompt, so the cached prefix
is reused. Its cost is reported on its own.

Not every server honours `tool_choice: none` (llama.cpp's Messages endpoint
ignores it), so the reply may still call a tool. Those calls are never run: each
is closed with an `is_error` result at once, recorded in `details["salvage"]`
and as a `tool.skipped` event, so the history the run returns is one the API
accepts when the conversation goes on.
"""

from __future__ import annotations

from typing import Any

from statemachine_agent.context.notices import (
    add_user_text,
    close_pending,
    not_run,
    unanswered_tool_uses,
)
from statemachine_agent.machine.calls import call_model, price_of
from statemachine_agent.machine.phase_env import PhaseEnv
from statemachine_agent.models.base import ModelError
from statemachine_agent.phases.perceive import build_request
from statemachine_agent.phases.reason import append_reply
from statemachine_agent.policy.pricing import MTOK


def salvage_notice(why: str) -> str:
    return (
        f"[system notice] The run is stopping now: {why}. Do not call any tools. "
        "Summarise briefly what you found so far and what is still left to do."
    )


async def salvage(ctx: PhaseEnv, why: str) -> tuple[str, dict[str, Any]]:
    """Make the salvage call; returns its text and the facts to report (usage, cost)."""
    run = ctx.state
    taken = run.subagents.limit_salvage
    if taken is not None:  # a sub-agent's salvage already was the one call past the limit
        skipped = "a sub-agent's salvage call was the one call the budget allows past its limit"
        return taken["text"], {"salvage": {"skipped": skipped, "run_id": taken["run_id"]}}
    max_tokens = _affordable_tokens(ctx)
    if max_tokens is None:
        cap = run.budget.salvage_max_cost_usd
        return "", {"salvage": {"skipped": f"a summary would cost more than ${cap}"}}
    if run.staged.calls:  # the summary says what was not done
        names = ", ".join(f"{c['ref']} {c['tool']}" for c in run.staged.calls)
        why += f"; the staged calls ({names}) will not run"
    add_user_text(run.messages, salvage_notice(why))
    request = build_request(
        ctx, tool_choice={"type": "none"} if request_has_tools(ctx) else None,
        max_tokens=max_tokens,
    )  # fmt: skip
    try:
        reply = await call_model(ctx, request, purpose="salvage")
    except ModelError as exc:
        return "", {"salvage": {"error": exc.describe()}}
    append_reply(run.messages, reply)
    cost = price_of(ctx, reply, ctx.deps.model)
    facts: dict[str, Any] = {"usage": reply.usage.to_dict(), "cost_usd": cost}
    not_run = close_side_call_tools(ctx, "salvage")
    if not_run:
        facts["tool_calls_not_run"] = not_run
    return reply.text, {"salvage": facts}


SIDE_CALL_TOOLS_NOT_RUN = "the run had already stopped, and its closing summary may not call tools"
"""The result a side call's tool_use is closed with (the model was told not to call any)."""


def close_side_call_tools(ctx: PhaseEnv, purpose: str) -> list[dict[str, str]]:
    """Close the tool calls a side call's reply made anyway, each with an `is_error`
    result, and report them (a `tool.skipped` event naming them); returns the calls."""
    pending = unanswered_tool_uses(ctx.state.messages)
    if not pending:
        return []
    calls = [{"tool_use_id": str(b.get("id", "")), "tool": str(b.get("name", ""))} for b in pending]
    closed = close_pending(ctx.state.messages, SIDE_CALL_TOOLS_NOT_RUN)
    ctx.emitter.emit("tool.skipped", count=closed, end_state=ctx.state.state, purpose=purpose,
                     calls=calls, content=not_run(SIDE_CALL_TOOLS_NOT_RUN),
                     iteration=ctx.state.iteration)  # fmt: skip
    return calls


MIN_SUMMARY_TOKENS = 64
"""A salvage call allowed fewer output tokens than this is not worth making."""


def _affordable_tokens(ctx: PhaseEnv) -> int | None:
    """The salvage call's output limit: `salvage_max_tokens`, lowered so that its
    estimated input plus that output fit `salvage_max_cost_usd`; None when too little
    would fit. Without a cost cap (or a price for the model), just the token limit."""
    budget = ctx.state.budget
    cap, limit = budget.salvage_max_cost_usd, budget.salvage_max_tokens
    price = ctx.deps.prices.get(ctx.deps.model.name)
    if cap is None or price is None:
        return limit
    input_cost = ctx.sizes.estimate(ctx.state.messages) * price.input / MTOK
    affordable = int((cap - input_cost) * MTOK / price.output) if price.output > 0 else limit
    if affordable < MIN_SUMMARY_TOKENS:
        return None
    return min(limit, affordable)


def request_has_tools(ctx: PhaseEnv) -> bool:
    return len(ctx.deps.tools) > 0
