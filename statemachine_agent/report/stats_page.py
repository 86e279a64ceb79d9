"""The fleet view as one self-contained HTML page (`statemachine-agent stats --html FILE`).

Built like the run report (`page.py`): every piece is a `markupsafe.Markup` made from
the literal templates here, every value from the files escaped as it is put in, one
style block allowed by its hash in the same strict Content-Security-Policy, and no
style attribute anywhere.

Its diagram is the review diagram drawn as a heat map (`heat_map`): each edge gets a
class `heat-1` (rarely fired) to `heat-5` (the most fired, relative to the busiest
edge, on a log scale) that sets its width and colour, and an edge whose rows never
fired is dashed and red (`unfired`). The diagram comes from `diagrams` (the DOT it
writes already labels fired edges with their counts and never-fired ones as such);
this module only tags the rendered SVG's edges by the ids `diagrams` gives them, so
the same tags mark the package's pre-rendered diagram when no renderer is installed.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping

from markupsafe import Markup

from statemachine_agent import diagrams
from statemachine_agent.machine.ends import SUCCESS_STATES
from statemachine_agent.report.fmt import duration, usd
from statemachine_agent.report.page import STYLE as REPORT_STYLE
from statemachine_agent.report.page import csp
from statemachine_agent.report.stats import Figures, FileProblem, FleetStats
from statemachine_agent.report.stats_console import files_line, stalls_line

HEAT_LEVELS = 5
"""Classes `heat-1` .. `heat-5`: how often an edge fired, relative to the busiest one."""

_EDGE = re.compile(r'<g id="([^"]*)" class="edge">')
_SVG_SIZE = re.compile(r'<svg width="([^"]*)" height="[^"]*"')
_NOT_TEXT = re.compile("[\ud800-\udfff\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")


def _join(parts: Iterable[Markup | str], sep: Markup | None = None) -> Markup:
    return (sep if sep is not None else Markup("")).join(parts)


# -- the heat map --------------------------------------------------------------------


def heat_level(fired: int, busiest: int) -> int:
    """1..`HEAT_LEVELS` for an edge fired `fired` times (>= 1) when the busiest fired
    `busiest`: on a log scale, so an edge fired 10 times in 10,000 still shows."""
    if busiest <= 1:
        return HEAT_LEVELS
    share = math.log(fired) / math.log(busiest)
    return max(1, min(HEAT_LEVELS, 1 + math.floor(share * HEAT_LEVELS)))


def heat_classes(fleet: FleetStats) -> dict[str, str]:
    """The SVG id of each edge of the review diagram -> its class (`heat-N` or `unfired`)."""
    marks = _marks(fleet)
    drawn = diagrams.edges(marks)
    busiest = max((edge.fired for edge in drawn), default=0)
    classes: dict[str, str] = {}
    for edge in drawn:
        if edge.fired:
            classes[edge.id] = f"fired heat-{heat_level(edge.fired, busiest)}"
        elif edge.unfired and (edge.back is None or edge.back.unfired):
            classes[edge.id] = "unfired"
    return classes


def _marks(fleet: FleetStats) -> diagrams.Highlight:
    rows: Counter[diagrams.RowKey] = Counter()
    for row in (*fleet.rows, *fleet.unknown_rows):
        if row.fired:
            rows[(row.source, row.trigger, row.dest, row.guards)] = row.fired
    never = frozenset((r.source, r.trigger, r.dest, r.guards) for r in fleet.never_fired)
    return diagrams.Highlight(rows, Counter(), never)


def heat_svg(svg: str, classes: Mapping[str, str]) -> str:
    """Graphviz's SVG made inline and scalable, each edge tagged with its heat class."""
    start = svg.find("<svg")
    svg = svg[start:] if start >= 0 else svg
    svg = _SVG_SIZE.sub(_scalable, svg, count=1)

    def tag(match: re.Match[str]) -> str:
        cls = classes.get(match.group(1))
        return match.group(0) if cls is None else match.group(0)[:-2] + f' {cls}">'

    return _EDGE.sub(tag, svg)


def _scalable(match: re.Match[str]) -> str:
    """No fixed size: scaled to the page's width by CSS, never wider than drawn."""
    size = re.fullmatch(r"([\d.]+)pt", match.group(1))
    if size is None:
        return '<svg class="machine"'
    return f'<svg class="machine" width="{float(size.group(1)) * 4 / 3:.0f}"'


def heat_map(fleet: FleetStats) -> tuple[str | None, str]:
    """The heat map's SVG (None when no drawing can be had) and a sentence saying what
    drew it: the review diagram rendered now with the fleet's counts, else the one
    shipped in the package (heat by class, counts only in the rows table)."""
    classes = heat_classes(fleet)
    renderer = diagrams.find_renderer()
    problem = "no Graphviz renderer is installed"
    if renderer is not None:
        try:
            svg = diagrams.rendered("svg", _marks(fleet)).data.decode("utf-8")
        except (diagrams.GraphvizError, OSError, UnicodeDecodeError) as exc:
            problem = f"{renderer.name} failed ({exc})"
        else:
            return heat_svg(svg, classes), f"Rendered by {renderer.name}."
    packaged = diagrams.packaged_svg()
    if packaged is None:
        return None, f"No diagram: {problem} and the package's diagram is missing."
    return heat_svg(packaged, classes), (
        f"The diagram shipped with the package, as {problem}: the heat is drawn, "
        "the counts are in the table of rows."
    )


# -- the page ------------------------------------------------------------------------


def _figures(figures: Figures, show: Callable[[float], str]) -> Markup:
    if figures.median is None or figures.p90 is None or figures.max is None:
        return Markup('<span class="muted">-</span>')
    approx = "" if figures.exact else "~"
    return Markup("{}{} / {}{} / {}").format(
        approx, show(figures.median), approx, show(figures.p90), show(figures.max)
    )


def _number(value: float) -> str:
    return f"{value:g}"


def _ends(fleet: FleetStats) -> Markup:
    rows = _join(
        Markup(
            '<tr><td><span class="badge end {}">{}</span></td><td class="num">{:,}</td>'
            '<td class="num">{:,}</td><td class="num">{}</td><td class="num">{}</td>'
            '<td class="num">{}</td></tr>'
        ).format(
            "success" if end.end_state in SUCCESS_STATES else "failure",
            end.end_state,
            end.runs,
            end.sub_agent_runs,
            _figures(end.iterations, _number),
            _figures(end.cost_usd, usd),
            _figures(end.wall_s, duration),
        )
        for end in fleet.end_states
    )
    return Markup(
        '<section id="ends"><h2>How runs ended</h2>'
        '<p class="muted">Each run counted once, by its last end state; sub-agent runs apart '
        "(their cost is in their parents'). Figures: median / p90 / max over the runs "
        "(~: estimated from a sample).</p>"
        '<table class="transitions"><thead><tr><th>end state</th><th class="num">runs</th>'
        '<th class="num">sub-agent runs</th><th class="num">iterations</th>'
        '<th class="num">cost</th><th class="num">wall time</th></tr>'
        "</thead><tbody>{}</tbody></table></section>"
    ).format(rows)


def _diagram(fleet: FleetStats) -> Markup:
    svg, note = heat_map(fleet)
    inner = (
        Markup('<div class="diagram" id="heat">{}</div>').format(Markup(svg))
        if svg is not None
        else ""
    )
    return Markup(
        '<section id="diagram"><h2>Where runs went</h2>'
        '<p class="legend"><span class="key heat-low">fired rarely</span>'
        '<span class="key heat-high">fired most</span>'
        '<span class="key never">never fired</span></p>'
        '<p class="muted">{}</p>{}</section>'
    ).format(note, inner)


def _rows(fleet: FleetStats) -> Markup:
    busiest = max((row.fired for row in fleet.rows), default=0)
    body = []
    marked = [(row, True) for row in fleet.rows] + [(row, False) for row in fleet.unknown_rows]
    for row, known in marked:
        cls = f"heat-{heat_level(row.fired, busiest)}" if row.fired else "never"
        body.append(
            Markup(
                '<tr class="{}"><td class="num">{}</td><td class="move"><code>{}</code>{}</td>'
                "<td>{}</td></tr>"
            ).format(
                cls,
                f"{row.fired:,}" if row.fired else "never",
                row.label,
                "" if known else Markup(' <span class="badge error">not in the table</span>'),
                row.description,
            )
        )
    never = len(fleet.never_fired)
    return Markup(
        '<section id="rows"><h2>Rows of the transition table</h2>'
        '<p class="muted">{} of {} rows never fired.</p>'
        '<table class="transitions rows"><thead><tr><th>fired</th><th>row</th>'
        "<th>what it means</th></tr></thead><tbody>{}</tbody></table></section>"
    ).format(never, len(fleet.rows), _join(body))


def _counts(counts: Mapping[str, int]) -> str:
    return ", ".join(f"{name} {n:,}" for name, n in counts.items()) or "none"


def _approvals(fleet: FleetStats) -> Markup:
    approvals = fleet.approvals
    rows = _join(
        Markup('<tr><td>{}</td><td>{}</td><td class="num">{}</td></tr>').format(
            r.reviewer, _counts(r.decisions), _figures(r.wait_s, duration)
        )
        for r in approvals.reviewers
    )
    return Markup(
        '<section id="approvals"><h2>Approvals</h2>'
        "<p>{:,} decisions: {}. Decided by: {}. People's decisions waited (median / p90 / "
        "max): {}.</p>"
        '<table class="transitions"><thead><tr><th>reviewer</th><th>decisions</th>'
        "<th>wait (median / p90 / max)</th></tr></thead><tbody>{}</tbody></table></section>"
    ).format(
        approvals.count,
        _counts(approvals.by_decision),
        _counts(approvals.by_decider),
        _figures(approvals.wait_s, duration),
        rows,
    )


def _problems(title: str, anchor: str, problems: tuple[FileProblem, ...], total: int) -> Markup:
    if not total:
        return Markup("")
    items = _join(
        Markup("<li><code>{}</code>: {}</li>").format(p.path, p.problem) for p in problems
    )
    more = (
        Markup("<li>+{:,} more not named</li>").format(total - len(problems))
        if total > len(problems)
        else ""
    )
    return Markup(
        '<section id="{}" class="problems"><h2>{} ({:,})</h2><ul>{}{}</ul></section>'
    ).format(anchor, title, total, items, more)


def render_stats(fleet: FleetStats, *, title: str = "Fleet view") -> str:
    """The whole page."""
    body = [
        Markup('<header class="run"><h1>{}</h1><p class="meta">{}</p></header>').format(
            title, files_line(fleet)
        ),
        _ends(fleet),
        _diagram(fleet),
        _rows(fleet),
        _approvals(fleet),
        Markup('<section id="stalls"><h2>Stalls</h2><p>{}</p></section>').format(
            stalls_line(fleet)
        ),
        _problems(
            "Files that do not verify (not counted)",
            "not-verified",
            fleet.not_verified,
            fleet.not_verified_count,
        ),
        _problems("Files skipped", "skipped", fleet.skipped, fleet.skipped_count),
        Markup("<footer>Built by <code>statemachine-agent stats</code>.</footer>"),
    ]
    page = Markup(
        "<!DOCTYPE html>\n"
        '<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta http-equiv="Content-Security-Policy" content="{csp}">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        '<link rel="icon" href="data:,">\n'
        "<title>{title}</title>\n"
        "<style>{style}</style>\n</head>\n<body>\n<main>\n{body}\n</main>\n</body>\n</html>\n"
    ).format(
        csp=Markup(CSP),
        title=title,
        style=Markup(STYLE),
        body=_join(body, Markup("\n")),
    )
    return _NOT_TEXT.sub("\ufffd", str(page))


_HEAT_STYLE = """
svg.machine g.edge.fired path { stroke-dasharray: none; }
svg.machine g.edge.fired.heat-1 path { stroke: #a6d8bd; stroke-width: 1.5; }
svg.machine g.edge.fired.heat-2 path { stroke: #6cbf8f; stroke-width: 2.5; }
svg.machine g.edge.fired.heat-3 path { stroke: #2e9a5e; stroke-width: 4; }
svg.machine g.edge.fired.heat-4 path { stroke: #067647; stroke-width: 5.5; }
svg.machine g.edge.fired.heat-5 path { stroke: #054f31; stroke-width: 7; }
svg.machine g.edge.fired.heat-1 polygon { stroke: #a6d8bd; fill: #a6d8bd; }
svg.machine g.edge.fired.heat-2 polygon { stroke: #6cbf8f; fill: #6cbf8f; }
svg.machine g.edge.fired.heat-5 polygon, svg.machine g.edge.fired.heat-4 polygon
  { stroke: #054f31; fill: #054f31; }
svg.machine g.edge.unfired path { stroke: var(--bad); stroke-dasharray: 6 4; opacity: .8; }
svg.machine g.edge.unfired polygon { stroke: var(--bad); fill: var(--bad); opacity: .8; }
svg.machine g.edge.unfired text { fill: var(--bad); }
table.rows tr.never td { color: var(--muted); }
table.rows tr.never td.num { color: var(--bad); font-weight: 600; }
table.rows tr.heat-5 td.num, table.rows tr.heat-4 td.num { font-weight: 700; color: var(--ok); }
.legend .heat-low::before { height: 2px; background: #a6d8bd; vertical-align: 3px; }
.legend .heat-high::before { height: 7px; background: #054f31; vertical-align: 1px; }
.legend .never::before { height: 0; border-top: 2px dashed var(--bad); vertical-align: 3px; }
.problems li { color: var(--bad); word-break: break-all; }
"""

STYLE = REPORT_STYLE + _HEAT_STYLE
"""The run report's style with the heat map's: the two pages read alike."""

CSP = csp(STYLE)
