"""Suite-wide checks.

Every `transition.fired` event emitted anywhere in the suite is collected; when
the whole suite runs, a table row that no test fired fails the session. (Each
row also has its own unit test in test_transitions.py, on an arranged record;
this check is about whole runs: a row that only those unit tests reach fails.)
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

from statemachine_agent.audit.events import Emitter
from statemachine_agent.machine.table import ROWS

FIRED: set[tuple[str, str, str, tuple[str, ...]]] = set()
UNIT_RUN_ID = "run_test"
"""The run id of test_transitions.py's arranged records, which do not count here."""


@pytest.fixture(autouse=True, scope="session")
def collect_fired_transitions() -> Iterator[None]:
    original = Emitter.emit

    def emit(self: Emitter, event: str, **payload: Any) -> None:
        if event == "transition.fired" and self.run_id != UNIT_RUN_ID:
            FIRED.add(
                (payload["source"], payload["trigger"], payload["dest"], tuple(payload["via"]))
            )
        original(self, event, **payload)

    Emitter.emit = emit  # type: ignore[method-assign]
    yield
    Emitter.emit = original  # type: ignore[method-assign]


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
