"""The Anthropic Messages API through the official `anthropic` SDK.

The SDK does the HTTP, the auth headers and the retries (408, 409, 429, 5xx and
529, with backoff and `retry-after`, each wait capped by `models.waiting`); this
adapter only shapes the request and turns what comes back (or what failed) into
the engine's own records (`sdk_args` picks the SDK surface and keywords). Replies
are read as raw JSON so that blocks the SDK does not model yet reach the history
verbatim.

A call is streamed (`client.messages.stream`) when the model is built with
`stream=True`, when someone listens to the run's deltas (`Agent.astream`), or when
`max_tokens` is so large that the SDK refuses a non-streamed call (it could run
past ten minutes). The reply the stream assembles is the one a non-streamed call
returns. A stream that dies after it started (an `error` event such as
`overloaded_error`, a dropped connection) is made again, as the SDK retries a
failed request (`max_retries` times, with backoff), and then fails as it would.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import os
import time
from collections.abc import Mapping
from typing import Any, cast

import anthropic
import httpx2
from anthropic._constants import MODEL_NONSTREAMING_TOKENS

from statemachine_agent.blocking import serving_blocking_call
from statemachine_agent.errors import Error
from statemachine_agent.models.base import DEFAULT_MODEL, ModelError, ModelReply, ModelRequest
from statemachine_agent.models.loop_clients import LoopClients
from statemachine_agent.models.sdk_args import sdk_arguments
from statemachine_agent.models.streaming import ReplyDelta, begin_reply, deliver, listener
from statemachine_agent.models.waiting import (
    DEFAULT_MAX_RETRY_WAIT,
    RetryWaitExceededError,
    capped_wait,
)
from statemachine_agent.tools.threads import DaemonWorkers

RETRYABLE_STATUSES = frozenset({408, 409, 429, 500, 502, 503, 504, 529})

STATUS_OF_ERROR_TYPE: Mapping[str, int] = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "billing_error": 402,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "timeout_error": 504,
    "overloaded_error": 529,
}
"""The HTTP status each `error.type` stands for: an `error` event in a stream comes
after status 200 was sent, and is classified as its status would be."""

_INITIAL_RETRY_DELAY = 0.5
_MAX_RETRY_DELAY = 8.0
"""The SDK's own backoff, for the streams it cannot retry itself (they died mid-reply)."""

_NONSTREAMING_SECONDS = 600
_MAX_SECONDS_PER_128K_TOKENS = 3600


def needs_streaming(model: str, max_tokens: int) -> bool:
    """Whether the SDK refuses to make this call without streaming.

    The SDK's rule: a call whose output could take more than ten minutes, at an
    hour per 128k tokens, must stream, as must one past a model's non-streaming
    token limit (the SDK's `MODEL_NONSTREAMING_TOKENS`).
    """
    expected = _MAX_SECONDS_PER_128K_TOKENS * max_tokens / 128_000
    limit = MODEL_NONSTREAMING_TOKENS.get(model)
    return expected > _NONSTREAMING_SECONDS or (limit is not None and max_tokens > limit)


class MissingAPIKeyError(Error, ValueError):
    """No API key was given and ANTHROPIC_API_KEY is not set."""


class AnthropicModel:
    """A Claude model, called synchronously (`complete`) or asynchronously (`acomplete`)."""

    def __init__(
        self,
        name: str = DEFAULT_MODEL,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        max_retries: int = 2,
        timeout: float = 600.0,
        max_retry_wait: float = DEFAULT_MAX_RETRY_WAIT,
        client: anthropic.Anthropic | None = None,
        async_client: anthropic.AsyncAnthropic | None = None,
        stream: bool | None = None,
    ) -> None:
        """`max_retry_wait` caps each wait before a retry (the API's `retry-after`
        included); a client given as `client=`/`async_client=` keeps its own rules.
        `stream`: True streams every call, False none; None (the default) streams when
        someone listens to the reply as it is written, or when `max_tokens` needs it."""
        self.name = name
        self.stream = stream
        self.max_retries = max_retries
        key = api_key or os.environ.get("ANTHROPIC_API_KEY")
        if client is None and async_client is None and not key:
            raise MissingAPIKeyError(
                "ANTHROPIC_API_KEY is not set: export it, or pass api_key= to AnthropicModel"
            )
        self._options: dict[str, Any] = {
            "api_key": key,
            "base_url": base_url or os.environ.get("ANTHROPIC_BASE_URL") or None,
            "max_retries": max_retries,
            "timeout": timeout,
        }
        self._client = client
        self._own_client: tuple[int, anthropic.Anthropic] | None = None
        """The sync client made here, and the process it was made in (see `client`)."""
        self._async_client = async_client
        self._max_retry_wait = max_retry_wait
        self._loop_clients = LoopClients(
            lambda: _CappedAsyncAnthropic(max_retry_wait, **self._options), _close
        )
        self._workers = DaemonWorkers(max_idle=4)
        """Threads for the sync client's calls made for a blocking run (see `acomplete`);
        a forked child starts its own (`DaemonWorkers` forgets its parent's)."""

    def __repr__(self) -> str:
        return f"<AnthropicModel {self.name}>"

    @property
    def api_key(self) -> str | None:
        """The key in use, so audit redaction can mask it wherever it might appear."""
        return cast("str | None", self._options["api_key"])

    @property
    def client(self) -> anthropic.Anthropic:
        """The sync client: the one given, else one made per process (a forked child
        must not send its requests down its parent's pooled connections)."""
        if self._client is not None:
            return self._client
        pid = os.getpid()
        if self._own_client is None or self._own_client[0] != pid:
            self._own_client = (pid, _CappedAnthropic(self._max_retry_wait, **self._options))
        return self._own_client[1]

    async def _async_client_for_loop(self) -> anthropic.AsyncAnthropic:
        """The async client for the running event loop (the one given, if one was)."""
        if self._async_client is not None:
            return self._async_client
        return await self._loop_clients.get()

    def streams(self, request: ModelRequest) -> bool:
        """Whether this call is streamed (see the module's docstring)."""
        if self.stream is not None:
            return self.stream
        return listener() is not None or needs_streaming(request.model, request.max_tokens)

    def complete(self, request: ModelRequest) -> ModelReply:
        beta, kwargs = sdk_arguments(request.to_api())
        messages = cast(Any, self.client.beta.messages if beta else self.client.messages)
        if self.streams(request):
            return self._retrying_sync(lambda: _stream_sync(messages, kwargs))
        try:
            raw = messages.with_raw_response.create(**kwargs)
            body = raw.json()
        except anthropic.AnthropicError as exc:
            raise to_model_error(exc) from exc
        except RetryWaitExceededError as exc:
            raise _wait_error(exc) from exc
        return ModelReply.from_api(body, request_id=raw.request_id)

    async def acomplete(self, request: ModelRequest) -> ModelReply:
        """The call for a run on an event loop.

        A blocking run (`Agent.run`, its caller waiting on its thread's kept loop) that
        is not streamed makes the call with the SDK's sync client on a daemon worker
        thread: httpx's sync transport costs ~0.3 ms of CPU less a call than the async
        one with its anyio plumbing, the hand-over ~0.04 ms, and the one sync client's
        keep-alive pool serves every thread. Cancelling abandons the call at once, as
        on the async path; the thread finishes the request (or its retries) unseen,
        and being a daemon it never delays exit. An `async_client=` given is always used.
        """
        streamed = self.streams(request)
        if self._async_client is None and not streamed and serving_blocking_call():
            return await self._complete_on_worker(request)
        beta, kwargs = sdk_arguments(request.to_api())
        client = self._async_client
        if client is None:  # the loop's own client, awaited only the first time
            client = self._loop_clients.current()
            if client is None:
                client = await self._loop_clients.get()
        messages = cast(Any, client.beta.messages if beta else client.messages)
        if streamed:
            attempt = 0
            while True:
                try:
                    return await _stream_async(messages, kwargs)
                except _StreamDiedError as died:
                    attempt = self._retry_or_raise(died, attempt)
                await asyncio.sleep(_delay(attempt))
        try:
            raw = await messages.with_raw_response.create(**kwargs)
            body = await raw.json()
        except anthropic.AnthropicError as exc:
            raise to_model_error(exc) from exc
        except RetryWaitExceededError as exc:
            raise _wait_error(exc) from exc
        return ModelReply.from_api(body, request_id=raw.request_id)

    async def _complete_on_worker(self, request: ModelRequest) -> ModelReply:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[ModelReply] = loop.create_future()
        context = contextvars.copy_context()  # the SDK's tracing span, structlog's context

        def settle(error: BaseException | None, reply: ModelReply | None) -> None:
            if future.done():  # the run was cancelled: nobody waits for this call
                return
            if error is not None:
                future.set_exception(error)
            else:
                future.set_result(cast(ModelReply, reply))

        def work() -> None:
            error: BaseException | None = None
            reply: ModelReply | None = None
            try:
                reply = context.run(self.complete, request)
            except BaseException as exc:  # handed to the awaiting run, never lost in the thread
                error = exc
            with contextlib.suppress(RuntimeError):  # the loop closed: nobody is waiting
                loop.call_soon_threadsafe(settle, error, reply)

        self._workers.submit(work)
        return await future

    def _retrying_sync(self, call: Any) -> ModelReply:
        attempt = 0
        while True:
            try:
                return cast(ModelReply, call())
            except _StreamDiedError as died:
                attempt = self._retry_or_raise(died, attempt)
            time.sleep(_delay(attempt))

    def _retry_or_raise(self, died: _StreamDiedError, attempt: int) -> int:
        """The next attempt's number after a stream died mid-reply, or its error raised."""
        if not died.error.retryable or attempt >= self.max_retries:
            raise died.error from died.__cause__
        deliver(ReplyDelta("restarted"))
        return attempt + 1

    async def acount_tokens(self, request: ModelRequest) -> int:
        """The API's own count of the request's input tokens."""
        body = request.to_api()
        params = {
            k: body[k] for k in ("model", "messages", "system", "tools", "tool_choice") if k in body
        }
        try:
            client = await self._async_client_for_loop()
            counted = await cast(Any, client.messages).count_tokens(**params)
        except anthropic.AnthropicError as exc:
            raise to_model_error(exc) from exc
        return int(counted.input_tokens)


class _CappedAnthropic(anthropic.Anthropic):
    """The sync SDK client, with each retry wait capped (see `models.waiting`)."""

    def __init__(self, max_retry_wait: float, **options: Any) -> None:
        super().__init__(**options)
        self._max_retry_wait = max_retry_wait

    def _calculate_retry_timeout(self, *args: Any, **kwargs: Any) -> float:
        return capped_wait(super()._calculate_retry_timeout(*args, **kwargs), self._max_retry_wait)


class _CappedAsyncAnthropic(anthropic.AsyncAnthropic):
    """The async SDK client, with each retry wait capped (see `models.waiting`)."""

    def __init__(self, max_retry_wait: float, **options: Any) -> None:
        super().__init__(**options)
        self._max_retry_wait = max_retry_wait

    def _calculate_retry_timeout(self, *args: Any, **kwargs: Any) -> float:
        return capped_wait(super()._calculate_retry_timeout(*args, **kwargs), self._max_retry_wait)


def _wait_error(exc: RetryWaitExceededError) -> ModelError:
    return ModelError(str(exc), error_type="RetryWaitExceededError", retryable=False)


async def _close(client: anthropic.AsyncAnthropic) -> None:
    await client.close()


class _StreamDiedError(Exception):
    """A stream that had started failed before its reply was complete."""

    def __init__(self, error: ModelError) -> None:
        super().__init__(error.message)
        self.error = error


def _delay(attempt: int) -> float:
    return float(min(_INITIAL_RETRY_DELAY * 2 ** (attempt - 1), _MAX_RETRY_DELAY))


async def _stream_async(messages: Any, kwargs: Mapping[str, Any]) -> ModelReply:
    """One streamed call: deltas delivered as they come, the SDK's assembled reply returned."""
    begin_reply()
    started = False
    try:
        async with messages.stream(**kwargs) as stream:
            started = True
            ended = False
            async for event in stream:
                ended = _forward(event) or ended
            _check_ended(ended)
            final = await stream.get_final_message()
            return _reply_of(final, stream.request_id)
    except anthropic.AnthropicError as exc:
        raise _failure(exc, started) from exc
    except httpx2.TransportError as exc:
        raise _failure(anthropic.APIConnectionError(request=exc.request), started) from exc
    except RetryWaitExceededError as exc:
        raise _wait_error(exc) from exc


def _stream_sync(messages: Any, kwargs: Mapping[str, Any]) -> ModelReply:
    begin_reply()
    started = False
    try:
        with messages.stream(**kwargs) as stream:
            started = True
            ended = False
            for event in stream:
                ended = _forward(event) or ended
            _check_ended(ended)
            return _reply_of(stream.get_final_message(), stream.request_id)
    except anthropic.AnthropicError as exc:
        raise _failure(exc, started) from exc
    except httpx2.TransportError as exc:
        raise _failure(anthropic.APIConnectionError(request=exc.request), started) from exc
    except RetryWaitExceededError as exc:
        raise _wait_error(exc) from exc


def _check_ended(ended: bool) -> None:
    """A stream cut without `message_stop` (the connection closed) holds half a reply."""
    if not ended:
        error = ModelError("the stream ended before message_stop (connection closed)",
                           error_type="APIConnectionError", retryable=True)  # fmt: skip
        raise _StreamDiedError(error)


def _failure(exc: anthropic.AnthropicError, started: bool) -> Exception:
    """Before the stream started the SDK has retried already; after, it is ours to retry."""
    error = to_model_error(exc)
    return _StreamDiedError(error) if started else error


def _reply_of(final: Any, request_id: str | None) -> ModelReply:
    return ModelReply.from_api(final.to_dict(mode="json"), request_id=request_id)


def _forward(event: Any) -> bool:
    """Deliver what an SDK stream event means for a listener; True at `message_stop`."""
    kind = getattr(event, "type", None)
    if kind == "message_stop":
        return True
    if kind == "content_block_delta":
        delta = event.delta
        if delta.type == "text_delta":
            deliver(ReplyDelta("text", event.index, text=delta.text))
        elif delta.type == "thinking_delta":
            deliver(ReplyDelta("thinking", event.index, text=delta.thinking))
    elif kind == "content_block_start" and event.content_block.type == "tool_use":
        block = event.content_block
        deliver(ReplyDelta("tool_use_started", event.index, tool_use_id=block.id, name=block.name))
    elif kind == "content_block_stop" and event.content_block.type == "tool_use":
        block = event.content_block
        deliver(ReplyDelta("tool_use_complete", event.index, tool_use_id=block.id,
                           name=block.name, input=block.input))  # fmt: skip
    return False


def to_model_error(exc: anthropic.AnthropicError) -> ModelError:
    """Classify an SDK error: what failed, whether it may pass, whether it is a long prompt.

    An `error` event of a stream arrives under status 200; its `error.type` says
    which status it stands for (`overloaded_error` is a 529).
    """
    if isinstance(exc, anthropic.APIStatusError):
        message = exc.api_message or str(exc)
        status = exc.status_code
        if status == 200:
            status = STATUS_OF_ERROR_TYPE.get(str(exc.type), 500)
        return ModelError(
            message,
            status=status,
            request_id=exc.request_id,
            error_type=exc.type or type(exc).__name__,
            retryable=status in RETRYABLE_STATUSES,
            context_exceeded=status in (400, 413) and _is_too_long(message),
        )
    if isinstance(exc, anthropic.APIConnectionError):
        return ModelError(str(exc), error_type=type(exc).__name__, retryable=True)
    return ModelError(str(exc), error_type=type(exc).__name__)


def _is_too_long(message: str) -> bool:
    text = message.lower()
    return "prompt is too long" in text or "context window" in text or "too many tokens" in text
