"""Speaking to the model from the engine without breaking the history's shape.

The engine's notices (a stall intervention, a reflection prompt, verifier
feedback, the budget notice) are user text. The API wants every tool_use
answered first thing in the next user message, so a notice joins the user
message that carries the tool results, after them, instead of starting a new
message; after an assistant text it becomes a user message of its own.
"""

from __future__ import annotations

from collections.abc import Mapping

from statemachine_agent.models.base import JSON


def add_user_text(messages: list[JSON], text: str) -> None:
    """Append `text` for the model as the latest user content, keeping roles alternating.

    After an assistant message whose tool_use blocks were never run (an `end_turn`
    reply that also asked for tools, then a verifier's feedback), they are answered
    first: the API rejects a request that leaves a tool_use unanswered.
    """
    close_pending(messages, "the model ended its turn, so this call was not run")
    if messages and messages[-1].get("role") == "user":
        last = messages[-1]
        content = last.get("content")
        blocks = (
            [{"type": "text", "text": content}] if isinstance(content, str) else list(content or [])
        )
        blocks.append({"type": "text", "text": text})
        last["content"] = blocks
        return
    messages.append({"role": "user", "content": [{"type": "text", "text": text}]})


def unanswered_tool_uses(messages: list[JSON]) -> list[JSON]:
    """tool_use blocks of a final assistant message that no tool_result answers yet."""
    if not messages or messages[-1].get("role") != "assistant":
        return []
    content = messages[-1].get("content")
    if not isinstance(content, list):
        return []
    return [b for b in content if isinstance(b, dict) and b.get("type") == "tool_use"]


def not_run(why: str) -> str:
    """The result a call that was never run is answered with (and a stream shows)."""
    return f"Not run: {why}."


INTERRUPTED = "Interrupted while running; it may have taken effect."
"""The answer to a call that was in flight when the run stopped: its outcome is unknown."""


def close_pending(
    messages: list[JSON],
    why: str,
    answers: Mapping[str, JSON] | None = None,
    *,
    interrupted: bool = False,
) -> int:
    """Answer every unanswered tool_use, so the history stays valid and says what happened.

    A run that ends between a tool request and its results (cancelled, cut off,
    out of budget) would otherwise leave a history the API rejects when the
    conversation continues. A call that ran is answered with its recorded
    result (`answers`, by tool_use id): telling the model a payment that went
    out was "not run" invites a second one. `interrupted` says the calls
    without a result were in flight, so their outcome is unknown. Returns how
    many calls were answered as not run.
    """
    pending = unanswered_tool_uses(messages)
    if not pending:
        return 0
    known = answers or {}
    blocks: list[JSON] = []
    skipped = 0
    for block in pending:
        tool_use_id = str(block.get("id", ""))
        if tool_use_id in known:
            blocks.append(dict(known[tool_use_id]))
            continue
        text = INTERRUPTED if interrupted else not_run(why)
        skipped += 0 if interrupted else 1
        blocks.append(
            {"type": "tool_result", "tool_use_id": tool_use_id, "content": text, "is_error": True}
        )
    messages.append({"role": "user", "content": blocks})
    return skipped
