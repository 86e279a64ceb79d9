"""A read-only data-analysis agent over a CSV, where one query is too big to show whole.

The tools only read the file (no tool can change it), so the model may explore
freely. Its first broad query matches hundreds of rows; rather than flooding
the context, the engine cuts the result at `ContextPolicy.max_tool_result_chars`
and says how much was left out ("narrow the query"), and the model narrows it.

Run it: `python examples/data_analysis.py` (offline: a scripted model; the CSV
is written to a temporary directory and removed afterwards).
"""

from __future__ import annotations

import csv
import io
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from statemachine_agent import Agent, Budget, Model, RunResult, ScriptedModel, Tool, tool
from statemachine_agent.policy.context import ContextPolicy
from statemachine_agent.testing import replies
from statemachine_agent.tools import ToolError

REGIONS = ("Kanto", "Kansai", "Chubu", "Kyushu")
PRODUCTS = ("Umbrella", "Raincoat", "Boots")
PRICES = {"Umbrella": 1200, "Raincoat": 4800, "Boots": 6500}
COLUMNS = ("order_id", "month", "region", "product", "units", "revenue")

QUESTION = (
    "Which region sold the most umbrellas in the first half of 2026, "
    "and what did Kansai's umbrella orders look like in March?"
)


def write_orders(path: Path, rows: int = 1200) -> Path:
    """Write a small, deterministic order book: the same numbers on every run."""
    with path.open("w", newline="") as out:
        writer = csv.writer(out)
        writer.writerow(COLUMNS)
        for i in range(rows):
            product = PRODUCTS[(i // 4) % 3]
            units = (i * 7) % 13 + 1
            month = f"2026-{(i // 12) % 6 + 1:02d}"
            writer.writerow([i + 1, month, REGIONS[i % 4], product, units, units * PRICES[product]])
    return path


def analysis_tools(path: Path) -> list[Tool]:
    """The agent's tools, bound to one CSV file, which they only ever read."""

    def read(where: dict[str, str] | None) -> Iterator[dict[str, str]]:
        unknown = sorted(set(where or {}) - set(COLUMNS))
        if unknown:
            raise ToolError(f"Unknown column(s) {unknown}; the columns are {list(COLUMNS)}.")
        with path.open(newline="") as data:
            for row in csv.DictReader(data):
                if all(row[key] == value for key, value in (where or {}).items()):
                    yield row

    @tool
    def list_columns() -> dict[str, Any]:
        """The table's columns, its row count and one example row. Call this first."""
        rows = list(read(None))
        return {"columns": list(COLUMNS), "rows": len(rows), "example": rows[0]}

    @tool(timeout=10.0)
    def query_rows(where: dict[str, str] | None = None) -> str:
        """The rows whose columns equal the given values, as CSV.

        Prefer narrow filters: a broad query returns too many rows to read.

        Args:
            where: Column -> exact value, all of which must match,
                e.g. {"region": "Kansai", "month": "2026-03"}. Omit for every row.
        """
        out = io.StringIO()
        writer = csv.DictWriter(out, fieldnames=COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(read(where))
        return out.getvalue()

    @tool(timeout=10.0)
    def summarize(
        column: str, group_by: str | None = None, where: dict[str, str] | None = None
    ) -> dict[str, Any]:
        """Count, total and mean of a numeric column, optionally per group and filtered.

        Args:
            column: The numeric column to summarize, e.g. "units" or "revenue".
            group_by: A column whose values form the groups, e.g. "region".
            where: Column -> exact value filters, as in query_rows.
        """
        if column not in ("units", "revenue"):
            raise ToolError(f"{column!r} is not numeric; use 'units' or 'revenue'.")
        if group_by is not None and group_by not in COLUMNS:
            raise ToolError(f"Unknown column {group_by!r}; the columns are {list(COLUMNS)}.")
        groups: dict[str, list[int]] = {}
        for row in read(where):
            groups.setdefault(row[group_by] if group_by else "all", []).append(int(row[column]))
        return {
            name: {"count": len(v), "total": sum(v), "mean": round(sum(v) / len(v), 2)}
            for name, v in sorted(groups.items())
        }

    return [list_columns, query_rows, summarize]


def make_model() -> Model:
    """The model that answers. Swap the script for a real model to run it live:

        from statemachine_agent import AnthropicModel
        return AnthropicModel("claude-sonnet-5")  # reads ANTHROPIC_API_KEY

    or `OpenAIModel("gpt-4o-mini")` from `statemachine_agent.models.openai`.
    """
    umbrellas = {"product": "Umbrella"}
    kansai_march = {**umbrellas, "region": "Kansai", "month": "2026-03"}
    return ScriptedModel(
        [
            replies.tool_use("list_columns", {}),
            # Too broad: 400 rows. The engine cuts the result and says so...
            replies.tool_use("query_rows", {"where": umbrellas}),
            # ...so the model narrows the query to what the question asks.
            replies.tool_use(
                "query_rows",
                {"where": kansai_march},
                text="That is too many rows to read; narrowing to Kansai in March.",
            ),
            # Two independent totals in one reply: the engine runs both calls.
            replies.tool_uses(
                ("summarize", {"column": "units", "group_by": "region", "where": umbrellas}),
                ("summarize", {"column": "revenue", "where": kansai_march}),
            ),
            replies.text(
                "Kanto sold the most umbrellas: 706 units over 100 orders, just ahead of "
                "Kansai (704), Chubu (702) and Kyushu (700). In March, Kansai had 17 "
                "umbrella orders, worth ¥136,800 in all."
            ),
        ]
    )


def main() -> RunResult:
    with tempfile.TemporaryDirectory() as folder:
        orders = write_orders(Path(folder) / "orders.csv")
        agent = Agent(
            make_model(),
            tools=analysis_tools(orders),
            system=(
                "You analyse the orders table with read-only tools. Start with "
                "list_columns, filter as narrowly as the question allows, and use "
                "summarize for totals rather than adding rows yourself."
            ),
            # A result longer than this is cut, with a notice, so one query cannot flood
            # the context window (the default, 50,000 characters, suits real models).
            context=ContextPolicy(max_tool_result_chars=2_000),
            budget=Budget(max_iterations=10),
        )
        return agent.run(QUESTION)


if __name__ == "__main__":
    result = main()
    print(result.text)
    print(f"[{result.end_state}] {result.reason}; {result.iterations} model calls")
