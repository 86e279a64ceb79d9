"""The machine's picture for a report: rendered now, shipped with the package, or text.

A report must never be refused for want of a renderer, so the drawing falls back
step by step, and the page says which one it shows: the review diagram rendered
now (with the run's counts on its edges), the same diagram as pre-rendered into
the package when the diagrams were generated (the run's path marked on it by SVG
id, without counts), or the Mermaid text of the run's path.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from statemachine_agent import diagrams


@dataclass(frozen=True)
class Drawing:
    """What the report's diagram section shows, and the sentence that says so."""

    note: str
    svg: str | None = None
    """Graphviz output (never audit text); None when only the text form is left."""
    text: str | None = None
    """The Mermaid diagram with the run's path, when there is no SVG."""
    fired: frozenset[str] = frozenset()
    """SVG ids of the edges the run fired."""
    visited: frozenset[str] = frozenset()
    """SVG ids of the states it visited."""


def drawing(trail: Iterable[Any] | diagrams.Highlight) -> Drawing:
    """The best drawing of the machine with the run's path that this install can make
    (`trail`: the run's transitions, or their counts, `diagrams.Tally`)."""
    steps = diagrams.highlight(trail if isinstance(trail, diagrams.Highlight) else list(trail))
    ids = diagrams.marked_ids(steps)
    fired, visited = frozenset(ids[0]), frozenset(ids[1])
    problem = "no Graphviz renderer is installed"
    renderer = diagrams.find_renderer()
    if renderer is not None:
        try:
            svg = diagrams.rendered("svg", steps).data.decode("utf-8")
        except (diagrams.GraphvizError, OSError, UnicodeDecodeError) as exc:
            problem = f"{renderer.name} failed ({exc})"
        else:
            return Drawing(f"Rendered by {renderer.name}.", svg, None, fired, visited)
    packaged = diagrams.packaged_svg()
    if packaged is not None:
        note = (
            f"The diagram shipped with the package, as {problem}: the run's path is "
            "highlighted without counts (the timeline below has them)."
        )
        return Drawing(note, packaged, None, fired, visited)
    note = f"Text form of the diagram, as {problem} and the package's diagram is missing."
    return Drawing(note, text=diagrams.mermaid(steps))
