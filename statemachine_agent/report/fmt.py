"""How figures read, shared by the HTML report, `inspect` and the live status line,
so a cost printed in one place looks the same in every other."""

from __future__ import annotations

import re


def usd(value: float) -> str:
    """Dollars with enough digits that a cheap run does not read `$0.00` throughout."""
    if value == 0:
        return "$0"
    if abs(value) >= 1:
        return f"${value:,.2f}"
    if abs(value) >= 0.01:
        return f"${value:.3f}"
    if abs(value) >= 0.000001:
        return "$" + f"{value:.6f}".rstrip("0")
    return f"${value:.1e}"


def count(value: int | float) -> str:
    """A token count with thousands separators."""
    return f"{value:,.0f}"


def seconds(value: float) -> str:
    """A duration: milliseconds below a second, else seconds."""
    if value < 1:
        return f"{value * 1000:.1f} ms"
    return f"{value:.2f} s"


def duration(value: float) -> str:
    """A duration a person waited: `seconds` below a minute, else `2 h 5 min`, `3 min 4 s`."""
    if value < 60:
        return seconds(value)
    whole = round(value)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours} h {minutes} min"
    return f"{minutes} min {secs} s"


_NOT_PRINTABLE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff]")
"""C0 and C1 control characters other than tab and newline (an escape sequence from a
file could move the cursor, retitle the window or hide text), and lone surrogates
(which no terminal encoding can write): each becomes U+FFFD."""


def printable(value: object) -> str:
    """Text from an audit file or a model as a terminal may show it: `str(value)` with
    control characters and lone surrogates replaced (see `_NOT_PRINTABLE`).

    Markup is a separate concern: rich must get such text as `rich.text.Text`
    (`plain`), never as a `str` it would parse for `[style]` tags."""
    return _NOT_PRINTABLE.sub("\ufffd", value if isinstance(value, str) else str(value))
