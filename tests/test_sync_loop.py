"""The sync API keeps its event loop, so a model's SDK client serves run after run.

Counted at the real boundary: the real `anthropic` SDK against the local
Messages API server, which counts the TCP connections it accepts. Nothing may
be left open at exit: a child interpreter with ResourceWarning turned into an
error must exit cleanly, with nothing reported on stderr.
"""

from __future__ import annotations

import asyncio
import contextvars
import os
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from typing import Any

import anthropic
import pytest

from statemachine_agent import Agent, AnthropicModel, CancelToken, calculate
from statemachine_agent.blocking import run_blocking, thread_loop
from statemachine_agent.testing import FakeAnthropicServer, replies

API_KEY = "sk-ant-api03-TESTSECRET-abcdefghijklmnop"


@pytest.fixture
def server() -> Iterator[FakeAnthropicServer]:
    with FakeAnthropicServer() as fake:
        yield fake


class CountingClients:
    """Counts the SDK clients made, sync and async (any subclass too), by wrapping the
    SDK's __init__s: a blocking run calls through the sync client, an awaited one
    through the async client of its loop."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.made = 0
        for cls in (anthropic.Anthropic, anthropic.AsyncAnthropic):
            monkeypatch.setattr(cls, "__init__", self._counting(cls.__init__))

    def _counting(self, real: Any) -> Any:
        def counted(client: Any, *args: Any, **options: Any) -> None:
            self.made += 1
            real(client, *args, **options)

        return counted


def test_ten_sync_runs_share_one_client_and_one_connection(
    server: FakeAnthropicServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    counting = CountingClients(monkeypatch)
    model = AnthropicModel(api_key=API_KEY, base_url=server.base_url)
    agent = Agent(model, tools=[calculate])
    for k in range(10):
        server.add(replies.tool_use("calculate", {"expression": f"{k}+1"}), replies.text(f"{k}"))
        assert agent.run(f"what is {k}+1?").text == f"{k}"
    assert counting.made == 1
    assert server.connections == 1
    assert len(server.requests) == 20
    assert server.invalid_requests == []


def test_sync_runs_from_inside_a_running_loop_reuse_their_worker_loop(
    server: FakeAnthropicServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Called where a loop runs (a notebook), runs go to one kept worker, not a thread each."""
    counting = CountingClients(monkeypatch)
    model = AnthropicModel(api_key=API_KEY, base_url=server.base_url)
    agent = Agent(model)

    async def host() -> list[str]:
        texts = []
        for k in range(5):
            server.add(replies.text(f"answer {k}"))
            texts.append(agent.run("q").text)
        return texts

    assert asyncio.run(host()) == [f"answer {k}" for k in range(5)]
    assert counting.made == 1
    assert server.connections == 1


def test_tasks_a_run_leaves_behind_are_cancelled_when_it_returns() -> None:
    """As with `asyncio.run`: a later sync call never runs an earlier call's leftovers."""
    started: list[asyncio.Task[None]] = []
    cancelled = threading.Event()

    async def forever() -> None:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    async def leave_a_task() -> int:
        started.append(asyncio.get_running_loop().create_task(forever()))
        await asyncio.sleep(0)
        return 7

    assert run_blocking(leave_a_task()) == 7
    assert cancelled.is_set()
    assert started[0].cancelled()
    loop = thread_loop()
    assert loop is not None
    assert not loop.is_closed()
    assert run_blocking(leave_a_task()) == 7
    assert thread_loop() is loop


def test_each_thread_keeps_its_own_loop_and_closes_it_when_the_thread_ends() -> None:
    loops: list[asyncio.AbstractEventLoop] = []

    async def which() -> asyncio.AbstractEventLoop:
        return asyncio.get_running_loop()

    def in_thread() -> None:
        loops.append(run_blocking(which()))
        loops.append(run_blocking(which()))

    worker = threading.Thread(target=in_thread)
    worker.start()
    worker.join()
    assert loops[0] is loops[1]
    assert loops[0] is not run_blocking(which())
    assert loops[0].is_closed()  # the thread ended, so its kept loop was closed


CHILD = """
import gc, sys, warnings
warnings.simplefilter("error", ResourceWarning)
from statemachine_agent import Agent, AnthropicModel
from statemachine_agent.testing import FakeAnthropicServer, replies

server = FakeAnthropicServer()
model = AnthropicModel(api_key="sk-ant-api03-TESTSECRET-abcdefghijklmnop", base_url=server.base_url)
agent = Agent(model)
for k in range(10):
    server.add(replies.text(f"answer {k}"))
    assert agent.run("q").text == f"answer {k}"
print("connections", server.connections)
server.close()
gc.collect()
"""


def test_nothing_is_left_open_at_exit() -> None:
    """The kept loop and the client parked on it are closed at exit, without a warning."""
    done = subprocess.run(
        [sys.executable, "-W", "error::ResourceWarning", "-c", textwrap.dedent(CHILD)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "connections 1"
    assert "ResourceWarning" not in done.stderr
    assert "unclosed" not in done.stderr.lower()
    assert "Exception ignored" not in done.stderr


def test_a_call_from_inside_a_running_loop_keeps_the_callers_context_variables() -> None:
    marker: contextvars.ContextVar[str] = contextvars.ContextVar("marker", default="unset")

    async def read() -> str:
        return marker.get()

    async def host() -> str:
        marker.set("from the host")
        return run_blocking(read())

    assert asyncio.run(host()) == "from the host"


def test_context_variables_set_by_one_call_do_not_reach_the_next() -> None:
    marker: contextvars.ContextVar[str] = contextvars.ContextVar("marker", default="unset")

    async def set_and_read() -> str:
        seen = marker.get()
        marker.set("set by a call")
        return seen

    assert run_blocking(set_and_read()) == "unset"
    assert run_blocking(set_and_read()) == "unset"
    marker.set("the caller's")
    assert run_blocking(set_and_read()) == "the caller's"


def test_a_blocking_run_cancelled_in_its_model_call_ends_without_waiting_for_the_reply(
    server: FakeAnthropicServer,
) -> None:
    """The sync client's call is on a worker thread: cancelling abandons it at once, and
    the agent's next run is answered (the abandoned call's connection is not reused
    while it is busy)."""
    arrived, release = threading.Event(), threading.Event()

    def held(body: Any) -> Any:
        arrived.set()
        release.wait(60)
        return replies.text("too late")

    server.add(held)
    agent = Agent(AnthropicModel(api_key=API_KEY, base_url=server.base_url))
    token = CancelToken()

    def cancel_once_asked() -> None:
        arrived.wait(60)
        token.cancel()

    canceller = threading.Thread(target=cancel_once_asked)
    canceller.start()
    try:
        result = agent.run("q", cancel=token)
    finally:
        release.set()
        canceller.join()
    assert result.end_state == "cancelled"
    server.add(replies.text("next"))
    assert agent.run("q").text == "next"


def test_an_async_client_given_serves_blocking_runs_too(
    server: FakeAnthropicServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`async_client=` is the host's choice: no sync client is made for a blocking run."""
    counting = CountingClients(monkeypatch)
    given = anthropic.AsyncAnthropic(api_key=API_KEY, base_url=server.base_url)
    agent = Agent(AnthropicModel(async_client=given))
    for k in range(3):
        server.add(replies.text(f"answer {k}"))
        assert agent.run("q").text == f"answer {k}"
    assert counting.made == 1
    assert server.connections == 1


def test_a_forked_child_makes_its_own_loop_and_connection(server: FakeAnthropicServer) -> None:
    """A child forked after a blocking run never drives its parent's loop (their epoll
    instance is shared) nor sends down its parent's pooled connection; the parent's
    loop and connection go on serving the parent."""
    agent = Agent(AnthropicModel(api_key=API_KEY, base_url=server.base_url))
    server.add(replies.text("parent 1"), replies.text("child"), replies.text("parent 2"))
    assert agent.run("q").text == "parent 1"
    parent_loop = thread_loop()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report and leave at once, never back into pytest
        code = 1
        try:
            text = agent.run("q").text
            os.write(write, f"{text}|{thread_loop() is not parent_loop}".encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write)
    _, status = os.waitpid(pid, 0)
    with os.fdopen(read) as pipe:
        assert (status, pipe.read()) == (0, "child|True")
    assert agent.run("q").text == "parent 2"
    assert thread_loop() is parent_loop
    assert server.connections == 2


def test_a_forked_child_runs_sync_tools_on_its_own_threads() -> None:
    """A child forked after a run of a sync tool gets its own worker threads: the
    parent's idle ones do not exist in the child, and a call handed to one of them
    would wait out the tool's timeout instead of running."""
    from statemachine_agent import ScriptedModel, tool

    @tool(timeout=5.0)
    def where(n: int) -> str:
        """Say which process ran the call."""
        return f"ran in {os.getpid()}"

    def script() -> list[dict[str, object]]:
        return [replies.tool_use("where", {"n": 1}), replies.text("done")]

    agent = Agent(ScriptedModel(script() * 2), tools=[where])
    first = agent.run("q")
    assert first.messages[2]["content"][0]["content"] == f"ran in {os.getpid()}"
    time.sleep(0.2)  # the parent's worker has put itself back among the idle ones
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report and leave at once, never back into pytest
        code = 1
        try:
            result = agent.run("q")
            os.write(write, str(result.messages[2]["content"][0]["content"]).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write)
    _, status = os.waitpid(pid, 0)
    with os.fdopen(read) as pipe:
        assert (status, pipe.read()) == (0, f"ran in {pid}")
