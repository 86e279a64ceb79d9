"""How figures read, shared by the HTML report, `inspect` and the live status line,
so a cost printed in one place looks the same in every other."""

from __future__ import annotations


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
