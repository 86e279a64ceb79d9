"""Forking a recorded run (issue 31): a new run from any transition of the original,
which stays byte for byte as it was."""

from __future__ import annotations

import contextlib
import hashlib
import re
from pathlib import Path
from typing import Any

import pytest

from statemachine_agent import Agent, Audit, RunResult, ScriptedModel, StallPolicy, tool
from statemachine_agent.agent._fork import ForkPointError
from statemachine_agent.cli import main
from statemachine_agent.machine.engine import CARRIED
from statemachine_agent.models.anthropic import AnthropicModel
from statemachine_agent.persistence.sqlite import SQLiteCheckpointer
from statemachine_agent.replay import replay
from statemachine_agent.testing import FakeAnthropicServer, replies


@tool
def count(n: int) -> str:
    """Count."""
    return f"counted {n}"


def script(n: int) -> list[dict[str, Any]]:
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
        # A written transition's fork starts in the state it entered; a carried one's
        # (out of perceive, observe or act) from the last write before it.
        assert fork["seq"] <= step.seq
        if fork["seq"] == step.seq:
            assert fork["state_name"] == step.dest
        else:
            assert step.source in CARRIED
            entered = original.trail[fork["seq"] - 1].dest if fork["seq"] else "perceive"
            assert fork["state_name"] == entered
            resumed = agent.resume(str(fork_id))
            assert [t.key for t in resumed.trail[: step.seq]] == [
                t.key for t in original.trail[: step.seq]
            ]
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


def test_a_fork_with_another_stall_policy_runs_to_its_own_end(tmp_path: Path) -> None:
    """The original repeats a call with no stall detection and completes; forked before
    its first model call with a stall policy, the same replies stall instead."""
    same = [replies.tool_use("count", {"n": 1}) for _ in range(6)] + [replies.text("Done.")]
    store = SQLiteCheckpointer(tmp_path / "runs.sqlite3")
    agent = Agent(ScriptedModel(same), tools=[count], checkpointer=store, stall=None)
    original = agent.run("Count.", run_id="orig")
    assert original.end_state == "completed"
    result = agent.fork("orig", 1, model=ScriptedModel(same), stall=StallPolicy())
    assert not isinstance(result, str)
    assert result.end_state == "stalled", result.reason
    assert "intervene" in [t.dest for t in result.trail]
    assert "intervene" not in [t.dest for t in original.trail]


def test_the_forks_replay_follows_the_original_to_the_fork_point(tmp_path: Path) -> None:
    """A fork's audit file begins with the original's events, so its replay goes through
    the original's transitions first, then the fork's own, matching both."""
    store = SQLiteCheckpointer(tmp_path / "runs.sqlite3")
    audit = Audit(dir=tmp_path / "audit")
    agent = Agent(ScriptedModel(script(4)), tools=[count], checkpointer=store, audit=audit,
                  stall=None)  # fmt: skip
    original = agent.run("Count.", run_id="orig")
    recorded = replay(tmp_path / "audit" / "orig.jsonl").recorded
    for at in (1, 4, 8):
        result = agent.fork("orig", at, new_run_id=f"f{at}", model=ScriptedModel(script(1)))
        assert not isinstance(result, str)
        assert result.end_state == "completed"
        report = replay(tmp_path / "audit" / f"f{at}.jsonl")
        assert report.matched, report.difference
        assert report.replayed[:at] == recorded[:at]
        assert len(report.replayed) == len(result.trail)
    assert [t.dest for t in original.trail][-1] == "completed"


class TestTheCommand:
    def test_fork_prints_the_new_id_and_runs_inspect_and_report_name_the_origin(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.chdir(tmp_path)
        box: list[Agent] = []

        @tool
        def tally(n: int) -> str:
            """Tally."""
            if n == 0:
                box[0].steer("orig", "<script>alert(1)</script> count on", by="<i>ops</i>")
            return f"tallied {n}"

        moves = [replies.tool_use("tally", {"n": i}) for i in range(2)] + [replies.text("ok")]
        agent = Agent(ScriptedModel(moves), tools=[tally], checkpointer="runs.sqlite3",
                      audit=Audit(dir="audit"), stall=None)  # fmt: skip
        box.append(agent)
        original = agent.run("Tally.", run_id="orig")
        agent.close()
        at = next(t.seq for t in original.trail if t.via == ("steering_waiting",)) + 1
        assert main(["fork", "--store", "runs.sqlite3", "orig", "--at", str(at),
                     "--new-run-id", "fork-1"]) == 0  # fmt: skip
        assert capsys.readouterr().out == "fork-1\n"
        assert main(["runs", "--store", "runs.sqlite3"]) == 0
        rows = {line.split()[0]: line.split() for line in capsys.readouterr().out.splitlines()}
        assert f"orig@{at}" in rows["fork-1"]
        assert "orig@" not in " ".join(rows["orig"])
        assert main(["inspect", "audit/fork-1.jsonl"]) == 0
        shown = capsys.readouterr().out
        assert f"Forked:     from orig at transition {at}" in shown
        assert main(["report", "audit/fork-1.jsonl", "-o", "fork.html"]) == 0
        page = (tmp_path / "fork.html").read_text()
        assert f"forked from <code>orig</code> at transition {at}" in page
        assert "steered by &lt;i&gt;ops&lt;/i&gt;: &lt;script&gt;alert(1)&lt;/script&gt;" in page
        assert "<script>alert" not in page

    def test_a_refused_point_is_one_line_naming_the_nearest_and_leaves_no_run(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        db = tmp_path / "runs.sqlite3"
        agent = Agent(ScriptedModel(script(1)), tools=[count], checkpointer=db)
        original = agent.run("Count.", run_id="orig")
        agent.close()
        into_act = next(t.seq for t in original.trail if t.dest == "act")
        argv = ["fork", "--store", str(db), "orig", "--new-run-id", "nope", "--at"]
        for at, said in [
            (str(into_act), f"enters act, between .* \\(the nearest that can: {into_act - 1}, "),
            ("99", "the run has transitions 1 to"),
            ("0", "counted from 1"),
        ]:
            with contextlib.suppress(SystemExit):  # argparse's own refusals exit 2
                assert main([*argv, at]) == 2
            err = capsys.readouterr().err
            assert err.count("\n") == 1
            assert re.search(said, err), err
        assert main(["fork", "--store", str(db), "ghost", "--at", "1"]) == 2
        assert capsys.readouterr().err == (
            "statemachine-agent: error: fork: no checkpoints for run 'ghost'\n"
        )
        with SQLiteCheckpointer(db) as store:
            assert [r.run_id for r in store.runs()] == ["orig"]


class TestAForksToolCalls:
    """A fork is a run of its own: its calls are keyed by its id, and what the original
    recorded before the fork point is history, not work to do again."""

    @staticmethod
    def recorded(tmp_path: Path, ledger: list[tuple[str, int]]) -> tuple[Agent, RunResult]:
        @tool
        def pay(amount: int, idempotency_key: str) -> str:
            """Pay an amount, once per key (as the docs advise for side effects).

            Args:
                amount: in cents.
            """
            if any(key == idempotency_key for key, _ in ledger):
                return "already paid"
            ledger.append((idempotency_key, amount))
            return f"paid {amount}"

        moves = [
            replies.tool_use("pay", {"amount": 5}, id="toolu_a"),
            replies.tool_use("pay", {"amount": 7}, id="toolu_b"),
            replies.text("Paid."),
        ]
        agent = Agent(ScriptedModel(moves), tools=[pay], checkpointer=tmp_path / "runs.sqlite3",
                      stall=None)  # fmt: skip
        original = agent.run("Pay the two invoices.", run_id="orig")
        assert original.end_state == "completed"
        assert ledger == [("orig:toolu_a", 5), ("orig:toolu_b", 7)]
        return agent, original

    def test_every_fork_after_a_call_keys_its_own_calls_and_runs_none_of_the_originals(
        self, tmp_path: Path
    ) -> None:
        """Forked at every transition between the first call's `act` and the second's,
        each fork's model (through the SDK) calls the tool again, with the id the
        original's later call had: that call runs under the fork's key, the first
        payment is in the fork's history once and is never made again."""
        ledger: list[tuple[str, int]] = []
        agent, original = self.recorded(tmp_path, ledger)
        acts = [t.seq for t in original.trail if t.dest == "act"]
        points = list(range(acts[0] + 1, acts[1]))
        assert len(points) >= 3  # observe, perceive, reason at least
        fork_moves = [replies.tool_use("pay", {"amount": 9}, id="toolu_b"), replies.text("Paid.")]
        with FakeAnthropicServer(fork_moves * len(points)) as server:
            model = AnthropicModel("claude-sonnet-4-5", base_url=server.base_url,
                                   api_key="sk-ant-test-key", max_retries=0)  # fmt: skip
            for at in points:
                before = list(ledger)
                result = agent.fork("orig", at, new_run_id=f"f{at}", model=model)
                assert isinstance(result, RunResult)
                assert result.end_state == "completed", result.reason
                assert ledger == [*before, (f"f{at}:toolu_b", 9)]
                results = [b for m in result.messages if isinstance(m["content"], list)
                           for b in m["content"] if b.get("type") == "tool_result"]  # fmt: skip
                assert [(r["tool_use_id"], r["content"]) for r in results] == [
                    ("toolu_a", "paid 5"), ("toolu_b", "paid 9")]  # fmt: skip
            assert server.unexpected() == []
            assert server.invalid_requests == []
        assert [amount for _, amount in ledger] == [5, 7] + [9] * len(points)
        assert [key for key, _ in ledger if key.endswith("toolu_a")] == ["orig:toolu_a"]

    def test_a_fork_whose_model_repeats_a_recorded_call_id_does_not_run_it_again(
        self, tmp_path: Path
    ) -> None:
        """The fork's history holds the first call's result; a reply naming that call's
        id again gets an error result, not a second payment under any key."""
        ledger: list[tuple[str, int]] = []
        agent, original = self.recorded(tmp_path, ledger)
        at = next(t.seq for t in original.trail if t.dest == "perceive" and t.iteration == 1)
        again = [replies.tool_use("pay", {"amount": 5}, id="toolu_a"), replies.text("Done.")]
        result = agent.fork("orig", at, new_run_id="again",
                            model=ScriptedModel(again, validate=False))  # fmt: skip
        assert isinstance(result, RunResult)
        assert ledger == [("orig:toolu_a", 5), ("orig:toolu_b", 7)]
        last = [b for b in result.messages[-2]["content"] if b.get("type") == "tool_result"]
        assert last[0]["is_error"] is True
        assert "reused the id 'toolu_a'" in last[0]["content"]
