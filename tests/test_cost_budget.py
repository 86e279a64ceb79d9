"""The engine's cost per iteration stays within the committed budget, counted, never timed.

`benchmarks/cost_budget.py` counts what an iteration of benchmark 1's workload
costs (function calls, bytes allocated, events, SQL statements, bytes stored and
written to the audit file) and `benchmarks/budget.json` holds the budget. Each
measurement runs in a fresh interpreter, so what earlier tests configured
(structlog, logging, caches) cannot move a figure; two run side by side (with
different hash seeds) and must agree, so a figure that is not deterministic is
caught here rather than flaking later. Lowering a budget is free; raising one is
a commit that says why (`python -m benchmarks.cost_budget --write`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

from benchmarks import cost_budget

ROOT = Path(__file__).resolve().parents[1]
TRACED = ("allocated_bytes",)
"""tracemalloc's figure moves by well under 1% between processes (object sizes that
depend on addresses and the hash seed); every other figure is exact."""


def _spawn(*args: str, seed: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONHASHSEED": seed}
    return subprocess.Popen(
        [sys.executable, *args], cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True
    )


def _figures(process: subprocess.Popen[str]) -> dict[str, Any]:
    out, _ = process.communicate(timeout=110)
    assert process.returncode == 0, out
    body: dict[str, Any] = json.loads(out.splitlines()[-1])
    return body


def _agree(first: dict[str, float], second: dict[str, float]) -> list[str]:
    problems = []
    for name, value in first.items():
        other = second[name]
        if name in TRACED:
            if abs(value - other) > 0.01 * max(value, other):
                problems.append(f"{name}: {value} vs {other} (more than 1% apart)")
        elif value != other:
            problems.append(f"{name}: {value} vs {other}")
    return problems


class TestCostBudget:
    def test_the_workloads_cost_no_more_than_their_budget_and_the_same_every_time(
        self,
    ) -> None:
        """Two fresh measurements agree, and no figure exceeds its budget by over 5%."""
        runs = [_spawn("-m", "benchmarks.cost_budget", "--json", seed=s) for s in ("1", "2")]
        first, second = (_figures(run) for run in runs)
        budget = cost_budget.load_budget()
        assert first["python"] == budget["python"], (
            f"the budget was written on Python {budget['python']}, this is {first['python']}: "
            "regenerate it on the CI's Python (python -m benchmarks.cost_budget --write)"
        )
        unstable = {
            workload: problems
            for workload, figures in first["workloads"].items()
            if (problems := _agree(figures, second["workloads"][workload]))
        }
        assert not unstable, f"figures differ between two runs: {unstable}"
        lines = cost_budget.compare(first["workloads"], budget)
        table = cost_budget.report(lines)
        print(table)
        assert not [line for line in lines if line.over], "over budget:\n" + table
        assert {(line.workload, line.figure) for line in lines} == {
            (workload, name)
            for workload, figures in budget["workloads"].items()
            for name in figures
        }, "the budget and the measurement name different figures: regenerate the budget"

    def test_a_pass_over_the_whole_history_each_iteration_goes_over_budget(self) -> None:
        """A `json.dumps` of the history in `perceive` (O(history) per iteration) is caught
        by the run that starts from a long history."""
        script = textwrap.dedent(
            """
            import json
            from benchmarks import cost_budget
            from statemachine_agent.phases.perceive import Perceive

            plain = Perceive.run

            async def run(self, ctx):
                json.dumps(ctx.state.messages)
                return await plain(self, ctx)

            Perceive.run = run
            print(json.dumps({"workloads": {"history": cost_budget.measure("history")}}))
            """
        )
        figures = _figures(_spawn("-c", script, seed="3"))
        lines = cost_budget.compare(figures["workloads"], cost_budget.load_budget())
        over = {line.figure for line in lines if line.over}
        assert "allocated_bytes" in over, cost_budget.report(lines)


class TestCompare:
    def test_a_figure_over_its_budget_by_more_than_the_tolerance_is_over(self) -> None:
        """5% over is allowed, anything beyond it is not; a figure without a budget is over."""
        budget = {"workloads": {"w": {"a": 100.0, "b": 100.0}}}
        lines = cost_budget.compare({"w": {"a": 105.0, "b": 105.2, "c": 1.0}}, budget)
        assert [(line.figure, line.over) for line in lines] == [
            ("a", False),
            ("b", True),
            ("c", True),
        ]
        assert "OVER" in cost_budget.report(lines)

    def test_a_zero_budget_allows_nothing_above_zero(self) -> None:
        """A figure budgeted at 0 (nothing written) may not start costing anything."""
        budget = {"workloads": {"w": {"a": 0.0, "b": 0.0}}}
        lines = cost_budget.compare({"w": {"a": 0.0, "b": 0.1}}, budget)
        assert [line.over for line in lines] == [False, True]
