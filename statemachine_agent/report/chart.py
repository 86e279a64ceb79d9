"""A small inline SVG line chart of the budget spent, drawn by hand.

The report must open with no network and no script library, so the chart is a
few SVG elements: one panel per series (cost, tokens) sharing the x axis of
transitions, a dashed line at the budget's limit when it is near enough to
matter, and a `<title>` on every point so hovering names the transition.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from markupsafe import Markup, escape

from statemachine_agent.report.build import Point
from statemachine_agent.report.fmt import count, usd

WIDTH = 720
PANEL_HEIGHT = 150
_LEFT, _RIGHT, _TOP, _BOTTOM = 70, 16, 26, 28
_MAX_X_LABELS = 16
_LIMIT_SHOWN_WITHIN = 4.0
"""A limit is drawn when it is at most this many times the largest value: a limit far
above the data would flatten the line into the axis."""


@dataclass(frozen=True)
class Series:
    """One panel: a title, how to read a point's value, how to print a value, a limit."""

    title: str
    value: Callable[[Point], float]
    fmt: Callable[[float], str]
    limit: float | None = None
    css_class: str = "series"


def budget_chart(
    points: Sequence[Point], *, max_cost_usd: float | None, max_tokens: int | None
) -> Markup:
    """Two panels, cumulative cost and cumulative tokens per transition, as one `<svg>`."""
    series = (
        Series("cumulative cost (USD)", lambda p: p.cost_usd, usd, max_cost_usd, "cost"),
        Series(
            "cumulative tokens",
            lambda p: float(p.tokens),
            count,
            float(max_tokens) if max_tokens is not None else None,
            "tokens",
        ),
    )
    height = PANEL_HEIGHT * len(series)
    parts = [
        f'<svg class="budget-chart" xmlns="http://www.w3.org/2000/svg" role="img" '
        f'viewBox="0 0 {WIDTH} {height}" width="{WIDTH}" height="{height}">',
        "<title>Budget consumed over the run's transitions</title>",
    ]
    for index, one in enumerate(series):
        parts.append(_panel(points, one, index * PANEL_HEIGHT))
    parts.append("</svg>")
    # Every value from the file (a point's label and detail) went through `escape`.
    return Markup("\n".join(parts))


def _panel(points: Sequence[Point], series: Series, top: int) -> str:
    values = [series.value(p) for p in points]
    peak = max(values, default=0.0)
    limit = series.limit
    show_limit = limit is not None and limit > 0 and limit <= max(peak, 1e-12) * _LIMIT_SHOWN_WITHIN
    y_max = max(peak, limit if show_limit and limit is not None else 0.0) or 1.0
    plot_w = WIDTH - _LEFT - _RIGHT
    plot_h = PANEL_HEIGHT - _TOP - _BOTTOM
    y0 = top + _TOP + plot_h

    def x_at(i: int) -> float:
        return _LEFT + (plot_w * i / (len(points) - 1) if len(points) > 1 else plot_w / 2)

    def y_at(value: float) -> float:
        return y0 - plot_h * value / y_max

    title = series.title
    if limit is not None:
        title += f" — limit {series.fmt(limit)}"
    out = [
        f'<g class="panel {series.css_class}">',
        f'<text class="panel-title" x="{_LEFT}" y="{top + 16}">{escape(title)}</text>',
        f'<line class="axis" x1="{_LEFT}" y1="{y0}" x2="{WIDTH - _RIGHT}" y2="{y0}"/>',
        f'<line class="axis" x1="{_LEFT}" y1="{top + _TOP}" x2="{_LEFT}" y2="{y0}"/>',
    ]
    for fraction in (0.5, 1.0):
        y = y_at(y_max * fraction)
        out.append(
            f'<line class="grid" x1="{_LEFT}" y1="{y:.1f}" x2="{WIDTH - _RIGHT}" y2="{y:.1f}"/>'
        )
    for fraction in (0.0, 0.5, 1.0):
        y = y_at(y_max * fraction)
        label = escape(series.fmt(y_max * fraction))
        out.append(
            f'<text class="tick" x="{_LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">{label}</text>'
        )
    step = max(1, -(-len(points) // _MAX_X_LABELS))
    for i, point in enumerate(points):
        if i % step == 0 or i == len(points) - 1:
            out.append(
                f'<text class="tick" x="{x_at(i):.1f}" y="{y0 + 16}" '
                f'text-anchor="middle">{escape(point.label)}</text>'
            )
    if show_limit and limit is not None:
        y = y_at(limit)
        out.append(
            f'<line class="limit" x1="{_LEFT}" y1="{y:.1f}" x2="{WIDTH - _RIGHT}" y2="{y:.1f}"/>'
        )
    coords = " ".join(f"{x_at(i):.1f},{y_at(v):.1f}" for i, v in enumerate(values))
    out.append(f'<polyline class="line" points="{coords}"/>')
    for i, (point, value) in enumerate(zip(points, values, strict=True)):
        tip = escape(f"{point.detail}: {series.fmt(value)}")
        out.append(
            f'<circle class="dot" cx="{x_at(i):.1f}" cy="{y_at(value):.1f}" r="3">'
            f"<title>{tip}</title></circle>"
        )
    out.append("</g>")
    return "\n".join(out)
