"""A real MCP server to test MCP toolsets against, written with the `mcp` package's server API.

Run it as `python -m statemachine_agent.testing.mcp_server stdio` (what
`MCPToolset.stdio` starts) or `... http [PORT]` (streamable HTTP on 127.0.0.1, path
`/mcp`; port 0, the default, lets the system pick a free one, and the first line the
server prints is its URL). `serve_http()` starts one in a subprocess and yields the
URL. Needs the `mcp` extra. Its tools cover what a client must handle: text,
structured content, an image, an embedded resource, a tool error, a slow call, a
crash mid-call, a tool list that changes and a call counted on the server's side
(`mark`); the `mcp` demo and example use it too.
Servers in the wild add: an image sent twice (as content and as structured content,
like `server-filesystem`'s `read_media_file`), a tool only callable as an MCP task, a
dotted name, a destructive and an idempotent tool that kill the server on their first
call (each call counted in a file the test names), progress reports, and the client's
name as the server heard it.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import socket
import subprocess
import sys
from collections.abc import Iterator

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.utilities.types import Image
from mcp_types import (
    BlobResourceContents,
    CallToolResult,
    EmbeddedResource,
    ImageContent,
    TextResourceContents,
    ToolAnnotations,
    ToolExecution,
)
from mcp_types import Tool as ToolSpec
from pydantic import BaseModel

PNG = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c6360000002000100e221bc330000000049454e44ae426082"
)
"""A 1x1 PNG, the image the `picture` tool returns."""

TASK_ONLY = frozenset({"long_job"})
"""Tools listed as callable only as MCP tasks (`execution.taskSupport: "required"`)."""


class _Server(MCPServer):
    """MCPServer, listing the `TASK_ONLY` tools as task-only (its API cannot say so)."""

    async def list_tools(self) -> list[ToolSpec]:
        required = ToolExecution(task_support="required")
        return [
            spec.model_copy(update={"execution": required}) if spec.name in TASK_ONLY else spec
            for spec in await super().list_tools()
        ]


server: MCPServer = _Server("test-server", log_level="WARNING")


class Sum(BaseModel):
    total: int


@server.tool()
def echo(text: str) -> str:
    """Say the text back."""
    return text


@server.tool()
def add(a: int, b: int) -> Sum:
    """Add two integers (structured content)."""
    return Sum(total=a + b)


@server.tool()
def picture() -> Image:
    """A tiny PNG image."""
    return Image(data=PNG, format="png")


@server.tool()
def document() -> EmbeddedResource:
    """An embedded text resource."""
    return EmbeddedResource(
        type="resource",
        resource=TextResourceContents(uri="memo://one", mime_type="text/plain", text="memo body"),
    )


@server.tool()
def fail(why: str) -> str:
    """Always fails, with the reason given."""
    raise ToolError(why)


@server.tool()
def header(name: str, ctx: Context) -> str:
    """The value of an HTTP request header the client sent ("" when none, or on stdio)."""
    return (ctx.headers or {}).get(name.lower(), "")


@server.tool()
async def slow(seconds: float) -> str:
    """Sleeps, then answers."""
    await asyncio.sleep(seconds)
    return f"slept {seconds}"


@server.tool()
def crash() -> str:
    """Kills the server process mid-call."""
    os._exit(3)


MARKS_ENV = "STATEMACHINE_AGENT_MCP_MARKS"
"""The environment variable naming the file `mark` appends to (set by a test)."""


@server.tool()
def mark(token: str) -> str:
    """Appends `token` to the file named by $STATEMACHINE_AGENT_MCP_MARKS: what was
    received, counted on the server's side across all its processes."""
    with open(os.environ[MARKS_ENV], "a", encoding="utf-8") as marks:
        marks.write(f"{token}\n")
    return f"marked {token}"


@server.tool()
def pid() -> int:
    """The server's process id (tells a reconnect apart)."""
    return os.getpid()


@server.tool()
async def grow(name: str, ctx: Context) -> str:
    """Adds a tool named `name` and tells the client that the tool list changed."""

    def added() -> str:
        return f"{name} was added"

    server.add_tool(added, name=name, description=f"Added at run time: {name}.")
    await ctx.session.send_tool_list_changed()
    return f"added {name}"


@server.tool()
def photo() -> CallToolResult:
    """The PNG as an image item and again inside structured content (as `read_media_file`)."""
    data = base64.b64encode(PNG).decode()
    return CallToolResult(
        content=[ImageContent(type="image", data=data, mime_type="image/png")],
        structured_content={"content": [{"type": "image", "data": data, "mimeType": "image/png"}]},
    )


@server.tool()
def note_blob() -> EmbeddedResource:
    """A `text/plain` resource sent as a base64 blob."""
    blob = base64.b64encode(b"plain words").decode()
    return EmbeddedResource(
        type="resource",
        resource=BlobResourceContents(uri="memo://blob", mime_type="text/plain", blob=blob),
    )


@server.tool()
def long_job() -> str:
    """Only callable as an MCP task (listed so); a client without tasks must not offer it."""
    return "ran without a task"


def _read_file(path: str) -> str:
    with open(path, encoding="utf-8") as file:
        return file.read()


server.add_tool(_read_file, name="files.read", description="Read a text file (a dotted name).")


def _count_then_die(log: str) -> str:
    """Append a line to `log`; on the first call (the file was empty) kill the server."""
    with open(log, "a+", encoding="utf-8") as file:
        file.seek(0)
        before = len(file.read().splitlines())
        file.write("call\n")
    if before == 0:
        os._exit(3)
    return f"call {before + 1}"


server.add_tool(
    _count_then_die,
    name="charge",
    description="Charges a card (destructive, not idempotent); the first call kills the server.",
    annotations=ToolAnnotations(destructive_hint=True, idempotent_hint=False),
)
server.add_tool(
    _count_then_die,
    name="store",
    description="Stores a value (idempotent); the first call kills the server.",
    annotations=ToolAnnotations(destructive_hint=False, idempotent_hint=True),
)


@server.tool()
async def progress(steps: int, every: float, ctx: Context) -> str:
    """Works for `steps` x `every` seconds, reporting progress after each step."""
    for step in range(1, steps + 1):
        await asyncio.sleep(every)
        await ctx.report_progress(step, steps)
    return f"done {steps} steps"


@server.tool()
def client(ctx: Context) -> str:
    """The client's name and version, as it introduced itself in `initialize`."""
    params = ctx.session.client_params
    info = params.client_info if params is not None else None
    return f"{info.name} {info.version}" if info is not None else "(unknown)"


def serve_on(port: int) -> None:
    """Serve streamable HTTP on 127.0.0.1:`port` (0: any free port), printing the URL.

    The socket is bound here, before the URL is printed, so whoever started the
    server connects to the port it really has: no free port is guessed and raced for.
    """
    import uvicorn

    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen(128)
    print(f"http://127.0.0.1:{listener.getsockname()[1]}/mcp", flush=True)
    app = server.streamable_http_app(host="127.0.0.1")
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    uvicorn.Server(config).run(sockets=[listener])


@contextlib.contextmanager
def serve_http() -> Iterator[str]:
    """This server over streamable HTTP, in a subprocess; yields its URL, stops it after."""
    process = subprocess.Popen(
        [sys.executable, "-m", __name__, "http", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert process.stdout is not None
        url = process.stdout.readline().strip()
        if not url.startswith("http://"):
            raise RuntimeError(f"the MCP HTTP server did not start (exit {process.wait()})")
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:  # pragma: no cover - a server that ignores SIGTERM
            process.kill()
            process.wait()
        if process.stdout is not None:
            process.stdout.close()


def main(argv: list[str]) -> None:
    if argv[:1] == ["stdio"]:
        server.run("stdio")
    elif argv[:1] == ["http"] and len(argv) <= 2 and all(a.isdigit() for a in argv[1:]):
        serve_on(int(argv[1]) if len(argv) == 2 else 0)
    else:
        raise SystemExit(
            "usage: python -m statemachine_agent.testing.mcp_server stdio | http [PORT]"
        )


if __name__ == "__main__":
    main(sys.argv[1:])
