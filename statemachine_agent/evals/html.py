"""An evaluation's report as one self-contained HTML page, for a review.

Built like the run report (`report/page.py`): every piece is a `markupsafe.Markup`
made from the literal templates here, so every value (case ids, reasons, scorer
details: text a model wrote) is escaped as it is put in; the page loads nothing,
runs no script, and its Content-Security-Policy allows only its own style block, by
hash (`report.page.csp`). The plots are SVG drawn here: end states per variant as
stacked bars, and each variant's run costs as a strip with its median and p90.
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

from markupsafe import Markup

from statemachine_agent.evals.report import Report, quantile
from statemachine_agent.machine.ends import END_STATES
from statemachine_agent.report.page import csp

COLOURS = {
    "completed": "#2e7d32",
    "finished": "#66bb6a",
    "budget_exhausted": "#ef6c00",
    "stalled": "#8e24aa",
    "truncated": "#6d4c41",
    "refused": "#546e7a",
    "context_overflow": "#00838f",
    "failed": "#c62828",
    "cancelled": "#9e9e9e",
    "awaiting_approval": "#1565c0",
}
"""One colour per end state, in the plots and their legend."""

STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 0; color: #1d2433; background: #f6f7f9; }
main { max-width: 1100px; margin: 0 auto; padding: 16px; }
section { background: #fff; border: 1px solid #dde1e8; border-radius: 8px; padding: 12px 16px;
  margin: 12px 0; }
h1 { font-size: 20px; } h2 { font-size: 16px; margin: 4px 0 8px; }
table { border-collapse: collapse; width: 100%; }
th, td { text-align: left; padding: 3px 8px; border-bottom: 1px solid #eef0f4;
  vertical-align: top; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
.pass { color: #2e7d32; } .fail { color: #c62828; } .na { color: #8a93a3; }
.note { color: #5b6577; font-size: 12.5px; }
svg text { font: 11px system-ui, sans-serif; fill: #1d2433; }
.legend span { display: inline-block; margin-right: 12px; font-size: 12px; }
.stopped { background: #fff4e5; border-color: #ef6c00; }
"""

CSP = csp(STYLE)


def _join(parts: list[Markup]) -> Markup:
    return Markup("\n").join(parts)


def render(report: Report) -> str:
    """The whole page."""
    data = report.to_dict()
    stopped = (
        Markup(
            '<section class="stopped">Stopped at the cost limit (${}): {} of {} runs '
            "measured.</section>"
        ).format(report.max_cost_usd, len(report.runs), report.planned)
        if report.stopped == "cost_limit"
        else Markup("")
    )
    body = [
        Markup("<h1>Evaluation of {}: {} variants, {} cases, {} repeats</h1>").format(
            report.dataset, len(report.variants), len(report.cases), report.repeats
        ),
        stopped,
        _variants(report, data),
        _comparisons(data),
        Markup("<section><h2>End states per variant</h2>{}{}</section>").format(
            _end_bars(report), _legend(report)
        ),
        Markup("<section><h2>Cost per run</h2>{}</section>").format(_cost_strips(report)),
        _cases(report),
    ]
    page = Markup(
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta http-equiv="Content-Security-Policy" content="{csp}">\n'
        '<link rel="icon" href="data:,">\n<title>Evaluation: {name}</title>\n'
        "<style>{style}</style>\n</head>\n<body>\n<main>\n{body}\n</main>\n</body>\n</html>\n"
    ).format(csp=Markup(CSP), name=report.dataset, style=Markup(STYLE), body=_join(body))
    return str(page)


def write_html(report: Report, path: str | os.PathLike[str]) -> Path:
    """Write the page to `path` and return it."""
    target = Path(path)
    target.write_text(render(report), encoding="utf-8")
    return target


def _variants(report: Report, data: dict[str, object]) -> Markup:
    head = Markup(
        "<tr><th>variant</th><th class=num>runs</th><th class=num>success</th>{}"
        "<th class=num>cost $ (total)</th><th class=num>median $</th><th class=num>p90 $</th>"
        "<th class=num>tokens (median)</th><th class=num>iterations (median / p90)</th>"
        "<th class=num>wall s (median / p90)</th><th class=num>stall interventions</th>"
        "<th class=num>reflections</th><th class=num>verifier rejections</th></tr>"
    ).format(_join([Markup("<th class=num>{}</th>").format(s) for s in report.scorers]))
    rows = []
    for v in data["variants"]:  # type: ignore[attr-defined]
        rates = _join(
            [
                Markup("<td class=num>{}</td>").format("n/a" if r is None else f"{r:.0%}")
                for r in v["by_scorer"].values()
            ]
        )
        rows.append(
            Markup(
                "<tr><td>{}</td><td class=num>{}</td><td class=num>{}</td>{}<td class=num>{}</td>"
                "<td class=num>{}</td><td class=num>{}</td><td class=num>{}</td>"
                "<td class=num>{} / {}"
                "</td><td class=num>{} / {}</td><td class=num>{}</td><td class=num>{}</td>"
                "<td class=num>{}</td></tr>"
            ).format(
                v["name"],
                v["runs"],
                f"{v['success_rate']:.0%}",
                rates,
                f"{v['cost_usd']['total']:.4f}",
                f"{v['cost_usd']['median']:.4f}",
                f"{v['cost_usd']['p90']:.4f}",
                f"{v['tokens']['median']:g}",
                f"{v['iterations']['median']:g}",
                f"{v['iterations']['p90']:g}",
                f"{v['wall_s']['median']:.2f}",
                f"{v['wall_s']['p90']:.2f}",
                v["interventions"],
                v["reflections"],
                v["rejections"],
            )
        )
    return Markup("<section><h2>Variants</h2><table>{}{}</table></section>").format(
        head, _join(rows)
    )


def _comparisons(data: dict[str, object]) -> Markup:
    items = []
    for c in data["comparisons"]:  # type: ignore[attr-defined]
        changed = _join(
            [
                Markup("<li>{} (repeat {}): {} {} → {} {}</li>").format(
                    ch["case"],
                    ch["repeat"],
                    c["a"],
                    _verdict(ch[c["a"]]["success"]),
                    c["b"],
                    _verdict(ch[c["b"]]["success"]),
                )
                for ch in c["changed"]
            ]
        )
        items.append(
            Markup(
                "<p><b>{b}</b> against <b>{a}</b> over {n} paired runs: success {rb} vs {ra}, "
                "difference <b>{d}</b> ({conf} bootstrap CI {lo} to {hi}); {k} changed outcome.</p>"
                "<ul>{changed}</ul>"
            ).format(
                a=c["a"],
                b=c["b"],
                n=c["pairs"],
                rb=f"{c['success_rate_b']:.0%}",
                ra=f"{c['success_rate_a']:.0%}",
                d=f"{c['difference']:+.0%}",
                conf=f"{c['confidence']:.0%}",
                lo=f"{c['ci'][0]:+.0%}",
                hi=f"{c['ci'][1]:+.0%}",
                k=len(c["changed"]),
                changed=changed,
            )
        )
    if not items:
        items.append(Markup('<p class="note">One variant: nothing to compare.</p>'))
    return Markup("<section><h2>Paired comparisons</h2>{}</section>").format(_join(items))


def _verdict(success: bool) -> Markup:
    return (
        Markup('<span class="pass">pass</span>')
        if success
        else Markup('<span class="fail">fail</span>')
    )


def _end_bars(report: Report) -> Markup:
    width, bar, gap, left = 640, 22, 10, 120
    height = len(report.variants) * (bar + gap) + gap
    parts = []
    for i, name in enumerate(report.variants):
        runs = [r for r in report.runs if r.variant == name]
        y = gap + i * (bar + gap)
        parts.append(Markup('<text x="4" y="{}">{}</text>').format(y + 15, name))
        counts = Counter(r.end_state for r in runs)
        x = float(left)
        for state in END_STATES:
            if not counts[state]:
                continue
            w = (width - left - 10) * counts[state] / len(runs)
            parts.append(
                Markup(
                    '<rect x="{:.1f}" y="{}" width="{:.1f}" height="{}" fill="{}">'
                    "<title>{}: {} of {}</title></rect>"
                ).format(x, y, w, bar, COLOURS[state], state, counts[state], len(runs))
            )
            x += w
    return Markup('<svg role="img" width="{}" height="{}" viewBox="0 0 {} {}">{}</svg>').format(
        width, height, width, height, _join(parts)
    )


def _legend(report: Report) -> Markup:
    seen = {r.end_state for r in report.runs}
    return Markup('<div class="legend">{}</div>').format(
        _join(
            [
                Markup(
                    '<span><svg width="10" height="10">'
                    '<rect width="10" height="10" fill="{}"/></svg>'
                    " {}</span>"
                ).format(COLOURS[s], s)
                for s in END_STATES
                if s in seen
            ]
        )
    )


def _cost_strips(report: Report) -> Markup:
    width, row, left = 640, 30, 120
    top = max((r.cost_usd for r in report.runs), default=0.0) or 1.0
    height = len(report.variants) * row + 24
    scale = (width - left - 20) / top
    parts = []
    for i, name in enumerate(report.variants):
        costs = [r.cost_usd for r in report.runs if r.variant == name]
        y = 10 + i * row
        parts.append(Markup('<text x="4" y="{}">{}</text>').format(y + 13, name))
        parts.extend(
            Markup('<circle cx="{:.1f}" cy="{}" r="3" fill="#1565c0" fill-opacity="0.5"/>').format(
                left + c * scale, y + 9
            )
            for c in costs
        )
        for q, colour in ((0.5, "#1d2433"), (0.9, "#ef6c00")):
            x = left + quantile(costs, q) * scale
            parts.append(
                Markup(
                    '<line x1="{:.1f}" x2="{:.1f}" y1="{}" y2="{}" stroke="{}" stroke-width="2">'
                    "<title>{}: ${:.4f}</title></line>"
                ).format(
                    x, x, y, y + 18, colour, "median" if q == 0.5 else "p90", quantile(costs, q)
                )
            )
    parts.append(
        Markup(
            '<text x="{}" y="{}">$0</text><text x="{}" y="{}" text-anchor="end">${:.4f}</text>'
        ).format(left, height - 4, width - 20, height - 4, top)
    )
    return Markup(
        '<svg role="img" width="{}" height="{}" viewBox="0 0 {} {}">{}</svg>'
        '<p class="note">Each dot a run; black line the median, orange the p90.</p>'
    ).format(width, height, width, height, _join(parts))


def _cases(report: Report) -> Markup:
    head = Markup("<tr><th>case</th>{}</tr>").format(
        _join([Markup("<th>{}</th>").format(v) for v in report.variants])
    )
    rows = []
    for case in report.cases:
        cells = []
        for variant in report.variants:
            runs = [r for r in report.runs if r.case == case and r.variant == variant]
            cells.append(
                Markup("<td>{}</td>").format(
                    _join(
                        [
                            Markup('{} <a href="{}">{}</a> {}<br>').format(
                                _verdict(r.success),
                                r.audit or "",
                                r.end_state,
                                "; ".join(
                                    f"{s.scorer}: {s.detail}" for s in r.scores if s.passed is False
                                ),
                            )
                            if r.audit
                            else Markup("{} {}<br>").format(_verdict(r.success), r.end_state)
                            for r in runs
                        ]
                    )
                    or Markup('<span class="na">not run</span>')
                )
            )
        rows.append(Markup("<tr><td>{}</td>{}</tr>").format(case, _join(cells)))
    return Markup(
        "<section><h2>Cases</h2><p class=note>Each run links to its audit file "
        "(open it with <code>statemachine-agent report</code>).</p><table>{}{}</table></section>"
    ).format(head, _join(rows))
