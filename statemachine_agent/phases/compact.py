"""Compact: replace old tool results by placeholders, and go on with a smaller prompt.

Entered by the rows for an overflow (the API's 400 "prompt is too long", or a
reply stopped by `model_context_window_exceeded`): old tool results are
replaced, keeping at most the latest one, and the run goes back to `perceive`
for one more try; `can_compact` allows this once per run, so an overflow that
compaction cannot cure ends in `context_overflow`.

Entered `instead_of_summary` (the summary call failed, or would not have made
the prompt smaller), it is the first layer's fallback for the second: the
results are replaced keeping `keep_tool_results`, as at the compaction
threshold, and the one overflow retry is left unused.
"""

from __future__ import annotations

from typing import Literal

from statemachine_agent.context.compaction import compact_tool_results
from statemachine_agent.machine.phase_env import PhaseEnv


class Compact:
    """Drops what overflowed, compacts the history; names `compacted`."""

    async def run(self, ctx: PhaseEnv) -> Literal["compacted"]:
        run = ctx.state
        if ctx.arrival == "instead_of_summary":
            compact_history(ctx, keep=ctx.deps.context.keep_tool_results, forced=False)
            return "compacted"
        if ctx.arrival == "drop_cut_reply" and run.messages:
            run.messages.pop()  # the reply the window cut off: the retry replaces it
        run.error = None
        run.overflow_retried = True
        compact_history(ctx, keep=min(1, ctx.deps.context.keep_tool_results), forced=True)
        return "compacted"


def compact_history(ctx: PhaseEnv, *, keep: int, forced: bool) -> None:
    """Replace all but the last `keep` tool results with placeholders, and say so.

    Shared by this phase (forced, after an overflow) and `perceive` (when the
    prompt passes `ContextPolicy.compact_at_tokens`).
    """
    run = ctx.state
    before = ctx.sizes.estimate(run.messages)
    replaced, first = compact_tool_results(run.messages, keep)
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
