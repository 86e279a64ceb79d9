"""Perceive: decide what the model will see on its next call.

The request is assembled fresh from the record each time (system prompt, tool
definitions, the exact history), so nothing the model sees is hidden state.
This is also where the prompt is measured and kept in bounds before it
overflows. The measure is recorded, and the `summary_due` guard decides from it
whether the run passes through `summarize` first (the second layer); when it
does not, old tool results are replaced by placeholders once the prompt grows
past `compact_at_tokens`. Summarizing gets the first claim because placeholders
throw away what a summary would keep. (Continuing a cut-off reply and
recovering from an overflow are states of their own, `continue` and `compact`.)
"""

from __future__ import annotations

from typing import Literal

from statemachine_agent.context.caching import cache_last_tool, cache_latest_message
from statemachine_agent.context.notices import add_user_text
from statemachine_agent.context.summary import summary_cut
from statemachine_agent.machine.cancel import CancelToken
from statemachine_agent.machine.guards import summary_due
from statemachine_agent.machine.phase_env import PhaseEnv
from statemachine_agent.models.base import JSON, ModelRequest
from statemachine_agent.phases.compact import compact_history
from statemachine_agent.phases.staging import tool_definitions
from statemachine_agent.tools.output import TEXT_ANSWER


class Perceive:
    """Builds the next request; the guards then decide whether it may be sent."""

    carried_exit = True
    """Its transition is carried in the next checkpoint: the request is rebuilt from the
    record after a crash. A step that read steered messages from the queue is written
    at once (`PhaseEnv.outside_input`)."""

    async def run(self, ctx: PhaseEnv) -> Literal["prepared"]:
        if ctx.deps.tools.toolsets:  # nothing to list (or to say) without toolsets
            await refresh_tools(ctx)
        run, policy = ctx.state, ctx.deps.context
        if ctx.arrival == "ask_for_typed_answer":  # the row says: the text was no answer
            add_user_text(run.messages, TEXT_ANSWER)
        if ctx.arrival == "deliver_steering":  # the row says: steered messages wait
            deliver_steering(ctx)
        read_steering(ctx)
        if policy.compact_at_tokens is not None or policy.summarize_at_tokens is not None:
            run.summary.prompt_tokens = await measure(ctx)
            run.summary.replaceable = summary_cut(run.messages, policy.keep_last)
            limit = policy.compact_at_tokens
            if limit is not None and run.summary.prompt_tokens >= limit and not summary_due(run):
                compact_history(ctx, keep=policy.keep_tool_results, forced=False)
        ctx.request = build_request(ctx)
        return "prepared"


def read_steering(ctx: PhaseEnv) -> None:
    """Take what was steered into the run since it last looked into the record, where
    the `steering_waiting` guard sees it (one indexed read of the store's queue)."""
    mailbox, run = ctx.mailbox, ctx.state
    if mailbox is None:
        return
    found = mailbox.steered(run.run_id, run.steering.seen)
    if found:
        ctx.outside_input = True  # written with this transition: a fork or resume sees it
        run.steering.seen = found[-1].number
        run.steering.waiting = [*run.steering.waiting, *(m.to_plain() for m in found)]


def deliver_steering(ctx: PhaseEnv) -> None:
    """Add the waiting messages, in order, to the latest user turn (after its tool
    results, never between a tool_use and its result), each a `run.steered` event.

    A steered message is new information, not a repeat: the stall detector starts
    over, and the reflection interval does not fire on the call that first sees it.
    """
    run = ctx.state
    for message in run.steering.waiting:
        add_user_text(run.messages, str(message["text"]))
        run.steering.delivered += 1
        ctx.emitter.emit("run.steered", iteration=run.iteration, number=message["number"],
                         text=message["text"], by=message.get("by"),
                         sent_at=message.get("sent_at"))  # fmt: skip
    run.steering.waiting = []
    run.steering.seen_by_call = run.iteration + 1
    run.stall.observations, run.stall.finding = {}, None
    ctx.stall_detector = None


async def refresh_tools(ctx: PhaseEnv, cancel: CancelToken | None = None) -> None:
    """List the tools of toolsets whose list changed (or was never listed).

    A toolset that cannot list keeps the tools it had; the run goes on without
    the others, and each failure is a `toolset.failed` event. The wait is bounded
    by what the run has left of `Budget.max_seconds`, and, given the run's
    `cancel` token (before the engine races the phases against it), by its
    cancellation and deadline: a cancelled listing stops its server's start, and
    the engine then ends the run `cancelled`.
    """
    run = ctx.state
    limit = run.budget.max_seconds
    within = None if limit is None else max(limit - run.elapsed_s, 0.0)
    listing = ctx.deps.tools.refresh(within=within)
    if cancel is None:
        problems = await listing
    else:
        finished, found = await cancel.race(listing)
        problems = found if finished and found is not None else []
    for problem in problems:
        ctx.emitter.emit("toolset.failed", iteration=run.iteration, error=problem)
    say_listings(ctx)


def say_listings(ctx: PhaseEnv) -> None:
    """A `toolset.listed` event for each toolset whose listing changed the server's list
    (names mapped, tools left out), in every run offered that list (each run's audit
    file stands alone), and again only when a listing changes it."""
    for toolset in ctx.deps.tools.toolsets:
        notes = toolset.notes
        if notes and ctx.listed.get(toolset.name) != notes:
            ctx.listed[toolset.name] = notes
            ctx.emitter.emit("toolset.listed", iteration=ctx.state.iteration,
                             toolset=toolset.name, **notes)  # fmt: skip


async def measure(ctx: PhaseEnv) -> int:
    """How many tokens the prompt about to be sent takes.

    Estimated locally by default; with `count_tokens` on, the model's own
    counter is asked (when the model has one).
    """
    if ctx.deps.context.count_tokens:
        counter = getattr(ctx.deps.model, "acount_tokens", None)
        if counter is not None:
            return int(await counter(build_request(ctx)))
    return ctx.sizes.estimate(ctx.state.messages)


def system_blocks(text: str | None, *, cache: bool) -> list[JSON]:
    """The system prompt as blocks; cached, since it is the stable prefix of every call."""
    if not text:
        return []
    block: JSON = {"type": "text", "text": text}
    if cache:
        block["cache_control"] = {"type": "ephemeral"}
    return [block]


def build_request(
    ctx: PhaseEnv, *, tool_choice: JSON | None = None, max_tokens: int | None = None
) -> ModelRequest:
    """The request for the run's current history; `tool_choice` only for special calls."""
    deps = ctx.deps
    policy = deps.context
    tools = tool_definitions(ctx)  # the agent's tools, and `unstage` while calls are staged
    if deps.cache_prompt and policy.cache_tools:
        tools = cache_last_tool(tools)
    # One shallow copy of the history per call (the breakpoint copies only the last
    # message), so the request never aliases the run's own list as it grows.
    messages: list[JSON] = (
        cache_latest_message(ctx.state.messages)
        if deps.cache_prompt and policy.cache_history
        else list(ctx.state.messages)
    )
    if tool_choice is None and deps.output is not None:
        tool_choice = {"type": "any"}  # the answer is a call of final_result, never bare text
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
