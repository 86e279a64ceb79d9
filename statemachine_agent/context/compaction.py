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
    so only the last known message and the new ones are measured again, and the
    total is kept rather than summed. A history the run starts with (a resumed
    conversation's) is measured in one pass, as a block: only compaction inside
    it makes its messages be measured one by one.
    """

    def __init__(self) -> None:
        self._block = 0
        """How many messages at the start were measured together, as one block."""
        self._block_chars = 0
        self._sizes: list[int] = []
        """Each later message's size."""
        self._total = 0

    def estimate(self, messages: Sequence[JSON]) -> int:
        """Roughly how many tokens the messages take (characters / 4)."""
        known = self._block + len(self._sizes)
        keep = max(min(known, len(messages)) - 1, 0)
        if keep < self._block:
            self.forget_from(0)
            keep = known = 0
        if not known and len(messages) > 2:
            # A list encodes as its items joined by ", " within "[]".
            self._block = len(messages) - 1
            self._block_chars = len(_ENCODE(messages[: self._block])) - 2 * self._block
            self._total = self._block_chars
            keep = self._block
        self._drop(keep - self._block)
        for message in messages[keep:]:
            size = len(_ENCODE(message))
            self._sizes.append(size)
            self._total += size
        return self._total // CHARS_PER_TOKEN

    def forget_from(self, index: int) -> None:
        """Messages from `index` on were rewritten: measure them again next time."""
        if index < self._block:
            self._block = self._block_chars = self._total = 0
            self._sizes.clear()
            return
        self._drop(index - self._block)

    def _drop(self, start: int) -> None:
        if start < len(self._sizes):
            self._total -= sum(self._sizes[start:])
            del self._sizes[start:]


_ENCODE = json.JSONEncoder(ensure_ascii=False, default=str).encode
"""`json.dumps(..., ensure_ascii=False, default=str)` without a new encoder each time."""


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
