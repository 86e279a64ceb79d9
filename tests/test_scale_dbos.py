"""Agents as DBOS workflows: SQLite embedded, Postgres shared, queues, crashes and recovery."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from dbos import DBOS, DBOSClient
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Tracer

from statemachine_agent import Approve
from statemachine_agent.audit.chain import verify_file
from statemachine_agent.audit.sink import read_events
from statemachine_agent.durable import UnknownAgentError
from statemachine_agent.effects import dbos
from statemachine_agent.testing.postgres import LocalPostgres
from tests.support import scale_agents as agents
from tests.support.scale_agents import (
    assert_one_trace,
    assert_recovered_trace,
    ledger_lines,
    run_spans,
)

ROOT = Path(__file__).resolve().parent.parent
PAYMENT_STEPS = [
    "scale-payments:clock",
    "scale-payments:model:claude-sonnet-5",
    "scale-payments:tool:lookup",
    "scale-payments:tool:lookup",
    "scale-payments:model:claude-sonnet-5",
    "scale-payments:tool:pay",
    "scale-payments:tool:pay",
    "scale-payments:model:claude-sonnet-5",
]


@pytest.fixture
def ledger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh ledger every model call and tool execution of this process writes to."""
    path = tmp_path / "ledger"
    monkeypatch.setenv(agents.LEDGER_ENV, str(path))
    return path


@pytest.fixture(scope="class")
def embedded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """DBOS launched in this process on a SQLite system database (no server)."""
    path = tmp_path_factory.mktemp("embedded") / "dbos.sqlite"
    dbos.launch(dbos.dbos_config(dbos.sqlite_url(path)), retry_interval_seconds=0.05)
    try:
        yield path
    finally:
        dbos.shutdown()


@pytest.fixture(scope="module")
def postgres() -> Iterator[LocalPostgres]:
    """One PostgreSQL server on 127.0.0.1 for the module; each test takes its own database."""
    with LocalPostgres() as server:
        yield server


def database(server: LocalPostgres, name: str) -> str:
    """A system database URL on `server` (DBOS creates the database on first launch)."""
    return f"{server.dsn.rsplit('/', 1)[0]}/{name}"


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def in_memory_tracer() -> tuple[InMemorySpanExporter, Tracer]:
    """A tracer of the caller (a service enqueuing runs), read back in memory."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return exporter, provider.get_tracer("scale-tests")


def hex_ids(span: ReadableSpan) -> tuple[str, str]:
    """The trace id and span id of `span`, in hex as W3C writes them."""
    assert span.context is not None
    return f"{span.context.trace_id:032x}", f"{span.context.span_id:016x}"


def counts(path: Path) -> Counter[str]:
    """How often each model turn or tool call ran, whichever process ran it."""
    return Counter(key for _, _, key in ledger_lines(path))


class TestEmbedded:
    """One process, SQLite: the default when one machine is enough."""

    def test_run_is_one_workflow_of_named_steps(self, embedded: Path, ledger: Path) -> None:
        """The run is the workflow `run_id`; each effect is a step named by agent and tool."""
        result = run(dbos.run_agent(agents.PAYMENTS, "Pay my bills.", run_id="run_sqlite"))
        assert result.end_state == "completed"
        assert result.text == agents.FINAL_TEXT
        assert result.run_id == "run_sqlite"
        steps = DBOS.list_workflow_steps("run_sqlite")
        assert [s["function_name"] for s in steps] == PAYMENT_STEPS
        assert set(counts(ledger).values()) == {1}

    def test_a_run_id_runs_once(self, embedded: Path, ledger: Path) -> None:
        """Starting a finished run again returns its result without calling anything."""
        first = run(dbos.run_agent(agents.PAYMENTS, "Pay once.", run_id="run_once"))
        before = counts(ledger)
        again = run(dbos.run_agent(agents.PAYMENTS, "Pay once.", run_id="run_once"))
        assert again.messages == first.messages
        assert counts(ledger) == before

    def test_elapsed_time_is_the_recorded_clock(self, embedded: Path) -> None:
        """Elapsed seconds only move when a step records the time, so replay reads the same."""
        result = run(dbos.run_agent(agents.PAYMENTS, "Pay by the clock.", run_id="run_clock"))
        steps = DBOS.list_workflow_steps("run_clock")
        span = (steps[-1]["completed_at_epoch_ms"] or 0) - (steps[0]["started_at_epoch_ms"] or 0)
        elapsed = [t.elapsed_s for t in result.trail]
        assert elapsed == sorted(elapsed)
        assert elapsed[0] == 0.0
        assert 0 < elapsed[-1] <= span / 1000 + 0.05

    def test_transient_model_error_is_retried(self, embedded: Path, ledger: Path) -> None:
        """An overloaded model (529, retryable) is tried again by the step's retry policy."""
        result = run(dbos.run_agent(agents.FLAKY, "Flaky?", run_id="run_flaky"))
        assert result.end_state == "completed"
        assert result.text == "Recovered."
        assert counts(ledger)["Flaky?#0"] == 2

    def test_fatal_model_error_is_not_retried(self, embedded: Path, ledger: Path) -> None:
        """A rejected key (401) fails the run after one attempt, named in its error."""
        result = run(dbos.run_agent(agents.FATAL, "Fatal?", run_id="run_fatal"))
        assert result.end_state == "failed"
        assert "401" in result.reason
        assert counts(ledger)["Fatal?#0"] == 1

    def test_unknown_agent_fails_the_workflow(self, embedded: Path) -> None:
        """A name this worker never registered ends the workflow in error, naming the agents."""
        with pytest.raises(UnknownAgentError, match=agents.PAYMENTS):
            run(dbos.run_agent("no-such-agent", "Anyone?", run_id="run_unknown"))

    def test_approval_waits_for_a_message(self, embedded: Path, ledger: Path) -> None:
        """The run waits for a DBOS message with the decision, then sends the e-mail once."""

        async def scenario() -> Any:
            run_id = await dbos.start_run(agents.APPROVAL, "Mail the boss.", run_id="run_mail")
            await dbos.send_decision(run_id, "toolu_mail", Approve())
            return await dbos.get_result(run_id)

        result = run(scenario())
        assert result.end_state == "completed"
        assert counts(ledger)["run_mail:toolu_mail"] == 1

    def test_staged_calls_are_approved_as_one_batch(self, embedded: Path, ledger: Path) -> None:
        """Two staged payments needing a person (issue 34): `commit` waits for a DBOS message
        per call, both approved before it asks, and each is paid once."""

        async def scenario() -> Any:
            run_id = await dbos.start_run(agents.COMMIT_APPROVAL, "Pay.", run_id="run_cpay")
            for call in ("toolu_pay5", "toolu_pay7"):
                await dbos.send_decision(run_id, call, Approve())
            return await dbos.get_result(run_id)

        result = run(scenario())
        assert result.end_state == "completed"
        assert [t.dest for t in result.trail][-2:] == ["commit", "completed"]
        assert counts(ledger) == Counter({"run_cpay:toolu_pay5": 1, "run_cpay:toolu_pay7": 1,
                                          "Pay.#0": 1, "Pay.#1": 1})  # fmt: skip

    def test_approval_times_out_into_awaiting_approval(
        self, embedded: Path, ledger: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Without a decision in time the call is deferred and the run waits by name."""
        monkeypatch.setenv(agents.APPROVAL_TIMEOUT_ENV, "0.2")
        result = run(dbos.run_agent(agents.APPROVAL, "Mail nobody.", run_id="run_nomail"))
        assert result.end_state == "awaiting_approval"
        assert counts(ledger)["run_nomail:toolu_mail"] == 0


class Worker:
    """A DBOS worker process on a shared system database."""

    def __init__(self, url: str, executor: str, env: dict[str, str], concurrency: int) -> None:
        self.executor = executor
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.support.scale_dbos", url, executor, str(concurrency)],
            cwd=ROOT,
            env={**os.environ, **env, agents.WORKER_ENV: executor},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def ready(self) -> None:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        assert json.loads(line or "{}").get("ready") == self.executor, self.stderr()

    def died(self, timeout: float) -> int:
        return self.process.wait(timeout=timeout)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        for stream in (self.process.stdout, self.process.stderr):
            if stream is not None:
                stream.close()

    def stderr(self) -> str:
        if self.process.poll() is None or self.process.stderr is None:
            return ""
        return self.process.stderr.read()[-3000:]


@pytest.fixture
def workers() -> Iterator[list[Worker]]:
    """The worker processes a test starts, stopped at its end whatever happened."""
    started: list[Worker] = []
    yield started
    for worker in started:
        worker.stop()


class TestPostgres:
    """Many processes, one Postgres system database: the multi-machine set-up."""

    def test_run_on_postgres(self, postgres: LocalPostgres, ledger: Path) -> None:
        """The same workflow runs on a real PostgreSQL system database."""
        dbos.launch(dbos.dbos_config(database(postgres, "embedded"), executor_id="local"))
        try:
            result = run(dbos.run_agent(agents.PAYMENTS, "Pay on Postgres.", run_id="run_pg"))
            steps = DBOS.list_workflow_steps("run_pg")
        finally:
            dbos.shutdown()
        assert result.end_state == "completed"
        assert [s["function_name"] for s in steps] == PAYMENT_STEPS

    def test_two_workers_split_one_queue(
        self, postgres: LocalPostgres, tmp_path: Path, workers: list[Worker]
    ) -> None:
        """Runs enqueued by a client are shared out between two worker processes."""
        url = database(postgres, "split")
        ledger = tmp_path / "ledger"
        env = {agents.LEDGER_ENV: str(ledger), agents.DELAY_ENV: "0.15"}
        workers += [Worker(url, name, env, concurrency=2) for name in ("w1", "w2")]
        for worker in workers:
            worker.ready()
        client = DBOSClient(system_database_url=url)
        try:
            ids = [
                dbos.enqueue_run(client, agents.PAYMENTS, f"Pay bill {i}.", run_id=f"run_split_{i}")
                for i in range(12)
            ]
            results = [dbos.wait_result(client, run_id, timeout_seconds=90) for run_id in ids]
            executors = {client.retrieve_workflow(i).get_status().executor_id for i in ids}
        finally:
            client.destroy()
        assert {r.end_state for r in results} == {"completed"}
        assert executors == {"w1", "w2"}
        assert {worker for worker, _, _ in ledger_lines(ledger)} == {"w1", "w2"}
        assert set(counts(ledger).values()) == {1}, "a step ran twice"
        assert len(counts(ledger)) == 12 * 7

    def test_killed_worker_resumes_on_restart(
        self, postgres: LocalPostgres, tmp_path: Path, workers: list[Worker]
    ) -> None:
        """SIGKILLed inside a payment, the worker restarted under its id finishes the run,
        re-running only the payment in flight, and writes each audit event once."""
        url = database(postgres, "crash")
        ledger, audit, spans = tmp_path / "ledger", tmp_path / "audit", tmp_path / "spans"
        spans.mkdir()
        env = {
            agents.LEDGER_ENV: str(ledger),
            agents.KILL_ENV: "toolu_pay7",
            agents.AUDIT_ENV: str(audit),
            agents.SPANS_ENV: str(spans),
        }
        first = Worker(url, "w1", env, concurrency=4)
        workers.append(first)
        first.ready()
        client = DBOSClient(system_database_url=url)
        exporter, tracer = in_memory_tracer()
        try:
            with tracer.start_as_current_span("handle request"):
                run_id = dbos.enqueue_run(
                    client, agents.PAYMENTS, "Pay my bills.", run_id="run_crash"
                )
            assert first.died(timeout=60) == -9
            ran_before = counts(ledger)
            again = Worker(url, "w1", env, concurrency=4)
            workers.append(again)
            again.ready()
            result = dbos.wait_result(client, run_id, timeout_seconds=60)
        finally:
            client.destroy()
        assert result.end_state == "completed"
        assert result.text == agents.FINAL_TEXT
        ran = counts(ledger)
        assert ran["run_crash:toolu_pay7"] == 2, "the payment in flight runs again"
        assert {key: n for key, n in ran.items() if key != "run_crash:toolu_pay7"} == {
            key: 1 for key in ran if key != "run_crash:toolu_pay7"
        }
        assert ran - ran_before == Counter({"run_crash:toolu_pay7": 1, "Pay my bills.#2": 1}), (
            "a finished step ran again"
        )
        assert verify_file(audit / "run_crash.jsonl").ok, "the recovered file's chain holds"
        events = read_events(audit / "run_crash.jsonl")
        names = Counter(e["event"] for e in events)
        assert names["run.started"] == 1
        assert names["run.ended"] == 1
        seqs = {e["seq"] for e in events if e["event"] == "transition.fired"}
        assert seqs == set(range(1, max(seqs) + 1))
        assert result.trail[-1].seq == max(seqs)
        (request,) = exporter.get_finished_spans()
        assert_recovered_trace(run_spans(spans, run_id), *hex_ids(request))

    def test_worker_killed_inside_commit_pays_each_staged_call_once(
        self, postgres: LocalPostgres, tmp_path: Path, workers: list[Worker]
    ) -> None:
        """SIGKILLed inside the second staged payment of `commit` (issue 34), the restarted
        worker finishes the commit: the first payment answers from its recorded step, only
        the one in flight runs again, and the commit's events are each written once."""
        url = database(postgres, "commit_crash")
        ledger, audit = tmp_path / "ledger", tmp_path / "audit"
        env = {agents.LEDGER_ENV: str(ledger), agents.KILL_ENV: "toolu_pay7",
               agents.AUDIT_ENV: str(audit)}  # fmt: skip
        first = Worker(url, "w1", env, concurrency=2)
        workers.append(first)
        first.ready()
        client = DBOSClient(system_database_url=url)
        try:
            run_id = dbos.enqueue_run(client, agents.COMMIT, "Pay the claim.", run_id="run_cc")
            assert first.died(timeout=60) == -9
            ran_before = counts(ledger)
            again = Worker(url, "w1", env, concurrency=2)
            workers.append(again)
            again.ready()
            result = dbos.wait_result(client, run_id, timeout_seconds=60)
        finally:
            client.destroy()
        assert result.end_state == "completed"
        assert [t.dest for t in result.trail][-3:] == ["verify", "commit", "completed"]
        assert [c["ref"] for c in (result.details or {}).get("committed", [])] == [
            "S1",
            "S2",
            "S3",
            "S4",
        ]
        ran = counts(ledger)
        assert ran["run_cc:toolu_pay5"] == 1, "a staged payment that ran ran again"
        assert ran["run_cc:toolu_pay7"] == 2, "the payment in flight runs again"
        after_kill = {"run_cc:toolu_pay7": 1, "run_cc:toolu_note_a": 1, "run_cc:toolu_note_b": 1}
        assert ran - ran_before == Counter(after_kill), "a finished step ran again"
        assert verify_file(audit / "run_cc.jsonl").ok, "the recovered file's chain holds"
        names = Counter(e["event"] for e in read_events(audit / "run_cc.jsonl"))
        assert names["commit.started"] == names["commit.finished"] == 1
        assert names["run.started"] == names["run.ended"] == 1

    def test_the_worker_continues_the_callers_trace(
        self, postgres: LocalPostgres, tmp_path: Path, workers: list[Worker]
    ) -> None:
        """A run enqueued inside a span of the caller's is traced by the worker process as
        that span's child (its trace context is a workflow argument): the run span, its
        model calls and tool calls, one trace across the two processes."""
        url = database(postgres, "traced")
        spans = tmp_path / "spans"
        spans.mkdir()
        worker = Worker(url, "w1", {agents.SPANS_ENV: str(spans)}, concurrency=2)
        workers.append(worker)
        worker.ready()
        exporter, tracer = in_memory_tracer()
        client = DBOSClient(system_database_url=url)
        try:
            with tracer.start_as_current_span("handle request"):
                run_id = dbos.enqueue_run(client, agents.PAYMENTS, "Pay, traced.", run_id="run_tr")
            result = dbos.wait_result(client, run_id, timeout_seconds=60)
        finally:
            client.destroy()
        assert result.end_state == "completed"
        (request,) = exporter.get_finished_spans()
        assert_one_trace(run_spans(spans, run_id), *hex_ids(request))
