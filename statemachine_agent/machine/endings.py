"""End-state handlers: one per way a run can end, each saying exactly why.

A handler runs once, when the machine enters its end state, and turns the record
into the `Ending` the result is built from. No run ends in a bare `return` or an
escaped exception: whatever happened has a name here and a sentence in `reason`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from statemachine_agent.machine.ends import ENDS
from statemachine_agent.machine.guards import KNOWN_STOP_REASONS, budget_reason
from statemachine_agent.machine.phase_env import PhaseEnv
from statemachine_agent.machine.salvage import salvage


@dataclass(frozen=True, slots=True)
class Ending:
    """What a handler decides: the answer, the reason, and any structured extras."""

    text: str
    reason: str
    data: Any = None
    details: dict[str, Any] | None = None
    output: Any = None
    """The typed answer, when the run has an output type and the model gave one."""


Handler = Callable[[PhaseEnv], Awaitable[Ending]]


def _last_text(ctx: PhaseEnv) -> str:
    reply = ctx.state.last_reply
    return reply.text if reply else ""


async def completed(ctx: PhaseEnv) -> Ending:
    """The model's final text is the answer (with any continued, cut-off parts before it)."""
    run = ctx.state
    reply = run.last_reply
    stop = reply.stop_reason if reply else "end_turn"
    reason = f"the model ended its turn ({stop})"
    if run.verification.verdict is not None:
        reason += " and the verifier accepted the answer"
    return Ending(run.continuation.partial_text + _last_text(ctx), reason)


async def finished(ctx: PhaseEnv) -> Ending:
    """The finish tool's input is the structured result; its summary is the text."""
    data = dict(ctx.state.finish or {})
    status = data.get("status", "completed")
    summary = str(data.get("summary") or "")
    reason = f"the model called finish with status {status!r}"
    if ctx.state.verification.verdict is not None:
        reason += " and the verifier accepted the result"
    return Ending(summary, reason, data=data, output=typed_output(ctx))


async def budget_exhausted(ctx: PhaseEnv) -> Ending:
    """Name the limit and its figures, then salvage a summary of what was found."""
    why = budget_reason(ctx.state) or "a budget limit was reached"
    reason = f"budget exhausted: {why}"
    if not ctx.state.budget.salvage:
        return Ending(_last_text(ctx), reason)
    summary, details = await salvage(ctx, f"the budget is exhausted ({why})")
    return Ending(summary, reason, details=details)


async def stalled(ctx: PhaseEnv) -> Ending:
    """Name the repeated pattern; salvage a summary when the stall policy asks for it."""
    run = ctx.state
    finding = run.stall.finding or {}
    reason = (
        f"stalled: {finding.get('detail', 'the model kept repeating itself')} "
        f"(pattern {finding.get('pattern')}, after {run.stall.interventions} interventions)"
    )
    details: dict[str, Any] = {"stall": dict(finding), "interventions": run.stall.interventions}
    policy = run.settings.stall
    if policy is None or not policy.salvage:
        return Ending(_last_text(ctx), reason, details=details)
    summary, extra = await salvage(ctx, "the run is stalled, repeating the same steps")
    return Ending(summary, reason, details={**details, **extra})


async def truncated(ctx: PhaseEnv) -> Ending:
    """The output hit max_tokens; a tool call cut off inside it is never run."""
    reply = ctx.state.last_reply
    cut_tool = bool(reply and reply.tool_uses)
    limit = ctx.deps.max_tokens
    reason = f"the reply was cut off at max_tokens={limit} in iteration {ctx.state.iteration}"
    if cut_tool:
        reason += "; the tool call inside it was not run"
    return Ending(
        _last_text(ctx),
        reason + " (raise max_tokens or ask for shorter steps)",
        details={"max_tokens": limit, "cut_tool_use": cut_tool},
    )


async def refused(ctx: PhaseEnv) -> Ending:
    """Keep the API's stop details: they say which policy applied."""
    reply = ctx.state.last_reply
    details = dict(reply.stop_details) if reply and reply.stop_details else {}
    explanation = details.get("explanation") or details.get("category") or ""
    reason = "the model refused to continue" + (f": {explanation}" if explanation else "")
    return Ending(_last_text(ctx), reason, details={"stop_details": details})


async def context_overflow(ctx: PhaseEnv) -> Ending:
    """Say how large the prompt was, as far as the API told us."""
    run = ctx.state
    input_tokens = run.last_reply.usage.input_tokens if run.last_reply else None
    if run.error is not None:
        reason = f"the prompt is too long for the model: {run.error.describe()}"
    else:
        reason = (
            "the model's context window was exceeded "
            f"(last input {input_tokens} tokens, {len(run.messages)} messages)"
        )
    return Ending(
        _last_text(ctx),
        reason,
        details={"input_tokens": input_tokens, "messages": len(run.messages)},
    )


async def failed(ctx: PhaseEnv) -> Ending:
    """An error class, status and request id when an error ended the run; else the reply's fault."""
    run = ctx.state
    if run.error is not None:
        err = run.error
        return Ending(
            "",
            f"failed: {err.describe()}",
            details={"error": err.kind, "status": err.status, "request_id": err.request_id},
        )
    if run.fatal_tool is not None:
        detail = run.notes.get("fatal_tool_error", "")
        return Ending(
            "",
            f"failed: tool {run.fatal_tool!r} failed and is configured to end the run: {detail}",
            details={"tool": run.fatal_tool, "error": detail},
        )
    if run.invalid_answers > run.settings.output_retries:
        errors = run.notes.get("answer_errors", "")
        return Ending(
            "",
            f"failed: the final answer was rejected {run.invalid_answers} times; last: {errors}",
            details={"invalid_answers": run.invalid_answers, "errors": errors},
        )
    checked = run.verification
    if checked.verdict is not None and not checked.verdict.get("ok"):
        feedback = checked.verdict.get("feedback") or "no reason given"
        return Ending(
            "",
            f"failed: the verifier rejected the result {checked.rejections} times; "
            f"last: {feedback}",
            details={"verdict": dict(checked.verdict), "rejections": checked.rejections},
        )
    reply = run.last_reply
    if reply is None:
        return Ending("", "failed before any model reply")
    if reply.stop_reason == "tool_use" and not reply.tool_uses:
        why = "stop_reason 'tool_use' but the reply holds no tool_use block"
    elif reply.stop_reason not in KNOWN_STOP_REASONS:
        why = f"unknown stop_reason {reply.stop_reason!r}"
    else:
        why = "the reply had neither text nor tool calls"
    return Ending("", f"failed: {why}", details={"stop_reason": reply.stop_reason})


async def cancelled(ctx: PhaseEnv) -> Ending:
    """Everything done so far is kept in the result's messages; a reply cut while it
    streamed gives the text it had written."""
    return Ending(
        ctx.state.notes.get("partial_text") or _last_text(ctx),
        f"cancelled by the host after {ctx.state.iteration} iterations",
    )


async def awaiting_approval(ctx: PhaseEnv) -> Ending:
    """List the calls waiting for a decision; `Agent.resume` continues with the answers."""
    run = ctx.state
    waiting = set(run.approval.awaiting)
    pending: list[dict[str, Any]] = []
    for c in run.pending_calls:
        if c.id in waiting:
            pending.append({"tool_use_id": c.id, "name": c.name, "input": c.input})
        child = run.subagents.runs.get(c.id) or {}
        pending += [p for p in child.get("pending") or () if p["tool_use_id"] in waiting]
    names = ", ".join(sorted({p["name"] for p in pending}))
    return Ending(
        _last_text(ctx),
        f"waiting for approval of {len(pending)} tool call(s): {names}",
        details={"pending": pending},
    )


def typed_output(ctx: PhaseEnv) -> Any:
    """The typed value of the run's answer, built again from its checkpointed JSON form
    (None without an output type, or when the answer came through another tool)."""
    spec, finish = ctx.deps.output, ctx.state.finish
    if spec is None or finish is None:
        return None
    try:
        return spec.rebuild(finish.get("result"))
    except Exception:
        return None


def _handler_of(name: str) -> Handler:
    """The handler of an end state is the function of this module named after it."""
    handler = globals().get(name)
    if not callable(handler):  # pragma: no cover - a definition error, caught at import
        raise RuntimeError(f"end state {name!r} is declared in ends.py but has no handler here")
    return handler  # type: ignore[no-any-return]


ENDINGS: Mapping[str, Handler] = {end.name: _handler_of(end.name) for end in ENDS}
"""Each end state's handler, derived from the declarations in `ends.py`."""
