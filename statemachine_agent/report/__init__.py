"""Reports of one run, built from its audit file alone.

`build` gathers the events into iterations (`build.py`), `html` renders the
self-contained HTML page (`page.py`, with the chart of `chart.py`), `inspect_table`
the terminal table of `statemachine-agent inspect` (`console.py`), and
`RunProgress` drives the live status line of `statemachine-agent run` (`live.py`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from statemachine_agent.audit.chain import Verification
from statemachine_agent.report.build import (
    Iteration,
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

__all__ = [
    "Drawing",
    "Iteration",
    "ModelCall",
    "Note",
    "Outcome",
    "Report",
    "ReportError",
    "RunProgress",
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
]


def html(
    events: Sequence[Mapping[str, Any]],
    *,
    source: str = "",
    verification: Verification | None = None,
) -> str:
    """The HTML report of a run's events, its path highlighted on the machine's diagram.

    Raises `ReportError` for a file with nothing to report. Without a Graphviz
    renderer the diagram falls back to the one shipped in the package, or to
    text (`drawing.py`), and the page says so: the report is never refused.
    """
    report = build(events)
    trail = [
        e
        for e in events
        if e.get("event") == "transition.fired" and e.get("run_id") == report.run_id
    ]
    return render(report, drawing(trail), source=source, verification=verification)
