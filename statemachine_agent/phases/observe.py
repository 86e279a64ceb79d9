"""Observe: put the tool results where the model will see them, and watch for stalls.

All results of one reply go into ONE user message, tool_result blocks first and
in the order of the calls: the API requires every tool_use to be answered in the
very next message, and the model reads results best in the order it asked.
"""

from __future__ import annotations

from typing import Literal

from statemachine_agent.machine.phase_env import PhaseEnv


class Observe:
    """Appends the results, records them for the stall detector, names `observed`."""

    carried_exit = True
    """Its transition is carried in the next checkpoint: filing the recorded results is
    re-done from the record after a crash."""

    async def run(self, ctx: PhaseEnv) -> Literal["observed"]:
        run = ctx.state
        if run.outcomes:
            run.messages.append(
                {"role": "user", "content": [outcome.to_block() for outcome in run.outcomes]}
            )
        policy = run.settings.stall
        if policy is not None and run.outcomes:
            detector = ctx.detector(policy)
            for call, outcome in zip(run.pending_calls, run.outcomes, strict=True):
                detector.record(call.name, call.input, outcome.content, is_error=outcome.is_error)
            run.stall.observations = detector.to_state()
            finding = detector.is_stalled()
            run.stall.finding = finding.to_dict() if finding else None
            if finding is not None:
                ctx.emitter.emit("stall.detected", iteration=run.iteration, **finding.to_dict())
        run.pending_calls = []
        run.outcomes = []
        return "observed"
