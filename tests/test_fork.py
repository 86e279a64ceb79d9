"""Forking a recorded run (issue 31): a new run from any transition of the original,
which stays byte for byte as it was."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from statemachine_agent import Agent, Audit, ScriptedModel, tool
from statemachine_agent.agent._fork import ForkPointError
from statemachine_agent.persistence.sqlite import SQLiteCheckpointer
from statemachine_agent.testing import replies


@tool
def count(n: int) -> str:
    """Count."""
    return f"counted {n}"


def script(n: int) -> list[object]:
    return [replies.tool_use("count", {"n": i}) for i in range(n)] + [replies.text("Done.")]


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_fork_at_every_transition_starts_there_and_leaves_the_original_alone(
    tmp_path: Path,
) -> None:
    store = SQLiteCheckpointer(tmp_path / "runs.sqlite3")
    agent = Agent(ScriptedModel(script(10)), tools=[count], checkpointer=store,
                  audit=Audit(dir=tmp_path / "audit"), stall=None)  # fmt: skip
    original = agent.run("Count to ten.", run_id="orig")
    assert original.end_state == "completed"
    bodies = [dict(b) for b in store.bodies("orig")]
    audit = digest(tmp_path / "audit" / "orig.jsonl")
    made = refused = 0
    for step in original.trail:
        try:
            fork_id = agent.fork("orig", step.seq, new_run_id=f"f{step.seq}", start=False)
        except ForkPointError:
            refused += 1
            refused_into = step.dest
            assert refused_into in ("act", "completed")
            assert not list(store.bodies(f"f{step.seq}"))  # no run left behind
            continue
        made += 1
        (fork,) = list(store.bodies(str(fork_id)))
        assert fork["state_name"] == step.dest
    assert made
    assert refused
    assert [dict(b) for b in store.bodies("orig")] == bodies
    assert digest(tmp_path / "audit" / "orig.jsonl") == audit


def test_a_fork_with_another_model_runs_to_its_own_end(tmp_path: Path) -> None:
    store = SQLiteCheckpointer(tmp_path / "runs.sqlite3")
    agent = Agent(ScriptedModel(script(3)), tools=[count], checkpointer=store)
    original = agent.run("Count.", run_id="orig")
    at = next(t.seq for t in original.trail if t.dest == "perceive" and t.iteration == 1)
    result = agent.fork("orig", at, model=ScriptedModel([replies.text("Other answer.")]))
    assert not isinstance(result, str)
    assert result.end_state == "completed"
    assert result.text == "Other answer."
    assert [t.key for t in result.trail[:at]] == [t.key for t in original.trail[:at]]
    with pytest.raises(ForkPointError, match="nearest"):
        agent.fork("orig", next(t.seq for t in original.trail if t.dest == "act"))
