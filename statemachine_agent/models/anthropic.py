"""The Anthropic Messages API through the official `anthropic` SDK.

The SDK does the HTTP, the auth headers and the retries (408, 409, 429, 5xx and
529, with backoff and `retry-after`, each wait capped by `models.waiting`); this
adapter only shapes the request and turns what comes back (or what failed) into
the engine's own records (`sdk_args` picks the SDK surface and keywords). Replies
are read as raw JSON so that blocks the SDK does not model yet reach the history
verbatim.
"""

from __future__ import annotations

import os
from typing import Any, cast

import anthropic

from statemachine_agent.models.base import DEFAULT_MODEL, ModelError, ModelReply, ModelRequest
from statemachine_agent.models.loop_clients import LoopClients
from statemachine_agent.models.sdk_args import sdk_arguments
from statemachine_agent.models.waiting import (
    DEFAULT_MAX_RETRY_WAIT,
    RetryWaitExceededError,
    capped_wait,
)

RETRYABLE_STATUSES = frozenset({408, 409, 429, 500, 502, 503, 504, 529})


class MissingAPIKeyError(ValueError):
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
    ) -> None:
        """`max_retry_wait` caps each wait before a retry (the API's `retry-after`
        included); a client given as `client=`/`async_client=` keeps its own rules."""
        self.name = name
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
        self._async_client = async_client
        self._max_retry_wait = max_retry_wait
        self._loop_clients = LoopClients(
            lambda: _CappedAsyncAnthropic(max_retry_wait, **self._options), _close
        )

    def __repr__(self) -> str:
        return f"<AnthropicModel {self.name}>"

    @property
    def api_key(self) -> str | None:
        """The key in use, so audit redaction can mask it wherever it might appear."""
        return cast("str | None", self._options["api_key"])

    @property
    def client(self) -> anthropic.Anthropic:
        if self._client is None:
            self._client = _CappedAnthropic(self._max_retry_wait, **self._options)
        return self._client

    async def _async_client_for_loop(self) -> anthropic.AsyncAnthropic:
        """The async client for the running event loop (the one given, if one was)."""
        if self._async_client is not None:
            return self._async_client
        return await self._loop_clients.get()

    def complete(self, request: ModelRequest) -> ModelReply:
        beta, kwargs = sdk_arguments(request.to_api())
        messages = cast(Any, self.client.beta.messages if beta else self.client.messages)
        try:
            raw = messages.with_raw_response.create(**kwargs)
            body = raw.json()
        except anthropic.AnthropicError as exc:
            raise to_model_error(exc) from exc
        except RetryWaitExceededError as exc:
            raise _wait_error(exc) from exc
        return ModelReply.from_api(body, request_id=raw.request_id)

    async def acomplete(self, request: ModelRequest) -> ModelReply:
        beta, kwargs = sdk_arguments(request.to_api())
        client = await self._async_client_for_loop()
        messages = cast(Any, client.beta.messages if beta else client.messages)
        try:
            raw = await messages.with_raw_response.create(**kwargs)
            body = await raw.json()
        except anthropic.AnthropicError as exc:
            raise to_model_error(exc) from exc
        except RetryWaitExceededError as exc:
            raise _wait_error(exc) from exc
        return ModelReply.from_api(body, request_id=raw.request_id)

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


def to_model_error(exc: anthropic.AnthropicError) -> ModelError:
    """Classify an SDK error: what failed, whether it may pass, whether it is a long prompt."""
    if isinstance(exc, anthropic.APIStatusError):
        message = exc.api_message or str(exc)
        return ModelError(
            message,
            status=exc.status_code,
            request_id=exc.request_id,
            error_type=exc.type or type(exc).__name__,
            retryable=exc.status_code in RETRYABLE_STATUSES,
            context_exceeded=exc.status_code in (400, 413) and _is_too_long(message),
        )
    if isinstance(exc, anthropic.APIConnectionError):
        return ModelError(str(exc), error_type=type(exc).__name__, retryable=True)
    return ModelError(str(exc), error_type=type(exc).__name__)


def _is_too_long(message: str) -> bool:
    text = message.lower()
    return "prompt is too long" in text or "context window" in text or "too many tokens" in text
