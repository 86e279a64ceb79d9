"""The diagram of one agent: only the rows its configuration can reach, from
`agent.diagram(...)` and `statemachine-agent diagram --agent MODULE:ATTR`."""

from __future__ import annotations

import pytest

from statemachine_agent import Agent, ContextPolicy, ScriptedModel, tool
from statemachine_agent.cli import main
from statemachine_agent.diagrams import row_id
from statemachine_agent.machine.table import ROWS
from statemachine_agent.testing import reachable_rows


@tool(requires_approval=True)
def pay(amount: int) -> str:
    """Pay an amount."""
    return f"paid {amount}"


def _edges(mermaid: str) -> list[str]:
    return [line for line in mermaid.splitlines() if " --> " in line and "[*]" not in line]


def test_mermaid_draws_only_the_reachable_rows() -> None:
    """Full: one edge per reachable row, none for a row it rules out (summarize, verify)."""
    agent = Agent(ScriptedModel([]), [pay], stall=None)
    reach = reachable_rows(agent)
    text = agent.diagram(full=True)
    assert isinstance(text, str)
    assert len(_edges(text)) == len(reach.reachable)
    assert "summarize" not in text
    assert "verify" not in text
    assert "awaiting_approval" in text
    assert "The rows agent 'agent' can reach" in text


def test_a_setting_brings_its_rows_into_the_drawing() -> None:
    agent = Agent(ScriptedModel([]), stall=None, context=ContextPolicy(summarize_at_tokens=100))
    assert "summarize" in str(agent.diagram())
    assert "awaiting_approval" not in str(agent.diagram())


def test_the_review_drawing_joins_rows_between_the_same_states() -> None:
    agent = Agent(ScriptedModel([]), stall=None)
    pairs = {(row.source, row.dest) for row in reachable_rows(agent).reachable}
    assert len(_edges(str(agent.diagram()))) == len(pairs)


def test_dot_and_svg_carry_each_reachable_rows_id() -> None:
    agent = Agent(ScriptedModel([]), [pay], stall=None)
    reach = reachable_rows(agent)
    dot = str(agent.diagram("dot", full=True))
    svg = str(agent.diagram("svg", full=True))
    for row in ROWS:
        drawn = f'id="{row_id(row.key)}"' in svg
        assert drawn == (row in reach.reachable), row.key
        assert (f'"{row_id(row.key)}"' in dot) == (row in reach.reachable)
    assert isinstance(agent.diagram("png"), bytes)


def test_an_unknown_format_is_named() -> None:
    with pytest.raises(ValueError, match="must be one of mermaid, dot, svg, png"):
        Agent(ScriptedModel([])).diagram("gif")


def test_the_cli_draws_an_agent(capsys: pytest.CaptureFixture[str]) -> None:
    """`diagram --agent` with `--full` and `--format`: the example agent's rows only."""
    from examples.eval_policies import base

    assert main(["diagram", "--agent", "examples.eval_policies:base", "--full"]) == 0
    out = capsys.readouterr().out
    assert len(_edges(out)) == len(reachable_rows(base).reachable)
    assert main(["diagram", "--agent", "examples.eval_policies:base", "--format", "dot"]) == 0
    assert capsys.readouterr().out.startswith("digraph agent_loop {")


def test_the_cli_names_a_bad_agent_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["diagram", "--agent", "examples.eval_policies:variants"]) == 2
    err = capsys.readouterr().err
    assert "diagram: examples.eval_policies:variants is a list, not an Agent" in err
    assert err.count("\n") == 1
