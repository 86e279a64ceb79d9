"""Tools most agents want: a clock, a calculator, and the explicit end of a task or chat.

Models have no clock and make arithmetic slips, so both are offered as tools;
`finish` makes the end of a run an explicit, structured act rather than a
guess from the absence of tool calls.
"""

from __future__ import annotations

import difflib
import functools
import zoneinfo
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Literal

from .base import Tool
from .calculator import CalculationError, evaluate
from .decorator import tool
from .registry import ToolError

__all__ = [
    "calculate",
    "end_chat",
    "finish",
    "get_current_time",
    "make_current_time_tool",
]


def make_current_time_tool(clock: Callable[[], datetime]) -> Tool:
    """The `get_current_time` tool reading `clock`, so demos and tests can pin the time.

    `clock` should return an aware datetime (UTC by convention); a naive one
    is taken to be UTC.
    """

    @tool(name="get_current_time", timeout=5.0)
    def get_current_time(timezone: str = "UTC") -> str:
        """Get the current date and time in a time zone.

        You have no clock of your own: call this whenever the answer depends on
        today's date, the day of the week or the time of day.

        Args:
            timezone: IANA time zone name, e.g. "Europe/Paris", "America/New_York"
                or "Asia/Tokyo". Defaults to "UTC".
        """
        zone = _zone(timezone)
        now = clock()
        if now.tzinfo is None:
            now = now.replace(tzinfo=UTC)
        return f"{now.astimezone(zone).isoformat(timespec='seconds')} ({zone.key})"

    return get_current_time


def _zone(name: str) -> zoneinfo.ZoneInfo:
    """The zone called `name`, or a `ToolError` that suggests valid names."""
    try:
        return zoneinfo.ZoneInfo(name.strip())
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError):
        pass
    close = difflib.get_close_matches(name.strip(), _zone_names(), n=3, cutoff=0.6)
    case_match = _zone_names_folded().get(name.strip().casefold())
    if case_match and case_match not in close:
        close.insert(0, case_match)
    hint = f" Did you mean {', '.join(repr(z) for z in close)}?" if close else ""
    raise ToolError(
        f"Unknown time zone {name!r}.{hint} Use an IANA time zone name such as "
        '"Asia/Tokyo", "Europe/London" or "UTC".'
    )


@functools.cache
def _zone_names() -> list[str]:
    """All IANA names known here; read once, and only when a name was wrong."""
    return sorted(zoneinfo.available_timezones())


@functools.cache
def _zone_names_folded() -> dict[str, str]:
    return {zone.casefold(): zone for zone in _zone_names()}


get_current_time: Tool = make_current_time_tool(lambda: datetime.now(UTC))


@tool(timeout=5.0)
def calculate(expression: str) -> str:
    """Evaluate an arithmetic expression exactly and return the number.

    Use it for any arithmetic rather than computing in your head. Supports
    integers and decimals, + - * / // % ** and parentheses; no variables or
    functions. Very large results are refused.

    Args:
        expression: The expression, e.g. "(17.5 * 4) / 3" or "2**64 - 1".
    """
    try:
        return str(evaluate(expression))
    except CalculationError as exc:
        raise ToolError(str(exc)) from None


@tool(ends_run=True, sequential=True)
def finish(
    status: Literal["completed", "failed", "needs_user_input"],
    summary: str,
    result: Any = None,
) -> dict[str, Any]:
    """Report that the task is over, with its outcome. This ends the run.

    Call it exactly once, when the task is done or cannot be done, instead of
    writing a final text answer. Do not call other tools after it.

    Args:
        status: "completed" if the task was accomplished, "failed" if it cannot
            be, "needs_user_input" if you need information only the user has.
        summary: A short account for the user of what was done, found or is missing.
        result: The structured answer, if the task asked for one (any JSON value).
    """
    return {"status": status, "summary": summary, "result": result}


@tool(timeout=5.0)
def end_chat(reason: str = "") -> str:
    """End the conversation with the user.

    Call it only when the user has clearly finished (said goodbye, or confirmed
    there is nothing else), not merely because one task is done.

    Args:
        reason: Why the conversation is over, in a few words.
    """
    return "Conversation marked as complete."
