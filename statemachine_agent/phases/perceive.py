"""Perceive: decide what the model will see on its next call.

The request is assembled fresh from the record each time (system prompt, tool
definitions, the exact history), so nothing the model sees is hidden state.
"""

from __future__ import annotations

from statemachine_agent.machine.context import RunContext
from statemachine_agent.models.base import JSON, ModelRequest


class Perceive:
    """Builds the next request; the guards then decide whether it may be sent."""

    trigger = "prepared"

    async def run(self, ctx: RunContext) -> str:
        ctx.request = build_request(ctx)
        return self.trigger


def system_blocks(text: str | None, *, cache: bool) -> list[JSON]:
    """The system prompt as blocks; cached, since it is the stable prefix of every call."""
    if not text:
        return []
    block: JSON = {"type": "text", "text": text}
    if cache:
        block["cache_control"] = {"type": "ephemeral"}
    return [block]


def build_request(ctx: RunContext, *, tool_choice: JSON | None = None) -> ModelRequest:
    """The request for the run's current history; `tool_choice` only for special calls."""
    deps = ctx.deps
    return ModelRequest(
        model=deps.model.name,
        max_tokens=deps.max_tokens,
        messages=list(ctx.state.messages),
        system=system_blocks(deps.system, cache=deps.cache_prompt),
        tools=deps.tools.definitions(),
        tool_choice=tool_choice,
        extra=dict(deps.request_options),
    )
