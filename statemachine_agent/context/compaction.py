"""Keeping the prompt small: token estimates and replacing old tool results.

Old tool results are the bulk of a long run's prompt and the least useful part
of it: the model has already read them and acted. Replacing all but the last
few with a short placeholder keeps every tool_use answered (the pairing the API
requires) while dropping their weight. The full results stay in the audit file.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from statemachine_agent.models.base import JSON

PLACEHOLDER = (
    "[Earlier tool result removed to save context ({chars} characters). "
    "Call the tool again if you need it.]"
)
"""What an old result becomes; it says how to get the information back."""

CHARS_PER_TOKEN = 4
"""A rough local estimate; `ContextPolicy.count_tokens` asks the API instead."""


class SizeCache:
    """The history's size in characters, measured incrementally.

    Measuring the whole history before every call would make a long run
    quadratic. Messages are only ever appended, or changed in place at the end
    (a continued reply, a notice) or by compaction, which says where it began;
    so only the last known message and the new ones are measured again.
    """

    def __init__(self) -> None:
        self._sizes: list[int] = []

    def estimate(self, messages: Sequence[JSON]) -> int:
        """Roughly how many tokens the messages take (characters / 4)."""
        keep = max(min(len(self._sizes), len(messages)) - 1, 0)
        del self._sizes[keep:]
        for message in messages[keep:]:
            self._sizes.append(len(json.dumps(message, ensure_ascii=False, default=str)))
        return sum(self._sizes) // CHARS_PER_TOKEN

    def forget_from(self, index: int) -> None:
        """Messages from `index` on were rewritten: measure them again next time."""
        del self._sizes[index:]


def _result_blocks(messages: Sequence[JSON]) -> list[tuple[int, JSON]]:
    """Every tool_result block with the index of its message."""
    blocks: list[tuple[int, JSON]] = []
    for index, message in enumerate(messages):
        content = message.get("content")
        if message.get("role") != "user" or not isinstance(content, list):
            continue
        blocks.extend(
            (index, b) for b in content if isinstance(b, dict) and b.get("type") == "tool_result"
        )
    return blocks


def compact_tool_results(messages: list[JSON], keep_last: int) -> tuple[int, int | None]:
    """Replace all but the last `keep_last` tool results with a placeholder, in place.

    Returns how many results were replaced and the index of the first message
    changed (None when nothing was), so a checkpoint can store just the change.
    """
    blocks = _result_blocks(messages)
    old = blocks[: max(len(blocks) - keep_last, 0)]
    replaced = 0
    first: int | None = None
    for index, block in old:
        content = block.get("content")
        if isinstance(content, str) and content.startswith("[Earlier tool result removed"):
            continue
        chars = len(content) if isinstance(content, str) else len(json.dumps(content, default=str))
        block["content"] = PLACEHOLDER.format(chars=chars)
        replaced += 1
        first = index if first is None else min(first, index)
    return replaced, first
