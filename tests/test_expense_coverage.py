"""The issue's expense agent: five hand-written tests that take every path it can read
100% of its reachable rows, not a share of a table it can never take; the rows its
configuration rules out are listed apart, each with the setting that does."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from statemachine_agent.testing import reachable_rows
from tests.support import expense_suite

SUITE = Path(expense_suite.__file__)


def test_five_tests_cover_every_reachable_row(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_expense_agent=SUITE.read_text(encoding="utf-8"))
    result = pytester.runpytest(
        "-p",
        "no:cacheprovider",
        "-W",
        "ignore::pytest.PytestAssertRewriteWarning",
        "--transition-coverage-fail-under=100",
        "--transition-coverage-report=cov.json",
    )
    result.assert_outcomes(passed=5)
    assert result.ret == 0
    reach = reachable_rows(expense_suite.expense_agent())
    n, ruled_out = len(reach.reachable), len(reach.unreachable)
    result.stdout.fnmatch_lines(
        [
            f"*transition coverage: {n}/{n} reachable rows fired (100.0%); {ruled_out} "
            f"unreachable, {len(reach.defect_rows)} defect rows*",
            f"unreachable by the agents that ran ({ruled_out}):",
            "  observe --observed [reflection_due]--> reflect: reflection_due: no reflection "
            "interval (`reflection=None`)",
        ]
    )
    assert "never fired (" not in result.stdout.str()
    report = json.loads((pytester.path / "cov.json").read_text(encoding="utf-8"))
    assert report["percent"] == 100.0
    assert len(report["reachable"]) == n
    assert all(row["fired"] for row in report["reachable"])
    assert {row["reason"] for row in report["unreachable"]} >= {
        "summary_due: `ContextPolicy.summarize_at_tokens` is not set",
        "verifier_configured: no verifier configured (`verify=None`)",
        "stall_detected: `stall=None`",
    }


def test_the_docs_cite_the_expense_agents_reachable_rows() -> None:
    """docs/testing.md's figure for the expense agent is the analysis's, so it cannot go
    stale when the table gains a row."""
    docs = (Path(__file__).resolve().parents[1] / "docs" / "testing.md").read_text("utf-8")
    n = len(reachable_rows(expense_suite.expense_agent()).reachable)
    flat = " ".join(docs.split())
    assert f"can take {n} rows" in flat
    assert f"read `{n}/{n} reachable rows fired (100.0%)`" in flat
