"""A real MCP server to test MCP toolsets against, written with the `mcp` package's server API.

Run it as `python -m statemachine_agent.testing.mcp_server stdio` (what
`MCPToolset.stdio` starts) or `... http [PORT]` (streamable HTTP on 127.0.0.1, path
`/mcp`; port 0, the default, lets the system pick a free one, and the first line the
server prints is its URL). `serve_http()` starts one in a subprocess and yields the
URL. Needs the `mcp` extra. Its tools cover what a client must handle: text,
structured content, an image, an embedded resource, a tool error, a slow call, a
crash mid-call, a tool list that changes and a call counted on the server's side
(`mark`); the `mcp` demo and example use it too.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import subprocess
import sys
from collections.abc import Iterator

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.utilities.types import Image
from mcp_types import EmbeddedResource, TextResourceContents
from pydantic import BaseModel

PNG = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c6360000002000100e221bc330000000049454e44ae426082"
)
"""A 1x1 PNG, the image the `picture` tool returns."""

server: MCPServer = MCPServer("test-server", log_level="WARNING")


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
