"""`MCPToolset`: the tools of a Model Context Protocol server, offered as `Tool`s.

Needs the `mcp` extra (`pip install 'statemachine-agent[mcp]'`, the official SDK).
The server's tools are listed when a run first needs them, with the server's own
input schemas, so the registry validates the model's input before anything is
sent; the list is cached and listed again when the server says it changed.

A toolset keeps one session per event loop, owned by that loop: every run on the
loop (an `async with agent:` block, a service's loop, or, for the blocking
`agent.run()`, the thread's kept loop of `statemachine_agent.blocking`) shares it,
and no other loop ever closes it while it serves calls, so a call in flight is never
cut off by another thread's run and sent again. A session ends with its loop (a
kept loop when its thread ends or at exit, another loop when it closes), so the
live server processes are bounded by the live loops; `aclose()` (`agent.close()`),
from any thread, closes every loop's session, each on its own loop, and returns
when they are closed (a stdio server stopped). The session runs in a task of its
own, since the SDK's transports must be entered and left in one task while calls
come from many. Opening and listing are bounded by `start_timeout`; an open that
is cancelled or times out tears its transport down.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Callable, Collection, Mapping, Sequence
from typing import Any, TextIO, cast

import anyio
import httpx2
import mcp_types as types
from mcp import ClientSession
from mcp.client.session import IncomingMessage, MessageHandlerFnT
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from ..blocking import create_kept_task, kept_loop_caller
from .base import DEFAULT_TOOL_TIMEOUT, JSON, Tool, ToolContent
from .registry import ToolError
from .toolset import Toolset, ToolsetError

__all__ = ["MCPToolset"]

Opener = Callable[[], contextlib.AbstractAsyncContextManager[Any]]
"""Opens the transport: an async context yielding the (read, write) stream pair."""

_DROPPED = (
    anyio.ClosedResourceError,
    anyio.BrokenResourceError,
    anyio.EndOfStream,
    ConnectionError,
    OSError,
    httpx2.TransportError,
)
"""What a call raises when the server went away (besides `MCPError` CONNECTION_CLOSED)."""


DEFAULT_START_TIMEOUT = 30.0
"""Seconds a server may take to answer `initialize` and list its tools (an `npx -y`
start that installs first can take that long; a server that waits for input never
answers)."""


class MCPToolset(Toolset):
    """The tools of one MCP server; pass it in `Agent(tools=[...])` next to other tools.

    Build one with `MCPToolset.stdio(command, args, env=...)` (the server is a
    subprocess) or `MCPToolset.http(url, headers=...)` (streamable HTTP). The
    options apply to every tool of the server, named as the server names them:

    - `allow` / `deny`: offer only these tools, or all but these (not both);
    - `prefix`: put before each tool's name, to keep two servers' tools apart;
    - `untrusted=True`: fence the results as outside content (`Tool.untrusted`);
    - `requires_approval`: the tools (or `True`: all) whose calls need approval;
    - `timeout`: seconds a call may take before it is answered with a timeout error;
    - `start_timeout`: seconds opening the session (the server's answer to `initialize`)
      and listing the tools may take (a run's own `Budget(max_seconds=)` and `deadline=`
      bound it too); past them the toolset is left out of the run with a
      `toolset.failed` event, and tried again later (see `ToolRegistry.refresh`).

    A call that finds the server gone reconnects once and tries again; if that
    fails too the call is answered with an `is_error` result (so a call the server
    died in may have run on it once before). A tool error the server reports is an
    `is_error` result with the server's words.
    """

    def __init__(
        self,
        opener: Opener,
        *,
        name: str,
        allow: Collection[str] | None = None,
        deny: Collection[str] = (),
        prefix: str = "",
        untrusted: bool = False,
        requires_approval: bool | Collection[str] = (),
        timeout: float | None = DEFAULT_TOOL_TIMEOUT,
        start_timeout: float = DEFAULT_START_TIMEOUT,
    ) -> None:
        """Prefer `MCPToolset.stdio` or `MCPToolset.http`; `opener` opens the transport."""
        if allow is not None and deny:
            raise ValueError("MCPToolset takes an allow list or a deny list, not both")
        for label, names in (("allow", allow or ()), ("deny", deny)):
            if isinstance(names, str):
                raise TypeError(f"MCPToolset {label}= takes a collection of names, not one string")
        if isinstance(requires_approval, str):
            raise TypeError("MCPToolset requires_approval= takes True or a collection of names")
        if timeout is not None and not timeout > 0:
            raise ValueError(f"MCPToolset timeout must be positive, got {timeout!r}")
        if not start_timeout > 0:
            raise ValueError(f"MCPToolset start_timeout must be positive, got {start_timeout!r}")
        self.name = name
        self.allow = frozenset(allow) if allow is not None else None
        self.deny = frozenset(deny)
        self.prefix = prefix
        self.untrusted = untrusted
        self.requires_approval = (
            requires_approval
            if isinstance(requires_approval, bool)
            else frozenset(requires_approval)
        )
        self.timeout = timeout
        self.start_timeout = start_timeout
        self.secrets: tuple[str, ...] = ()
        """Values the agent's audit redaction masks (the `headers=` of `http`)."""
        self._opener = opener
        self._guard = threading.Lock()
        """Runs on any threads open sessions: guards the two tables below."""
        self._sessions: dict[asyncio.AbstractEventLoop, _Connection] = {}
        """Each loop's session, from its opening until its task has ended."""
        self._opening: dict[asyncio.AbstractEventLoop, asyncio.Lock] = {}
        """Each loop's lock, so its concurrent runs open one session, not one each."""
        self._stale = True
        self.reconnects = 0
        """How many times a dropped session was opened again (for tests and monitoring)."""

    @classmethod
    def stdio(
        cls,
        command: str,
        args: Sequence[str] = (),
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        **options: Any,
    ) -> MCPToolset:
        """A server run as a subprocess, spoken to over its stdin and stdout.

        `env` is added to the SDK's safe default environment (not the whole of
        this process's, so secrets are not handed to the server unasked).
        """
        params = StdioServerParameters(
            command=command, args=list(args), env=dict(env) if env else None, cwd=cwd
        )
        options.setdefault("name", command)
        return cls(lambda: stdio_client(params, errlog=_server_stderr()), **options)

    @classmethod
    def http(
        cls, url: str, *, headers: Mapping[str, str] | None = None, **options: Any
    ) -> MCPToolset:
        """A server reached over streamable HTTP at `url` (e.g. `http://127.0.0.1:8000/mcp`)."""
        sent = dict(headers or {})

        @contextlib.asynccontextmanager
        async def opener() -> AsyncIterator[Any]:
            timeout = httpx2.Timeout(30.0, read=300.0)
            async with (
                httpx2.AsyncClient(headers=sent, timeout=timeout) as client,
                streamable_http_client(url, http_client=client) as streams,
            ):
                yield streams

        options.setdefault("name", url)
        toolset = cls(opener, **options)
        # Header values are credentials more often than not ("Bearer ...", API keys):
        # each value, and each word of it, is masked wherever a run's events hold it.
        toolset.secrets = tuple(
            {part for value in sent.values() for part in (value, *value.split()) if len(part) >= 8}
        )
        return toolset

    def __repr__(self) -> str:
        return f"<MCPToolset {self.name}>"

    @property
    def stale(self) -> bool:
        return self._stale

    @property
    def may_require_approval(self) -> bool:
        return bool(self.requires_approval)

    async def list_tools(self) -> list[Tool]:
        """The server's tools (filtered, prefixed) as `Tool`s; the list is then fresh."""
        self._stale = False  # a change announced while listing makes it stale again
        try:
            async with asyncio.timeout(self.start_timeout):
                listed = await self._request(lambda session: _all_tools(session))
        except TimeoutError:
            self._stale = True
            raise ToolsetError(self._late()) from None
        except BaseException:  # failed or cancelled: not listed
            self._stale = True
            raise
        return [self._tool(spec) for spec in listed if self._offered(spec.name)]

    async def call(self, name: str, arguments: Mapping[str, Any]) -> ToolContent:
        """Call the server's tool `name`; its result as content, its error as `ToolError`."""
        try:
            result = await self._request(lambda session: session.call_tool(name, dict(arguments)))
        except ToolsetError as exc:
            raise ToolError(
                f"MCP server {self.name!r} failed the call to {name!r}: {exc}"
            ) from None
        content = result_content(result)
        if result.is_error:
            raise ToolError(content.text or f"MCP tool {name!r} reported an error")
        return content

    async def aclose(self) -> None:
        """Close every loop's session (and stop its stdio server); a later call opens anew.

        Each session is closed on its own loop: this one's here; a running loop's (in
        another thread) by sending the close to it; a thread's idle kept loop's by
        running that loop for the close. It returns when all of them have closed.
        """
        loop = asyncio.get_running_loop()
        with self._guard:
            connections = list(self._sessions.values())
        await asyncio.gather(*(connection.close_from(loop) for connection in connections))
        with self._guard:  # sessions of loops closed without ending their tasks
            for connection in connections:
                if connection.loop.is_closed():
                    self._forget(connection)

    # -- the session ---------------------------------------------------------

    async def _request(self, send: Callable[[ClientSession], Any]) -> Any:
        """Send on the session, reconnecting once if the server went away."""
        connection: _Connection | None = None
        for attempt in (1, 2):
            connection = await self._open(replacing=connection)
            try:
                return await send(connection.session)
            except MCPError as exc:
                if exc.code != types.CONNECTION_CLOSED:
                    raise ToolsetError(
                        f"the server answered with an error: {exc.error.message}"
                    ) from None
                failure: str = "the connection closed"
            except _DROPPED as exc:
                failure = f"the connection failed ({type(exc).__name__}: {exc})"
            if attempt == 2:
                raise ToolsetError(f"{failure}, again after reconnecting")
        raise AssertionError("unreachable")  # pragma: no cover

    async def _open(self, *, replacing: _Connection | None = None) -> _Connection:
        """This loop's live session, opened if there is none; `replacing`: the session a
        call found gone, opened again unless another call of this loop already did."""
        loop = asyncio.get_running_loop()
        with self._guard:
            for other in [other for other in self._opening if other.is_closed()]:
                del self._opening[other]
            lock = self._opening.setdefault(loop, asyncio.Lock())
        async with lock:
            current = self._sessions.get(loop)
            if current is not None and current.alive and current is not replacing:
                return current
            if current is not None:
                await current.close()
                with self._guard:
                    self._forget(current)
                    self.reconnects += 1
                self._stale = True  # the server may have other tools now
            connection = _Connection(self._opener, self._on_message, self._ended)
            with self._guard:
                self._sessions[loop] = connection
            try:
                async with asyncio.timeout(self.start_timeout):
                    await connection.ready()
            except BaseException as exc:  # failed, timed out or cancelled: no process left
                await connection.abort()
                if isinstance(exc, TimeoutError):
                    raise ToolsetError(self._late()) from None
                raise
            return connection

    def _ended(self, connection: _Connection) -> None:
        with self._guard:
            self._forget(connection)

    def _forget(self, connection: _Connection) -> None:
        """Drop `connection` from the table if it is still there (it ended); under `_guard`."""
        if self._sessions.get(connection.loop) is connection:
            del self._sessions[connection.loop]

    def _late(self) -> str:
        return (
            f"the server did not answer within start_timeout={self.start_timeout:g} s "
            "(a server still installing or starting, or one waiting for input, answers "
            "nothing); the run goes on without its tools"
        )

    async def _on_message(self, message: IncomingMessage) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            self._stale = True

    # -- the tools -----------------------------------------------------------

    def _offered(self, name: str) -> bool:
        if self.allow is not None:
            return name in self.allow
        return name not in self.deny

    def _tool(self, spec: types.Tool) -> Tool:
        remote = spec.name

        async def handler(**arguments: Any) -> ToolContent:
            return await self.call(remote, arguments)

        approval = self.requires_approval
        return Tool(
            name=f"{self.prefix}{remote}",
            description=spec.description or spec.title or f"The {remote!r} tool of {self.name}.",
            input_schema=dict(spec.input_schema),
            handler=handler,
            timeout=self.timeout,
            untrusted=self.untrusted,
            requires_approval=approval if isinstance(approval, bool) else remote in approval,
        )


class _Connection:
    """One session, owned by a task that enters and leaves the SDK's contexts."""

    def __init__(
        self,
        opener: Opener,
        on_message: MessageHandlerFnT,
        on_end: Callable[[_Connection], None],
    ) -> None:
        self.loop = asyncio.get_running_loop()
        self._opener = opener
        self._on_message = on_message
        self._up = asyncio.Event()
        self._stop = asyncio.Event()
        self._session: ClientSession | None = None
        self._error: BaseException | None = None
        # On a thread's kept loop (a blocking `agent.run()`), the session outlives the
        # call that opened it and is closed when the loop is closed; other threads
        # close it through `_elsewhere`, even while that loop is idle.
        self._elsewhere = kept_loop_caller()
        self._task = create_kept_task(self._serve(), name="mcp-session", close=self.close)
        self._task.add_done_callback(lambda _: on_end(self))

    @property
    def session(self) -> ClientSession:
        if self._session is None:  # pragma: no cover - `ready` raised instead
            raise ToolsetError("the session is not open")
        return self._session

    @property
    def alive(self) -> bool:
        return self._session is not None and not self._task.done()

    async def ready(self) -> None:
        await self._up.wait()
        if self._session is None:
            error = self._error
            detail = f"{type(error).__name__}: {error}" if error is not None else "it ended"
            raise ToolsetError(f"could not open the session ({_innermost(detail, error)})")

    async def close_from(self, loop: asyncio.AbstractEventLoop) -> None:
        """Close from code running on `loop`, which need not be the session's own, and
        return when it is closed (but for a foreign loop that is neither running nor
        closed: it is told to close, and does when it runs again)."""
        if self.loop is loop:
            await self.close()
        elif self.loop.is_closed():
            return  # the session ended with its loop
        elif self._elsewhere is not None:  # a thread's kept loop, running or idle
            await asyncio.wrap_future(self._elsewhere(self.close))
        elif self.loop.is_running():  # another thread's loop: close it there
            await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(self.close(), self.loop))
        else:
            self.loop.call_soon_threadsafe(self._stop.set)

    async def abort(self) -> None:
        """End an open that failed or was given up: cancel it, and wait while the
        transport is torn down (the SDK stops a stdio server even when cancelled)."""
        self._task.cancel()
        await asyncio.wait({self._task})

    async def close(self) -> None:
        """Leave the session's contexts (in its own task) and wait for that, on its loop."""
        if not self._up.is_set():  # still opening (a server that does not answer): give up
            self._task.cancel()
        self._stop.set()
        with contextlib.suppress(Exception, asyncio.CancelledError):
            await asyncio.wait_for(asyncio.shield(self._task), timeout=10)
        if not self._task.done():  # pragma: no cover - a transport that would not close
            self._task.cancel()

    async def _serve(self) -> None:
        try:
            async with (
                self._opener() as (read, write),
                ClientSession(read, write, message_handler=self._on_message) as session,
            ):
                await session.initialize()
                self._session = session
                self._up.set()
                await self._stop.wait()
        except Exception as exc:
            self._error = exc
        finally:
            self._up.set()


def _server_stderr() -> TextIO:
    """Where a stdio server's stderr goes: this process's, resolved when the server starts.

    The SDK's default is the `sys.stderr` of when it was imported; a stream without a
    file descriptor (a test's or notebook's capture object) cannot be handed to a
    subprocess, so the process's original stderr is used then.
    """
    for stream in (sys.stderr, sys.__stderr__):
        try:
            if stream is not None:
                stream.fileno()
                return stream
        except (AttributeError, OSError, ValueError):
            continue
    return cast(TextIO, subprocess.DEVNULL)  # no stderr at all: drop the server's


def _innermost(detail: str, error: BaseException | None) -> str:
    """An exception group's first leaf, which says what went wrong."""
    while isinstance(error, BaseExceptionGroup) and error.exceptions:
        error = error.exceptions[0]
        detail = f"{type(error).__name__}: {error}"
    return detail


async def _all_tools(session: ClientSession) -> list[types.Tool]:
    """Every page of the server's tool list."""
    tools: list[types.Tool] = []
    cursor: str | None = None
    while True:
        params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
        page = await session.list_tools(params=params)
        tools.extend(page.tools)
        cursor = page.next_cursor
        if not cursor:
            return tools


def result_content(result: types.CallToolResult) -> ToolContent:
    """An MCP tool result as tool_result content.

    Text, and the text of embedded resources (named by their URI), become the
    result's text; images, and PDF or image resources, become blocks of their
    own; audio and other binary content is named, not sent. Structured content
    is the outcome's `data` (and the text, when the server sent no text).
    """
    texts: list[str] = []
    blocks: list[JSON] = []
    for item in result.content:
        if isinstance(item, types.TextContent):
            texts.append(item.text)
        elif isinstance(item, types.ImageContent):
            blocks.append(_image(item.mime_type, item.data))
        elif isinstance(item, types.EmbeddedResource):
            resource = item.resource
            uri = str(resource.uri)
            if isinstance(resource, types.TextResourceContents):
                texts.append(f"[resource {uri}]\n{resource.text}")
            else:
                mime = resource.mime_type or "application/octet-stream"
                if mime.startswith("image/"):
                    blocks.append(_image(mime, resource.blob))
                elif mime == "application/pdf":
                    blocks.append({"type": "document", "source": {
                        "type": "base64", "media_type": mime, "data": resource.blob}})  # fmt: skip
                else:
                    size = len(base64.b64decode(resource.blob, validate=False))
                    texts.append(f"[binary resource {uri} ({mime}, {size} bytes) not shown]")
        elif isinstance(item, types.ResourceLink):
            texts.append(f"[resource link {item.uri}: {item.name}]")
        elif isinstance(item, types.AudioContent):
            texts.append(f"[audio ({item.mime_type}) not shown]")
        else:  # pragma: no cover - a content type newer than this mapping
            texts.append(f"[{getattr(item, 'type', 'unknown')} content not shown]")
    structured = result.structured_content
    if not texts and structured is not None:
        texts.append(json.dumps(structured, ensure_ascii=False))
    return ToolContent(text="\n".join(texts), blocks=tuple(blocks), data=structured)


def _image(mime: str, data: str) -> JSON:
    return {"type": "image", "source": {"type": "base64", "media_type": mime, "data": data}}
