"""Act: run every tool call of the reply, and never raise.

Whatever a tool does (raise, hang, return nothing or too much), each call ends
with an outcome; failures go back to the model flagged `is_error`, so it can
correct itself instead of the loop crashing.
"""

from __future__ import annotations

from statemachine_agent.machine.context import RunContext


class Act:
    """Runs the pending tool calls; names `tools_done`."""

    trigger = "tools_done"

    async def run(self, ctx: RunContext) -> str:
        run, deps = ctx.state, ctx.deps
        calls = list(run.pending_calls)
        for call in calls:
            ctx.emitter.emit(
                "tool.called",
                iteration=run.iteration,
                tool=call.name,
                tool_use_id=call.id,
                input=call.input,
            )
        outcomes = await deps.effects.run_tools(deps.tools, calls)
        for call, outcome in zip(calls, outcomes, strict=True):
            run.calls_per_tool[call.name] = run.calls_per_tool.get(call.name, 0) + 1
            tool = deps.tools.get(call.name)
            if outcome.is_error:
                ctx.emitter.emit(
                    "tool.failed",
                    iteration=run.iteration,
                    tool=call.name,
                    tool_use_id=call.id,
                    input=call.input,
                    error_kind=outcome.error_kind,
                    content=outcome.content,
                    duration_s=outcome.duration_s,
                )
                continue
            ctx.emitter.emit(
                "tool.finished",
                iteration=run.iteration,
                tool=call.name,
                tool_use_id=call.id,
                input=call.input,
                content=outcome.content,
                duration_s=outcome.duration_s,
            )
            if tool is not None and tool.ends_run and run.finish is None:
                run.finish = (
                    outcome.data if isinstance(outcome.data, dict) else {"result": outcome.data}
                )
        run.outcomes = outcomes
        return self.trigger
