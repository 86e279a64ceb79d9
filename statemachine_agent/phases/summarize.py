"""Summarize: the second context layer, as a state of its own.

Entered from `perceive` when the prompt passed `ContextPolicy.summarize_at_tokens`
(the `summary_due` row, below the cancel and budget rows, so no summary is asked
for past a limit). One model call, through the same path as every other
(`call_model`: budget checked before it starts, charged once, fallbacks on
overload, cancellable), summarizes the exchanges older than the last
`keep_last`; they are replaced by one user message holding the summary.

An attempt is marked before the call, so a run summarizes at most once per
model call of the loop. When the call fails, or the summary would not make the
prompt smaller, nothing is replaced: the phase names `summary_failed`, and its
row sends the run to `compact` for the placeholder fallback.
"""

from __future__ import annotations

from typing import Literal

from statemachine_agent.context.compaction import CHARS_PER_TOKEN, SizeCache
from statemachine_agent.context.summary import (
    SUMMARY_REQUEST,
    SUMMARY_SYSTEM,
    summarized,
    summary_cut,
)
from statemachine_agent.machine.calls import call_model
from statemachine_agent.machine.phase_env import PhaseEnv
from statemachine_agent.models.base import JSON, ModelError, ModelRequest
from statemachine_agent.phases.reflect import transcript
from statemachine_agent.policy.context import ContextPolicy

SUMMARY_MAX_TOKENS = 2048
"""The summary's output limit; a summary cut at it is not used (it may miss what is left)."""


class Summarize:
    """Replaces older exchanges by a summary; names `summarized` or `summary_failed`."""

    def interrupted(self, ctx: PhaseEnv) -> Literal["summary_failed"]:
        """A cancel abandoned the summary call in flight: nothing was replaced."""
        return _failed(ctx, "the summary call was cancelled by the host")

    async def run(self, ctx: PhaseEnv) -> Literal["summarized", "summary_failed"]:
        run, deps = ctx.state, ctx.deps
        track, policy = run.summary, deps.context
        track.attempted_at = run.iteration
        track.failure = None
        cut = summary_cut(run.messages, policy.keep_last)
        if cut == 0:
            return _failed(ctx, "no messages older than the kept exchanges")
        model = deps.summary_model or deps.model
        request = ModelRequest(
            model=model.name,
            max_tokens=SUMMARY_MAX_TOKENS,
            system=[{"type": "text", "text": SUMMARY_SYSTEM}],
            messages=[{"role": "user", "content": _prompt(run.messages[:cut], policy)}],
        )
        try:
            reply = await call_model(ctx, request, purpose="summary", model=model, fallbacks=True)
        except ModelError as exc:
            return _failed(ctx, f"the summary call failed: {exc.describe()}")
        text = reply.text.strip()
        if not text:
            return _failed(ctx, "the summary came back empty")
        if reply.stop_reason not in ("end_turn", "stop_sequence"):
            return _failed(ctx, f"the summary stopped with {reply.stop_reason!r}")
        before = ctx.sizes.estimate(run.messages)
        replaced_tokens = SizeCache().estimate(run.messages[:cut])
        history = summarized(run.messages, cut, text)
        after = SizeCache().estimate(history)
        if after >= before:
            return _failed(
                ctx, f"the summary would not make the prompt smaller ({before} -> {after} tokens)"
            )
        run.messages[:] = history
        run.dirty_from = 0
        ctx.sizes.forget_from(0)
        track.count += 1
        ctx.emitter.emit(
            "context.summarized",
            iteration=run.iteration,
            messages_replaced=cut,
            tokens_replaced=replaced_tokens,
            kept_exchanges=policy.keep_last,
            summary=text,
            model=reply.model or model.name,
            tokens_before=before,
            tokens_after=after,
        )
        return "summarized"


def _prompt(older: list[JSON], policy: ContextPolicy) -> str:
    """The transcript of the older messages, then what the summary must cover.

    The transcript is at most about `summarize_at_tokens` long (the size the run
    found too big); when cut, its start (where the task is) and its end are kept.
    """
    limit = max(20_000, (policy.summarize_at_tokens or 0) * CHARS_PER_TOKEN)
    head = transcript(older[:1], limit // 4)
    rest = transcript(older[1:], limit - len(head))
    return f"<transcript>\n{head}\n{rest}\n</transcript>\n\n{SUMMARY_REQUEST}"


def _failed(ctx: PhaseEnv, why: str) -> Literal["summary_failed"]:
    run = ctx.state
    run.summary.failure = why
    ctx.emitter.emit(
        "context.summary_failed", iteration=run.iteration, reason=why, fallback="compact"
    )
    return "summary_failed"
