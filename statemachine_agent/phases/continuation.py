"""Continue: a text reply was cut off at max_tokens; ask the model to go on.

The cut-off text is kept (it prefixes the final answer) and a short notice asks
the model to continue exactly where it stopped. A notice rather than an
assistant prefill: newer models reject prefill, and the notice keeps the
history valid either way.
"""

from __future__ import annotations

from typing import Literal

from statemachine_agent.context.notices import add_user_text
from statemachine_agent.machine.phase_env import PhaseEnv

CONTINUE_NOTICE = (
    "[system notice] Your previous reply was cut off at the output limit. "
    "Continue exactly where it stopped, without repeating what you already wrote."
)


class Continue:
    """Keeps the cut-off text and asks for the rest; names `continued`."""

    async def run(self, ctx: PhaseEnv) -> Literal["continued"]:
        run = ctx.state
        run.continuation.count += 1
        run.continuation.partial_text += run.last_reply.text if run.last_reply else ""
        add_user_text(run.messages, CONTINUE_NOTICE)
        ctx.emitter.emit("context.continued", iteration=run.iteration, count=run.continuation.count)
        return "continued"
