"""What the fake API servers share: a local HTTP server that answers from a script.

Both fakes (`FakeAnthropicServer`, `FakeOpenAIServer`) are the same machine with
a different API spoken at its edge, so the machine is written once, here. A
subclass says how its API validates requests, spells errors and streams; this
module does the rest: serving on 127.0.0.1 (never anything else) in a daemon
thread, reading and parsing the POSTed body (chunked or not), recording requests,
handing out scripted answers in order, turning an exhausted script or a failing
scripted callable into a 500 the client sees, and writing JSON and server-sent
event responses. It also scripts the faults a client must survive
(`rate_limited`, `server_error`, `overloaded`, `hang`) and says what a test
should not have let pass (`unexpected`).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import sys
import threading
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Generic, Protocol, Self, TypeVar, cast

JSON = dict[str, Any]


class ScriptedError(Protocol):
    """What the plumbing reads of a server's scripted-error type: the status and the
    extra headers; the body is the server's to spell (`ScriptedServer.error_body`)."""

    @property
    def status(self) -> int: ...

    @property
    def headers(self) -> Mapping[str, str] | None: ...


Error = TypeVar("Error", bound=ScriptedError)
"""The server's scripted-error type (e.g. `FakeError`)."""


class ScriptedServer(Generic[Error]):
    """A fake API server answering from a script of bodies, errors or callables."""

    name = "ScriptedServer"
    path_prefix = ""
    """Appended to the address in `base_url` (the OpenAI SDK wants `/v1` there)."""
    error_type: type[Error]

    def __init__(
        self,
        responses: Iterable[JSON | Error | Callable[[JSON], JSON | Error]],
        *,
        validate: bool,
        handler: type[BaseHTTPRequestHandler],
    ) -> None:
        self.validate = validate
        self.requests: list[JSON] = []
        """Every JSON body posted to the API, in order, valid or not."""
        self.headers: list[dict[str, str]] = []
        """The headers of each request in `requests` (names lower-cased)."""
        self.invalid_requests: list[tuple[JSON, list[str]]] = []
        """Bodies the validator rejected, with their problems."""
        self.errors: list[BaseException] = []
        """Exceptions raised by scripted callables (they also became 500s)."""
        self.connections = 0
        """TCP connections accepted so far (a client reusing keep-alive opens few)."""
        self._script: deque[JSON | Error | Callable[[JSON], JSON | Error]] = deque(responses)
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._httpd = _HTTPServer(self, handler)
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=self.name,
            daemon=True,
        )
        self._closed = False
        self._closing = threading.Event()
        self.invalid_expected = False
        """Set by `expect_invalid()`: rejected requests are then part of the test."""
        self._thread.start()

    @property
    def base_url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}{self.path_prefix}"

    @property
    def remaining(self) -> int:
        """How many scripted answers have not been used yet."""
        with self._lock:
            return len(self._script)

    def add(self, *responses: JSON | Error | Callable[[JSON], JSON | Error]) -> None:
        """Queue more answers after the ones already scripted (each its own argument:
        `add(*replies)` for a list)."""
        for index, response in enumerate(responses):
            if isinstance(response, list | tuple | str | bytes):
                raise TypeError(
                    f"add() takes each answer as its own argument; responses[{index}] is a "
                    f"{type(response).__name__}: write add(*answers) to queue a list"
                )
        with self._lock:
            self._script.extend(responses)

    @property
    def invalid(self) -> list[tuple[JSON, list[str]]]:
        """The requests the real API would have rejected, with why (`invalid_requests`)."""
        with self._lock:
            return list(self.invalid_requests)

    def expect_invalid(self) -> None:
        """Declare that this test sends requests the API rejects (so `unexpected` allows them)."""
        self.invalid_expected = True

    def unexpected(self) -> list[str]:
        """What went wrong unnoticed: rejected requests nobody expected, failing callables.

        The pytest fixtures fail the test at teardown when this is not empty: a 400
        the engine turned into a `failed` run is easy to assert past by accident.
        """
        problems: list[str] = []
        if not self.invalid_expected:
            for n, (_body, why) in enumerate(self.invalid, 1):
                problems.append(
                    f"{self.name}: invalid request #{n} (the API would reject it): "
                    + "; ".join(why)
                )
        with self._lock:
            errors = list(self.errors)
        problems.extend(f"{self.name}: a scripted callable raised {exc!r}" for exc in errors)
        return problems

    # -- faults ---------------------------------------------------------------------------

    def fault(self, status: int, message: str, headers: dict[str, str]) -> Error:
        """An error answer with `status` as this API spells it."""
        raise NotImplementedError

    def rate_limited(self, retry_after: float | None = 0.01) -> None:
        """Queue a 429 with `retry-after` (seconds) and `retry-after-ms` headers."""
        self.add(self.fault(429, "Rate limited (scripted).", _retry_headers(retry_after)))

    def server_error(self, retry_after: float | None = 0.01) -> None:
        """Queue a 500; `retry_after` keeps the client's retry short (None: no header)."""
        self.add(self.fault(500, "Internal server error (scripted).", _retry_headers(retry_after)))

    def overloaded(self, retry_after: float | None = 0.01) -> None:
        """Queue a 529 (overloaded), as the Messages API sends under load."""
        self.add(self.fault(529, "Overloaded (scripted).", _retry_headers(retry_after)))

    def hang(self) -> None:
        """Queue a response that never comes: the request is held until the server closes,
        so the client's timeout is what ends it (give the model a short `timeout`)."""

        def held(body: JSON) -> Error:
            self._closing.wait()
            return self.failure(f"{self.name}: the held request was released at close")

        self.add(held)

    def close(self) -> None:
        """Stop serving and wait for the server thread; safe to call twice."""
        if self._closed:
            return
        self._closed = True
        self._closing.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- what a subclass says about its API --------------------------------------------

    def problems(self, body: JSON) -> list[str]:
        """Why the API would reject the request (empty when it is valid)."""
        return []

    def header_problems(self, body: JSON, headers: Mapping[str, str]) -> list[str]:
        """Why the API would reject the request for its headers (empty when they are fine)."""
        return []

    def rejection(self, problems: list[str]) -> Error:
        """The 400 the API answers an invalid request with."""
        raise NotImplementedError

    def failure(self, message: str) -> Error:
        """A 500 that tells the client not to retry (the script, not the network, failed)."""
        raise NotImplementedError

    def error_body(self, error: Error, request_id: str) -> JSON:
        """The JSON body the API sends with `error`."""
        raise NotImplementedError

    # -- called from the handler threads -------------------------------------------

    def _next_request_id(self) -> str:
        with self._lock:
            return f"req_{next(self._ids)}"

    def _record(self, body: JSON, headers: dict[str, str]) -> None:
        with self._lock:
            self.requests.append(body)
            self.headers.append(headers)

    def _answer(self, body: JSON, headers: Mapping[str, str] | None = None) -> JSON | Error:
        """What to send for a request that passed the transport checks."""
        if self.validate:
            problems = self.problems(body) + self.header_problems(body, headers or {})
            if problems:
                with self._lock:
                    self.invalid_requests.append((body, problems))
                return self.rejection(problems)
        with self._lock:
            item = self._script.popleft() if self._script else None
        if item is None:
            return self.failure(
                f"{self.name}: the script is exhausted; no response is queued for "
                f"request #{len(self.requests)}"
            )
        if isinstance(item, dict | self.error_type) or not callable(item):
            return item  # a body, an error, or a record the subclass's handler knows
        try:
            return item(body)
        except Exception as exc:  # reported to the client and kept for the test to see
            with self._lock:
                self.errors.append(exc)
            return self.failure(f"{self.name}: the scripted callable raised {exc!r}")


def _retry_headers(retry_after: float | None) -> dict[str, str]:
    if retry_after is None:
        return {}
    return {"retry-after": f"{retry_after:g}", "retry-after-ms": str(round(retry_after * 1000))}


@dataclass(frozen=True)
class Posted:
    """A POST that reached a known endpoint with a JSON object for a body."""

    path: str
    """The path without query string or trailing slash."""
    body: JSON
    raw: bytes
    """The body as sent (what a token count is made of)."""
    headers: dict[str, str]
    """Names lower-cased."""
    request_id: str


def sse(data: Mapping[str, Any] | str, event: str | None = None) -> bytes:
    """One server-sent event: an optional `event:` line and the data, as JSON unless
    it is already text (OpenAI's closing `[DONE]`)."""
    payload = data if isinstance(data, str) else json.dumps(data)
    head = f"event: {event}\n" if event is not None else ""
    return f"{head}data: {payload}\n\n".encode()


class ScriptedHandler(BaseHTTPRequestHandler):
    """The HTTP side both fake APIs share: keep-alive, no request log, a 404 for any
    other path or method, the body read and parsed once, JSON and event-stream answers.

    A subclass names its endpoints and its spelling of the transport errors, and
    answers each `Posted` request in `answer`.
    """

    protocol_version = "HTTP/1.1"
    """Keep-alive, as the real APIs: clients that reuse connections are tested too."""
    disable_nagle_algorithm = True
    """Headers and body go out as separate writes; with Nagle's algorithm on, the body
    waits for the client's delayed ACK of the headers (~40 ms per response)."""
    paths: frozenset[str] = frozenset()
    """The API's POST endpoints; any other path is a 404."""
    request_id_header = "request-id"
    """The header each answer carries its request id in."""
    not_found_message = "Not found: {method} {path}"
    bad_json_message = "request body is not valid JSON: {error}"
    not_object_message = "request body must be a JSON object"

    @property
    def scripted(self) -> ScriptedServer[Any]:
        return cast(_HTTPServer, self.server).owner

    def setup(self) -> None:
        super().setup()
        owner = self.scripted
        with owner._lock:
            owner.connections += 1

    def log_message(self, format: str, *args: Any) -> None:
        """No request log on stderr."""

    def do_GET(self) -> None:
        self._not_found(self.scripted._next_request_id())

    def do_POST(self) -> None:
        owner = self.scripted
        request_id = owner._next_request_id()
        path = self.path.split("?", 1)[0].rstrip("/")
        raw = self._read_body()
        if path not in self.paths:
            self._not_found(request_id)
            return
        headers = {name.lower(): value for name, value in self.headers.items()}
        try:
            body = json.loads(raw or b"null")
        except ValueError as exc:
            self._error(request_id, owner.fault(400, self.bad_json_message.format(error=exc), {}))
            return
        if not isinstance(body, dict):
            self._error(request_id, owner.fault(400, self.not_object_message, {}))
            return
        self.answer(Posted(path, body, raw, headers, request_id))

    def answer(self, request: Posted) -> None:
        """Check and answer a parsed request (record it with `scripted._record`)."""
        raise NotImplementedError

    def _read_body(self) -> bytes:
        if self.headers.get("transfer-encoding", "").lower() == "chunked":
            chunks: list[bytes] = []
            while True:
                size = int(self.rfile.readline().split(b";", 1)[0].strip() or b"0", 16)
                if size == 0:
                    self.rfile.readline()
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.headers.get("content-length") or 0)
        return self.rfile.read(length) if length else b""

    def _not_found(self, request_id: str) -> None:
        message = self.not_found_message.format(method=self.command, path=self.path)
        self._error(request_id, self.scripted.fault(404, message, {}))

    def _error(self, request_id: str, error: ScriptedError) -> None:
        body = self.scripted.error_body(error, request_id)
        self._json(error.status, body, request_id, error.headers)

    def _json(
        self,
        status: int,
        body: Mapping[str, Any],
        request_id: str,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        payload = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(payload)))
        self.send_header(self.request_id_header, request_id)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        with contextlib.suppress(ConnectionError):
            self.wfile.write(payload)

    def _events(
        self, request_id: str, frames: Iterable[bytes], headers: Mapping[str, str] | None = None
    ) -> None:
        """A 200 event stream of `frames` (see `sse`), each flushed as it is made, then
        the connection closes, as the APIs do; a client hanging up ends it quietly."""
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header(self.request_id_header, request_id)
        self.send_header("connection", "close")
        self.close_connection = True
        self.end_headers()
        with contextlib.suppress(ConnectionError):
            for frame in frames:
                self.wfile.write(frame)
                self.wfile.flush()


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, owner: ScriptedServer[Any], handler: type[BaseHTTPRequestHandler]) -> None:
        self.owner = owner
        super().__init__(("127.0.0.1", 0), handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Stay quiet when a client hangs up; a test never wants that on stderr."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)
