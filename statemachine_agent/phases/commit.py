"""Commit: run the staged writes, once the run would end successfully.

Entered only from the success paths (the model ended its turn, or called `finish`
with status completed, and the verifier accepted), so a run that ends any other way
runs none of its staged calls. The calls run in the order staged (consecutive ones
of non-`sequential` tools together, as `act` runs a reply's calls), each with its
idempotency key `<run_id>:<tool_use_id>` and through `Effects.run_tools`, so a
durable engine records them as it records `act`'s. Each outcome is kept and
checkpointed the moment it exists (`StagedTrack.ran`): a crashed or cancelled
commit, resumed, runs only the calls without one.

Approval is asked first, for every staged call whose tool needs it, so a person
decides on the whole batch at once; the run pauses in `awaiting_approval` and its
`resumed` row brings it back here. A failure (a raise, a timeout, a denial) stops
the commit after the batch it was in: the row that fires says what it means
(`CommitPolicy.on_failure`).
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Literal

from statemachine_agent.context.notices import add_user_text
from statemachine_agent.machine.phase_env import PhaseEnv
from statemachine_agent.phases.act import Act
from statemachine_agent.tools.base import ToolCall, ToolOutcome
from statemachine_agent.tools.scope import RunScope, tool_scope

_ACT = Act()
"""Approval is `act`'s (the same policy, decisions and records), asked later."""


class Commit:
    """Runs the staged calls; names `committed`."""

    async def run(self, ctx: PhaseEnv) -> Literal["committed"]:
        run = ctx.state
        track = run.staged
        track.committing, track.failure = True, None
        run.approval.awaiting = []
        if not track.calls:
            track.committing = False
            return "committed"
        ctx.emitter.emit("commit.started", iteration=run.iteration,
                         staged=[_brief(c) for c in track.calls])  # fmt: skip
        cleared: list[tuple[dict[str, Any], ToolCall]] = []
        for entry in track.calls:
            call = ToolCall(id=entry["tool_use_id"], name=entry["tool"], input=entry["input"])
            answer = await _ACT.approve(ctx, call)
            if isinstance(answer, ToolOutcome):  # denied: a failure of the commit
                self._settle(ctx, entry, call, answer)
                break
            if answer is not None:
                cleared.append((entry, answer))
        if run.approval.awaiting:
            run.approval.paused_at = time.time()
            ctx.checkpoint()
            return "committed"
        if track.failure is None:
            await self._run_batches(ctx, cleared)
        self._close(ctx)
        return "committed"

    async def _run_batches(
        self, ctx: PhaseEnv, cleared: list[tuple[dict[str, Any], ToolCall]]
    ) -> None:
        """Run the cleared calls in staged order, a batch at a time; stop after a failure."""
        run, deps = ctx.state, ctx.deps
        batches: list[list[tuple[dict[str, Any], ToolCall]]] = []
        for item in cleared:
            tool = deps.tools.get(item[1].name)
            alone = tool is not None and tool.sequential
            if alone or not batches or _is_alone(ctx, batches[-1]):
                batches.append([item])
            else:
                batches[-1].append(item)
        for batch in batches:
            entries = {call.id: entry for entry, call in batch}
            keyed = [dataclasses.replace(call, idempotency_key=f"{run.run_id}:{call.id}")
                     for _, call in batch]  # fmt: skip
            scope = RunScope(deps=ctx.host_deps, run_id=run.run_id, iteration=run.iteration,
                             usage=run.usage, metadata=dict(run.metadata), env=ctx)  # fmt: skip

            def settle(call: ToolCall, outcome: ToolOutcome, e: dict[str, Any] = entries) -> None:
                self._settle(ctx, e[call.id], call, outcome, batch=list(e))

            with tool_scope(scope):
                await deps.effects.run_tools(deps.tools, keyed, settle)
            if run.staged.failure is not None:
                return

    def _settle(
        self,
        ctx: PhaseEnv,
        entry: dict[str, Any],
        call: ToolCall,
        outcome: ToolOutcome,
        batch: list[str] | None = None,
    ) -> None:
        """Keep one staged call's outcome, take it off the staged list, and checkpoint,
        so that a resumed commit never runs it again. `batch` is the tool_use ids of the
        batch the call ran in, in staged order (see `_placed`)."""
        run = ctx.state
        track = run.staged
        done = {"ref": entry["ref"], "tool_use_id": call.id, "tool": call.name,
                "input": call.input, "content": outcome.content,
                "is_error": outcome.is_error}  # fmt: skip
        track.ran = _placed(track.ran, done, batch or [])
        track.calls = [c for c in track.calls if c["tool_use_id"] != call.id]
        fields = {"iteration": run.iteration, "tool": call.name, "tool_use_id": call.id,
                  "input": call.input, "content": outcome.content,
                  "duration_s": outcome.duration_s, "committed": entry["ref"]}  # fmt: skip
        if outcome.is_error:
            ctx.emitter.emit("tool.failed", **fields, error_kind=outcome.error_kind,
                             fatal=outcome.fatal)  # fmt: skip
            if track.failure is None:
                track.failure = {"ref": entry["ref"], "tool": call.name,
                                 "error": outcome.content}  # fmt: skip
        else:
            ctx.emitter.emit("tool.finished", **fields)
        if outcome.error_kind not in ("limit", "denied"):
            run.calls_per_tool[call.name] = run.calls_per_tool.get(call.name, 0) + 1
        run.approval.decisions.pop(call.id, None)
        ctx.checkpoint()

    def _close(self, ctx: PhaseEnv) -> None:
        """The commit is over: a failure the model may fix goes into the history."""
        run = ctx.state
        track = run.staged
        track.committing = False
        ctx.emitter.emit("commit.finished", iteration=run.iteration, failure=track.failure,
                         left=[_brief(c) for c in track.calls])  # fmt: skip
        policy = run.settings.commit
        if track.failure is not None and policy is not None and policy.on_failure == "retry":
            failure = track.failure
            left = ", ".join(f"{c['ref']} ({c['tool']})" for c in track.calls)
            add_user_text(
                run.messages,
                f"[commit] The staged call {failure['ref']} ({failure['tool']}) failed when "
                f"it was run: {failure['error']}. "
                + (f"Still staged, not run: {left}. " if left else "")
                + "The calls that ran before it took effect. Fix the plan and finish again.",
            )


def _placed(
    ran: list[dict[str, Any]], done: dict[str, Any], batch: list[str]
) -> list[dict[str, Any]]:
    """`ran` with `done` added in staged order, not in the order the outcomes arrived.

    The calls of a batch run concurrently and finish in any order (a thread's, an
    engine's activity's), but the record of what ran is part of the result and of
    every checkpoint, so it must read the same in process, on DBOS, on Temporal and
    on replay: `done` goes before the outcomes of its batch that were staged after it.
    """
    rank = {tool_use_id: n for n, tool_use_id in enumerate(batch)}
    mine = rank.get(done["tool_use_id"], len(batch))
    at = next((i for i, e in enumerate(ran) if rank.get(e["tool_use_id"], -1) > mine), len(ran))
    return [*ran[:at], done, *ran[at:]]


def _is_alone(ctx: PhaseEnv, batch: list[tuple[dict[str, Any], ToolCall]]) -> bool:
    tool = ctx.deps.tools.get(batch[-1][1].name)
    return tool is not None and tool.sequential


def _brief(entry: dict[str, Any]) -> dict[str, Any]:
    return {"ref": entry["ref"], "tool": entry["tool"], "tool_use_id": entry["tool_use_id"],
            "input": entry["input"]}  # fmt: skip
