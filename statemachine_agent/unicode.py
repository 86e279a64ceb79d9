"""Text that is not valid Unicode, repaired where it enters a run.

A Python `str` may hold lone surrogates: JSON may spell one (`"\\ud800"`), bytes
decoded with `surrogateescape` leave them, a tool may slice a string between the
halves of a pair. UTF-8 cannot encode them, so the first write of such text (a
checkpoint, an audit line, an API request) would fail and end the run. Each is
replaced with U+FFFD, the replacement character, where text enters the run: the
model's reply, a tool's result, the prompt and history, an error message.
"""

from __future__ import annotations

from typing import Any

__all__ = ["REPLACEMENT", "repair", "repair_text"]

REPLACEMENT = "\ufffd"


def repair_text(text: str) -> str:
    """`text` with each lone surrogate replaced (and split pairs joined); itself if valid."""
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        # UTF-16 round trip: a high+low pair becomes its character, a lone half U+FFFD.
        return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return text


def repair(value: Any) -> Any:
    """`value` with every string in it repaired, keys included; the same object if none needed it.

    Keeping the object when nothing changed keeps identities the checkpoint
    writer relies on (a reply's content is the history's last message).
    """
    if isinstance(value, str):
        return repair_text(value)
    if isinstance(value, dict):
        items = [(repair(k), repair(v)) for k, v in value.items()]
        if all(k is k0 and v is v0 for (k, v), (k0, v0) in zip(items, value.items(), strict=True)):
            return value
        return dict(items)
    if isinstance(value, list | tuple):
        repaired = [repair(item) for item in value]
        if all(new is old for new, old in zip(repaired, value, strict=True)):
            return value
        return repaired if isinstance(value, list) else tuple(repaired)
    return value
