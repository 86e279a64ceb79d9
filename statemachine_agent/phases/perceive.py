"""Perceive: decide what the model will see on its next call.

The request is assembled fresh from the record each time (system prompt, tool
definitions, the exact history), so nothing the model sees is hidden state.
This is also where the context is kept in bounds: continuing a cut-off reply,
retrying after an overflow, and replacing old tool results once the prompt
grows past its threshold.
"""

from __future__ import annotations

from statemachine_agent.context.caching import cache_last_tool, cache_latest_message
from statemachine_agent.context.compaction import compact_tool_results
from statemachine_agent.context.notices import add_user_text
from statemachine_agent.machine.context import RunContext
from statemachine_agent.models.base import JSON, ModelRequest

CONTINUE_NOTICE = (
    "[system notice] Your previous reply was cut off at the output limit. "
    "Continue exactly where it stopped, without repeating what you already wrote."
)


class Perceive:
    """Builds the next request; the guards then decide whether it may be sent."""

    trigger = "prepared"

    async def run(self, ctx: RunContext) -> str:
        run = ctx.state
        reply = run.last_reply
        overflowed = False
        if reply is not None and run.messages and run.messages[-1].get("role") == "assistant":
            if reply.stop_reason == "max_tokens":
                self._continue(ctx)
            elif reply.stop_reason == "model_context_window_exceeded":
                run.messages.pop()
                overflowed = True
        if run.error is not None and run.error.context_exceeded:
            run.error = None
            overflowed = True
        if overflowed:
            self._compact(ctx, keep=min(1, ctx.deps.context.keep_tool_results), forced=True)
        elif await _over_threshold(ctx):
            self._compact(ctx, keep=ctx.deps.context.keep_tool_results, forced=False)
        ctx.request = build_request(ctx)
        return self.trigger

    def _continue(self, ctx: RunContext) -> None:
        run = ctx.state
        run.continuations += 1
        run.partial_text += run.last_reply.text if run.last_reply else ""
        add_user_text(run.messages, CONTINUE_NOTICE)
        ctx.emitter.emit("context.continued", iteration=run.iteration, count=run.continuations)

    def _compact(self, ctx: RunContext, *, keep: int, forced: bool) -> None:
        run = ctx.state
        if forced:
            run.overflow_retried = True
        before = ctx.sizes.estimate(run.messages)
        replaced, first = compact_tool_results(run.messages, keep)
        if replaced:
            run.compactions += 1
        if first is not None:
            run.dirty_from = first if run.dirty_from is None else min(run.dirty_from, first)
            ctx.sizes.forget_from(first)
        ctx.emitter.emit(
            "context.compacted",
            iteration=run.iteration,
            forced=forced,
            replaced=replaced,
            kept=keep,
            tokens_before=before,
            tokens_after=ctx.sizes.estimate(run.messages),
        )


async def _over_threshold(ctx: RunContext) -> bool:
    """Whether the prompt has grown past the compaction threshold.

    Estimated locally by default; with `count_tokens` on, the model's own
    counter is asked (when the model has one).
    """
    limit = ctx.deps.context.compact_at_tokens
    if limit is None:
        return False
    counter = getattr(ctx.deps.model, "acount_tokens", None)
    if ctx.deps.context.count_tokens and counter is not None:
        return int(await counter(build_request(ctx))) >= limit
    return ctx.sizes.estimate(ctx.state.messages) >= limit


def system_blocks(text: str | None, *, cache: bool) -> list[JSON]:
    """The system prompt as blocks; cached, since it is the stable prefix of every call."""
    if not text:
        return []
    block: JSON = {"type": "text", "text": text}
    if cache:
        block["cache_control"] = {"type": "ephemeral"}
    return [block]


def build_request(
    ctx: RunContext, *, tool_choice: JSON | None = None, max_tokens: int | None = None
) -> ModelRequest:
    """The request for the run's current history; `tool_choice` only for special calls."""
    deps = ctx.deps
    policy = deps.context
    tools = deps.tools.definitions()
    messages: list[JSON] = list(ctx.state.messages)
    if deps.cache_prompt and policy.cache_tools:
        tools = cache_last_tool(tools)
    if deps.cache_prompt and policy.cache_history:
        messages = cache_latest_message(messages)
    extra = dict(deps.request_options)
    if policy.server_edits is not None:
        extra["context_management"] = dict(policy.server_edits)
    return ModelRequest(
        model=deps.model.name,
        max_tokens=max_tokens or deps.max_tokens,
        messages=messages,
        system=system_blocks(deps.system, cache=deps.cache_prompt),
        tools=tools,
        tool_choice=tool_choice,
        extra=extra,
    )
