"""Act: run every tool call of the reply, and never raise.

Whatever a tool does (raise, hang, return nothing or too much), each call ends
with an outcome; failures go back to the model flagged `is_error`, so it can
correct itself instead of the loop crashing. Calls past a per-tool limit are
answered without running, calls needing approval are put to the approval
policy first, and each outcome is recorded (and checkpointed) the moment it
exists, so a resumed run never executes a recorded call again.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import inspect
import time
from types import MappingProxyType
from typing import Literal

from statemachine_agent.machine.failures import ComponentError
from statemachine_agent.machine.phase_env import PhaseEnv
from statemachine_agent.phases.staging import is_unstage, stage, stages, unstage
from statemachine_agent.policy.approval import (
    ApprovalRecord,
    Approve,
    Defer,
    Deny,
    Edit,
    PolicyAnswer,
    decision_from_plain,
    now_iso,
    policy_name,
)
from statemachine_agent.policy.taint import excerpt
from statemachine_agent.tools.base import ErrorKind, TaintSource, Tool, ToolCall, ToolOutcome
from statemachine_agent.tools.registry import UNTRUSTED_TAG
from statemachine_agent.tools.scope import RunScope, tool_scope
from statemachine_agent.tools.settling import Settling

ANSWER_ERRORS: frozenset[ErrorKind] = frozenset({"invalid_input", "raised"})
"""Failures of a run-ending tool that mean its input (the answer) was rejected."""

ENGINE_WORDS: frozenset[ErrorKind | None] = frozenset(
    {"unknown_tool", "invalid_input", "timeout", "abandoned", "limit", "not_run", "denied"}
)
"""Answers written by the engine, not by the tool: an untrusted tool's call answered
with one of them brought no outside text into the run."""


class Act:
    """Runs the pending tool calls; names `tools_done`.

    Interruptible by a deadline only (`deadline_only`): after a plain `cancel()`
    the tools in flight are left to finish, so each call has its real outcome.
    """

    deadline_only = True

    carried_exit = True
    """Its `tools_done` transition is carried in the next checkpoint: each outcome was
    written as it came (`_record`), so after a crash act runs again, finds every call
    answered and runs none of them."""

    def interrupted(self, ctx: PhaseEnv) -> Literal["tools_done"]:
        """A deadline abandoned the tools in flight; `run` answered each as it stopped."""
        self._sort(ctx)
        return "tools_done"

    async def run(self, ctx: PhaseEnv) -> Literal["tools_done"]:
        run, deps = ctx.state, ctx.deps
        done = {outcome.tool_use_id for outcome in run.outcomes}
        run.approval.awaiting = []
        to_run: list[ToolCall] = []
        admitted: dict[str, int] = {}
        used = ctx.call_ids_used()
        seen: set[str] = set()
        for call in run.pending_calls:
            reused = call.id in used or call.id in seen
            seen.add(call.id)
            if call.id in done:
                continue
            ctx.emitter.emit("tool.called", iteration=run.iteration, tool=call.name,
                             tool_use_id=call.id, input=call.input)  # fmt: skip
            refusal = _reused(call) if reused else self._over_limit(ctx, call, admitted)
            if refusal is not None:
                self._record(ctx, call, refusal)
                continue
            if is_unstage(ctx, call) or stages(ctx, call):  # side effects last: not run now
                staged = unstage(ctx, call) if is_unstage(ctx, call) else stage(ctx, call)
                self._record(ctx, call, staged, staging=not staged.is_error)
                continue
            cleared = await self.approve(ctx, call)
            if isinstance(cleared, ToolOutcome):
                self._record(ctx, call, cleared)
            elif cleared is not None:
                to_run.append(cleared)
        used.update(seen)
        keyed = [dataclasses.replace(c, idempotency_key=f"{run.run_id}:{c.id}") for c in to_run]
        started = deps.effects.monotonic()
        metadata = MappingProxyType(copy.deepcopy(run.metadata))
        scope = RunScope(deps=ctx.host_deps, run_id=run.run_id, iteration=run.iteration,
                         usage=run.usage, metadata=metadata, env=ctx)  # fmt: skip
        try:
            with tool_scope(scope):
                await deps.effects.run_tools(
                    deps.tools, keyed, lambda c, o: self._record(ctx, c, o)
                )
        except asyncio.CancelledError:
            self._abandon(ctx, keyed, deps.effects.monotonic() - started)
            raise
        self._sort(ctx)
        # The run pauses when calls wait: the pause time is what a person's decision
        # on them, brought by `resume`, is measured from (`waited_s`).
        run.approval.paused_at = time.time() if run.approval.awaiting else None
        return "tools_done"

    def _sort(self, ctx: PhaseEnv) -> None:
        """Outcomes in the order of the calls, as the history wants them."""
        run = ctx.state
        order = {call.id: i for i, call in enumerate(run.pending_calls)}
        run.outcomes.sort(key=lambda o: order.get(o.tool_use_id, len(order)))

    def _abandon(self, ctx: PhaseEnv, calls: list[ToolCall], seconds: float) -> None:
        """Answer the calls still running when the act is stopped (a deadline passed).

        Their tasks are cancelled, not awaited: a handler may ignore that, or have
        acted already, so the answer says both, and a resume never runs them again.
        """
        done = {outcome.tool_use_id for outcome in ctx.state.outcomes}
        for call in calls:
            if call.id in done:
                continue
            outcome = ToolOutcome(
                tool_use_id=call.id,
                name=call.name,
                content=(
                    f"Tool {call.name!r} was abandoned after {seconds:.1f} s when the run was "
                    "stopped; it may still be running, and it may have taken effect."
                ),
                is_error=True,
                error_kind="abandoned",
                duration_s=seconds,
            )
            self._record(ctx, call, outcome)

    def _over_limit(
        self, ctx: PhaseEnv, call: ToolCall, admitted: dict[str, int]
    ) -> ToolOutcome | None:
        """Past its tool's limit a call is answered instead of run.

        Calls count when their outcome is recorded (`_record`), plus the ones
        admitted in this act so far: a call that ran before a crash is counted
        once, not again when the resumed act admits the rest.
        """
        run = ctx.state
        used = run.calls_per_tool.get(call.name, 0) + admitted.get(call.name, 0)
        limit = run.budget.tool_limit(call.name)
        if limit is not None and used >= limit:
            run.blocked_calls += 1
            return ToolOutcome(
                tool_use_id=call.id,
                name=call.name,
                content=(
                    f"Not run: tool {call.name!r} reached its limit of {limit} calls in this "
                    "run. Work with the results you have, or take another approach."
                ),
                is_error=True,
                error_kind="limit",
            )
        admitted[call.name] = admitted.get(call.name, 0) + 1
        return None

    async def approve(self, ctx: PhaseEnv, call: ToolCall) -> ToolCall | ToolOutcome | None:
        """The call to run (maybe edited), a denial to answer with, or None if deferred.

        `commit` asks the same of each staged call, so a staged write needing approval
        is decided exactly as it would have been in the loop, only later, in one batch."""
        run, deps = ctx.state, ctx.deps
        tool = deps.tools.get(call.name)
        if tool is None:
            return call
        gated = self._taint_gate(ctx, call, tool)
        if isinstance(gated, ToolOutcome):
            return gated
        if gated is None and not tool.requires_approval:
            return call
        call = gated or call
        answer: PolicyAnswer
        now = time.time()
        decided_at, by = now, None
        if call.id in run.approval.decisions:
            # Kept until the call's outcome is recorded (`_record`): a process that dies
            # while the approved call runs leaves the decision in the store for the resume.
            plain = run.approval.decisions[call.id]
            answer = decision_from_plain(plain)
            received = plain.get("decided_at")
            decided_at = received if isinstance(received, int | float) else now
            source: Literal["policy", "resume", "default"] = "resume"
        elif deps.approval is not None:
            try:
                reply = deps.approval(call)
                answer = await reply if inspect.isawaitable(reply) else reply
                if not isinstance(answer, Approve | Deny | Edit | Defer):
                    raise TypeError(f"answered {type(answer).__name__}, not a decision")
            except Exception as exc:
                raise ComponentError("approval policy", exc) from exc
            source, by = "policy", policy_name(deps.approval)
        else:
            answer, source = Defer(), "default"
        self._log(ctx, call, answer, source, by, decided_at)
        if isinstance(answer, Approve):
            return call
        if isinstance(answer, Edit):
            return dataclasses.replace(call, input=dict(answer.input))
        if isinstance(answer, Deny):
            return ToolOutcome(tool_use_id=call.id, name=call.name, content=answer.message,
                               is_error=True, error_kind="denied")  # fmt: skip
        run.approval.awaiting.append(call.id)
        return None

    def _taint_gate(
        self, ctx: PhaseEnv, call: ToolCall, tool: Tool
    ) -> ToolCall | ToolOutcome | None:
        """The run's `TaintPolicy` on this call: None when it does not gate it (no taint
        yet, no side effect, a trusted tool, `"allow"`, no policy); else the call with
        its `tainted_by` to put to the approval policy (`"approve"`), or the refusal
        to answer it with (`"deny"`). Either way the gate is on the record and in the
        audit trail (`taint.gated`), once per call, before anything runs."""
        run = ctx.state
        policy = run.settings.taint
        if (
            policy is None
            or not run.taint.tainted
            or not policy.gates(call.name, side_effect=tool.side_effect)
        ):
            return None
        sources = tuple(_source(s) for s in run.taint.sources)
        if call.id not in run.taint.gated:
            run.taint.gated.append(call.id)
            ctx.emitter.emit("taint.gated", iteration=run.iteration, tool=call.name,
                             tool_use_id=call.id, action=policy.side_effects,
                             tainted_by=[dict(s) for s in run.taint.sources])  # fmt: skip
        if policy.side_effects == "deny":
            named = ", ".join(f"{s.tool} (call {s.tool_use_id})" for s in sources)
            return ToolOutcome(
                tool_use_id=call.id,
                name=call.name,
                content=(
                    f"Not run: {call.name!r} has side effects, and this run has read untrusted "
                    f"text (from {named}); the agent's TaintPolicy refuses such calls. Go on "
                    "without it, and tell the user what you would have done."
                ),
                is_error=True,
                error_kind="denied",
            )
        return dataclasses.replace(call, tainted_by=sources)

    def _taint(self, ctx: PhaseEnv, call: ToolCall, outcome: ToolOutcome, by: bool) -> None:
        """Note an untrusted source when this outcome brings outside text into the
        history: an untrusted tool's own answer, or (`by`) a sub-agent's free-text
        answer from a tainted run. The first one is the run's `taint.entered` event."""
        tool = ctx.deps.tools.get(call.name)
        untrusted = by or (tool is not None and tool.untrusted)
        if not untrusted or outcome.error_kind in ENGINE_WORDS:
            return
        run = ctx.state
        source = TaintSource(tool=call.name, tool_use_id=call.id,
                             excerpt=excerpt(_unfenced(outcome.content)),
                             iteration=run.iteration)  # fmt: skip
        first = not run.taint.tainted
        run.taint.sources.append(_plain_source(source))
        if first:
            ctx.emitter.emit("taint.entered", iteration=run.iteration, tool=call.name,
                             tool_use_id=call.id, excerpt=source.excerpt)  # fmt: skip

    def _log(
        self,
        ctx: PhaseEnv,
        call: ToolCall,
        answer: PolicyAnswer,
        source: Literal["policy", "resume", "default"],
        policy: str | None,
        decided_at: float,
    ) -> None:
        """Put the decision on the record (`RunResult.approvals`) and in the audit trail:
        who decided (a person, the policy by name, or nobody), when, and how long the
        call waited since the run paused for it (0 when it did not pause)."""
        run = ctx.state
        paused = run.approval.paused_at
        if source != "resume":
            waited: float | None = 0.0
        else:
            waited = None if paused is None else round(max(0.0, decided_at - paused), 3)
        person = None if isinstance(answer, Defer) else answer.by
        decision = ApprovalRecord(
            tool_use_id=call.id,
            tool=call.name,
            decision=_KINDS[type(answer)],
            source=source,
            decided_by=_DECIDED_BY[source],
            by=person or policy,
            note=None if isinstance(answer, Defer) else answer.note,
            decided_at=now_iso(decided_at),
            waited_s=waited,
        )
        run.approval.log.append(decision)
        ctx.emitter.emit("approval.decided", iteration=run.iteration, tool=call.name,
                         tool_use_id=call.id, **decision.fields())  # fmt: skip

    def _record(
        self, ctx: PhaseEnv, call: ToolCall, outcome: ToolOutcome, *, staging: bool = False
    ) -> None:
        """Keep the outcome (without its raw value, which need not be JSON) and checkpoint.

        A staged (or unstaged) call's answer is the engine's, not the tool's: its own
        event (`call.staged`, `call.unstaged`) says so, and no `tool.finished` claims a
        write ran that has not (a replay answers the tool from its commit's event).

        A result with accounts to settle with the run (`Settling`, e.g. a sub-agent's
        run) is settled first: its charge and the approvals it waits for are applied
        here, and a result with no answer leaves the call open for the run's resume.
        """
        run = ctx.state
        tainting = False
        if isinstance(outcome.data, Settling):
            settled = outcome.data.settle(ctx, call)
            run.usage = run.usage + settled.charge
            run.cost_usd += settled.cost_usd
            run.approval.awaiting.extend(settled.awaiting)
            if settled.answer is None:
                ctx.checkpoint()
                return
            outcome = dataclasses.replace(settled.answer, duration_s=outcome.duration_s)
            tainting = settled.tainted
        self._taint(ctx, call, outcome, tainting)
        fields = {
            "iteration": run.iteration,
            "tool": call.name,
            "tool_use_id": call.id,
            "input": call.input,
            "content": outcome.content,
            "duration_s": outcome.duration_s,
        }
        if outcome.blocks:  # what went with the text (an image): named and digested, no bytes
            fields["blocks"] = outcome.block_records()
        if staging:
            pass
        elif outcome.is_error:
            tool = ctx.deps.tools.get(call.name)
            if tool is not None and tool.ends_run and outcome.error_kind in ANSWER_ERRORS:
                run.invalid_answers += 1
                run.notes["answer_errors"] = outcome.content
            ctx.emitter.emit(
                "tool.failed", **fields, error_kind=outcome.error_kind, fatal=outcome.fatal
            )
            if outcome.fatal and run.fatal_tool is None:
                run.fatal_tool = call.name
                run.notes["fatal_tool_error"] = outcome.content
        else:
            ctx.emitter.emit("tool.finished", **fields)
            tool = ctx.deps.tools.get(call.name)
            if tool is not None and tool.ends_run and run.finish is None:
                data = outcome.data
                run.finish = data if isinstance(data, dict) else {"result": data}
                run.notes["finish_tool"] = call.name  # the end reason names it
            if call.name == "end_chat":
                run.chat_ended = True
        if outcome.error_kind not in ("limit", "denied"):
            run.calls_per_tool[call.name] = run.calls_per_tool.get(call.name, 0) + 1
        run.outcomes.append(dataclasses.replace(outcome, data=None))
        run.approval.decisions.pop(call.id, None)  # answered: stored with its outcome
        ctx.checkpoint()


_KINDS: dict[type, Literal["approve", "deny", "edit", "defer"]] = {
    Approve: "approve",
    Deny: "deny",
    Edit: "edit",
    Defer: "defer",
}
_DECIDED_BY: dict[str, Literal["person", "policy", "default"]] = {
    "resume": "person",
    "policy": "policy",
    "default": "default",
}


def _unfenced(content: str) -> str:
    """The outside text inside an untrusted result's fence (`wrap_untrusted`), so an
    excerpt quotes what was read, not the fence's note."""
    if not content.startswith(f"The text between <{UNTRUSTED_TAG}_"):
        return content
    lines = content.split("\n")
    return "\n".join(lines[2:-2]) if len(lines) > 4 else content


def _plain_source(source: TaintSource) -> dict[str, object]:
    return dataclasses.asdict(source)


def _source(plain: dict[str, object]) -> TaintSource:
    return TaintSource(
        tool=str(plain.get("tool", "")),
        tool_use_id=str(plain.get("tool_use_id", "")),
        excerpt=str(plain.get("excerpt", "")),
        iteration=int(plain.get("iteration", 0) or 0),  # type: ignore[call-overload]
    )


def _reused(call: ToolCall) -> ToolOutcome:
    """The answer to a call whose tool_use id an earlier call of the run already used.

    Its idempotency key (`<run_id>:<tool_use_id>`) would be the earlier call's, so a
    tool that deduplicates on it, as the docs advise, would drop it and report
    success; it is refused instead, and the model may simply call again.
    """
    return ToolOutcome(
        tool_use_id=call.id,
        name=call.name,
        content=(
            f"Not run: this call reused the id {call.id!r} of an earlier call in this run, "
            "so it could not be told apart from it. If it is still needed, call the tool again."
        ),
        is_error=True,
        error_kind="not_run",
    )
