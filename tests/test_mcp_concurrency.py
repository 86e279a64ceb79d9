"""One `MCPToolset` serving many runs, on any loops and threads; bounded start-up.

Against real servers the tests start themselves: npm's reference `server-everything`
(over stdio, and over streamable HTTP on 127.0.0.1), PyPI's `mcp-server-time`, and
the project's own `testing/mcp_server.py` where a call must be counted on the
server's side (its `mark` tool appends to a file). `make mcp-servers` (a prerequisite
of `make unit`) installs server-everything into build/mcp-servers/; the tests
download nothing. Server processes are counted as this process's live children.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from statemachine_agent import Agent, AnthropicModel, Audit, Budget, MCPToolset, ScriptedModel
from statemachine_agent.audit.sink import MemorySink
from statemachine_agent.models.base import ModelRequest
from statemachine_agent.testing import FakeAnthropicServer, replies
from statemachine_agent.testing.mcp_server import MARKS_ENV

ROOT = Path(__file__).resolve().parents[1]
EVERYTHING = ROOT / "build/mcp-servers/node_modules/@modelcontextprotocol/server-everything"
LOOPBACK = Path(__file__).with_name("mcp_servers") / "loopback.cjs"
OWN_SERVER = ["-m", "statemachine_agent.testing.mcp_server", "stdio"]
EVERYTHING_TOOLS = {"echo", "get-sum", "get-tiny-image"}

HANG_STDIO = "import sys, time\nsys.stdin.read()\ntime.sleep(3600)\n"
"""A server that reads its stdin to the end and never answers `initialize`."""


def everything_js() -> str:
    main = EVERYTHING / "dist/index.js"
    assert main.is_file(), "server-everything is not installed: run `make mcp-servers`"
    return str(main)


def stdio_marker() -> str:
    """How a stdio server-everything's command line ends (the HTTP one's does not)."""
    return f"{everything_js()} stdio"


def everything_stdio(**options: Any) -> MCPToolset:
    return MCPToolset.stdio("node", [everything_js(), "stdio"], name="everything", **options)


def servers(marker: str) -> list[psutil.Process]:
    """This process's live descendants whose command line holds `marker`."""
    found = []
    for child in psutil.Process().children(recursive=True):
        try:
            if child.status() != psutil.STATUS_ZOMBIE and marker in " ".join(child.cmdline()):
                found.append(child)
        except psutil.NoSuchProcess:
            continue
    return found


def gone(processes: list[psutil.Process]) -> bool:
    """Whether every process has ended (waited on, so a process being reaped counts)."""
    _, alive = psutil.wait_procs(processes, timeout=10)
    return not alive


def offered(request: ModelRequest) -> set[str]:
    return {tool["name"] for tool in request.tools}


def answers(count: int) -> ScriptedModel:
    return ScriptedModel([replies.text("ok")] * count)


def ping() -> str:
    """Answers pong (a tool of the agent's own, next to a toolset)."""
    return "pong"


def failures(sink: MemorySink) -> list[str]:
    return [event["error"] for event in sink.events if event["event"] == "toolset.failed"]


@pytest.fixture(scope="module")
def everything_http() -> Iterator[str]:
    """server-everything over streamable HTTP, bound to 127.0.0.1 on a port the system
    picked (`loopback.cjs` makes its `listen` do so, and prints the port)."""
    process = subprocess.Popen(
        ["node", "--require", str(LOOPBACK), everything_js(), "streamableHttp"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert process.stdout is not None
        for line in process.stdout:  # it says other things on stdout first
            if line.startswith("PORT "):
                break
        else:
            raise AssertionError(f"server-everything did not start (exit {process.wait()})")
        yield f"http://127.0.0.1:{line.split()[1]}/mcp"
    finally:
        process.terminate()
        process.wait(timeout=10)
        assert process.stdout is not None
        process.stdout.close()


class TestManyRuns:
    @pytest.mark.parametrize("transport", ["stdio", "http"])
    def test_ten_concurrent_aruns_all_offer_the_tools(
        self, transport: str, everything_http: str
    ) -> None:
        toolset = everything_stdio() if transport == "stdio" else MCPToolset.http(everything_http)
        model = answers(10)
        agent = Agent(model, tools=[toolset])

        async def main() -> list[str]:
            async with agent:
                done = await asyncio.gather(*(agent.arun(f"Run {i}.") for i in range(10)))
            return [result.end_state for result in done]

        assert asyncio.run(main()) == ["completed"] * 10
        assert len(model.requests) == 10
        for request in model.requests:
            assert offered(request) >= EVERYTHING_TOOLS
        assert not servers(stdio_marker())

    def test_eight_threads_of_blocking_runs_all_offer_the_tools(self) -> None:
        model = answers(8)
        agent = Agent(model, tools=[everything_stdio()])
        start = threading.Barrier(8)

        def one(i: int) -> str:
            start.wait()
            return agent.run(f"Run {i}.").end_state

        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            ends = list(pool.map(one, range(8)))
            assert ends == ["completed"] * 8
            assert 1 <= len(servers(stdio_marker())) <= 8  # one per thread's loop at most
            live = servers(stdio_marker())
            agent.close()  # from a thread that ran nothing: every thread's session closes
            assert not servers(stdio_marker())
        assert gone(live)
        assert len(model.requests) == 8
        for request in model.requests:
            assert offered(request) >= EVERYTHING_TOOLS

    def test_fifty_runs_on_four_threads_each_call_reaches_the_server_once(
        self, tmp_path: Path
    ) -> None:
        marks = tmp_path / "marks.txt"
        marks.touch()
        toolset = MCPToolset.stdio(sys.executable, OWN_SERVER, env={MARKS_ENV: str(marks)})

        def reply(request: ModelRequest) -> dict[str, Any]:
            last = request.messages[-1]["content"]
            if last[0]["type"] == "text":  # the prompt: call `mark` with its token
                token = last[0]["text"].split()[-1]
                return replies.tool_use("mark", {"token": token}, id=f"toolu_{token}")
            return replies.text("marked")

        model = ScriptedModel([reply] * 100)
        agent = Agent(model, tools=[toolset])
        most = 0
        stop = threading.Event()

        def ours() -> list[psutil.Process]:
            """This test's servers: those writing to its marks file (a server another test
            left ending is not counted against this one's threads)."""
            found = []
            for child in servers("statemachine_agent.testing.mcp_server"):
                try:
                    if child.environ().get(MARKS_ENV) == str(marks):
                        found.append(child)
                except (psutil.NoSuchProcess, psutil.AccessDenied):
                    continue
            return found

        def watch() -> None:  # the live servers, counted while the runs go on
            nonlocal most
            while not stop.is_set():
                most = max(most, len(ours()))
                stop.wait(0.02)

        watcher = threading.Thread(target=watch)
        watcher.start()
        try:
            with concurrent.futures.ThreadPoolExecutor(4) as pool:
                ends = list(pool.map(lambda i: agent.run(f"Mark t{i}").end_state, range(50)))
        finally:
            stop.set()
            watcher.join()
        assert ends == ["completed"] * 50
        received = marks.read_text().split()
        assert sorted(received) == sorted(f"t{i}" for i in range(50))  # each exactly once
        assert 1 <= most <= 4
        assert toolset.reconnects == 0
        # The pool's threads ended, and their loops closed their sessions with them.
        assert gone(ours())
        agent.close()

    def test_close_from_another_thread_stops_an_idle_threads_server(self) -> None:
        agent = Agent(answers(1), tools=[everything_stdio()])
        ran, release = threading.Event(), threading.Event()

        def runner() -> None:  # runs, then stays alive with its loop idle
            agent.run("Go.")
            ran.set()
            release.wait()

        worker = threading.Thread(target=runner)
        worker.start()
        try:
            ran.wait()
            live = servers(stdio_marker())
            assert len(live) == 1
            agent.close()
            assert not servers(stdio_marker())
            assert gone(live)
        finally:
            release.set()
            worker.join()


class TestStartUp:
    def test_a_stdio_server_that_never_answers_initialize(self, tmp_path: Path) -> None:
        script = tmp_path / "hang.py"
        script.write_text(HANG_STDIO)
        sink = MemorySink()
        toolset = MCPToolset.stdio(sys.executable, [str(script)], name="hang", start_timeout=1)
        agent = Agent(answers(1), tools=[toolset], audit=Audit(sinks=[sink]))
        with agent:
            result = agent.run("Hello.")
        assert result.end_state == "completed"
        (failure,) = failures(sink)
        assert "toolset 'hang'" in failure
        assert "start_timeout=1 s" in failure
        assert not servers(str(script))

    def test_the_runs_max_seconds_bounds_the_start(self, tmp_path: Path) -> None:
        script = tmp_path / "hang.py"
        script.write_text(HANG_STDIO)
        sink = MemorySink()
        toolset = MCPToolset.stdio(sys.executable, [str(script)], name="hang")  # 30 s default
        agent = Agent(answers(2), tools=[toolset], audit=Audit(sinks=[sink]),
                      budget=Budget(max_seconds=1))  # fmt: skip
        with agent:
            result = agent.run("Hello.")
        assert result.end_state == "completed"  # the engine's clock starts after the listing
        (failure,) = failures(sink)
        assert "not listed within the 1.0 s the run had left" in failure
        assert not servers(str(script))

    def test_an_http_server_that_accepts_and_never_replies(self) -> None:
        listener = socket.create_server(("127.0.0.1", 0))
        held: list[socket.socket] = []

        def accept() -> None:
            while True:
                try:
                    held.append(listener.accept()[0])
                except OSError:
                    return

        acceptor = threading.Thread(target=accept, daemon=True)
        acceptor.start()
        sink = MemorySink()
        url = f"http://127.0.0.1:{listener.getsockname()[1]}/mcp"
        toolset = MCPToolset.http(url, name="silent", start_timeout=1)
        agent = Agent(answers(1), tools=[toolset], audit=Audit(sinks=[sink]))
        try:
            with agent:
                result = agent.run("Hello.")
        finally:
            listener.close()
            for connection in held:
                connection.close()
        assert result.end_state == "completed"
        (failure,) = failures(sink)
        assert "toolset 'silent'" in failure
        assert "start_timeout=1 s" in failure

    def test_a_cancelled_arun_leaves_no_server(self, tmp_path: Path) -> None:
        script = tmp_path / "hang.py"
        script.write_text(HANG_STDIO)
        toolset = MCPToolset.stdio(sys.executable, [str(script)], name="hang")
        agent = Agent(answers(1), tools=[toolset])

        async def main() -> None:
            run = asyncio.create_task(agent.arun("Hello."))
            while not servers(str(script)):  # the server started and awaits `initialize`
                await asyncio.sleep(0.02)
            live = servers(str(script))
            run.cancel()
            with pytest.raises(asyncio.CancelledError):
                await run
            await agent.aclose()
            assert gone(live)

        asyncio.run(main())
        assert not servers(str(script))

    def test_a_failing_toolset_is_retried_with_a_backoff(self) -> None:
        """Not before every model call: one start, one event, in a four-call run."""
        sink = MemorySink()
        toolset = MCPToolset.stdio(sys.executable, ["-c", "raise SystemExit(1)"], name="broken")
        model = ScriptedModel([
            replies.tool_use("ping", {}, id=f"toolu_{i}") for i in range(3)
        ] + [replies.text("done")])  # fmt: skip
        agent = Agent(model, tools=[toolset, ping], audit=Audit(sinks=[sink]))
        with agent:
            result = agent.run("Hello.")
        assert result.end_state == "completed"
        assert len(model.requests) == 4
        assert len(failures(sink)) == 1


class TestPypiServer:
    def test_mcp_server_time_through_the_real_sdk(self) -> None:
        """PyPI's reference `mcp-server-time`, its tool called through the real SDK."""
        command = str(Path(sys.executable).with_name("mcp-server-time"))
        toolset = MCPToolset.stdio(command, ["--local-timezone", "UTC"], name="time")
        with FakeAnthropicServer() as api:
            api.add(
                replies.tool_use("get_current_time", {"timezone": "UTC"}, id="toolu_t"),
                replies.text("It is now."),
            )
            model = AnthropicModel(api_key="sk-test", base_url=api.base_url)
            with Agent(model, tools=[toolset]) as agent:
                result = agent.run("What time is it in UTC?")
            assert result.end_state == "completed", result.reason
            assert api.invalid_requests == []
            first, second = api.requests
        assert {"get_current_time", "convert_time"} <= {t["name"] for t in first["tools"]}
        answer = second["messages"][2]["content"][0]
        assert answer["tool_use_id"] == "toolu_t"
        assert '"timezone": "UTC"' in answer["content"]
        assert not servers(command)
