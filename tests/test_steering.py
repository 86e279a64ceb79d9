"""Steering a run while it runs (issue 31): `Agent.steer` queues a user message that the
run's next `perceive` delivers, by its own row, after any tool results.

Through the real `anthropic` SDK against the strict local server (every request is
validated: a message between a tool_use and its tool_result would be refused):
a steer during `act` is in the next request's last user turn and nowhere earlier;
a steer to a paused run is delivered when it is resumed; a steer from a second
process reaches a run driven by the first through the store, SQLite or PostgreSQL
(a real server the module starts on 127.0.0.1); and a steer queued before a SIGKILL
is delivered exactly once after the resume, on both stores. Writers racing to steer
one run on PostgreSQL get consecutive numbers.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from statemachine_agent import Agent, Approve, Audit, Conversation, RunResult, ScriptedModel, tool
from statemachine_agent.audit.sink import read_events
from statemachine_agent.machine.resume import RunAlreadyEndedError
from statemachine_agent.persistence.base import MemoryCheckpointer, RunNotFoundError
from statemachine_agent.persistence.postgres import PostgresCheckpointer
from statemachine_agent.persistence.sqlite import SQLiteCheckpointer
from statemachine_agent.stream.events import ToolCallStarted, Transition
from statemachine_agent.testing import FakeAnthropicServer, replies
from statemachine_agent.testing.postgres import LocalPostgres

ROOT = Path(__file__).resolve().parents[1]


def texts(message: dict[str, Any]) -> list[str]:
    content = message["content"]
    if isinstance(content, str):
        return [content]
    return [b["text"] for b in content if b.get("type") == "text"]


def mentions(request: dict[str, Any], text: str) -> bool:
    return text in json.dumps(request["messages"])


class TestSteerDuringAct:
    def test_the_next_request_carries_it_in_its_last_user_turn_and_no_earlier_one(
        self, tmp_path: Path
    ) -> None:
        agent_box: list[Agent] = []

        @tool
        def lookup(month: str) -> str:
            """Look up invoices of a month."""
            if month == "February":
                agent_box[0].steer("run-steer-act", "also check the March invoices", by="ops")
                agent_box[0].steer("run-steer-act", "and skip staging", by="ops")
            return f"invoices of {month}: 3"

        script = [
            replies.tool_use("lookup", {"month": "February"}),
            replies.tool_use("lookup", {"month": "March"}),
            replies.text("Done."),
        ]
        with FakeAnthropicServer(script) as server:
            agent = Agent(server.model(max_retries=0), tools=[lookup],
                          audit=Audit(dir=tmp_path))  # fmt: skip
            agent_box.append(agent)
            result = agent.run("Check the February invoices.", run_id="run-steer-act")
            assert server.unexpected() == []
            requests = server.requests
        assert result.end_state == "completed", result.reason
        assert not mentions(requests[0], "March invoices")
        last = requests[1]["messages"][-1]
        assert last["role"] == "user"
        assert [b["type"] for b in last["content"]] == ["tool_result", "text", "text"]
        assert texts(last) == ["also check the March invoices", "and skip staging"]
        assert json.dumps(requests[2]["messages"]).count("also check the March") == 1
        steered = [t for t in result.trail if t.via == ("steering_waiting",)]
        assert [(t.source, t.dest) for t in steered] == [("perceive", "perceive")]
        events = read_events(tmp_path / "run-steer-act.jsonl")
        sent = [e for e in events if e["event"] == "run.steered"]
        assert [(e["number"], e["text"], e["by"]) for e in sent] == [
            (1, "also check the March invoices", "ops"),
            (2, "and skip staging", "ops"),
        ]


class TestSteerAPausedRun:
    def test_it_is_delivered_when_the_run_is_resumed(self) -> None:
        @tool(requires_approval=True)
        def refund(amount: int) -> str:
            """Refund an amount."""
            return f"refunded {amount}"

        script = [
            replies.reply(
                replies.tool_use_block("refund", {"amount": 12}, id="toolu_r"),
                stop_reason="tool_use",
            ),
            replies.text("Done."),
        ]
        with FakeAnthropicServer(script) as server:
            agent = Agent(server.model(max_retries=0), tools=[refund],
                          checkpointer=MemoryCheckpointer())  # fmt: skip
            paused = agent.run("Refund 12.")
            assert paused.end_state == "awaiting_approval"
            assert agent.steer(paused.run_id, "the customer is a VIP", by="carol") == 1
            done = agent.resume(paused.run_id, decisions={"toolu_r": Approve()})
            assert server.unexpected() == []
            requests = server.requests
        assert done.end_state == "completed", done.reason
        assert texts(requests[1]["messages"][-1])[-1] == "the customer is a VIP"
        assert not mentions(requests[0], "VIP")
        with pytest.raises(RunAlreadyEndedError, match="has ended \\(completed\\)"):
            agent.steer(done.run_id, "too late")

    def test_an_unknown_run_and_bad_text_are_refused_by_name(self) -> None:
        agent = Agent(ScriptedModel([replies.text("ok")]), checkpointer=False)
        with pytest.raises(RunNotFoundError):
            agent.steer("nobody", "hello")
        with pytest.raises(ValueError, match="non-empty"):
            agent.steer("nobody", "  ")


AGENT = """
import sys, time
from pathlib import Path
from statemachine_agent import Agent, Audit, PostgresCheckpointer, SQLiteCheckpointer, tool
from statemachine_agent.models.anthropic import AnthropicModel

url, folder, marker = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
spec, run_id = sys.argv[4], sys.argv[5]

@tool
def wait_for_news() -> str:
    '''Wait until something happens.'''
    marker.write_text("waiting")
    deadline = time.monotonic() + 60
    while not (folder / "go").exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    return "nothing new"

model = AnthropicModel("claude-sonnet-4-5", base_url=url, api_key="sk-ant-test-key",
                       max_retries=0)
Store = PostgresCheckpointer if spec.startswith("postgresql:") else SQLiteCheckpointer
store = Store(spec, lease_seconds=1.0)
agent = Agent(model, tools=[wait_for_news], checkpointer=store,
              audit=Audit(dir=folder / "audit"))
"""

DRIVE = (
    AGENT
    + """
result = agent.run("Watch the queue.", run_id=run_id)
print(result.end_state)
"""
)

RESUME = (
    AGENT
    + """
(folder / "go").write_text("go")
result = agent.resume(run_id, wait=30)  # the killed worker's lease runs out
print(result.end_state)
"""
)


def wait_for(path: Path) -> None:
    deadline = time.monotonic() + 60
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.02)


def script_waiting() -> list[Any]:
    return [replies.tool_use("wait_for_news", {}), replies.text("Done.")]


@pytest.fixture(scope="module")
def postgres() -> Iterator[LocalPostgres]:
    with LocalPostgres() as server:
        yield server


@pytest.fixture(params=["sqlite", "postgres"])
def spec(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Where the worker's store is: an SQLite file, or the test's PostgreSQL server
    (started once for the module; each test's run has its own id)."""
    if request.param == "sqlite":
        return str(tmp_path / "runs.sqlite3")
    server: LocalPostgres = request.getfixturevalue("postgres")
    return server.dsn


def open_store(spec: str) -> PostgresCheckpointer | SQLiteCheckpointer:
    if spec.startswith("postgresql:"):
        return PostgresCheckpointer(spec)
    return SQLiteCheckpointer(spec)


def steer_from_here(spec: str, run_id: str, text: str) -> None:
    """What a web handler does: its own agent and store connection, not the worker's."""
    store = open_store(spec)
    here = Agent(ScriptedModel([]), checkpointer=store)
    try:
        here.steer(run_id, text, by="web")
    finally:
        here.close()
        store.close()


class TestSteerFromAnotherProcess:
    def test_a_run_driven_by_a_worker_gets_a_message_steered_here(
        self, tmp_path: Path, spec: str
    ) -> None:
        marker, run_id = tmp_path / "marker", f"run-far-{secrets.token_hex(4)}"
        args = [str(tmp_path), str(marker), spec, run_id]
        with FakeAnthropicServer(script_waiting()) as server:
            worker = subprocess.Popen(
                [sys.executable, "-c", DRIVE, server.base_url, *args],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
            )  # fmt: skip
            wait_for(marker)
            steer_from_here(spec, run_id, "the queue moved to eu-west")
            (tmp_path / "go").write_text("go")
            out, err = worker.communicate(timeout=120)
            assert worker.returncode == 0, err
            assert server.unexpected() == []
            requests = server.requests
        assert out.strip() == "completed"
        assert texts(requests[1]["messages"][-1])[-1] == "the queue moved to eu-west"
        assert not mentions(requests[0], "eu-west")

    def test_a_message_queued_before_a_sigkill_is_delivered_once_after_the_resume(
        self, tmp_path: Path, spec: str
    ) -> None:
        marker, run_id = tmp_path / "marker", f"run-far-{secrets.token_hex(4)}"
        args = [str(tmp_path), str(marker), spec, run_id]
        with FakeAnthropicServer(script_waiting()) as server:
            worker = subprocess.Popen(
                [sys.executable, "-c", DRIVE, server.base_url, *args],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT,
            )  # fmt: skip
            wait_for(marker)
            steer_from_here(spec, run_id, "use the backup queue")
            os.kill(worker.pid, signal.SIGKILL)
            worker.wait(timeout=60)
            resumed = subprocess.run(
                [sys.executable, "-c", RESUME, server.base_url, *args],
                capture_output=True, text=True, timeout=120, check=False, cwd=ROOT,
            )  # fmt: skip
            assert resumed.returncode == 0, resumed.stderr
            assert server.unexpected() == []
            requests = server.requests
        assert resumed.stdout.strip().splitlines()[-1] == "completed"
        assert [json.dumps(r["messages"]).count("use the backup queue") for r in requests] == [
            0,
            1,
        ]


def test_processes_steering_one_run_at_once_get_consecutive_numbers_on_postgres(
    postgres: LocalPostgres,
) -> None:
    """Each message is numbered inside the write that queues it, under the run's row
    lock: writers racing on separate connections never share a number or lose one."""
    run_id, writers, each = f"run-race-{secrets.token_hex(4)}", 4, 6
    start = threading.Barrier(writers)

    def write(w: int) -> list[int]:
        store = PostgresCheckpointer(postgres.dsn)
        try:
            start.wait()
            return [store.steer(run_id, f"w{w} m{i}") for i in range(each)]
        finally:
            store.close()

    with ThreadPoolExecutor(writers) as pool:
        numbered = list(pool.map(write, range(writers)))
    with PostgresCheckpointer(postgres.dsn) as store:
        queued = store.steered(run_id)
    assert sorted(n for ns in numbered for n in ns) == list(range(1, writers * each + 1))
    assert [m.number for m in queued] == list(range(1, writers * each + 1))
    for w, ns in enumerate(numbered):
        assert ns == sorted(ns)
        assert [m.text for m in queued if m.text.startswith(f"w{w} ")] == [
            f"w{w} m{i}" for i in range(each)
        ]
        assert {m.number: m.text for m in queued if m.number in ns} == {
            n: f"w{w} m{i}" for i, n in enumerate(ns)
        }


@settings(max_examples=25, deadline=None)
@given(batches=st.lists(st.lists(st.text(min_size=1, max_size=12).filter(str.strip),
                                 max_size=3), min_size=3, max_size=3))  # fmt: skip
def test_every_message_is_delivered_once_in_order_and_every_request_stays_valid(
    batches: list[list[str]],
) -> None:
    """Whatever is steered during each act (none, one, several), each message reaches
    the model exactly once, in order, after the tool results of that act."""
    box: list[Agent] = []
    rounds = iter(batches)

    @tool
    def step() -> str:
        """One step."""
        for text in next(rounds):
            box[0].steer("run-prop", text)
        return "ok"

    script = [replies.tool_use("step", {}) for _ in batches] + [replies.text("Done.")]
    model = ScriptedModel(script)
    agent = Agent(model, tools=[step], checkpointer=False, stall=None)
    box.append(agent)
    result = agent.run("Go.", run_id="run-prop")
    assert result.end_state == "completed", result.reason
    sent = [t for batch in batches for t in batch]
    got = [
        b["text"]
        for m in result.messages
        if m["role"] == "user" and isinstance(m["content"], list)
        for b in m["content"]
        if b.get("type") == "text"
    ]
    assert got == sent
    steered = sum(1 for t in result.trail if t.via == ("steering_waiting",))
    assert steered == sum(1 for batch in batches if batch)


@pytest.mark.parametrize("steered", [False, True])
def test_a_steered_message_is_new_information_for_the_stall_detector(steered: bool) -> None:
    """The same call three times is a stall; with a steer delivered between them it is
    the model following new directions, and the detector starts over."""
    box: list[Agent] = []

    @tool
    def check() -> str:
        """Check the queue."""
        if steered:
            box[0].steer("run-stall", "check it again, it changes")
        return "same"

    script = [replies.tool_use("check", {}) for _ in range(3)] + [replies.text("Done.")]
    agent = Agent(ScriptedModel(script), tools=[check], checkpointer=False)
    box.append(agent)
    result = agent.run("Watch the queue.", run_id="run-stall")
    went = [t.dest for t in result.trail]
    assert ("intervene" in went) is not steered


class TestSteerAStream:
    def test_a_steer_on_the_stream_reaches_the_next_request_after_the_tool_results(
        self,
    ) -> None:
        """`RunStream.steer` during `act` (on the tool's call event) queues the message
        for the streamed run; before the first event it goes in with the prompt; once
        the run has ended it is refused by name."""

        @tool
        def lookup(month: str) -> str:
            """Look up invoices of a month."""
            return f"invoices of {month}: 3"

        script = [replies.tool_use("lookup", {"month": "May"}), replies.text("Done.")]

        async def go(agent: Agent) -> tuple[list[Any], Any]:
            stream = agent.astream("Check May.")
            assert stream.steer("mind the refunds", by="ops") == 1
            seen: list[Any] = []
            async for event in stream:
                seen.append(event)
                if isinstance(event, ToolCallStarted):
                    assert await stream.asteer("and June too", by="ops") == 2
            with pytest.raises(RunAlreadyEndedError):
                stream.steer("too late")
            return seen, stream.result

        with FakeAnthropicServer(script) as server:
            agent = Agent(server.model(max_retries=0), tools=[lookup], checkpointer=False)
            seen, result = asyncio.run(go(agent))
            assert server.unexpected() == []
            requests = server.requests
        assert result.end_state == "completed", result.reason
        first, second = requests[0]["messages"], requests[1]["messages"]
        assert texts(first[-1]) == ["Check May.", "mind the refunds"]
        assert not mentions(requests[0], "June")
        assert [b["type"] for b in second[-1]["content"]] == ["tool_result", "text"]
        assert texts(second[-1]) == ["and June too"]
        via = [e.guards for e in seen if isinstance(e, Transition) and e.dest == "perceive"]
        assert sum(1 for g in via if "steering_waiting" in g) == 2


class TestSteerAConversation:
    def test_a_running_turn_takes_it_and_an_ended_turn_starts_the_next(self) -> None:
        """Steered from a tool while a turn runs, the message joins that turn's run;
        steered after the turn ended, it is the next turn's prompt."""
        box: list[Conversation[Any]] = []
        numbers: list[int | object] = []

        @tool
        def search(q: str) -> str:
            """Search."""
            numbers.append(box[0].steer("only 2025 results", by="ana"))
            return f"found {q}"

        script = [
            replies.tool_use("search", {"q": "flights"}),
            replies.text("Here are 2025 flights."),
            replies.text("Booked."),
        ]
        with FakeAnthropicServer(script) as server:
            agent = Agent(server.model(max_retries=0), tools=[search], checkpointer=False)
            chat = Conversation(agent)
            box.append(chat)
            first = chat.send("Find flights.")
            second = chat.steer("Book the first one.", by="ana")
            assert server.unexpected() == []
            requests = server.requests
        assert numbers == [1]
        assert first.end_state == "completed", first.reason
        assert texts(requests[1]["messages"][-1]) == ["only 2025 results"]
        assert isinstance(second, RunResult)
        assert second.text == "Booked."
        assert chat.turns == 2
        assert texts(requests[2]["messages"][-1]) == ["Book the first one."]
        assert json.dumps(requests[2]["messages"]).count("only 2025 results") == 1
