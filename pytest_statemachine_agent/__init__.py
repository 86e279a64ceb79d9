"""The statemachine-agent pytest plugin: fixtures, golden trails and transition coverage.

Installed with the package (the `pytest11` entry point `statemachine_agent`), it
stays inert until a test asks for one of its fixtures or the session for one of
its options: this module imports only pytest and the standard library, and the
library itself (whose import pulls in the model SDKs) is imported on first use.
Disable it with `-p no:statemachine_agent`.

Fixtures: `anthropic_server`, `openai_server`, `scripted_model`, `audit_events`.
Options: `--transition-coverage`, `--transition-coverage-fail-under=PERCENT`,
`--transition-coverage-report=FILE`, `--transition-coverage-of={reachable,table}`,
`--update-golden`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from statemachine_agent.models.scripted import ScriptedModel
    from statemachine_agent.testing.coverage import TransitionCoverage
    from statemachine_agent.testing.golden import GoldenMode
    from statemachine_agent.testing.openai_server import FakeOpenAIServer
    from statemachine_agent.testing.server import FakeAnthropicServer

COVERAGE_KEY = "statemachine_agent_coverage"
"""Where an xdist worker puts its counts in `workeroutput` (and the controller reads them)."""
REACH_KEY = "statemachine_agent_reach"
"""Where an xdist worker puts what its runs' configurations can reach."""
GOLDEN_KEY = "statemachine_agent_golden"
"""Where an xdist worker lists the golden files it rewrote."""


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("statemachine_agent", "statemachine-agent")
    group.addoption(
        "--transition-coverage",
        action="store_true",
        default=False,
        help="record every transition-table row fired by every run in the session and "
        "print each row with its count, and the rows that never fired",
    )
    group.addoption(
        "--transition-coverage-fail-under",
        metavar="PERCENT",
        type=float,
        default=None,
        help="fail the session when fewer than PERCENT of the measured rows fired (the "
        "rows the agents that ran can reach, or every row with --transition-coverage-of="
        "table) (implies --transition-coverage)",
    )
    group.addoption(
        "--transition-coverage-of",
        choices=("reachable", "table"),
        default="reachable",
        help="what coverage is measured against: the rows the agents the suite ran can "
        "reach, the rest listed apart with the setting that rules each out and the "
        "crashed rows apart as defect rows (reachable, the default), or every row of the "
        "table (table)",
    )
    group.addoption(
        "--transition-coverage-report",
        metavar="FILE",
        default=None,
        help="write the transition coverage as JSON to FILE, and an HTML page with the "
        "machine's diagram next to it (FILE with the suffix .html) "
        "(implies --transition-coverage)",
    )
    group.addoption(
        "--update-golden",
        action="store_true",
        default=False,
        help="rewrite the golden trail files that assert_trail_matches finds different "
        "or missing, instead of failing",
    )


def pytest_configure(config: pytest.Config) -> None:
    option = config.option
    fail_under = option.transition_coverage_fail_under
    if fail_under is not None and not 0 <= fail_under <= 100:
        raise pytest.UsageError("--transition-coverage-fail-under must be between 0 and 100")
    report = option.transition_coverage_report
    if report is not None and Path(report).suffix == ".html":
        raise pytest.UsageError(
            "--transition-coverage-report names the JSON file (the HTML page goes next to it)"
        )
    if option.transition_coverage or fail_under is not None or report is not None:
        plugin = _CoveragePlugin(config, fail_under, report, option.transition_coverage_of)
        config.pluginmanager.register(plugin, _COVERAGE)
    if option.update_golden:
        config.pluginmanager.register(_GoldenPlugin(config), _GOLDEN)


_COVERAGE = "statemachine_agent_transition_coverage"
_GOLDEN = "statemachine_agent_update_golden"


def _is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


class _CoveragePlugin:
    """Counts rows for the session; under xdist, workers count and the controller merges."""

    def __init__(
        self, config: pytest.Config, fail_under: float | None, report: str | None, of: str
    ) -> None:
        from statemachine_agent.testing.coverage import TransitionCoverage

        self.config = config
        self.fail_under = fail_under
        self.report = Path(report) if report is not None else None
        self.coverage: TransitionCoverage = TransitionCoverage(
            of="table" if of == "table" else "reachable"
        )
        self._watch: AbstractContextManager[Any] = self.coverage.watch()
        self._watch.__enter__()
        self.failed_under: str | None = None
        self.report_error: str | None = None

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        self._watch.__exit__(None, None, None)

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        """xdist: a worker finished; add its counts."""
        output = getattr(node, "workeroutput", None) or {}
        self.coverage.merge(output.get(COVERAGE_KEY) or ())
        if output.get(REACH_KEY):
            self.coverage.merge_reach(output[REACH_KEY])

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if _is_worker(self.config):
            self.config.workeroutput[COVERAGE_KEY] = self.coverage.to_plain()  # type: ignore[attr-defined]
            self.config.workeroutput[REACH_KEY] = self.coverage.reach_to_plain()  # type: ignore[attr-defined]
            return
        if self.report is not None:
            try:
                self.report.parent.mkdir(parents=True, exist_ok=True)
                self.report.write_text(self.coverage.report_json(), encoding="utf-8")
                self.report.with_suffix(".html").write_text(
                    self.coverage.report_html(), encoding="utf-8"
                )
            except OSError as exc:
                self.report_error = f"cannot write the transition coverage report: {exc}"
                session.exitstatus = pytest.ExitCode.TESTS_FAILED
        percent = self.coverage.percent()
        if self.fail_under is not None and percent < self.fail_under:
            self.failed_under = (
                f"transition coverage {percent:.2f}% is under the required "
                f"{self.fail_under:g}% ({self.coverage.summary()})"
            )
            if session.exitstatus == pytest.ExitCode.OK:
                session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if _is_worker(self.config):
            return
        tr = terminalreporter
        tr.write_sep("-", f"transition coverage: {self.coverage.summary()}")
        for line in self.coverage.table_lines():
            tr.write_line(line)
        if self.report_error is not None:
            tr.write_line(f"ERROR: {self.report_error}", red=True, bold=True)
        elif self.report is not None:
            tr.write_line(f"report: {self.report} and {self.report.with_suffix('.html')}")
        if self.failed_under is not None:
            tr.write_line(f"FAIL: {self.failed_under}", red=True, bold=True)


class _GoldenPlugin:
    """`--update-golden`: `assert_trail_matches` rewrites files for the whole session."""

    def __init__(self, config: pytest.Config) -> None:
        from statemachine_agent.testing.golden import updating_golden

        self.config = config
        self._updating: AbstractContextManager[GoldenMode] = updating_golden()
        self.mode = self._updating.__enter__()
        self.written: list[str] = []

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        self._updating.__exit__(None, None, None)

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        output = getattr(node, "workeroutput", None) or {}
        self.written.extend(output.get(GOLDEN_KEY) or ())

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        mine = [str(path) for path in self.mode.written]
        if _is_worker(self.config):
            self.config.workeroutput[GOLDEN_KEY] = mine  # type: ignore[attr-defined]
        self.written[:0] = mine

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if _is_worker(self.config):
            return
        tr = terminalreporter
        tr.write_sep("-", f"golden trails rewritten: {len(self.written)}")
        for path in self.written:
            tr.write_line(f"  {path}")


# -- fixtures -------------------------------------------------------------------------


def _check_server(server: FakeAnthropicServer | FakeOpenAIServer) -> None:
    problems = server.unexpected()
    if problems:
        pytest.fail(
            "\n".join(problems)
            + "\n(call .expect_invalid() on the server if the test sends them on purpose)",
            pytrace=False,
        )


@pytest.fixture
def anthropic_server() -> Iterator[FakeAnthropicServer]:
    """A strict local Messages API on 127.0.0.1 for the real `anthropic` SDK, per test.

    Script it with `.add(replies.text(...), ...)` and the fault helpers
    (`.rate_limited()`, `.server_error()`, `.overloaded()`, `.hang()`); point a model
    at it with `.model()` (or `base_url=.base_url`). `.requests` holds what was sent.
    A request the real API would reject (`.invalid`) fails the test at teardown
    unless the test called `.expect_invalid()`.
    """
    from statemachine_agent.testing.server import FakeAnthropicServer

    with FakeAnthropicServer() as server:
        yield server
    _check_server(server)


@pytest.fixture
def openai_server() -> Iterator[FakeOpenAIServer]:
    """The same for the OpenAI-compatible adapter: a strict local Chat Completions API.

    It takes the same `replies` helpers (sent as the equivalent chat completion) as
    well as `chat_text`/`chat_tool_calls` bodies; `.model()` is an `OpenAIModel`.
    """
    from statemachine_agent.testing.openai_server import FakeOpenAIServer

    with FakeOpenAIServer() as server:
        yield server
    _check_server(server)


@pytest.fixture
def scripted_model() -> Callable[..., ScriptedModel]:
    """A factory: `scripted_model(replies.tool_use(...), replies.text(...))` (or one list)
    returns a `ScriptedModel` answering with those replies, in order."""
    from statemachine_agent.models.scripted import ScriptedModel

    def make(*replies: Any, **options: Any) -> ScriptedModel:
        if len(replies) == 1 and isinstance(replies[0], list | tuple):
            replies = tuple(replies[0])
        return ScriptedModel(replies, **options)

    return make


@pytest.fixture
def audit_events() -> Iterator[list[dict[str, Any]]]:
    """Every event of every run started in the test, in order, as its audit file has it."""
    from statemachine_agent.audit.events import capture_events

    with capture_events() as events:
        yield events


def coverage_of(config: pytest.Config) -> TransitionCoverage | None:
    """The session's transition coverage, when `--transition-coverage` is on (for conftests)."""
    plugin = config.pluginmanager.get_plugin(_COVERAGE)
    return plugin.coverage if isinstance(plugin, _CoveragePlugin) else None


def assert_trail_matches(result: Any, path: str | Path) -> None:
    """`statemachine_agent.testing.assert_trail_matches`, reachable from the plugin too."""
    from statemachine_agent.testing.golden import assert_trail_matches as check

    check(result, path)
