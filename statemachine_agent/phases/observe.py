"""Observe: put the tool results where the model will see them.

All results of one reply go into ONE user message, tool_result blocks first and
in the order of the calls: the API requires every tool_use to be answered in the
very next message, and the model reads results best in the order it asked.
"""

from __future__ import annotations

from statemachine_agent.machine.context import RunContext


class Observe:
    """Appends the results; names `observed` and lets the guards choose the way on."""

    trigger = "observed"

    async def run(self, ctx: RunContext) -> str:
        run = ctx.state
        if run.outcomes:
            run.messages.append(
                {"role": "user", "content": [outcome.to_block() for outcome in run.outcomes]}
            )
        run.pending_calls = []
        run.outcomes = []
        return self.trigger
