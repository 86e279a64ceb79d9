"""The second context layer: old exchanges replaced by a summary of them.

Placeholders (`compaction.py`) keep a long run small by throwing old tool
results away; a summary keeps what they taught. The history is cut before the
last `keep_last` exchanges (an exchange is an assistant message and the user
message answering it), the older part is summarized by a model, and the history
becomes one user message holding the summary followed by the kept exchanges
verbatim. Cutting only in front of an assistant message is what keeps the
history valid: every tool_result still follows its own tool_use, and roles
still alternate (the summary is a user message, the kept part starts with the
assistant).
"""

from __future__ import annotations

from collections.abc import Sequence

from statemachine_agent.models.base import JSON

SUMMARY_HEADER = (
    "[Summary of the {count} earlier messages of this conversation, written to save "
    "context; the messages after it are verbatim.]"
)
"""How the summary message starts: it says it is a summary, and of how many messages."""

SUMMARY_SYSTEM = (
    "You condense the transcript of an AI agent's work so that the agent can carry on "
    "without it. The agent will see only your summary and its latest steps, so anything "
    "you leave out is lost to it."
)

SUMMARY_REQUEST = (
    "Summarize the transcript above for the agent that continues this work. Cover, "
    "under these headings:\n"
    "1. Asked: the task and its constraints, in the user's words where they matter.\n"
    "2. Found: the facts, figures, names, identifiers, paths and values a later step may "
    "need, exactly as they appeared.\n"
    "3. Tried and failed: what did not work, and why, so it is not repeated.\n"
    "4. Left: what remains to be done.\n"
    "Write only the summary."
)

MIN_REPLACED = 2
"""Fewer older messages than this are not worth a model call: one message would replace one."""


def summary_cut(messages: Sequence[JSON], keep_last: int) -> int:
    """Where the kept exchanges begin: the index of the assistant message that starts the
    last `keep_last` exchanges, or 0 when fewer than `MIN_REPLACED` messages are older."""
    seen = 0
    for index in range(len(messages) - 1, -1, -1):
        if messages[index].get("role") == "assistant":
            seen += 1
            if seen == keep_last:
                return index if index >= MIN_REPLACED else 0
    return 0


def summary_message(count: int, summary: str) -> JSON:
    """The user message that stands for `count` earlier messages."""
    text = f"{SUMMARY_HEADER.format(count=count)}\n\n{summary}"
    return {"role": "user", "content": [{"type": "text", "text": text}]}


def summarized(messages: Sequence[JSON], cut: int, summary: str) -> list[JSON]:
    """The history with `messages[:cut]` replaced by one summary message (a new list)."""
    return [summary_message(cut, summary), *messages[cut:]]
