"""Reflect: every N iterations, step back and check the plan.

Long runs drift: an early wrong assumption compounds with every step. A
periodic check (where are we, which assumption may be wrong, what is the
shortest way to finish), or a critique from a second model, placed after the
latest tool results, gives the model a chance to change course.
"""

from __future__ import annotations

import json
from typing import Literal

from statemachine_agent.context.notices import add_user_text
from statemachine_agent.machine.calls import call_model
from statemachine_agent.machine.phase_env import PhaseEnv
from statemachine_agent.models.base import JSON, ModelError, ModelRequest

PROGRESS_CHECK = (
    "[reflection] Before the next step, check your progress:\n"
    "1. What have you achieved towards the goal so far?\n"
    "2. Which assumption might be wrong, given the results above?\n"
    "3. What is the shortest path to finish from here?\n"
    "Then continue with that path."
)

CRITIC_SYSTEM = (
    "You review the transcript of an AI agent working on a task. In a few sentences: "
    "say whether it is making progress, point out any wrong assumption or repeated "
    "effort, and suggest the shortest way to finish. Do not solve the task yourself."
)


def transcript(messages: list[JSON], limit: int = 20_000) -> str:
    """The history as plain text for the critic, newest part kept when it is long."""
    lines: list[str] = []
    for message in messages:
        content = message.get("content")
        if isinstance(content, str):
            lines.append(f"{message.get('role')}: {content}")
            continue
        for block in content or []:
            kind = block.get("type")
            if kind == "text":
                lines.append(f"{message.get('role')}: {block.get('text')}")
            elif kind == "tool_use":
                args = json.dumps(block.get("input"), ensure_ascii=False)
                lines.append(f"tool call: {block.get('name')}({args})")
            elif kind == "compaction":  # the API's own summary of what came before it
                lines.append(f"summary of earlier work: {block.get('content')}")
            elif kind == "tool_result":
                flag = " (error)" if block.get("is_error") else ""
                lines.append(f"tool result{flag}: {block.get('content')}")
    text = "\n".join(lines)
    return text if len(text) <= limit else "...\n" + text[-limit:]


class Reflect:
    """Adds a progress check or a critique; names `reflected`."""

    async def run(self, ctx: PhaseEnv) -> Literal["reflected"]:
        run, deps = ctx.state, ctx.deps
        run.last_reflection = run.iteration
        note = PROGRESS_CHECK
        source = "prompt"
        if deps.critic is not None:
            critique = await self._critique(ctx)
            if critique:
                note = f"[reflection] A reviewer read the work so far and says:\n{critique}"
                source = "critic"
        add_user_text(run.messages, note)
        ctx.emitter.emit("reflection.added", iteration=run.iteration, source=source, text=note)
        return "reflected"

    async def _critique(self, ctx: PhaseEnv) -> str:
        """Ask the critic model; its usage counts against the run's budget."""
        run, critic = ctx.state, ctx.deps.critic
        assert critic is not None
        request = ModelRequest(
            model=critic.name,
            max_tokens=512,
            system=[{"type": "text", "text": CRITIC_SYSTEM}],
            messages=[{"role": "user", "content": transcript(run.messages)}],
        )
        try:
            reply = await call_model(ctx, request, purpose="critic", model=critic)
        except ModelError as exc:
            ctx.emitter.emit("reflection.failed", iteration=run.iteration, error=exc.describe())
            return ""
        return reply.text.strip()
