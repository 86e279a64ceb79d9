"""Staging: how `act` answers a call of a deferrable tool without running it.

Side effects last (the seed's section 5.4.4): a write whose result the model does
not need is recorded in the run (`RunRecord.staged`, checkpointed) and answered
"staged", with a reference the model can name; the `commit` state runs the staged
calls once the run would end successfully. The built-in `unstage` tool, offered only
while something is staged, takes one back (to replace a call: unstage it, then call
the tool again).
"""

from __future__ import annotations

from typing import Any

from statemachine_agent.machine.phase_env import PhaseEnv
from statemachine_agent.tools.base import JSON, ToolCall, ToolOutcome

UNSTAGE_TOOL = "unstage"
"""The name of the built-in tool that takes back a staged call."""

UNSTAGE_DEFINITION: JSON = {
    "name": UNSTAGE_TOOL,
    "description": (
        "Take back a staged call (a write that has not run yet), by the reference its "
        "result gave (e.g. 'S2'), so it will not run when the task is complete. To "
        "replace a staged call, unstage it and call the tool again."
    ),
    "input_schema": {
        "type": "object",
        "properties": {"reference": {"type": "string", "description": "e.g. 'S2'"}},
        "required": ["reference"],
        "additionalProperties": False,
    },
}
"""What the model is shown of `unstage` (only while something is staged)."""


def staging_on(ctx: PhaseEnv) -> bool:
    """Calls of deferrable tools are staged in this run (the agent commits)."""
    return ctx.state.settings.commit is not None


def stages(ctx: PhaseEnv, call: ToolCall) -> bool:
    """This call is staged rather than run: its tool is deferrable and the run commits."""
    tool = ctx.deps.tools.get(call.name)
    return staging_on(ctx) and tool is not None and tool.deferrable


def is_unstage(ctx: PhaseEnv, call: ToolCall) -> bool:
    """A call of the built-in `unstage` (a tool of the agent's own by that name wins)."""
    return staging_on(ctx) and call.name == UNSTAGE_TOOL and UNSTAGE_TOOL not in ctx.deps.tools


def tool_definitions(ctx: PhaseEnv) -> list[JSON]:
    """The tools a request offers: the agent's, and `unstage` while something is staged."""
    tools = ctx.deps.tools.definitions()
    if ctx.state.staged.calls and is_unstage(ctx, ToolCall("", UNSTAGE_TOOL, None)):
        tools.append(dict(UNSTAGE_DEFINITION))
    return tools


def stage(ctx: PhaseEnv, call: ToolCall) -> ToolOutcome:
    """Check the call's input as a run would, then stage it; the answer says which."""
    refused = ctx.deps.tools.check(call)
    if refused is not None:
        return refused
    run = ctx.state
    run.staged.issued += 1
    ref = f"S{run.staged.issued}"
    entry: dict[str, Any] = {"ref": ref, "tool_use_id": call.id, "tool": call.name,
                             "input": call.input, "iteration": run.iteration}  # fmt: skip
    run.staged.calls = [*run.staged.calls, entry]
    ctx.emitter.emit("call.staged", iteration=run.iteration, ref=ref, tool=call.name,
                     tool_use_id=call.id, input=call.input)  # fmt: skip
    return ToolOutcome(
        tool_use_id=call.id,
        name=call.name,
        content=(
            f"staged: {call.name} runs when the task is complete; reference {ref}. "
            f"It has not run yet; to take it back, call {UNSTAGE_TOOL} with reference {ref}."
        ),
    )


def unstage(ctx: PhaseEnv, call: ToolCall) -> ToolOutcome:
    """Take a staged call back by its reference; an unknown one is the model's mistake."""
    run = ctx.state
    given = call.input.get("reference") if isinstance(call.input, dict) else None
    ref = str(given).strip().upper() if given is not None else ""
    found = next((c for c in run.staged.calls if c["ref"] == ref), None)
    if found is None:
        staged = ", ".join(f"{c['ref']} ({c['tool']})" for c in run.staged.calls) or "none"
        return ToolOutcome(
            tool_use_id=call.id,
            name=call.name,
            content=f"Nothing is staged under reference {given!r}. Staged now: {staged}.",
            is_error=True,
            error_kind="invalid_input",
        )
    run.staged.calls = [c for c in run.staged.calls if c is not found]
    ctx.emitter.emit("call.unstaged", iteration=run.iteration, ref=ref, tool=found["tool"],
                     tool_use_id=found["tool_use_id"])  # fmt: skip
    return ToolOutcome(
        tool_use_id=call.id,
        name=call.name,
        content=f"unstaged: {ref} ({found['tool']}) will not run.",
    )
