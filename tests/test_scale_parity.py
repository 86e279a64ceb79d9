"""One machine, three engines: the same scripted run ends the same way everywhere.

The engine only swaps the `Effects`; the machine, its guards and the phases are
the same code. So each scenario must reach the same end state with the same
transcript and the same trail (every transition and guard verdict) in
process, as a DBOS workflow and as a Temporal workflow: the payments run (two
concurrent lookups, two sequential payments, an answer) and the commit run
(a read, two payments staged, a verifier that accepts, then `commit` runs both;
issue 34). Only the elapsed times differ, since each engine has its own clock.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from statemachine_agent import Agent, ScriptedModel, SQLiteCheckpointer
from statemachine_agent.durable import (
    UnknownAgentError,
    agent_factory,
    build_agent,
    register_agent,
    unregister_agent,
)
from statemachine_agent.durable.codec import result_from_plain
from statemachine_agent.durable.devserver import TemporalDevServer
from statemachine_agent.effects import dbos
from statemachine_agent.effects.base import Effects, InProcessEffects
from statemachine_agent.machine.result import RunResult
from tests.support import scale_agents as agents

ROOT = Path(__file__).resolve().parent.parent
RUN_ID = "run_parity"
PROMPT = "Pay my bills."
SCENARIOS: dict[str, Callable[[Effects], Agent]] = {
    agents.PAYMENTS: agents.payments,
    agents.COMMIT: agents.commit,
}
"""Each scenario's registered name and its factory (the reference builds it directly)."""
TOOL_CALLS = {
    agents.PAYMENTS: ["toolu_look_a", "toolu_look_b", "toolu_pay5", "toolu_pay7"],
    agents.COMMIT: ["toolu_read", "toolu_pay5", "toolu_pay7", "toolu_note_a", "toolu_note_b"],
}
"""The tool calls each scenario makes, each exactly once."""


def in_process(tmp_path: Path, agent: str) -> RunResult:
    return build_agent(agent, InProcessEffects()).run(PROMPT, run_id=RUN_ID)


def on_dbos(tmp_path: Path, agent: str) -> RunResult:
    dbos.launch(dbos.dbos_config(dbos.sqlite_url(tmp_path / "dbos.sqlite")))
    try:
        return asyncio.run(dbos.run_agent(agent, PROMPT, run_id=RUN_ID))
    finally:
        dbos.shutdown()


def on_temporal(tmp_path: Path, agent: str) -> RunResult:
    """A worker and a client in child processes (see tests/support/scale_temporal.py)."""
    command = [sys.executable, "-m", "tests.support.scale_temporal"]
    with TemporalDevServer(log_file=tmp_path / "server.log") as server:
        worker = subprocess.Popen(
            [*command, "worker", server.address, "parity", "parity"],
            cwd=ROOT, env=dict(os.environ), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )  # fmt: skip
        try:
            client = subprocess.run(
                [*command, "run", server.address, "parity", agent, RUN_ID, PROMPT],
                cwd=ROOT, capture_output=True, text=True, timeout=120,
            )  # fmt: skip
        finally:
            worker.terminate()
            worker.communicate(timeout=20)
    assert client.returncode == 0, client.stderr[-3000:]
    return result_from_plain(json.loads(client.stdout.strip().splitlines()[-1])["result"])


ENGINES = {"in-process": in_process, "dbos": on_dbos, "temporal": on_temporal}


def shape(result: RunResult) -> dict[str, Any]:
    """Everything a run produced except its timings."""
    trail = []
    for step in result.trail:
        plain = step.to_dict()
        plain.pop("elapsed_s")
        trail.append(plain)
    return {
        "end_state": result.end_state,
        "text": result.text,
        "reason": result.reason,
        "run_id": result.run_id,
        "iterations": result.iterations,
        "turn": result.turn,
        "usage": result.usage,
        "cost_usd": result.cost_usd,
        "messages": result.messages,
        "trail": trail,
        "data": result.data,
        "details": result.details,
    }


def reference(agent: str) -> dict[str, Any]:
    """The scenario run in process with the default effects, the agent built directly."""
    return shape(SCENARIOS[agent](InProcessEffects()).run(PROMPT, run_id=RUN_ID))


class TestParity:
    @pytest.mark.parametrize("agent", sorted(SCENARIOS))
    @pytest.mark.parametrize("engine", sorted(ENGINES))
    def test_same_end_state_transcript_and_trail(
        self, engine: str, agent: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The run ends in the same state, with the same transcript and trail, on each
        engine, and made each tool call once (the commit run's staged payments too)."""
        expected = reference(agent)
        ledger = tmp_path / "ledger"
        monkeypatch.setenv(agents.LEDGER_ENV, str(ledger))
        result = ENGINES[engine](tmp_path, agent)
        assert result.end_state == "completed"
        got = shape(result)
        assert got["messages"] == expected["messages"]
        assert got["trail"] == expected["trail"]
        assert got == expected
        through = [step["dest"] for step in got["trail"]][-3:]
        assert (through == ["verify", "commit", "completed"]) == (agent == agents.COMMIT)
        committed = [c["ref"] for c in (got["details"] or {}).get("committed", [])]
        assert committed == (["S1", "S2", "S3", "S4"] if agent == agents.COMMIT else [])
        ran = Counter(key for _, kind, key in agents.ledger_lines(ledger) if kind == "tool")
        assert ran == Counter(f"{RUN_ID}:{call}" for call in TOOL_CALLS[agent])


class TestRegistry:
    """Workers rebuild agents by name; the registry refuses agents that would not be durable."""

    def test_unknown_name_lists_the_registered_ones(self) -> None:
        """Asking for an unregistered agent names the ones this process knows."""
        with pytest.raises(UnknownAgentError, match=agents.PAYMENTS):
            agent_factory("no-such-agent")

    def test_a_name_keeps_its_factory(self) -> None:
        """Another factory under a taken name is refused; the same one again is harmless."""
        register_agent(agents.PAYMENTS, agents.payments)
        with pytest.raises(ValueError, match="already registered"):
            register_agent(agents.PAYMENTS, agents.approval)

    def test_factory_must_use_the_engine_effects(self) -> None:
        """An agent built on other effects would escape the engine, so it is refused."""
        register_agent("scale-escapes", lambda effects: agents.payments(InProcessEffects()))
        try:
            with pytest.raises(TypeError, match="ignored its effects"):
                build_agent("scale-escapes", InProcessEffects())
        finally:
            unregister_agent("scale-escapes")

    def test_checkpointer_is_refused(self, tmp_path: Path) -> None:
        """The engine records the run itself; a store would get replayed checkpoints twice."""

        def factory(effects: Effects) -> Agent:
            store = SQLiteCheckpointer(tmp_path / "runs.sqlite3")
            return Agent(ScriptedModel([]), effects=effects, checkpointer=store)

        register_agent("scale-checkpointed", factory)
        try:
            with pytest.raises(ValueError, match="checkpointer"):
                build_agent("scale-checkpointed", InProcessEffects())
        finally:
            unregister_agent("scale-checkpointed")

    def test_no_in_memory_store_on_an_engine(self) -> None:
        """An approval agent gets an in-memory store in process, none on an engine's effects."""
        from statemachine_agent.replay import ReplayEffects

        assert agents.approval(InProcessEffects()).checkpointer is not None
        assert build_agent(agents.APPROVAL, ReplayEffects([])).checkpointer is None

    def test_progress_model_answers_by_turn_not_by_call(self) -> None:
        """One model answers a second run as it did the first (a call count would not)."""
        agent = agents.payments(InProcessEffects())
        first = agent.run(PROMPT, run_id="run_a")
        again = agent.run(PROMPT, run_id="run_b")
        assert again.end_state == "completed"
        assert again.messages == first.messages
