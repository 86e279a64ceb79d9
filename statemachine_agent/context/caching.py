"""Prompt-cache breakpoints: the stable prefix (system, tools) and the growing history.

An agent re-sends its whole history every iteration; with a breakpoint on the
latest message, the next call reads everything before it from cache at a tenth
of the input price. The API allows four breakpoints; the engine uses at most
three (system, tools, latest message).
"""

from __future__ import annotations

from collections.abc import Sequence

from statemachine_agent.models.base import JSON

EPHEMERAL: JSON = {"type": "ephemeral"}


def cache_last_tool(tools: Sequence[JSON]) -> list[JSON]:
    """The tool definitions with a breakpoint on the last one (definitions are a prefix).

    Only the last definition is copied (to mark it); the others are shared, as the
    history's messages are: nothing changes a definition once it is in a request.
    """
    marked = list(tools)
    if marked:
        marked[-1] = {**marked[-1], "cache_control": dict(EPHEMERAL)}
    return marked


def cache_latest_message(messages: Sequence[JSON]) -> list[JSON]:
    """A copy of the history whose latest message ends with a breakpoint.

    Only the last message is copied; the run's own history is never marked, so
    the breakpoint moves forward instead of piling up.
    """
    copied = list(messages)
    if not copied:
        return copied
    last = dict(copied[-1])
    content = last.get("content")
    blocks: list[JSON] = (
        [{"type": "text", "text": content}]
        if isinstance(content, str)
        else [dict(b) for b in content or []]
    )
    for block in reversed(blocks):
        if block.get("type") in ("text", "tool_result", "tool_use", "image", "document"):
            block["cache_control"] = dict(EPHEMERAL)
            break
    else:
        return copied
    last["content"] = blocks
    copied[-1] = last
    return copied
