"""Cap what one event of an audit file may bring into a report.

A report is read by a person, so a 50 MB tool result or a 100,000-item list helps
nobody, and holding every such value of a large file at once is what makes a report
of a 200 MB file need gigabytes. Each event is therefore folded as it is read:
a string longer than `TEXT_CAP` characters keeps its beginning and ends with a note
of how many characters were left out; a list or object with more than `ITEMS_CAP`
members keeps the first ones and says how many were left out. What a report counts
(tokens, costs, states, guards) is never that large, so the figures stay exact.
The replay does not fold: it needs every recorded value verbatim.

The caps on how many things a report shows (`ROWS_CAP`, `ITERATIONS_CAP`, ...) are
here too: `build.py` and its reader (`_reading.py`) apply them, so a file of millions of
tiny events is as bounded as one of a few huge ones.
"""

from __future__ import annotations

from collections.abc import Mapping
from itertools import islice
from typing import Any

TEXT_CAP = 20_000
"""Characters of one string a report keeps."""
ITEMS_CAP = 500
"""Members of one list or object a report keeps."""


def left_out(count: int, what: str) -> str:
    """The note that replaces what was cut."""
    return f"… [{count:,} more {what} left out of this report]"


def fold_text(text: str, cap: int = TEXT_CAP) -> str:
    """`text`, or its first `cap` characters and a note of how many more there were."""
    if len(text) <= cap:
        return text
    return f"{text[:cap]}\n{left_out(len(text) - cap, 'characters')}"


_SCALARS = frozenset({int, float, bool, type(None)})


def fold(value: Any, cap: int = TEXT_CAP, items: int = ITEMS_CAP) -> Any:
    """A copy of `value` with every long string and every long list or object capped.

    Every event of a file passes through here, so the types JSON gives are told apart
    by `type` first (an `isinstance` on `Mapping` costs more than the rest of the fold).
    """
    kind = type(value)
    if kind in _SCALARS:
        return value
    if kind is str or isinstance(value, str):
        return fold_text(value, cap)
    if kind is dict or (kind is not list and isinstance(value, Mapping)):
        folded = {k: fold(v, cap, items) for k, v in islice(value.items(), items)}
        if len(value) > items:
            folded["…"] = left_out(len(value) - items, "members")
        return folded
    if isinstance(value, list):
        kept = [fold(v, cap, items) for v in value[:items]]
        if len(value) > items:
            kept.append(left_out(len(value) - items, "items"))
        return kept
    return value


def fold_event(event: Mapping[str, Any]) -> dict[str, Any]:
    """One audit event with its payloads capped (`fold`); the event's name is kept whole."""
    folded: dict[str, Any] = fold(event)
    return folded


ROWS_CAP = 50
"""Model calls, tool calls, transitions and notes of one iteration a report shows, of
each kind; the rest are counted in a note of how many were left out."""
ITERATIONS_CAP = 500
"""Iterations of one run a report shows: the first half of these and the last half;
those between are counted in a note."""
POINTS_CAP = 1_000
"""Transitions a report keeps one by one (the budget chart's points, `Report.transitions`);
past it the chart takes every second one, then every fourth, and so on."""
RUNS_CAP = 100
"""Runs (the file's own and the sub-agent runs under it) one report gathers."""
