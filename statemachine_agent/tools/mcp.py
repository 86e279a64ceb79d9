"""`MCPToolset`: the tools of a Model Context Protocol server, offered as `Tool`s.

Needs the `mcp` extra (`pip install 'statemachine-agent[mcp]'`, the official SDK).
The server's tools are listed when a run first needs them, with the server's own
input schemas, so the registry validates the model's input before anything is
sent; the list is cached and listed again when the server says it changed.

One session per toolset serves every run of the agents it is given to, on the
event loop that opened it: an `async with agent:` block or a service's loop, or,
for the blocking `agent.run()`, the thread's kept loop (`statemachine_agent.blocking`),
where the session stays open between calls and is closed with `agent.close()`, when
the thread ends, or at exit. The session runs in a task of its own, since the SDK's
transports must be entered and left in one task while calls come from many.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import subprocess
import sys
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

from ..blocking import create_kept_task
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


class MCPToolset(Toolset):
    """The tools of one MCP server; pass it in `Agent(tools=[...])` next to other tools.

    Build one with `MCPToolset.stdio(command, args, env=...)` (the server is a
    subprocess) or `MCPToolset.http(url, headers=...)` (streamable HTTP). The
    options apply to every tool of the server, named as the server names them:

    - `allow` / `deny`: offer only these tools, or all but these (not both);
    - `prefix`: put before each tool's name, to keep two servers' tools apart;
    - `untrusted=True`: fence the results as outside content (`Tool.untrusted`);
    - `requires_approval`: the tools (or `True`: all) whose calls need approval;
    - `timeout`: seconds a call may take before it is answered with a timeout error.

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
        self.secrets: tuple[str, ...] = ()
        """Values the agent's audit redaction masks (the `headers=` of `http`)."""
        self._opener = opener
        self._connection: _Connection | None = None
        self._lock: asyncio.Lock | None = None
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
            listed = await self._request(lambda session: _all_tools(session))
        except ToolsetError:
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
        """Close the session (and stop a stdio server); the next call opens a new one.

        A session opened on another event loop is closed on that loop: at once if
        the loop runs (in another thread), otherwise when that loop is closed.
        """
        connection, self._connection = self._connection, None
        if connection is not None:
            await connection.close_from(asyncio.get_running_loop())

    # -- the session ---------------------------------------------------------

    async def _request(self, send: Callable[[ClientSession], Any]) -> Any:
        """Send on the session, reconnecting once if the server went away."""
        for attempt in (1, 2):
            connection = await self._open(fresh=attempt == 2)
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

    async def _open(self, *, fresh: bool) -> _Connection:
        """The live session of this event loop, opened if there is none (or `fresh`)."""
        loop = asyncio.get_running_loop()
        if self._lock is None or self._lock_loop is not loop:
            self._lock, self._lock_loop = asyncio.Lock(), loop
        async with self._lock:
            current = self._connection
            if current is not None and current.loop is loop and not fresh and current.alive:
                return current
            if current is not None:
                self._connection = None
                if current.loop is loop:
                    await current.close()
                    self.reconnects += 1
                else:  # a session of another loop (a thread's kept loop, or one that ended)
                    await current.close_from(loop, wait=False)
            connection = _Connection(self._opener, self._on_message)
            await connection.ready()
            self._connection = connection
            self._stale = True if current is not None else self._stale  # relist after a reconnect
            return connection

    async def _on_message(self, message: IncomingMessage) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            self._stale = True

    _lock_loop: asyncio.AbstractEventLoop | None = None

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

    def __init__(self, opener: Opener, on_message: MessageHandlerFnT) -> None:
        self.loop = asyncio.get_running_loop()
        self._opener = opener
        self._on_message = on_message
        self._up = asyncio.Event()
        self._stop = asyncio.Event()
        self._session: ClientSession | None = None
        self._error: BaseException | None = None
        # On a thread's kept loop (a blocking `agent.run()`), the session outlives the
        # call that opened it and is closed when the loop is closed.
        self._task = create_kept_task(self._serve(), name="mcp-session", close=self.close)

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

    async def close_from(self, loop: asyncio.AbstractEventLoop, *, wait: bool = True) -> None:
        """Close from code running on `loop`, which need not be the session's own."""
        if self.loop is loop:
            await self.close()
        elif self.loop.is_closed():
            return  # the session ended with its loop
        elif self.loop.is_running():  # another thread's loop: close it there
            future = asyncio.run_coroutine_threadsafe(self.close(), self.loop)
            if wait:
                await asyncio.wrap_future(future)
        # else: an idle kept loop (another thread's blocking calls) closes it when it closes

    async def close(self) -> None:
        """Leave the session's contexts (in its own task) and wait for that, on its loop."""
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
