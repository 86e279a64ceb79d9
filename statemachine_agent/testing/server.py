"""A local fake of the Messages API, for driving the *real* SDK in tests.

Mocking the SDK would test our idea of it; this server lets the real client do
its real work (headers, retries, error mapping, parsing) against scripted
answers, while checking every request with the strict validator. It only ever
binds 127.0.0.1, on a port the OS picks.
"""

from __future__ import annotations

import contextlib
import json
import re
import socket
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias, cast

from statemachine_agent.models.base import DEFAULT_MODEL
from statemachine_agent.testing._http import Posted, ScriptedHandler, ScriptedServer, sse
from statemachine_agent.testing.validator import (
    describe_problems,
    error_body,
    validate_headers,
    validate_request,
)

if TYPE_CHECKING:
    from statemachine_agent.models.anthropic import AnthropicModel

__all__ = ["ERROR_TYPES", "FakeAnthropicServer", "FakeError", "PausedStream", "ScriptItem"]

JSON = dict[str, Any]

ERROR_TYPES: Mapping[int, str] = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    408: "timeout_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    504: "timeout_error",
    529: "overloaded_error",
}
"""The `error.type` the real API sends with each status."""


def _default_error_type(status: int) -> str:
    if status in ERROR_TYPES:
        return ERROR_TYPES[status]
    return "api_error" if status >= 500 else "invalid_request_error"


@dataclass(frozen=True)
class FakeError:
    """A scripted API error: the status, the error body, and headers such as `retry-after-ms`.

    `error_type` defaults to what the real API sends with `status` (529 -> overloaded_error).
    """

    status: int
    message: str = "Scripted error from FakeAnthropicServer."
    error_type: str | None = None
    headers: Mapping[str, str] | None = None
    partial: JSON | None = None
    """For a streamed request: the error comes mid-stream, after the first `after_events`
    events of this reply (status 200 is already sent, so the API sends an `error`
    event; a non-streamed request gets the error as usual)."""
    after_events: int = 0
    reset: bool = False
    """Mid-stream, drop the connection instead of sending an `error` event."""

    @property
    def type(self) -> str:
        return self.error_type or _default_error_type(self.status)

    @classmethod
    def mid_stream(
        cls, partial: JSON, *, after_events: int, status: int = 529, reset: bool = False
    ) -> FakeError:
        """An error (`overloaded_error` by default) or a dropped connection in the middle
        of streaming `partial`."""
        return cls(status, "Overloaded" if status == 529 else "Scripted mid-stream error",
                   partial=partial, after_events=after_events, reset=reset)  # fmt: skip


@dataclass(frozen=True)
class PausedStream:
    """A streamed reply that stops after `after_events` events until `resume` is set (or
    `timeout` seconds pass), then goes on: a reply being written, for cancel tests."""

    reply: JSON
    after_events: int
    resume: threading.Event
    timeout: float = 30.0


ScriptItem: TypeAlias = JSON | FakeError | PausedStream | Callable[[JSON], JSON | FakeError]
"""One scripted answer: a response body, an error, or a function of the request body."""

_MESSAGES = "/v1/messages"
_COUNT_TOKENS = "/v1/messages/count_tokens"


class FakeAnthropicServer(ScriptedServer[FakeError]):
    """Answers `POST /v1/messages` from a script, recording every request.

    Use as a context manager; point `anthropic.Anthropic(base_url=server.base_url)`
    at it. The server is listening as soon as it is constructed. Like the API it
    wants credentials: an `x-api-key` header, or `authorization: Bearer ...`, which
    is how SDK 2.x sends an api_key.
    """

    name = "FakeAnthropicServer"
    error_type = FakeError

    def __init__(self, responses: Iterable[ScriptItem] = (), *, validate: bool = True) -> None:
        # A `PausedStream` passes through the base as a record only our handler reads.
        super().__init__(cast(Any, responses), validate=validate, handler=_Handler)
        self.count_tokens_requests: list[JSON] = []

    def problems(self, body: JSON) -> list[str]:
        return validate_request(body)

    def header_problems(self, body: JSON, headers: Mapping[str, str]) -> list[str]:
        return validate_headers(body, headers)

    def rejection(self, problems: list[str]) -> FakeError:
        return FakeError(400, describe_problems(problems))

    def failure(self, message: str) -> FakeError:
        return FakeError(500, message, headers={"x-should-retry": "false"})

    def fault(self, status: int, message: str, headers: dict[str, str]) -> FakeError:
        return FakeError(status, message, headers=headers)

    def error_body(self, error: FakeError, request_id: str) -> JSON:
        return error_body(error.type, error.message, request_id)

    def model(self, name: str = DEFAULT_MODEL, **options: Any) -> AnthropicModel:
        """An `AnthropicModel` (the real SDK) pointed at this server with a test key.

        `options` go to `AnthropicModel` (`max_retries=0`, `timeout=0.5`, ...).
        """
        from statemachine_agent.models.anthropic import AnthropicModel

        options.setdefault("api_key", "sk-ant-test-key")
        return AnthropicModel(name, base_url=self.base_url, **options)


class _Handler(ScriptedHandler):
    server_version = "FakeAnthropicServer/1"
    paths = frozenset({_MESSAGES, _COUNT_TOKENS})

    def answer(self, request: Posted) -> None:
        owner = cast("FakeAnthropicServer", self.scripted)
        body, headers, request_id = request.body, request.headers, request.request_id
        if request.path == _MESSAGES:
            owner._record(body, headers)
        else:
            with owner._lock:
                owner.count_tokens_requests.append(body)
        if not headers.get("x-api-key") and not headers.get("authorization", "").startswith(
            "Bearer "
        ):
            message = "an x-api-key header (or an authorization: Bearer header) is required"
            self._error(request_id, FakeError(401, message))
            return
        if not headers.get("anthropic-version"):
            self._error(request_id, FakeError(400, "anthropic-version: header is required"))
            return
        if request.path == _COUNT_TOKENS:
            self._json(200, {"input_tokens": max(1, len(request.raw) // 4)}, request_id)
            return
        answer = owner._answer(body, headers)
        if isinstance(answer, PausedStream):
            self._stream(answer.reply, request_id, pause=answer)
        elif isinstance(answer, FakeError) and answer.partial is not None and body.get("stream"):
            self._stream(answer.partial, request_id, cut=answer)
        elif isinstance(answer, FakeError):
            self._error(request_id, answer)
        elif body.get("stream") is True:
            self._stream(answer, request_id)
        else:
            self._json(200, answer, request_id)

    def _stream(
        self,
        reply: Mapping[str, Any],
        request_id: str,
        cut: FakeError | None = None,
        pause: PausedStream | None = None,
    ) -> None:
        """Send a scripted reply as the server-sent events the streaming API emits; with
        `cut`, stop after `cut.after_events` events with an `error` event or a reset."""
        events = list(_stream_events(reply))
        if cut is not None:
            events = events[: cut.after_events]
            if not cut.reset:
                events.append(error_body(cut.type, cut.message, request_id))

        def frames() -> Iterator[bytes]:
            for sent, event in enumerate(events):
                if pause is not None and sent == pause.after_events:
                    pause.resume.wait(pause.timeout)
                yield sse(event, event=event["type"])

        self._events(request_id, frames(), headers={"cache-control": "no-cache"})
        if cut is not None and cut.reset:
            with contextlib.suppress(OSError):
                self.connection.shutdown(socket.SHUT_RDWR)


def _stream_events(reply: Mapping[str, Any]) -> Iterator[JSON]:
    """The event sequence of a streamed response whose final message is `reply`."""
    usage = dict(reply.get("usage") or {})
    start = {
        **reply,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {**usage, "output_tokens": 1},
    }
    start.pop("stop_details", None)
    yield {"type": "message_start", "message": start}
    yield {"type": "ping"}
    for index, block in enumerate(reply.get("content") or ()):
        kind = block.get("type")
        if kind == "text":
            yield _block_start(index, {**block, "text": ""})
            for piece in _pieces(str(block.get("text", ""))):
                yield _delta(index, {"type": "text_delta", "text": piece})
        elif kind == "tool_use":
            yield _block_start(index, {**block, "input": {}})
            partial = json.dumps(block.get("input") or {})
            for piece in (partial[: len(partial) // 2], partial[len(partial) // 2 :]):
                yield _delta(index, {"type": "input_json_delta", "partial_json": piece})
        elif kind == "thinking":
            yield _block_start(index, {**block, "thinking": "", "signature": ""})
            for piece in _pieces(str(block.get("thinking", ""))):
                yield _delta(index, {"type": "thinking_delta", "thinking": piece})
            signature = block.get("signature", "")
            yield _delta(index, {"type": "signature_delta", "signature": signature})
        else:
            yield _block_start(index, dict(block))
        yield {"type": "content_block_stop", "index": index}
    yield {
        "type": "message_delta",
        "delta": {
            "stop_reason": reply.get("stop_reason"),
            "stop_sequence": reply.get("stop_sequence"),
            "stop_details": reply.get("stop_details"),
        },
        "usage": {"output_tokens": int(usage.get("output_tokens") or 0)},
    }
    yield {"type": "message_stop"}


def _pieces(text: str) -> list[str]:
    """The text in word-sized deltas, as the API streams it (at least one, maybe empty)."""
    return re.findall(r"\S*\s*", text)[:-1] or [text]


def _block_start(index: int, block: JSON) -> JSON:
    return {"type": "content_block_start", "index": index, "content_block": block}


def _delta(index: int, delta: JSON) -> JSON:
    return {"type": "content_block_delta", "index": index, "delta": delta}
