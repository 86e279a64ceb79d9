"""Speaking to the model from the engine without breaking the history's shape.

The engine's notices (a stall intervention, a reflection prompt, verifier
feedback, the budget notice) are user text. The API wants every tool_use
answered first thing in the next user message, so a notice joins the user
message that carries the tool results, after them, instead of starting a new
message; after an assistant text it becomes a user message of its own.
"""

from __future__ import annotations

from statemachine_agent.models.base import JSON


def add_user_text(messages: list[JSON], text: str) -> None:
    """Append `text` for the model as the latest user content, keeping roles alternating."""
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


def close_pending(messages: list[JSON], why: str) -> int:
    """Answer every unanswered tool_use with an is_error result, so the history stays valid.

    A run that ends between a tool request and its results (cancelled, cut off,
    out of budget) would otherwise leave a history the API rejects when the
    conversation continues.
    """
    pending = unanswered_tool_uses(messages)
    if not pending:
        return 0
    messages.append(
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": block.get("id", ""),
                    "content": f"Not run: {why}.",
                    "is_error": True,
                }
                for block in pending
            ],
        }
    )
    return len(pending)
