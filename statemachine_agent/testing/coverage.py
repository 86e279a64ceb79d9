"""Transition coverage: which rows of the table a test suite's runs fired, and how often.

Line coverage says which code ran; this says which *decisions* of the machine a
suite has exercised ("have we ever tested the budget running out mid-tool-call?").
The rows are always read from `table.ROWS`, so a row added to the table is a row
the next report lists, fired or not. `TransitionCoverage.watch()` records through
the engine's observer seam; the pytest plugin (`--transition-coverage`) drives it.

Measured `of="table"`, every row counts. Measured `of="reachable"` (the plugin's
default), only the rows the agents that ran can reach count (the union of their
configurations, `testing.reachable_rows`, learnt from the engine's run observers):
the rows they rule out are listed apart with the setting that rules each out, and the
`crashed` rows, reachable only through a defect, apart again. A suite that tests an
expense agent fully then reads 100%, not the share of a table it can never take.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from html import escape
from typing import TYPE_CHECKING, Any, Literal

from statemachine_agent import diagrams
from statemachine_agent.machine import observers, table
from statemachine_agent.machine.run import TransitionRecord
from statemachine_agent.machine.table import Row

if TYPE_CHECKING:
    from statemachine_agent.machine.settings import RunSettings
    from statemachine_agent.testing.reachability import Reachability
    from statemachine_agent.tools.base import Tool

RowKey = tuple[str, str, str, tuple[str, ...]]
Of = Literal["table", "reachable"]
"""What coverage is measured against: every row of the table, or the reachable ones."""


@dataclass(frozen=True)
class RowCoverage:
    """One row of the table and how many times it fired."""

    row: Row
    fired: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.row.source,
            "trigger": self.row.trigger,
            "guards": list(self.row.guards),
            "dest": self.row.dest,
            "description": self.row.description,
            "fired": self.fired,
        }


class TransitionCoverage:
    """Counts of fired rows, safe to update from any thread (runs happen on many)."""

    def __init__(self, of: Of = "table") -> None:
        if of not in ("table", "reachable"):
            raise ValueError(f"TransitionCoverage: of must be 'table' or 'reachable', not {of!r}")
        self.of: Of = of
        self._counts: Counter[RowKey] = Counter()
        self._lock = threading.Lock()
        self._reach: Reachability | None = None
        self._setups: set[str] = set()

    def observe_run(self, run_id: str, settings: RunSettings, tools: Iterable[Tool]) -> None:
        """The engine's run observer: a run with this configuration is driven, so the
        rows it can reach join the denominator (each configuration analysed once)."""
        from statemachine_agent.testing.reachability import analyse, setup_from

        setup = setup_from(settings, tools)
        key = repr(setup)
        with self._lock:
            if key in self._setups:
                return
            self._setups.add(key)
        self.add_reachability(analyse(setup))

    def add_reachability(self, reach: Reachability) -> None:
        """Count what `reach` can reach too (an agent the suite ran, or a worker's union)."""
        with self._lock:
            self._reach = reach if self._reach is None else self._reach.union(reach)

    @property
    def reachability(self) -> Reachability:
        """The union of the configurations that ran (nothing reachable before any ran)."""
        from statemachine_agent.testing.reachability import Reachability

        with self._lock:
            if self._reach is not None:
                return self._reach
        return Reachability(reachable=(), unreachable={}, defect_rows=())

    def observe(self, run_id: str, row: Row, record: TransitionRecord) -> None:
        """The engine's observer callback: `row` fired once more."""
        with self._lock:
            self._counts[row.key] += 1

    @contextmanager
    def watch(self) -> Iterator[TransitionCoverage]:
        """Count every row fired in this process while the block runs."""
        with observers.watch_transitions(self.observe):
            if self.of == "reachable":
                with observers.watch_runs(self.observe_run):
                    yield self
            else:
                yield self

    # -- merging (pytest-xdist workers send their counts as plain data) ---------------

    def to_plain(self) -> list[list[Any]]:
        """The counts as JSON-able data: `[[source, trigger, dest, [guards], count], ...]`."""
        with self._lock:
            return [[s, t, d, list(g), n] for (s, t, d, g), n in self._counts.items()]

    def merge(self, plain: Iterable[Sequence[Any]]) -> None:
        """Add counts made elsewhere (another worker's `to_plain()`)."""
        with self._lock:
            for source, trigger, dest, guards, count in plain:
                self._counts[(str(source), str(trigger), str(dest), tuple(guards))] += int(count)

    def reach_to_plain(self) -> dict[str, Any]:
        """What the configurations that ran can reach, as JSON-able data (`Reachability`)."""
        return self.reachability.to_dict()

    def merge_reach(self, plain: dict[str, Any]) -> None:
        """Add what another worker's configurations reach (its `reach_to_plain()`)."""
        from statemachine_agent.testing.reachability import Reachability

        by_key = {row.key: row for row in table.ROWS}

        def rows(name: str) -> list[tuple[Row, dict[str, Any]]]:
            found = []
            for item in plain.get(name) or ():
                key = (item["source"], item["trigger"], item["dest"], tuple(item["guards"]))
                if key in by_key:
                    found.append((by_key[key], item))
            return found

        self.add_reachability(
            Reachability(
                reachable=tuple(row for row, _ in rows("reachable")),
                unreachable={row: str(item.get("reason")) for row, item in rows("unreachable")},
                defect_rows=tuple(row for row, _ in rows("defect_rows")),
            )
        )

    # -- reading ----------------------------------------------------------------------

    def all_rows(self) -> list[RowCoverage]:
        """Every row of the table, in table order, with its count."""
        with self._lock:
            return [RowCoverage(row, self._counts.get(row.key, 0)) for row in table.ROWS]

    def rows(self) -> list[RowCoverage]:
        """The rows coverage is measured against (every row, or the reachable ones), in
        table order, with their counts."""
        every = self.all_rows()
        if self.of == "table":
            return every
        keys = {row.key for row in self.reachability.reachable}
        return [r for r in every if r.row.key in keys]

    def unreachable(self) -> list[tuple[RowCoverage, str]]:
        """`of="reachable"`: the rows no configuration that ran can take, with why (a
        count above zero means a run fired one anyway: the analysis is wrong there)."""
        if self.of == "table":
            return []
        counts = {r.row.key: r for r in self.all_rows()}
        return [(counts[row.key], why) for row, why in self.reachability.unreachable.items()]

    def defect_rows(self) -> list[RowCoverage]:
        """`of="reachable"`: the `crashed` rows of reachable states (fired by a defect)."""
        if self.of == "table":
            return []
        keys = {row.key for row in self.reachability.defect_rows}
        return [r for r in self.all_rows() if r.row.key in keys]

    def never_fired(self) -> list[Row]:
        return [r.row for r in self.rows() if not r.fired]

    def percent(self) -> float:
        """The share of the measured rows fired at least once, 0 to 100."""
        rows = self.rows()
        return 100.0 * sum(1 for r in rows if r.fired) / len(rows) if rows else 100.0

    def summary(self) -> str:
        rows = self.rows()
        fired = sum(1 for r in rows if r.fired)
        if self.of == "table":
            return f"{fired}/{len(rows)} rows fired ({self.percent():.1f}%)"
        return (
            f"{fired}/{len(rows)} reachable rows fired ({self.percent():.1f}%); "
            f"{len(self.unreachable())} unreachable, {len(self.defect_rows())} defect rows"
        )

    def table_lines(self) -> list[str]:
        """The terminal table: each row's source, trigger, guards, dest and count,
        then the rows that never fired."""
        rows = self.rows()
        cells = [
            (r.row.source, r.row.trigger, " & ".join(r.row.guards) or "-", r.row.dest, r.fired)
            for r in rows
        ]
        head = ("source", "trigger", "guards", "dest", "fired")
        widths = [max(len(str(c[i])) for c in [head, *cells]) for i in range(4)]

        def line(c: tuple[str, str, str, str, Any]) -> str:
            left = "  ".join(str(c[i]).ljust(widths[i]) for i in range(4))
            return f"{left}  {str(c[4]).rjust(5)}"

        lines = [line(head), *(line(c) for c in cells)]
        never = [r.row for r in rows if not r.fired]
        if never:
            lines.append("")
            lines.append(f"never fired ({len(never)}):")
            lines.extend(f"  {_describe(row)}" for row in never)
        unreachable = self.unreachable()
        if unreachable:
            lines.append("")
            lines.append(f"unreachable by the agents that ran ({len(unreachable)}):")
            for r, why in unreachable:
                fired = f" (fired {r.fired}x anyway)" if r.fired else ""
                lines.append(f"  {_describe(r.row)}: {why}{fired}")
        defects = self.defect_rows()
        if defects:
            lines.append("")
            lines.append(f"defect rows, fired only by a bug ({len(defects)}):")
            lines.extend(f"  {_describe(r.row)}  {r.fired}" for r in defects)
        return lines

    def report(self) -> dict[str, Any]:
        """The JSON report: totals, then every row with its count."""
        rows = self.rows()
        report: dict[str, Any] = {
            "of": self.of,
            "rows_total": len(rows),
            "rows_fired": sum(1 for r in rows if r.fired),
            "percent": round(self.percent(), 2),
            "rows": [r.to_dict() for r in rows],
            "never_fired": [r.to_dict() for r in rows if not r.fired],
        }
        if self.of == "reachable":
            report["reachable"] = [r.to_dict() for r in rows]
            report["unreachable"] = [
                {**r.to_dict(), "reason": why} for r, why in self.unreachable()
            ]
            report["defect_rows"] = [r.to_dict() for r in self.defect_rows()]
        return report

    def _diagram_svg(self, rows: Sequence[RowCoverage], marks: diagrams.Highlight) -> str:
        """Every row of the table, or (`of="reachable"`) only the rows the agents that ran
        can reach: the review diagram of this suite's agents."""
        if self.of == "reachable":
            return _reachable_svg(rows, marks)
        return diagrams.svg(marks, full=True)

    def report_json(self) -> str:
        return json.dumps(self.report(), indent=2, ensure_ascii=False) + "\n"

    def report_html(self) -> str:
        """A self-contained page: the report's diagram of the machine with exercised rows
        drawn as fired (with counts) and unexercised ones marked, then the table."""
        from statemachine_agent.report import page

        rows = self.rows()
        marks = coverage_highlight(rows)
        try:
            svg: str | None = self._diagram_svg(rows, marks)
        except (diagrams.GraphvizNotFoundError, diagrams.GraphvizError):
            svg = None
        fired, visited = diagrams.marked_ids(marks, full=True)
        unfired = diagrams.unfired_ids(marks, full=True)
        diagram = (
            f'<div class="diagram">{page.mark_diagram(svg, fired, visited, unfired)}</div>'
            if svg is not None
            else f'<p class="muted">No diagram: no Graphviz renderer was found '
            f"({escape(diagrams.GRAPHVIZ_HINT)}).</p>"
        )
        body = "\n".join(
            f'<tr class="{"fired" if r.fired else "unfired"}"><td>{escape(r.row.source)}</td>'
            f"<td>{escape(r.row.trigger)}</td><td>{escape(' & '.join(r.row.guards) or '-')}</td>"
            f"<td>{escape(r.row.dest)}</td><td class=num>{r.fired}</td>"
            f"<td>{escape(r.row.description)}</td></tr>"
            for r in rows
        )
        return (
            "<!DOCTYPE html>\n"
            '<html lang="en">\n<head>\n<meta charset="utf-8">\n'
            '<meta http-equiv="Content-Security-Policy" '
            f'content="{page.csp(page.STYLE + _STYLE)}">\n'
            '<link rel="icon" href="data:,">\n'
            f"<title>Transition coverage: {escape(self.summary())}</title>\n"
            f"<style>{page.STYLE}{_STYLE}</style>\n</head>\n<body>\n<main>\n"
            f"<header><h1>Transition coverage</h1><p>{escape(self.summary())}</p></header>\n"
            '<section id="diagram"><h2>State machine</h2>'
            '<p class="legend"><span class="key fired">fired row (×count)</span>'
            '<span class="key unfired">never fired</span></p>'
            f"{diagram}</section>\n"
            '<section id="rows"><h2>Rows</h2><table class="coverage">'
            "<tr><th>source</th><th>trigger</th><th>guards</th><th>dest</th>"
            f"<th>fired</th><th>what it means</th></tr>\n{body}</table></section>\n"
            "</main>\n</body>\n</html>\n"
        )


def _reachable_svg(rows: Sequence[RowCoverage], marks: diagrams.Highlight) -> str:
    """The diagram of only the measured rows (what the agents that ran can reach)."""
    drawn = diagrams.subset_diagram(
        "svg",
        [r.row for r in rows],
        full=True,
        title="The rows the agents that ran can reach",
        trail=marks,
    )
    return drawn if isinstance(drawn, str) else drawn.decode("utf-8")


def coverage_highlight(rows: Sequence[RowCoverage]) -> diagrams.Highlight:
    """What the diagram marks: fired rows with their counts, states entered, and the
    unexercised rows (`Highlight.unfired`)."""
    fired = Counter({r.row.key: r.fired for r in rows if r.fired})
    states: Counter[str] = Counter()
    for r in rows:
        if r.fired:
            states[r.row.dest] += r.fired
    for r in rows:
        if r.fired and r.row.source not in states:
            states[r.row.source] += r.fired
    never = frozenset(r.row.key for r in rows if not r.fired)
    return diagrams.Highlight(fired, states, unfired=never)


def _describe(row: Row) -> str:
    via = f" [{' & '.join(row.guards)}]" if row.guards else ""
    return f"{row.source} --{row.trigger}{via}--> {row.dest}"


_STYLE = """
.legend .key.unfired::before { background: #fff; border: 2px dashed #b42318; }
table.coverage { border-collapse: collapse; width: 100%; font-size: 13px; }
table.coverage td, table.coverage th { padding: 3px 8px; border-bottom: 1px solid #eaecf0;
  text-align: left; }
table.coverage td.num { text-align: right; font-variant-numeric: tabular-nums; }
table.coverage tr.unfired td { color: #b42318; }
g.edge.unfired path { stroke-dasharray: 5 4; }
"""
