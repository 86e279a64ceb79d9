"""Guards: named, pure predicates over the run record.

A guard reads the record and answers; it never calls a model, a tool or a clock
(the engine refreshes `elapsed_s` before every transition). That is what makes a
transition deterministic, so a recorded run replays to the same path.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from statemachine_agent.machine import reach
from statemachine_agent.machine.reach import requires
from statemachine_agent.machine.run import RunRecord
from statemachine_agent.machine.table import guard_names

Guard = Callable[[RunRecord], bool]

KNOWN_STOP_REASONS = frozenset(
    {
        "tool_use",
        "end_turn",
        "stop_sequence",
        "max_tokens",
        "refusal",
        "pause_turn",
        "compaction",
        "model_context_window_exceeded",
    }
)


def _stop_reason(run: RunRecord) -> str | None:
    return run.last_reply.stop_reason if run.last_reply else None


@requires(reach.always)
def cancel_requested(run: RunRecord) -> bool:
    """The host asked the run to stop at the next boundary."""
    return run.cancel_requested


@requires(reach.always)
def budget_exceeded(run: RunRecord) -> bool:
    """A limit is reached, so another model call would overspend."""
    return budget_reason(run) is not None


def budget_reason(run: RunRecord) -> str | None:
    """Which limit is reached, with the figures (shared by the guard and the handler)."""
    return run.budget.exhausted(
        iterations=run.iteration,
        cost_usd=run.cost_usd,
        total_tokens=run.usage.total_tokens,
        elapsed_s=run.elapsed_s,
        blocked_calls=run.blocked_calls,
    )


@requires(reach.tools_offered)
def is_tool_use(run: RunRecord) -> bool:
    """The model stopped to call tools and the reply really holds tool calls."""
    reply = run.last_reply
    return reply is not None and reply.stop_reason == "tool_use" and bool(reply.tool_uses)


@requires(reach.always)
def is_empty_reply(run: RunRecord) -> bool:
    """A reply with neither text nor tool calls cannot be an answer."""
    reply = run.last_reply
    if reply is None:
        return True
    if reply.stop_reason in ("pause_turn", "compaction", "max_tokens", "refusal"):
        return False
    return not reply.tool_uses and not reply.text.strip()


@requires(reach.always)
def is_end_turn(run: RunRecord) -> bool:
    """The model ended its turn naturally."""
    return _stop_reason(run) in ("end_turn", "stop_sequence")


def _window_filled(run: RunRecord) -> bool:
    """The reply stopped at `max_tokens` with its prompt and output reaching the model's
    known context window (`ContextPolicy.window_tokens`): what some servers report when
    the window, not the output limit, ran out."""
    reply, window = run.last_reply, run.settings.context.window_tokens
    return (
        reply is not None
        and window is not None
        and reply.stop_reason == "max_tokens"
        and reply.usage.total_tokens >= window
    )


@requires(reach.always)
def is_max_tokens(run: RunRecord) -> bool:
    """The reply was cut off at max_tokens, and did not fill the model's known context
    window (that is `is_context_exceeded`)."""
    return _stop_reason(run) == "max_tokens" and not _window_filled(run)


@requires(reach.always)
def output_below_limit(run: RunRecord) -> bool:
    """The reply's output is shorter than the call's `max_tokens`, so that limit is not
    what stopped it: a `max_tokens` stop below it means the context window ran out."""
    reply, limit = run.last_reply, run.reply_max_tokens
    return reply is not None and limit is not None and reply.usage.output_tokens < limit


@requires(reach.always)
def is_refusal(run: RunRecord) -> bool:
    """The model declined to continue (a safety refusal)."""
    return _stop_reason(run) == "refusal"


@requires(reach.always)
def is_pause_turn(run: RunRecord) -> bool:
    """A long-running server tool paused the turn; it continues when sent back."""
    return _stop_reason(run) == "pause_turn"


@requires(reach.always)
def is_compaction(run: RunRecord) -> bool:
    """Server-side compaction summarized the history and paused (`pause_after_compaction`)."""
    return _stop_reason(run) == "compaction"


@requires(reach.always)
def is_context_exceeded(run: RunRecord) -> bool:
    """Generation stopped because the model's context window was full: the API said so,
    or a `max_tokens` stop filled the known window."""
    return _stop_reason(run) == "model_context_window_exceeded" or _window_filled(run)


@requires(reach.always)
def is_context_error(run: RunRecord) -> bool:
    """The API refused the request because the prompt is too long."""
    return run.error is not None and run.error.context_exceeded


@requires(reach.run_ending_tool)
def finish_called(run: RunRecord) -> bool:
    """The model called the finish tool successfully."""
    return run.finish is not None


@requires(reach.run_ending_tool)
def finish_claims_success(run: RunRecord) -> bool:
    """finish was called with status 'completed' (other statuses are not claims to verify)."""
    return run.finish is not None and run.finish.get("status", "completed") == "completed"


@requires(reach.verifier, constant=True)
def verifier_configured(run: RunRecord) -> bool:
    """A verifier checks claimed completions."""
    return run.settings.has_verifier


@requires(reach.verifier)
def verdict_passed(run: RunRecord) -> bool:
    """The verifier accepted the claim."""
    return run.verification.verdict is not None and bool(run.verification.verdict.get("ok"))


@requires(reach.verifier)
def rejections_exhausted(run: RunRecord) -> bool:
    """The verifier has rejected more claims than the run allows."""
    return run.verification.rejections > run.settings.max_rejections


@requires(reach.continuations)
def can_continue(run: RunRecord) -> bool:
    """A text-only reply cut at max_tokens may be continued (a cut tool call never is)."""
    reply = run.last_reply
    return (
        reply is not None
        and not reply.tool_uses
        and run.continuation.count < run.settings.max_continuations
    )


@requires(reach.compaction_retry)
def can_compact(run: RunRecord) -> bool:
    """One compaction-and-retry is allowed per run when the context overflows."""
    return run.settings.context.retry_on_overflow and not run.overflow_retried


@requires(reach.run_ending_tool)
def answer_retries_exhausted(run: RunRecord) -> bool:
    """The model's final answer was rejected more often than the run allows."""
    return run.invalid_answers > run.settings.output_retries


@requires(reach.typed_output, constant=True)
def output_expected(run: RunRecord) -> bool:
    """The run has an output type: only a validated call of `final_result` answers it."""
    return run.settings.output_expected


@requires(reach.output_retry)
def output_retry_left(run: RunRecord) -> bool:
    """The invalid final answers so far (the reply just counted among them) are still
    within `output_retries`, so the model may be asked again."""
    return not answer_retries_exhausted(run)


@requires(reach.summarizing)
def summary_due(run: RunRecord) -> bool:
    """The prompt `perceive` measured has passed `summarize_at_tokens`, messages older than
    the kept exchanges exist, and no summary was tried since the loop's last model call."""
    limit = run.settings.context.summarize_at_tokens
    track = run.summary
    return (
        limit is not None
        and track.prompt_tokens >= limit
        and track.replaceable > 0
        and track.attempted_at != run.iteration
    )


@requires(reach.approval)
def approval_pending(run: RunRecord) -> bool:
    """Some tool calls wait for a human decision."""
    return bool(run.approval.awaiting)


@requires(reach.taint_pause)
def taint_approval_pending(run: RunRecord) -> bool:
    """A side-effect call a `TaintPolicy` sent for approval, after untrusted text entered
    the run (or, for a sub-agent's pending call, the child's run), waits for a human."""
    gated = run.taint.gated
    return any(key in gated for key in run.approval.awaiting)


@requires(reach.fatal_tool)
def tool_failed_fatally(run: RunRecord) -> bool:
    """A tool configured to fail the run (on_error='fail') failed."""
    return run.fatal_tool is not None


@requires(reach.stall_interventions)
def stall_detected(run: RunRecord) -> bool:
    """The model repeats itself and may still be told so."""
    policy = run.settings.stall
    return (
        run.stall.finding is not None
        and policy is not None
        and run.stall.interventions < policy.max_interventions
    )


@requires(reach.stall_policy)
def stall_persists(run: RunRecord) -> bool:
    """The model kept repeating itself after every allowed intervention."""
    policy = run.settings.stall
    return (
        run.stall.finding is not None
        and policy is not None
        and run.stall.interventions >= policy.max_interventions
    )


@requires(reach.reflection)
def reflection_due(run: RunRecord) -> bool:
    """Every N iterations the run reviews its progress (once per iteration count)."""
    interval = run.settings.reflection_interval
    return (
        interval is not None
        and run.iteration > 0
        and run.iteration % interval == 0
        and run.last_reflection != run.iteration
        and run.steering.seen_by_call != run.iteration  # just redirected by a steer
    )


@requires(reach.always)
def steering_waiting(run: RunRecord) -> bool:
    """Steered messages wait to be added to the history, and it may take them now:
    never while a tool_use of the last reply is still unanswered."""
    if not run.steering.waiting:
        return False
    last = run.messages[-1] if run.messages else None
    if last is None or last.get("role") != "assistant":
        return True
    content = last.get("content")
    return not (
        isinstance(content, list)
        and any(isinstance(b, dict) and b.get("type") == "tool_use" for b in content)
    )


@requires(reach.always)
def cancelled_before_reply(run: RunRecord) -> bool:
    """The run was cancelled before a model reply was in hand (in perceive, or with the
    model call abandoned), so resuming makes the call again."""
    return run.cancelled_at in (("perceive", "prepared"), ("reason", "model_failed"))


@requires(reach.always)
def cancelled_after_reply(run: RunRecord) -> bool:
    """The run was cancelled with the model's reply kept, so resuming decides on that reply."""
    return run.cancelled_at == ("reason", "replied")


@requires(reach.commits)
def calls_staged(run: RunRecord) -> bool:
    """Writes of deferrable tools wait, staged: a successful end runs them in `commit`."""
    return bool(run.staged.calls)


@requires(reach.commit_failure_retries)
def commit_failed(run: RunRecord) -> bool:
    """A staged call failed (it raised, timed out, or was denied) when committed."""
    return run.staged.failure is not None


@requires(reach.commit_failure_fails)
def commit_failure_ends_run(run: RunRecord) -> bool:
    """A staged call failed when committed, and `CommitPolicy(on_failure="fail")`."""
    policy = run.settings.commit
    return run.staged.failure is not None and (policy is None or policy.on_failure == "fail")


@requires(reach.commit_pause)
def committing(run: RunRecord) -> bool:
    """The run paused inside `commit` (staged calls waiting for approval): resume there."""
    return run.staged.committing


def _cancelled_in(state: str) -> Guard:
    def guard(run: RunRecord) -> bool:
        return run.cancelled_at is not None and run.cancelled_at[0] == state

    guard = requires(reach.entered(state))(guard)
    guard.__name__ = guard.__qualname__ = f"cancelled_in_{state}"
    guard.__doc__ = f"The run was cancelled right after `{state}` (its work is in the record)."
    return guard


GUARDS: Mapping[str, Guard] = {
    guard.__name__: guard
    for guard in (
        cancel_requested,
        budget_exceeded,
        steering_waiting,
        is_tool_use,
        is_empty_reply,
        is_end_turn,
        is_max_tokens,
        output_below_limit,
        is_refusal,
        is_pause_turn,
        is_compaction,
        is_context_exceeded,
        is_context_error,
        finish_called,
        finish_claims_success,
        verifier_configured,
        verdict_passed,
        rejections_exhausted,
        can_continue,
        can_compact,
        summary_due,
        tool_failed_fatally,
        answer_retries_exhausted,
        output_expected,
        output_retry_left,
        taint_approval_pending,
        approval_pending,
        stall_detected,
        stall_persists,
        reflection_due,
        cancelled_before_reply,
        cancelled_after_reply,
        calls_staged,
        commit_failed,
        commit_failure_ends_run,
        committing,
        # one per state the table resumes a cancelled run in (`cancelled_in_<state>`)
        *(
            _cancelled_in(name.removeprefix("cancelled_in_"))
            for name in guard_names()
            if name.startswith("cancelled_in_")
        ),
    )
}
"""The guards the table may name, by name."""
