"""Suite-wide checks.

The suite runs with the project's own pytest plugin (`make test` passes
`--transition-coverage-fail-under=100`: every row of the table fires somewhere).
That counts test_transitions.py's one-row unit tests too, so this conftest adds
the stricter check: when the whole suite runs, a table row that no *whole run*
fired fails the session (a row only those arranged records reach fails here).
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from statemachine_agent.machine.observers import watch_transitions
from statemachine_agent.machine.run import TransitionRecord
from statemachine_agent.machine.table import ROWS, Row

pytest_plugins = ["pytester"]

FIRED: set[tuple[str, str, str, tuple[str, ...]]] = set()
UNIT_RUN_ID = "run_test"
"""The run id of test_transitions.py's arranged records, which do not count here."""


@pytest.fixture(autouse=True, scope="session")
def collect_fired_transitions() -> Iterator[None]:
    def note(run_id: str, row: Row, record: TransitionRecord) -> None:
        if run_id != UNIT_RUN_ID:
            FIRED.add(row.key)

    with watch_transitions(note):
        yield


def _whole_suite(config: pytest.Config) -> bool:
    if os.environ.get("SMA_ROW_CHECK") == "always":
        return True
    option = config.option
    selected = [str(a) for a in config.args]
    return (
        not option.keyword
        and not option.markexpr
        and not getattr(option, "lf", False)
        and not getattr(option, "deselect", None)
        and all(a.rstrip("/").endswith("tests") for a in selected)
    )


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    forced = "SMA_ROW_CHECK" in os.environ
    if not _whole_suite(session.config) or (session.testsfailed and not forced):
        return
    never = [row.key for row in ROWS if row.key not in FIRED]
    if never:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        lines = "\n".join(f"  {s} --{t}--> {d} via {list(g)}" for s, t, d, g in never)
        message = f"table rows no test fired ({len(never)}):\n{lines}"
        if reporter is not None:
            reporter.write_line(message, red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
