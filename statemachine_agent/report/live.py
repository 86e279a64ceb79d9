"""The live status line of `statemachine-agent run`, driven by the run's own events.

A real run can take minutes; the status line says where the machine is (state,
iteration, tokens, cost, the tool running) while it works. It is fed as an
audit sink (`Agent(audit=Audit(sinks=[progress]))`), so it shows exactly what the audit file
records, needs no hook into the engine, and configures no logging.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.spinner import Spinner
from rich.text import Text

from statemachine_agent.report.build import Tokens
from statemachine_agent.report.fmt import count, printable, usd


class RunProgress:
    """An audit sink that keeps the figures of the run in progress."""

    def __init__(self) -> None:
        self.state = "starting"
        self.iteration = 0
        self.tokens = 0
        self.cost_usd = 0.0
        self.activity = ""
        """What is happening right now: a model call or a tool running."""
        self.events = 0
        self.on_change: Callable[[RunProgress], None] | None = None

    def write(self, event: Mapping[str, Any]) -> None:
        self.events += 1
        name = event.get("event")
        if name == "run.started":
            self.state = str(event.get("state", self.state))
        elif name == "transition.fired":
            self.state = str(event.get("dest", self.state))
            self._totals(event)
        elif name == "model.requested":
            self.iteration = max(self.iteration, int(event.get("iteration") or 0))
            purpose = event.get("purpose")
            self.activity = (
                f"{purpose} call to {event.get('model')}"
                if purpose
                else (f"calling {event.get('model')}")
            )
        elif name == "model.replied":
            # Tokens show at once; the cost total comes with the transition that follows.
            self.tokens += Tokens.of(event.get("usage")).total
            self.activity = ""
        elif name == "model.failed":
            self.activity = "model call failed"
        elif name == "tool.called":
            self.activity = f"running {event.get('tool')}"
        elif name in ("tool.finished", "tool.failed"):
            self.activity = ""
        elif name == "run.ended":
            self.state = str(event.get("end_state", self.state))
            self._totals(event)
            self.activity = ""
        if self.on_change is not None:
            self.on_change(self)

    def _totals(self, event: Mapping[str, Any]) -> None:
        self.tokens = Tokens.of(event.get("usage_total")).total
        self.cost_usd = float(event.get("cost_usd") or 0.0)

    def close(self) -> None:
        return None

    def line(self) -> str:
        """The status line: `reason · iteration 2 · 1,234 tokens · $0.0123 · running calculate`."""
        parts = [
            self.state,
            f"iteration {self.iteration}",
            f"{count(self.tokens)} tokens",
            usd(self.cost_usd),
        ]
        if self.activity:
            parts.append(self.activity)
        return " · ".join(parts)

    def text(self) -> Text:
        """`line()` as the terminal shows it: plain text (a tool named `[/x]` is a name, not
        rich markup) without the control characters a model or tool may have sent."""
        return Text(printable(self.line()), style="cyan")


@contextmanager
def live_status(progress: RunProgress, console: Console) -> Iterator[bool]:
    """Show `progress.line()` as a spinner on `console` while the block runs.

    Only on a terminal (yields whether it shows): piped or captured output gets no
    control codes. When stdout is the same terminal, its writes are routed above
    the status line; a logger writing to stdout must be made inside the block.
    """
    if not console.is_terminal:
        yield False
        return
    spinner = Spinner("dots", text=progress.text(), style="cyan")
    with Live(
        spinner,
        console=console,
        transient=True,
        refresh_per_second=10,
        redirect_stdout=sys.stdout.isatty(),
        redirect_stderr=False,
    ) as live:

        def show(current: RunProgress) -> None:
            spinner.update(text=current.text())
            live.refresh()

        progress.on_change = show
        try:
            yield True
        finally:
            progress.on_change = None
