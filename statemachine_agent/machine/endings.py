"""End-state handlers: one per way a run can end, each saying exactly why.

A handler runs once, when the machine enters its end state, and turns the record
into the `Ending` the result is built from. No run ends in a bare `return` or an
escaped exception: whatever happened has a name here and a sentence in `reason`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from string import Formatter
from typing import Any

from statemachine_agent.machine.ends import ENDS, RESUMABLE_STATES
from statemachine_agent.machine.guards import KNOWN_STOP_REASONS, budget_reason
from statemachine_agent.machine.phase_env import PhaseEnv
from statemachine_agent.machine.salvage import salvage
from statemachine_agent.machine.table import Row
from statemachine_agent.models.base import Usage


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
    return Ending(run.continuation.partial_text + _last_text(ctx), explain(ctx)[0])


async def finished(ctx: PhaseEnv) -> Ending:
    """The finish tool's input is the structured result; its summary is the text."""
    data = dict(ctx.state.finish or {})
    summary = str(data.get("summary") or "")
    return Ending(summary, explain(ctx)[0], data=data, output=typed_output(ctx))


async def budget_exhausted(ctx: PhaseEnv) -> Ending:
    """Name the limit and its figures, then salvage a summary of what was found."""
    reason = explain(ctx)[0]
    if not ctx.state.budget.salvage:
        return Ending(_last_text(ctx), reason)
    why = budget_reason(ctx.state) or "a budget limit was reached"
    summary, details = await salvage(ctx, f"the budget is exhausted ({why})")
    return Ending(summary, reason, details=details)


async def stalled(ctx: PhaseEnv) -> Ending:
    """Name the repeated pattern; salvage a summary when the stall policy asks for it."""
    run = ctx.state
    finding = run.stall.finding or {}
    reason = explain(ctx)[0]
    details: dict[str, Any] = {"stall": dict(finding), "interventions": run.stall.interventions}
    policy = run.settings.stall
    if policy is None or not policy.salvage:
        return Ending(_last_text(ctx), reason, details=details)
    summary, extra = await salvage(ctx, "the run is stalled, repeating the same steps")
    return Ending(summary, reason, details={**details, **extra})


async def truncated(ctx: PhaseEnv) -> Ending:
    """The output hit max_tokens; a tool call cut off inside it is never run."""
    reply = ctx.state.last_reply
    details = {"max_tokens": ctx.deps.max_tokens, "cut_tool_use": bool(reply and reply.tool_uses)}
    return Ending(_last_text(ctx), explain(ctx)[0], details=details)


async def refused(ctx: PhaseEnv) -> Ending:
    """Keep the API's stop details: they say which policy applied."""
    details = {"stop_details": _stop_details(ctx)}
    return Ending(_last_text(ctx), explain(ctx)[0], details=details)


async def context_overflow(ctx: PhaseEnv) -> Ending:
    """Say how large the prompt was, as far as the API told us."""
    details = {"input_tokens": _input_tokens(ctx), "messages": len(ctx.state.messages)}
    return Ending(_last_text(ctx), explain(ctx)[0], details=details)


async def failed(ctx: PhaseEnv) -> Ending:
    """The row that fired names the cause; the record gives its figures (an error's
    class, status and request id; a tool's name; the validation errors)."""
    reason, details = explain(ctx)
    return Ending("", reason, details=details or None)


async def cancelled(ctx: PhaseEnv) -> Ending:
    """Everything done so far is kept in the result's messages; a reply cut while it
    streamed gives the text it had written."""
    return Ending(ctx.state.notes.get("partial_text") or _last_text(ctx), explain(ctx)[0])


async def awaiting_approval(ctx: PhaseEnv) -> Ending:
    """List the calls waiting for a decision; `Agent.resume` continues with the answers."""
    return Ending(_last_text(ctx), explain(ctx)[0], details={"pending": _pending(ctx)})


# -- Figures: the facts of the record an end reason may name ------------------------


@dataclass(frozen=True, slots=True)
class Figure:
    """One fact of the record a row's reason may name as `{name}`, and what naming it
    adds to the result's `details` (for `failed`, whose details are its reason's facts).

    A figure only reads the record: the row has already decided the cause, and a
    figure the row does not name is never computed, so it may assume its fact exists
    no more than the row does (each says what it shows when the record lacks it)."""

    value: Callable[[PhaseEnv], object]
    details: Callable[[PhaseEnv], Mapping[str, Any]] | None = None


def _error(ctx: PhaseEnv) -> str:
    err = ctx.state.error
    return err.describe() if err is not None else "no error was recorded"


def _error_details(ctx: PhaseEnv) -> Mapping[str, Any]:
    err = ctx.state.error
    if err is None:
        return {}
    return {"error": err.kind, "status": err.status, "request_id": err.request_id}


def _stop_reason(ctx: PhaseEnv) -> str | None:
    reply = ctx.state.last_reply
    return reply.stop_reason if reply is not None else None


def _unhandled_stop(ctx: PhaseEnv) -> str:
    """Why no row took the reply: its stop_reason is unknown, or it contradicts the reply."""
    reply = ctx.state.last_reply
    if reply is None:
        return "no model reply to decide on"
    if reply.stop_reason == "tool_use" and not reply.tool_uses:
        return "stop_reason 'tool_use' but the reply holds no tool_use block"
    if reply.stop_reason not in KNOWN_STOP_REASONS:
        return f"unknown stop_reason {reply.stop_reason!r}"
    return f"no row takes a reply with stop_reason {reply.stop_reason!r}"


def _stop_details(ctx: PhaseEnv) -> dict[str, Any]:
    reply = ctx.state.last_reply
    return dict(reply.stop_details) if reply and reply.stop_details else {}


def _refusal(ctx: PhaseEnv) -> str:
    details = _stop_details(ctx)
    explanation = details.get("explanation") or details.get("category") or ""
    return f": {explanation}" if explanation else ""


def _input_tokens(ctx: PhaseEnv) -> int | None:
    reply = ctx.state.last_reply
    return reply.usage.input_tokens if reply is not None else None


def _usage(ctx: PhaseEnv) -> Usage:
    reply = ctx.state.last_reply
    return reply.usage if reply is not None else Usage()


def _window(ctx: PhaseEnv) -> str:
    """The window's size, when the agent knows it (`ContextPolicy.window_tokens`)."""
    window = ctx.state.settings.context.window_tokens
    return f" of {window} tokens" if window is not None else ""


def _cut_tool_use(ctx: PhaseEnv) -> str:
    reply = ctx.state.last_reply
    return "; the tool call inside it was not run" if reply and reply.tool_uses else ""


def _verdict_details(ctx: PhaseEnv) -> Mapping[str, Any]:
    return {"verdict": dict(ctx.state.verification.verdict or {})}


def _pending(ctx: PhaseEnv) -> list[dict[str, Any]]:
    """The calls waiting for a decision, a sub-agent's among them."""
    run = ctx.state
    waiting = set(run.approval.awaiting)
    pending: list[dict[str, Any]] = []
    for c in run.pending_calls:
        if c.id in waiting:
            entry: dict[str, Any] = {"tool_use_id": c.id, "name": c.name, "input": c.input}
            if c.id in run.taint.gated:  # why a person is asked: the untrusted sources
                entry["tainted_by"] = [dict(s) for s in run.taint.sources]
            pending.append(entry)
        child = run.subagents.runs.get(c.id) or {}
        pending += [p for p in child.get("pending") or () if p["tool_use_id"] in waiting]
    for s in run.staged.calls:  # asked at commit, as one batch
        if s["tool_use_id"] in waiting:
            entry = {"tool_use_id": s["tool_use_id"], "name": s["tool"], "input": s["input"],
                     "staged": s["ref"]}  # fmt: skip
            if s["tool_use_id"] in run.taint.gated:
                entry["tainted_by"] = [dict(t) for t in run.taint.sources]
            pending.append(entry)
    return pending


def _staged_failure(ctx: PhaseEnv) -> dict[str, Any]:
    return dict(ctx.state.staged.failure or {"ref": "?", "tool": "?", "error": "not recorded"})


def with_staged(ctx: PhaseEnv, ending: Ending) -> Ending:
    """The ending, with `details["staged"]` listing the calls still staged (tool, input,
    why not run) and `details["committed"]` the ones `commit` ran.

    Nothing staged runs on an ending other than through `commit`: each call left is a
    `call.discarded` event, except on a resumable end, whose resume keeps them staged."""
    run = ctx.state
    extra: dict[str, Any] = {}
    if run.staged.calls:
        if run.state in RESUMABLE_STATES:
            why = f"the run is {run.state}; a resume keeps it staged"
        elif run.staged.failure is not None:
            why = f"staged call {run.staged.failure['ref']} failed when committed"
        else:
            why = f"the run ended {run.state} before commit"
        extra["staged"] = [{"ref": c["ref"], "tool": c["tool"], "input": c["input"],
                            "tool_use_id": c["tool_use_id"], "why_not_run": why}
                           for c in run.staged.calls]  # fmt: skip
        if run.state not in RESUMABLE_STATES:
            for c in run.staged.calls:
                ctx.emitter.emit("call.discarded", iteration=run.iteration, ref=c["ref"],
                                 tool=c["tool"], tool_use_id=c["tool_use_id"], why=why)  # fmt: skip
    if run.staged.ran:
        extra["committed"] = [dict(c) for c in run.staged.ran]
    if not extra:
        return ending
    return replace(ending, details={**(ending.details or {}), **extra})


def _taint_sources(ctx: PhaseEnv) -> list[dict[str, Any]]:
    """The run's untrusted sources, then those of its sub-agents' taint-gated pending
    calls (a child may have read what its parent never did), each once."""
    pending = [s for p in _pending(ctx) for s in p.get("tainted_by") or ()]
    seen: set[tuple[Any, Any]] = set()
    sources: list[dict[str, Any]] = []
    for s in [*ctx.state.taint.sources, *pending]:
        key = (s.get("tool"), s.get("tool_use_id"))
        if key not in seen:
            seen.add(key)
            sources.append(dict(s))
    return sources


def _tainted_by(ctx: PhaseEnv) -> str:
    """The untrusted sources of the run, by tool and call (first three, then a count)."""
    sources = _taint_sources(ctx)
    named = [f"{s.get('tool')} (call {s.get('tool_use_id')})" for s in sources[:3]]
    more = f" and {len(sources) - 3} more" if len(sources) > 3 else ""
    return ", ".join(named) + more if named else "no source"


FIGURES: Mapping[str, Figure] = {
    "iteration": Figure(lambda ctx: ctx.state.iteration),
    "stop_reason": Figure(_stop_reason, lambda ctx: {"stop_reason": _stop_reason(ctx)}),
    "unhandled_stop": Figure(_unhandled_stop, lambda ctx: {"stop_reason": _stop_reason(ctx)}),
    "error": Figure(_error, _error_details),
    "tool": Figure(lambda ctx: ctx.state.fatal_tool, lambda ctx: {"tool": ctx.state.fatal_tool}),
    "tool_error": Figure(
        lambda ctx: ctx.state.notes.get("fatal_tool_error", ""),
        lambda ctx: {"error": ctx.state.notes.get("fatal_tool_error", "")},
    ),
    "invalid_answers": Figure(
        lambda ctx: ctx.state.invalid_answers,
        lambda ctx: {"invalid_answers": ctx.state.invalid_answers},
    ),
    "answer_errors": Figure(
        lambda ctx: ctx.state.notes.get("answer_errors", ""),
        lambda ctx: {"errors": ctx.state.notes.get("answer_errors", "")},
    ),
    "rejections": Figure(
        lambda ctx: ctx.state.verification.rejections,
        lambda ctx: {"rejections": ctx.state.verification.rejections},
    ),
    "feedback": Figure(
        lambda ctx: (ctx.state.verification.verdict or {}).get("feedback") or "no reason given",
        _verdict_details,
    ),
    "budget": Figure(lambda ctx: budget_reason(ctx.state) or "a budget limit was reached"),
    "stall": Figure(
        lambda ctx: (ctx.state.stall.finding or {}).get("detail", "the model kept repeating itself")
    ),
    "stall_pattern": Figure(lambda ctx: (ctx.state.stall.finding or {}).get("pattern")),
    "interventions": Figure(lambda ctx: ctx.state.stall.interventions),
    "max_tokens": Figure(lambda ctx: ctx.state.reply_max_tokens or ctx.deps.max_tokens),
    "prompt_tokens": Figure(lambda ctx: _usage(ctx).total_tokens - _usage(ctx).output_tokens),
    "output_tokens": Figure(lambda ctx: _usage(ctx).output_tokens),
    "window": Figure(_window),
    "cut_tool_use": Figure(_cut_tool_use),
    "refusal": Figure(_refusal),
    "input_tokens": Figure(_input_tokens),
    "messages": Figure(lambda ctx: len(ctx.state.messages)),
    "finish_tool": Figure(lambda ctx: ctx.state.notes.get("finish_tool", "finish")),
    "finish_status": Figure(lambda ctx: (ctx.state.finish or {}).get("status", "completed")),
    "pending_count": Figure(lambda ctx: len(_pending(ctx))),
    "pending_names": Figure(lambda ctx: ", ".join(sorted({p["name"] for p in _pending(ctx)}))),
    "staged_ref": Figure(lambda ctx: _staged_failure(ctx)["ref"]),
    "staged_tool": Figure(lambda ctx: _staged_failure(ctx)["tool"]),
    "staged_error": Figure(
        lambda ctx: _staged_failure(ctx)["error"],
        lambda ctx: {"staged_call": _staged_failure(ctx)},
    ),
    "tainted_by": Figure(_tainted_by, lambda ctx: {"tainted_by": _taint_sources(ctx)}),
}
"""The figures a row's `reason` may name, by name (checked when the machine is built)."""


def reason_fields(template: str) -> tuple[str, ...]:
    """The figures a reason template names, in order."""
    return tuple(field for _, field, _, _ in Formatter().parse(template) if field)


def reason_problems(rows: Iterable[Row]) -> list[str]:
    """What is wrong with the reasons of the rows into end states: a template naming an
    unknown figure, or two rows into one end state giving the same reason (a copied row
    would report another row's cause)."""
    problems: list[str] = []
    seen: dict[tuple[str, str], Row] = {}
    for row in rows:
        if row.dest not in ENDINGS:
            continue
        template = row.end_reason
        try:
            unknown = [f for f in reason_fields(template) if f not in FIGURES]
        except ValueError as exc:
            problems.append(f"row {row.key}: reason {template!r} is no template: {exc}")
            continue
        if unknown:
            problems.append(f"row {row.key}: reason names unknown figure(s) {unknown}")
        twin = seen.setdefault((row.dest, template), row)
        if twin is not row:
            problems.append(f"rows {twin.key} and {row.key} give the same reason {template!r}")
    return problems


def explain(ctx: PhaseEnv) -> tuple[str, dict[str, Any]]:
    """The end reason the row that entered this end state gives, its figures filled in
    from the record, and the details those figures add."""
    row = ctx.entered_by
    if row is None or row.dest != ctx.state.state:
        return f"{ctx.state.state}: no recorded row says how the run ended here", {}
    template = row.end_reason
    values: dict[str, object] = {}
    details: dict[str, Any] = {}
    for name in reason_fields(template):
        figure = FIGURES[name]
        values[name] = figure.value(ctx)
        if figure.details is not None:
            details.update(figure.details(ctx))
    return template.format_map(values), details


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
