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
import os
import re
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Callable, Collection, Mapping, Sequence
from typing import Any, TextIO, cast
from urllib.parse import urlsplit

import anyio
import httpx2
import mcp_types as types
from mcp import ClientSession
from mcp.client.session import IncomingMessage, MessageHandlerFnT
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

import statemachine_agent

from ..blocking import create_kept_task, kept_loop_caller
from ._execution import HandlerTimeoutError
from ._mcp_catalog import catalog, safe_to_resend
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

DEFAULT_MAX_CALL_SECONDS = 600.0
"""Seconds an MCP call may take at most, however often it reports progress."""

_PREFIX = re.compile(r"[a-zA-Z0-9_-]{0,32}")


def _client_info() -> types.Implementation:
    """How the client introduces itself in `initialize`: this package, not the SDK's default."""
    return types.Implementation(name="statemachine-agent", version=statemachine_agent.__version__)


def _check_call_limits(timeout: float | None, max_call_seconds: float | None) -> None:
    if max_call_seconds is None:
        return
    if not max_call_seconds > 0:
        raise ValueError(f"MCPToolset max_call_seconds must be positive, got {max_call_seconds!r}")
    if timeout is not None and timeout > max_call_seconds:
        raise ValueError(
            f"MCPToolset timeout ({timeout} s) must not exceed max_call_seconds "
            f"({max_call_seconds} s): raise max_call_seconds too"
        )


class MCPToolset(Toolset):
    """The tools of one MCP server; pass it in `Agent(tools=[...])` next to other tools.

    Build one with `MCPToolset.stdio(command, args, env=...)` (the server is a
    subprocess) or `MCPToolset.http(url, headers=...)` (streamable HTTP). The
    options apply to every tool of the server, named as the server names them:

    - `allow` / `deny`: offer only these tools, or all but these (not both);
    - `prefix`: put before each tool's name, to keep two servers' tools apart;
    - `untrusted=True`: fence the results as outside content (`Tool.untrusted`);
    - `requires_approval`: the tools (or `True`: all) whose calls need approval;
    - `deferrable`: the tools (or `True`: all) that are writes whose result the model
      does not need to go on: their calls are staged and run in `commit` once the run
      would end successfully (side effects last; `Tool.deferrable`, which implies
      `side_effect`), and one such tool switches staging on for the agent;
    - `timeout`: seconds a call may go without a result or a progress notification
      before it is answered with a timeout error;
    - `max_call_seconds`: seconds a call may take however much progress it reports;
    - `start_timeout`: seconds opening the session (the server's answer to `initialize`)
      and listing the tools may take (a run's own `Budget(max_seconds=)` and `deadline=`
      bound it too); past them the toolset is left out of the run with a
      `toolset.failed` event, and tried again later (see `ToolRegistry.refresh`);
    - `resend`: the tools (by the server's names) whose call the server died in may
      (`True`) or may not (`False`) be sent again, overriding the server's annotations.

    A name the model API refuses (`files.read`) is offered mapped (`files_read`) and
    called under the server's name; a tool that needs MCP tasks is left out. Both are
    said in a `toolset.listed` event. A call that finds the server gone reconnects
    once; the call is sent again only if the tool is safe to repeat (read-only or
    idempotent by the server's annotations, or `resend={name: True}`), otherwise it is
    answered "the server stopped during the call; it may have acted". A tool error
    the server reports is an `is_error` result with the server's words.
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
        deferrable: bool | Collection[str] = (),
        timeout: float | None = DEFAULT_TOOL_TIMEOUT,
        max_call_seconds: float | None = DEFAULT_MAX_CALL_SECONDS,
        resend: Mapping[str, bool] | None = None,
        start_timeout: float = DEFAULT_START_TIMEOUT,
    ) -> None:
        """Prefer `MCPToolset.stdio` or `MCPToolset.http`; `opener` opens the transport."""
        if allow is not None and deny:
            raise ValueError("MCPToolset takes an allow list or a deny list, not both")
        for label, names in (("allow", allow or ()), ("deny", deny)):
            if isinstance(names, str):
                raise TypeError(f"MCPToolset {label}= takes a collection of names, not one string")
        for label, chosen in (("requires_approval", requires_approval), ("deferrable", deferrable)):
            if isinstance(chosen, str):
                raise TypeError(f"MCPToolset {label}= takes True or a collection of names")
        if timeout is not None and not timeout > 0:
            raise ValueError(f"MCPToolset timeout must be positive, got {timeout!r}")
        _check_call_limits(timeout, max_call_seconds)
        if not start_timeout > 0:
            raise ValueError(f"MCPToolset start_timeout must be positive, got {start_timeout!r}")
        if not _PREFIX.fullmatch(prefix):
            raise ValueError(
                f"MCPToolset prefix must be at most 32 of a-z, A-Z, 0-9, _ and -, got {prefix!r}"
            )
        if resend is not None and not (
            isinstance(resend, Mapping)
            and all(isinstance(k, str) and isinstance(v, bool) for k, v in resend.items())
        ):
            raise TypeError("MCPToolset resend= takes a mapping of tool names to True or False")
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
        self.deferrable = deferrable if isinstance(deferrable, bool) else frozenset(deferrable)
        self.timeout = timeout
        self.start_timeout = start_timeout
        self.max_call_seconds = max_call_seconds
        self.resend: Mapping[str, bool] = dict(resend or {})
        self._notes: dict[str, Any] = {}
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
        # The label reaches the model in error texts: the program's name, never its path.
        options.setdefault("name", os.path.basename(command) or "mcp")
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

        parts = urlsplit(url)  # no credentials, query or path in the label
        options.setdefault("name", parts.hostname or "mcp")
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

    @property
    def may_defer(self) -> bool:
        return bool(self.deferrable)

    async def list_tools(self) -> list[Tool]:
        """The server's tools (filtered, prefixed) as `Tool`s; the list is then fresh."""
        self._stale = False  # a change announced while listing makes it stale again
        try:
            async with asyncio.timeout(self.start_timeout):
                listed = await self._request(lambda session: _all_tools(session), resend=True)
        except TimeoutError:
            self._stale = True
            raise ToolsetError(self._late()) from None
        except BaseException:  # failed or cancelled: not listed
            self._stale = True
            raise
        listing = catalog(listed, prefix=self.prefix, offered=self._offered)
        self._notes = listing.notes()
        return [self._tool(name, spec) for name, spec in listing.offered]

    @property
    def notes(self) -> Mapping[str, Any]:
        """What the last listing changed: names mapped (`renamed`, the model's name to
        the server's) and tools left out (`left_out`, with why)."""
        return dict(self._notes)

    async def call(
        self, name: str, arguments: Mapping[str, Any], *, resend: bool = False
    ) -> ToolContent:
        """Call the server's tool `name`; its result as content, its error as `ToolError`.

        If the server dies during the call, the call is sent again to a new server
        only with `resend=True` (the tools offered to the model say so from their
        annotations and the toolset's `resend=`): the first call may have acted.
        """
        try:
            result = await self._request(
                lambda session: self._call_tool(session, name, dict(arguments)), resend=resend
            )
        except _StoppedMidCallError:
            raise ToolError(
                f"MCP server {self.name!r} stopped during the call to {name!r}; it may have "
                "acted, so the call was not sent again. Check before calling it again"
            ) from None
        except ToolsetError as exc:
            # Our words only: the details in parentheses (exception texts) can carry the
            # server's install path or address, which are not the model's business.
            said = str(exc).split(" (", 1)[0]
            raise ToolError(
                f"MCP server {self.name!r} failed the call to {name!r}: {said}"
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

    async def _request(self, send: Callable[[ClientSession], Any], *, resend: bool) -> Any:
        """Send on the session, reconnecting once if the server went away.

        The request is sent again on the new session only if `resend`, or if the old
        session was already closed when it was sent (so it never left this process).
        """
        connection: _Connection | None = None
        for attempt in (1, 2):
            connection = await self._open(replacing=connection)
            unsent = _closed(connection.session)
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
            if not (resend or unsent):
                with contextlib.suppress(ToolsetError):  # the next call tries again
                    await self._open(replacing=connection)
                raise _StoppedMidCallError(failure)
        raise AssertionError("unreachable")  # pragma: no cover

    async def _call_tool(
        self, session: ClientSession, name: str, arguments: dict[str, Any]
    ) -> types.CallToolResult:
        """One `tools/call` with a progress token, under `timeout` renewed by progress.

        The registry holds the call to `max_call_seconds` (the tool's own timeout);
        this holds it to `timeout` since the call was sent or the server last
        reported progress, so a long job that says how it goes is not cut off.
        """
        loop = asyncio.get_running_loop()
        heard = loop.time()

        async def progressed(progress: float, total: float | None, message: str | None) -> None:
            nonlocal heard
            heard = loop.time()

        task = asyncio.ensure_future(
            session.call_tool(name, arguments, progress_callback=progressed)
        )
        try:
            while True:
                wait = None if self.timeout is None else heard + self.timeout - loop.time()
                done, _ = await asyncio.wait({task}, timeout=wait)
                if done:
                    return task.result()
                if self.timeout is not None and loop.time() - heard >= self.timeout:
                    raise HandlerTimeoutError(
                        f"Tool {name!r} did not finish within {float(self.timeout)} s "
                        "(no result or progress from the server in that time); try a "
                        "smaller request, or continue without this result"
                    )
        finally:
            if not task.done():  # cancelled or timed out: the SDK tells the server
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task

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

    def _tool(self, name: str, spec: types.Tool) -> Tool:
        """The server's tool as the model is offered it (`name`), called by the server's name."""
        remote = spec.name
        resend = safe_to_resend(spec, self.resend)

        async def handler(**arguments: Any) -> ToolContent:
            return await self.call(remote, arguments, resend=resend)

        approval, deferred = self.requires_approval, self.deferrable
        staged = deferred if isinstance(deferred, bool) else remote in deferred
        return Tool(
            name=name,
            description=spec.description or spec.title or f"The {remote!r} tool of {self.name}.",
            input_schema=dict(spec.input_schema),
            handler=handler,
            timeout=self.max_call_seconds if self.timeout is not None else None,
            untrusted=self.untrusted,
            requires_approval=approval if isinstance(approval, bool) else remote in approval,
            side_effect=staged,
            deferrable=staged,
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
                ClientSession(
                    read, write, message_handler=self._on_message, client_info=_client_info()
                ) as session,
            ):
                await session.initialize()
                self._session = session
                self._up.set()
                await self._stop.wait()
        except Exception as exc:
            self._error = exc
        finally:
            self._up.set()


class _StoppedMidCallError(ToolsetError):
    """The server went away with the call sent, and the call is not safe to send again."""


def _closed(session: ClientSession) -> bool:
    """Whether the session's connection had closed already (a request would not leave).

    Read from the SDK's dispatcher, which has no public flag for it; where it cannot
    be read the answer is False, which only means a call is not sent again.
    """
    dispatcher = getattr(session, "_dispatcher", None)
    return getattr(dispatcher, "_closed", False) is True


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
    """An MCP tool result as tool_result content, each piece of it sent once.

    Text, and the text of embedded resources (named by their URI; a `text/*` or
    JSON blob decoded), become the result's text; images, and PDF or image
    resources, become blocks of their own; audio and other binary content is named,
    not sent. Structured content is the outcome's `data`, and becomes the text only
    when the result has no other content: servers that send both usually say the
    same thing twice (`read_media_file` puts its image in both), and an image
    repeated as base64 text costs tens of thousands of tokens on every later call.
    Binary fields of structured content shown as text are named, never spelled out.
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
                continue
            mime = resource.mime_type or "application/octet-stream"
            shown = _blob_text(mime, resource.blob)
            if shown is not None:
                texts.append(f"[resource {uri}]\n{shown}")
            elif mime.startswith("image/"):
                blocks.append(_image(mime, resource.blob))
            elif mime == "application/pdf":
                blocks.append({"type": "document", "source": {
                    "type": "base64", "media_type": mime, "data": resource.blob}})  # fmt: skip
            else:
                size = _decoded_size(resource.blob)
                texts.append(f"[binary resource {uri} ({mime}, {size} bytes) not shown]")
        elif isinstance(item, types.ResourceLink):
            texts.append(f"[resource link {item.uri}: {item.name}]")
        elif isinstance(item, types.AudioContent):
            texts.append(f"[audio ({item.mime_type}) not shown]")
        else:  # pragma: no cover - a content type newer than this mapping
            texts.append(f"[{getattr(item, 'type', 'unknown')} content not shown]")
    structured = result.structured_content
    if not result.content and structured is not None:
        texts.append(json.dumps(_without_binary(structured), ensure_ascii=False))
    return ToolContent(text="\n".join(texts), blocks=tuple(blocks), data=structured)


_TEXT_MIMES = ("application/json", "application/xml", "application/yaml", "application/x-yaml")
"""Blob media types (besides `text/*`) that are text a model can read."""

_BASE64 = re.compile(r"[A-Za-z0-9+/]+={0,2}")
_LONG_BASE64 = 512
"""A structured string at least this long that is all base64 is taken for binary data:
shorter ones (ids, hex digests, words) are left alone."""
_BINARY_KEYS = frozenset({"data", "blob"})


def _blob_text(mime: str, blob: str) -> str | None:
    """A text blob's text (`text/plain` sent as base64), or None for binary content."""
    kind = mime.split(";", 1)[0].strip().lower()
    if not (kind.startswith("text/") or kind in _TEXT_MIMES or kind.endswith("+json")):
        return None
    try:
        return base64.b64decode(blob, validate=True).decode("utf-8")
    except (ValueError, UnicodeDecodeError):
        return None


def _decoded_size(data: str) -> int:
    try:
        return len(base64.b64decode(data, validate=False))
    except ValueError:  # bad padding: the size it would have
        return len(data) * 3 // 4


def _without_binary(value: Any) -> Any:
    """Structured content with every binary field named instead of spelled out.

    Binary is what MCP content items carry (`data` / `blob` beside a media type),
    a `data:` URI, or a long string that is all base64.
    """
    if isinstance(value, dict):
        mime = value.get("mimeType", value.get("mime_type"))
        typed = isinstance(mime, str) or value.get("type") in ("image", "audio", "resource")
        return {
            key: (
                _binary_note(item, mime)
                if typed and key in _BINARY_KEYS and isinstance(item, str)
                else _without_binary(item)
            )
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [_without_binary(item) for item in value]
    if isinstance(value, str):
        if value.startswith("data:") and ";base64," in value[:200]:
            header, _, data = value.partition(";base64,")
            return _binary_note(data, header.removeprefix("data:"))
        if len(value) >= _LONG_BASE64 and _BASE64.fullmatch(value):
            return _binary_note(value, None)
    return value


def _binary_note(data: str, mime: object) -> str:
    kind = f"{mime}, " if isinstance(mime, str) and mime else ""
    return f"[binary data ({kind}{_decoded_size(data)} bytes) not shown]"


def _image(mime: str, data: str) -> JSON:
    return {"type": "image", "source": {"type": "base64", "media_type": mime, "data": data}}
