"""Act: run every tool call of the reply, and never raise.

Whatever a tool does (raise, hang, return nothing or too much), each call ends
with an outcome; failures go back to the model flagged `is_error`, so it can
correct itself instead of the loop crashing. Calls past a per-tool limit are
answered without running, with the limit in the answer.
"""

from __future__ import annotations

from statemachine_agent.machine.context import RunContext
from statemachine_agent.tools.base import ToolCall, ToolOutcome


class Act:
    """Runs the pending tool calls; names `tools_done`."""

    trigger = "tools_done"

    async def run(self, ctx: RunContext) -> str:
        run, deps = ctx.state, ctx.deps
        calls = list(run.pending_calls)
        allowed: list[ToolCall] = []
        blocked: dict[str, ToolOutcome] = {}
        for call in calls:
            ctx.emitter.emit(
                "tool.called",
                iteration=run.iteration,
                tool=call.name,
                tool_use_id=call.id,
                input=call.input,
            )
            refusal = self._over_limit(ctx, call)
            if refusal is None:
                allowed.append(call)
            else:
                blocked[call.id] = refusal
        ran = iter(await deps.effects.run_tools(deps.tools, allowed))
        outcomes = [blocked.get(call.id) or next(ran) for call in calls]
        for call, outcome in zip(calls, outcomes, strict=True):
            self._record(ctx, call, outcome)
        run.outcomes = outcomes
        return self.trigger

    def _over_limit(self, ctx: RunContext, call: ToolCall) -> ToolOutcome | None:
        """Count the call against its tool's limit; past the limit, answer instead of running."""
        run = ctx.state
        used = run.calls_per_tool.get(call.name, 0)
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
        run.calls_per_tool[call.name] = used + 1
        return None

    def _record(self, ctx: RunContext, call: ToolCall, outcome: ToolOutcome) -> None:
        run = ctx.state
        fields = {
            "iteration": run.iteration,
            "tool": call.name,
            "tool_use_id": call.id,
            "input": call.input,
            "content": outcome.content,
            "duration_s": outcome.duration_s,
        }
        if outcome.is_error:
            ctx.emitter.emit(
                "tool.failed", **fields, error_kind=outcome.error_kind, fatal=outcome.fatal
            )
            if outcome.fatal and run.fatal_tool is None:
                run.fatal_tool = call.name
                run.notes["fatal_tool_error"] = outcome.content
            return
        ctx.emitter.emit("tool.finished", **fields)
        tool = ctx.deps.tools.get(call.name)
        if tool is not None and tool.ends_run and run.finish is None:
            data = outcome.data
            run.finish = data if isinstance(data, dict) else {"result": data}
