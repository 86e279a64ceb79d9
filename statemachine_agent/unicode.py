"""Text that is not valid Unicode, repaired where it enters a run.

A Python `str` may hold lone surrogates: JSON may spell one (`"\\ud800"`), bytes
decoded with `surrogateescape` leave them, a tool may slice a string between the
halves of a pair. UTF-8 cannot encode them, so the first write of such text (a
checkpoint, an audit line, an API request) would fail and end the run. Each is
replaced with U+FFFD, the replacement character, where text enters the run: the
model's reply, a tool's result, the prompt and history, an error message.

Almost nothing needs repair, and every reply and tool result passes through here,
so a value is first checked in one pass that allocates nothing (`_sound`: ASCII
text, or text with no surrogate in it); only a value that fails the check is
rebuilt.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["REPLACEMENT", "repair", "repair_text"]

REPLACEMENT = "\ufffd"

_SURROGATE = re.compile("[\ud800-\udfff]")
"""Any surrogate code point: in a Python `str`, a paired one is still two of these."""


def repair_text(text: str) -> str:
    """`text` with each lone surrogate replaced (and split pairs joined); itself if valid."""
    if text.isascii() or _SURROGATE.search(text) is None:
        return text
    # UTF-16 round trip: a high+low pair becomes its character, a lone half U+FFFD.
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def repair(value: Any) -> Any:
    """`value` with every string in it repaired, keys included; the same object if none needed it.

    Keeping the object when nothing changed keeps identities the checkpoint
    writer relies on (a reply's content is the history's last message).
    """
    if isinstance(value, str):
        return repair_text(value)
    if _sound(value):
        return value
    return _repaired(value)


def _sound(value: Any) -> bool:
    """Whether no string in `value` (keys included) holds a surrogate, i.e. `repair`
    would hand `value` back as it is. Containers are recognised exactly as `_repaired`
    recognises them; plain strings and scalars are checked without a call."""
    if isinstance(value, str):
        return value.isascii() or _SURROGATE.search(value) is None
    if isinstance(value, dict):
        for key, item in value.items():
            if type(key) is str:
                if not key.isascii() and _SURROGATE.search(key) is not None:
                    return False
            elif not _sound(key):
                return False
            kind = type(item)
            if kind is str:
                if not item.isascii() and _SURROGATE.search(item) is not None:
                    return False
            elif kind is not int and item is not None and not _sound(item):
                return False
        return True
    if isinstance(value, list | tuple):
        for item in value:
            if type(item) is str:
                if not item.isascii() and _SURROGATE.search(item) is not None:
                    return False
            elif not _sound(item):
                return False
        return True
    return True


def _repaired(value: Any) -> Any:
    """The walk for a value `_sound` refused: repaired copies of what changed, the
    untouched parts kept as they are."""
    if isinstance(value, str):
        return repair_text(value)
    if isinstance(value, dict):
        items = [(_repaired(k), _repaired(v)) for k, v in value.items()]
        if all(k is k0 and v is v0 for (k, v), (k0, v0) in zip(items, value.items(), strict=True)):
            return value
        return dict(items)
    if isinstance(value, list | tuple):
        repaired = [_repaired(item) for item in value]
        if all(new is old for new, old in zip(repaired, value, strict=True)):
            return value
        return repaired if isinstance(value, list) else tuple(repaired)
    return value
