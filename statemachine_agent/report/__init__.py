"""Reports of one run, built from its audit file alone.

`build` gathers the events into iterations (`build.py`), `html` renders the
self-contained HTML page (`page.py`, with the chart of `chart.py`), `inspect_table`
the terminal table of `statemachine-agent inspect` (`console.py`), and
`RunProgress` drives the live status line of `statemachine-agent run` (`live.py`).
`stats` is the fleet view over many audit files (`stats.py`: a `FleetStats`, shown by
`stats_console.py` in a terminal and by `stats_page.py` as an HTML heat map).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from statemachine_agent.audit.chain import Verification
from statemachine_agent.diagrams import Tally
from statemachine_agent.report.build import (
    Gap,
    Iteration,
    LeftOut,
    ModelCall,
    Note,
    Outcome,
    Report,
    ReportError,
    Tokens,
    ToolRun,
    Transition,
    build,
)
from statemachine_agent.report.console import inspect_table, print_inspect
from statemachine_agent.report.drawing import Drawing, drawing
from statemachine_agent.report.live import RunProgress, live_status
from statemachine_agent.report.page import render
from statemachine_agent.report.stats import (
    ApprovalStats,
    EndStateStats,
    Figures,
    FileProblem,
    FleetStats,
    ReviewerStats,
    RowCount,
    StallStats,
    stats,
)

ROW_KEYS_CAP = 10_000
"""Distinct rows of the transition table the diagram counts (a file may name any)."""

__all__ = [
    "ApprovalStats",
    "Drawing",
    "EndStateStats",
    "Figures",
    "FileProblem",
    "FleetStats",
    "Gap",
    "Iteration",
    "LeftOut",
    "ModelCall",
    "Note",
    "Outcome",
    "Report",
    "ReportError",
    "ReviewerStats",
    "RowCount",
    "RunProgress",
    "StallStats",
    "Tokens",
    "ToolRun",
    "Transition",
    "build",
    "drawing",
    "html",
    "inspect_table",
    "live_status",
    "print_inspect",
    "render",
    "stats",
]


def html(
    events: Iterable[Mapping[str, Any]],
    *,
    source: str = "",
    verification: Verification | None = None,
) -> str:
    """The HTML report of a run's events, its path highlighted on the machine's diagram.

    The events may be a stream (`statemachine-agent report` reads the file so, each
    event folded by `fold.fold_event`): the diagram keeps only the count of each
    transition's row, and `build` what the page shows, so its memory is bounded.
    Raises `ReportError` for a file with nothing to report. Without a
    Graphviz renderer the diagram falls back to the one shipped in the package, or
    to text (`drawing.py`), and the page says so: the report is never refused.
    """
    trail = Tally(limit=ROW_KEYS_CAP)
    own: list[Any] = []

    def tapped() -> Iterator[Mapping[str, Any]]:
        for event in events:
            if not own:
                own.append(event.get("run_id"))  # the file's own run: the first event's
            if event.get("event") == "transition.fired" and event.get("run_id") == own[0]:
                trail.add(
                    {
                        "source": event["source"],
                        "trigger": event["trigger"],
                        "dest": event["dest"],
                        "via": event.get("via"),
                    }
                )
            yield event

    report = build(tapped())
    return render(report, drawing(trail.highlight), source=source, verification=verification)
