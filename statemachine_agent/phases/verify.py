"""Verify: check a claimed completion before the run may end on it.

The verifier sees the claim (final text or finish input) and the history and
answers with a `Verdict`. A rejection sends its feedback back to the model and
the loop goes on; too many rejections end the run in `failed` with the last
feedback as the reason. A verifier that raises (or answers something that is not
a `Verdict`) ends the run in `failed` naming it: a check that cannot be made is
not a rejection the model could fix.
"""

from __future__ import annotations

import inspect
from typing import Literal

from statemachine_agent.context.notices import add_user_text
from statemachine_agent.machine.endings import typed_output
from statemachine_agent.machine.failures import ComponentError
from statemachine_agent.machine.phase_env import PhaseEnv
from statemachine_agent.policy.verify import Claim, Verdict


class Verify:
    """Runs the verifier on the claim; names `verified`."""

    async def run(self, ctx: PhaseEnv) -> Literal["verified"]:
        run, deps = ctx.state, ctx.deps
        via: Literal["end_turn", "finish"] = "finish" if run.finish is not None else "end_turn"
        text = (
            str(run.finish.get("summary") or "")
            if run.finish is not None
            else run.continuation.partial_text + (run.last_reply.text if run.last_reply else "")
        )
        claim = Claim(
            via=via,
            text=text,
            data=run.finish,
            messages=tuple(run.messages),
            iteration=run.iteration,
            run_id=run.run_id,
            output=typed_output(ctx),
        )
        verifier = deps.verifier
        if verifier is None:
            verdict = Verdict(ok=True)
        else:
            try:
                answer = verifier(claim)
                verdict = await answer if inspect.isawaitable(answer) else answer
                if not isinstance(verdict, Verdict):
                    raise TypeError(f"returned {type(verdict).__name__}, not a Verdict")
            except Exception as exc:
                raise ComponentError("verifier", exc) from exc
        run.verification.verdict = {
            "ok": bool(verdict.ok),
            "feedback": verdict.feedback,
            "via": via,
        }
        ctx.emitter.emit("verify.checked", iteration=run.iteration, ok=bool(verdict.ok),
                         feedback=verdict.feedback, via=via)  # fmt: skip
        if not verdict.ok:
            run.verification.rejections += 1
            run.finish = None
            run.continuation.partial_text = ""
            add_user_text(
                run.messages,
                "[verifier] Your result was checked and did not pass: "
                f"{verdict.feedback or 'no reason given'}. Fix this and try again.",
            )
        return "verified"
