"""Intervene: tell the model it is repeating itself, with the evidence.

"Do not repeat yourself" in the system prompt does not stop a stuck model; a
notice naming the tool, the pattern and the count, placed right after the
results it keeps getting, usually does. The detector is then told, so only new
repetitions count against the next intervention.
"""

from __future__ import annotations

from typing import Literal

from statemachine_agent.context.notices import add_user_text
from statemachine_agent.machine.phase_env import PhaseEnv


def intervention_text(finding: dict[str, object], number: int, allowed: int) -> str:
    return (
        f"[system notice] You seem to be stuck: {finding.get('detail')} "
        f"(pattern: {finding.get('pattern')}, tool: {finding.get('tool')}, "
        f"count: {finding.get('count')}). Repeating it will not give new information. "
        "Try a different approach, or stop and explain what is blocking you. "
        f"(Intervention {number} of {allowed}; after that the run is stopped.)"
    )


class Intervene:
    """Adds the intervention to the history; names `intervened`."""

    async def run(self, ctx: PhaseEnv) -> Literal["intervened"]:
        run = ctx.state
        policy = run.settings.stall
        finding = dict(run.stall.finding or {})
        if policy is not None:
            detector = ctx.detector(policy)
            detector.acknowledge()
            run.stall.observations = detector.to_state()
        run.stall.interventions += 1
        allowed = policy.max_interventions if policy else run.stall.interventions
        add_user_text(run.messages, intervention_text(finding, run.stall.interventions, allowed))
        ctx.emitter.emit(
            "stall.intervened",
            iteration=run.iteration,
            intervention=run.stall.interventions,
            pattern=finding.get("pattern"),
            tool=finding.get("tool"),
            count=finding.get("count"),
        )
        run.stall.finding = None
        return "intervened"
