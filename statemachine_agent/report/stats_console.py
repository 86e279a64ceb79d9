"""The terminal view of the fleet: `statemachine-agent stats PATH...`.

Tables a person scans in a terminal or pastes into a ticket: the files read, how runs
ended (with iterations, cost and wall time per end state), the rows that never fired,
approvals, stalls, and the files left out. Names in it come from audit files (end
states, reviewers, rows, paths), which anyone can edit, so every cell is a
`rich.text.Text` of `fmt.printable` text (`_text`): never markup, never a control
sequence.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from rich.console import Console
from rich.table import Table
from rich.text import Text

from statemachine_agent.report.fmt import count, duration, printable, usd
from statemachine_agent.report.stats import Figures, FileProblem, FleetStats


def _text(value: object, style: str = "") -> Text:
    return Text(printable(value), style=style)


def _row(table: Table, *cells: object) -> None:
    table.add_row(*(cell if isinstance(cell, Text) else _text(cell) for cell in cells))


def _figures(figures: Figures, show: Callable[[float], str]) -> str:
    """`median / p90 / max`, `~` before the estimated ones (past the sample cap)."""
    if figures.median is None or figures.p90 is None or figures.max is None:
        return "-"
    approx = "" if figures.exact else "~"
    return f"{approx}{show(figures.median)} / {approx}{show(figures.p90)} / {show(figures.max)}"


def _number(value: float) -> str:
    return f"{value:g}" if value != int(value) else count(value)


def files_line(fleet: FleetStats) -> str:
    """How many files were read, counted, refused and skipped, in one sentence."""
    return (
        f"Read {fleet.files_read:,} audit files: {fleet.files_counted:,} counted, "
        f"{fleet.not_verified_count:,} do not verify (not counted); "
        f"{fleet.skipped_count:,} skipped. "
        f"{fleet.runs:,} runs and {fleet.sub_agent_runs:,} sub-agent runs."
    )


def end_state_table(fleet: FleetStats) -> Table:
    table = Table(
        title=_text("How runs ended (figures: median / p90 / max; ~ estimated)"),
        title_justify="left",
    )
    table.add_column("end state")
    table.add_column("runs", justify="right")
    table.add_column("sub-agent runs", justify="right")
    table.add_column("iterations", justify="right", no_wrap=True)
    table.add_column("cost", justify="right", no_wrap=True)
    table.add_column("wall time", justify="right", no_wrap=True)
    for end in fleet.end_states:
        _row(
            table,
            end.end_state,
            f"{end.runs:,}",
            f"{end.sub_agent_runs:,}",
            _figures(end.iterations, _number),
            _figures(end.cost_usd, usd),
            _figures(end.wall_s, duration),
        )
    return table


def rows_table(fleet: FleetStats) -> Table:
    """Every row of the table with how often it fired; never-fired rows stand out."""
    table = Table(title=_text("Rows of the transition table"), title_justify="left")
    table.add_column("fired", justify="right")
    table.add_column("row (source --trigger [guards]--> dest)")
    for row in fleet.rows:
        style = "" if row.fired else "red"
        _row(
            table, _text(f"{row.fired:,}" if row.fired else "never", style), _text(row.label, style)
        )
    for row in fleet.unknown_rows:
        _row(table, f"{row.fired:,}", _text(f"{row.label} (not in the table)", "yellow"))
    return table


def _counts(counts: Mapping[str, int]) -> str:
    return ", ".join(f"{name} {n:,}" for name, n in counts.items()) or "-"


def approvals_line(fleet: FleetStats) -> str:
    approvals = fleet.approvals
    return (
        f"Approvals: {approvals.count:,} decisions ({_counts(approvals.by_decision)}), "
        f"decided by {_counts(approvals.by_decider)}; people's decisions waited "
        f"{_figures(approvals.wait_s, duration)} (median / p90 / max)"
    )


def approvals_table(fleet: FleetStats) -> Table:
    approvals = fleet.approvals
    table = Table(title=_text("Approvals by reviewer"), title_justify="left")
    table.add_column("reviewer")
    table.add_column("decisions")
    table.add_column("wait (median / p90 / max)", justify="right")
    for reviewer in approvals.reviewers:
        _row(
            table,
            reviewer.reviewer,
            _counts(reviewer.decisions),
            _figures(reviewer.wait_s, duration),
        )
    return table


def stalls_line(fleet: FleetStats) -> str:
    stalls = fleet.stalls
    return (
        f"Stalls: {stalls.detections:,} detected, {stalls.interventions:,} interventions in "
        f"{stalls.runs:,} runs, which ended: {_counts(stalls.ended)}"
    )


def _problems(console: Console, title: str, problems: tuple[FileProblem, ...], total: int) -> None:
    if not total:
        return
    console.print(_text(f"{title} ({total:,}):", "bold red"))
    for problem in problems:
        console.print(_text(f"  {problem.path}: {problem.problem}", "red"))
    if total > len(problems):
        console.print(_text(f"  +{total - len(problems):,} more not named", "dim"))


def print_stats(fleet: FleetStats, console: Console) -> None:
    """The whole terminal view, top to bottom."""
    console.print(_text(files_line(fleet), "bold"))
    console.print(end_state_table(fleet))
    never = len(fleet.never_fired)
    console.print(
        _text(f"{never} of {len(fleet.rows)} rows never fired.", "red" if never else "green")
    )
    console.print(rows_table(fleet))
    console.print(_text(approvals_line(fleet)))
    if fleet.approvals.reviewers:
        console.print(approvals_table(fleet))
    console.print(_text(stalls_line(fleet)))
    _problems(console, "Files that do not verify", fleet.not_verified, fleet.not_verified_count)
    _problems(console, "Files skipped", fleet.skipped, fleet.skipped_count)
