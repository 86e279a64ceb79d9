"""The machine's picture for a report: rendered now, shipped with the package, or text.

A report must never be refused for want of a renderer, so the drawing falls back
step by step, and the page says which one it shows: the review diagram rendered
now (with the run's counts on its edges), the same diagram as pre-rendered into
the package when the diagrams were generated (the run's path marked on it by SVG
id, without counts), or the Mermaid text of the run's path.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

from statemachine_agent import diagrams


@dataclass(frozen=True)
class Drawing:
    """What the report's diagram section shows, and the sentence that says so."""

    note: str
    svg: str | None = None
    """Graphviz output (never audit text) of the run's path: the states it visited and
    the rows it fired; None when only the text form is left."""
    text: str | None = None
    """The Mermaid drawing of the run's path, when there is no SVG."""
    fired: frozenset[str] = frozenset()
    """SVG ids of the edges the run fired, on the path drawing."""
    visited: frozenset[str] = frozenset()
    """SVG ids of the states it visited."""
    machine_svg: str | None = None
    """The whole machine (the review diagram), folded under the path."""
    machine_fired: frozenset[str] = frozenset()
    """SVG ids of the edges the run fired, on the whole machine."""


def drawing(trail: Iterable[Any] | diagrams.Highlight) -> Drawing:
    """The best drawing of the run's path that this install can make, with the whole
    machine beside it (`trail`: the run's transitions, or their counts, `diagrams.Tally`).

    The path is drawn on its own (only what the run did), so it fits a page; the whole
    machine is the review diagram with the path marked."""
    steps = diagrams.highlight(trail if isinstance(trail, diagrams.Highlight) else list(trail))
    path_fired, visited = diagrams.marked_ids(steps, path=True)
    machine_fired, _ = diagrams.marked_ids(steps)
    marks = Drawing(
        "",
        fired=frozenset(path_fired),
        visited=frozenset(visited),
        machine_fired=frozenset(machine_fired),
    )
    problem = "no Graphviz renderer is installed"
    renderer = diagrams.find_renderer()
    if renderer is not None:
        try:
            path = diagrams.rendered("svg", steps, path=True).data.decode("utf-8")
            machine = diagrams.rendered("svg", steps).data.decode("utf-8")
        except (diagrams.GraphvizError, OSError, UnicodeDecodeError) as exc:
            problem = f"{renderer.name} failed ({exc})"
        else:
            return replace(
                marks, note=f"Rendered by {renderer.name}.", svg=path, machine_svg=machine
            )
    packaged = diagrams.packaged_svg()
    note = f"Text form of the run's path, as {problem}"
    if packaged is not None:
        note += (
            "; the whole machine is the diagram shipped with the package, the path marked "
            "without counts (the timeline has them)."
        )
    else:
        note += " and the package's diagram is missing."
    text = diagrams.mermaid(steps, path=True)
    return replace(marks, note=note, text=text, machine_svg=packaged)
