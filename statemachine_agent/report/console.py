"""The terminal view of one run: `statemachine-agent inspect AUDIT.jsonl`.

A table a person can scan in a terminal or paste in a ticket: per iteration the
transitions that fired (with the guards of the row that chose each), the tool
calls and how they ended, the tokens and the cost; then the totals and the end.

Everything in it came from an audit file, which anyone can edit, so every cell and
line is a `rich.text.Text` (never a `str`, which rich would parse for `[style]`
markup) whose characters went through `fmt.printable` (no escape sequence reaches
the terminal): `_text` and `_row` are the only ways in.
"""

from __future__ import annotations

from typing import TextIO

from rich.console import Console
from rich.table import Table
from rich.text import Text

from statemachine_agent.audit.chain import Verification
from statemachine_agent.report._reading import REVIEW_EVENTS
from statemachine_agent.report.build import Iteration, Report, SummaryStep, Tokens, describe_calls
from statemachine_agent.report.fmt import count, printable, usd
from statemachine_agent.report.reviews import Reviews

NOTE_WIDTH = 72
"""Notes (a stall, a compaction, ...) are cut to this: the HTML report has them whole."""


def _text(value: str | Text, style: str = "") -> Text:
    """`value` as plain text for the terminal: no markup read, no control characters.

    `printable` keeps the length, so the styles of a `Text` stay where they were."""
    if isinstance(value, Text):
        value.plain = printable(value.plain)
        return value
    return Text(printable(value), style=style)


def _row(table: Table, *cells: str | Text, style: str | None = None) -> None:
    table.add_row(*(_text(cell) for cell in cells), style=style)


def inspect_table(report: Report, *, reviews_apart: bool = False) -> Table:
    """One row per iteration (and one for transitions before the first model call), then totals.

    `reviews_apart`: leave decisions, pauses and resumes out of the rows, because the
    caller lists them whole beside the table (`print_inspect` does), so each shows once."""
    table = Table(title=_text(f"Run {report.run_id}"), title_justify="left", show_lines=True)
    table.add_column("iter", justify="right", no_wrap=True)
    table.add_column("transitions (guards of the row that fired)", ratio=1)
    table.add_column("stop", no_wrap=True)
    table.add_column("tool calls", overflow="fold")
    table.add_column("tokens (in / out)", justify="right", no_wrap=True)
    table.add_column("cost", justify="right", no_wrap=True)
    if report.preamble is not None:
        _row(table, "-", *_cells(report.preamble, reviews_apart))
    gap = report.gap
    for index, iteration in enumerate(report.iterations):
        if gap is not None and index == gap.at:
            _row(table, "…", Text(f"{gap.count:,} iterations left out", style="dim"))
        _row(table, str(iteration.number), *_cells(iteration, reviews_apart))
        for step in report.summaries:
            if step.after_iteration == iteration.number:
                _row(table, "S", *_summary_cells(step))
    tokens = report.tokens
    failed = report.failed_tool_calls
    tools = Text(f"{report.tool_calls} calls")
    if failed:
        tools.append(f", {failed} failed", style="red")
    _row(
        table,
        Text("total", style="bold"),
        f"{report.transitions_fired} transitions",
        describe_calls(report.calls),
        tools,
        _tokens(tokens),
        usd(report.cost_usd),
        style="bold",
    )
    return table


def _cells(iteration: Iteration, reviews_apart: bool) -> tuple[Text, str, Text, str, str]:
    """The cells of one iteration's row, after its number."""
    moves = Text()
    for index, t in enumerate(iteration.transitions):
        if index:
            moves.append("\n")
        moves.append(f"#{t.seq} {t.source} → {t.dest}")
        if t.via:
            moves.append(f" [{' & '.join(t.via)}]", style="dim")
    for note in iteration.notes:
        if reviews_apart and note.event in REVIEW_EVENTS:
            continue
        text = note.text if len(note.text) <= NOTE_WIDTH else note.text[: NOTE_WIDTH - 1] + "…"
        moves.append(f"\n{note.event}: {text}", style="red" if note.error else "yellow")
    left = iteration.left_out
    for n, what in ((left.transitions, "transitions"), (left.notes, "notes")):
        if n:
            moves.append(f"\n+{n:,} {what} left out", style="dim")
    call = iteration.call
    stop = ""
    if call is not None:
        stop = call.stop_reason or ("failed" if call.error else "")
    tools = Text()
    for index, tool in enumerate(iteration.tools):
        if index:
            tools.append("\n")
        if tool.output is None:
            tools.append(f"{tool.tool} (no result)", style="red")
        elif tool.failed:
            tools.append(f"{tool.tool} ✗ {tool.error_kind}", style="red")
        else:
            tools.append(f"{tool.tool} ✓")
        if tool.child is not None:
            end = tool.child.outcome.end_state if tool.child.outcome is not None else "unfinished"
            tools.append(f"\n  ↳ {end}", style="cyan")  # the sub-agent's run, shown below
    for n, what in ((left.tool_calls, "tool calls"), (left.model_calls, "model calls")):
        if n:
            tools.append(f"\n+{n:,} {what} left out", style="dim")
    return moves, stop, tools, _tokens(iteration.tokens), usd(iteration.cost_usd)


def _summary_cells(step: SummaryStep) -> tuple[Text, str, Text, str, str]:
    """A summary's row: what it replaced, and the prompt before and after."""
    what = Text(
        f"summary: {step.messages_replaced} messages ({count(step.tokens_replaced)} tokens) "
        f"→ 1; prompt {count(step.tokens_before)} → {count(step.tokens_after)} tokens",
        style="magenta",
    )
    call = step.call
    tokens = _tokens(call.tokens) if call is not None else ""
    cost = usd(call.cost_usd) if call is not None and call.cost_usd is not None else ""
    return what, call.stop_reason or "" if call is not None else "", Text(), tokens, cost


def _tokens(tokens: Tokens) -> str:
    return f"{count(tokens.total)} ({count(tokens.input)} / {count(tokens.output)})"


def console_for(stream: TextIO) -> Console:
    """A console on `stream`: the terminal's width there, else 120 columns (not rich's
    80), so a piped or captured table keeps each transition on one line."""
    return Console(file=stream, width=None if stream.isatty() else 120)


def print_inspect(
    report: Report,
    console: Console,
    verification: Verification | None = None,
    reviews: Reviews | None = None,
) -> None:
    """The table, then the run's approvals, pauses and resumes (from `reviews`, read
    off the same events), then how the run ended, then whether the audit file's chain
    holds; then each sub-agent run it started, the same way, under its tool call."""
    if report.forked_from is not None:
        console.print(
            _text(f"Forked:     from {report.forked_from} at transition {report.forked_at}", "cyan")
        )
    console.print(inspect_table(report, reviews_apart=reviews is not None))
    _print_left_out(report, console)
    if reviews is not None:
        _print_reviews(report.run_id, reviews, console)
    if verification is not None:
        style = "green" if verification.ok else "bold red"
        console.print(_text(f"Audit:      {verification.summary}", style))
    _print_outcome(report, console)
    for iteration, tool in report.children:
        child = tool.child
        if child is None:  # pragma: no cover - `children` holds only calls with a child
            continue
        console.print(
            _text(
                f"\n↳ Sub-agent {child.agent or tool.tool}, started by call {tool.tool_use_id} "
                f"in iteration {iteration.number}:",
                "bold cyan",
            )
        )
        print_inspect(child, console, reviews=reviews)


def _print_reviews(run_id: str, reviews: Reviews, console: Console) -> None:
    """One line per decision, pause and resume: who decided what, the note, the wait."""
    entries = reviews.of(run_id)
    if not entries:
        return
    console.print(_text("Approvals, pauses and resumes:", "bold"))
    styles = {"pause": "yellow", "resume": "cyan"}
    for entry in entries:
        style = styles.get(entry.kind, "red" if entry.decision == "deny" else "green")
        console.print(_text(f"  {entry.line()}", style))
    left = reviews.left_out.get(run_id)
    if left:
        console.print(_text(f"  +{left:,} more left out", "dim"))


def _print_left_out(report: Report, console: Console) -> None:
    """What the table leaves out, each as a sentence (the table's cells only count it)."""
    if report.gap is not None:
        console.print(_text(report.gap.note, "dim"))
    parts = [report.preamble] if report.preamble is not None else []
    for iteration in (*parts, *report.iterations):
        for line in iteration.left_out.lines():
            console.print(_text(f"Iteration {iteration.number}: {line}", "dim"))


def _print_outcome(report: Report, console: Console) -> None:
    outcome = report.outcome
    if outcome is None:
        console.print(Text("End state:  none (no run.ended event: unfinished or cut short)", "red"))
        return
    style = "green" if outcome.success else "red"
    line = Text("End state:  ")
    line.append(outcome.end_state, style=f"bold {style}")
    line.append(f" ({outcome.reason})")
    console.print(_text(line))
    if outcome.text:
        console.print(_text(f"Answer:     {outcome.text}"))
