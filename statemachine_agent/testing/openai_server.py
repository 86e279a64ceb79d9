"""A local fake of OpenAI Chat Completions, for driving the *real* `openai` SDK in tests.

Like `FakeAnthropicServer`, it lets the real client do its real work (auth
header, retries with `retry-after-ms`, error classes, parsing) against scripted
answers, and checks every request strictly: an adapter bug that sends a history
the API rejects (an unanswered tool call, a tool message out of place, a leaked
Anthropic-only key) comes back as a 400 here instead of in production. It only
ever binds 127.0.0.1, on a port the OS picks; `base_url` ends in `/v1`, as the
SDK expects.

The reply builders (`chat_text`, `chat_tool_calls`, `chat_completion`, in
`openai_replies`) and the request check (`validate_chat_request`, in
`openai_validator`) are importable from here too; this module holds what only the
server needs: its scripted errors and the streamed form of a completion.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias, cast

from statemachine_agent.testing._http import Posted, ScriptedHandler, ScriptedServer, sse
from statemachine_agent.testing.openai_replies import (
    DEFAULT_CHAT_MODEL,
    DEFAULT_CHAT_USAGE,
    chat_completion,
    chat_from_message,
    chat_text,
    chat_tool_calls,
    tool_call,
)
from statemachine_agent.testing.openai_validator import validate_chat_request

if TYPE_CHECKING:
    from statemachine_agent.models.openai import OpenAIModel

__all__ = [
    "DEFAULT_CHAT_USAGE",
    "OPENAI_ERROR_TYPES",
    "FakeOpenAIError",
    "FakeOpenAIServer",
    "OpenAIScriptItem",
    "chat_completion",
    "chat_from_message",
    "chat_text",
    "chat_tool_calls",
    "context_length_error",
    "tool_call",
    "validate_chat_request",
]

JSON = dict[str, Any]

OPENAI_ERROR_TYPES: Mapping[int, tuple[str, str | None]] = {
    400: ("invalid_request_error", None),
    401: ("invalid_request_error", "invalid_api_key"),
    403: ("invalid_request_error", "unsupported_country_region_territory"),
    404: ("invalid_request_error", None),
    408: ("timeout", None),
    409: ("invalid_request_error", "conflict"),
    429: ("requests", "rate_limit_exceeded"),
    500: ("server_error", None),
    502: ("server_error", None),
    503: ("server_error", None),
}
"""The `error.type` and `error.code` the real API sends with each status."""

_CHAT_COMPLETIONS = "/v1/chat/completions"


@dataclass(frozen=True)
class FakeOpenAIError:
    """A scripted API error: status, error body and headers such as `retry-after-ms`.

    `error_type` and `code` default to what the real API sends with `status`.
    """

    status: int
    message: str = "Scripted error from FakeOpenAIServer."
    error_type: str | None = None
    code: str | None = None
    param: str | None = None
    headers: Mapping[str, str] | None = None

    def body(self) -> JSON:
        default_type, default_code = OPENAI_ERROR_TYPES.get(
            self.status,
            ("server_error" if self.status >= 500 else "invalid_request_error", None),
        )
        return {
            "error": {
                "message": self.message,
                "type": self.error_type or default_type,
                "param": self.param,
                "code": self.code if self.code is not None else default_code,
            }
        }


def context_length_error(tokens: int = 130_512, limit: int = 128_000) -> FakeOpenAIError:
    """The 400 the API sends when the prompt does not fit the model's context window."""
    return FakeOpenAIError(
        400,
        f"This model's maximum context length is {limit} tokens. However, your messages "
        f"resulted in {tokens} tokens. Please reduce the length of the messages.",
        code="context_length_exceeded",
        param="messages",
    )


OpenAIScriptItem: TypeAlias = JSON | FakeOpenAIError | Callable[[JSON], JSON | FakeOpenAIError]
"""One scripted answer: a response body, an error, or a function of the request body."""


class FakeOpenAIServer(ScriptedServer[FakeOpenAIError]):
    """Answers `POST /v1/chat/completions` from a script, recording every request.

    Use as a context manager; point `openai.OpenAI(base_url=server.base_url)` at
    it. It is listening as soon as it is constructed. Like the API, it wants an
    `authorization: Bearer ...` header.
    """

    name = "FakeOpenAIServer"
    path_prefix = "/v1"
    """The SDK appends `/chat/completions` to the base URL itself."""
    error_type = FakeOpenAIError

    def __init__(
        self, responses: Iterable[OpenAIScriptItem] = (), *, validate: bool = True
    ) -> None:
        super().__init__(responses, validate=validate, handler=_Handler)

    def problems(self, body: JSON) -> list[str]:
        return validate_chat_request(body)

    def rejection(self, problems: list[str]) -> FakeOpenAIError:
        return FakeOpenAIError(400, "Invalid request: " + "; ".join(problems))

    def failure(self, message: str) -> FakeOpenAIError:
        return FakeOpenAIError(500, message, headers={"x-should-retry": "false"})

    def fault(self, status: int, message: str, headers: dict[str, str]) -> FakeOpenAIError:
        return FakeOpenAIError(status, message, headers=headers)

    def error_body(self, error: FakeOpenAIError, request_id: str) -> JSON:
        return error.body()

    def model(self, name: str = DEFAULT_CHAT_MODEL, **options: Any) -> OpenAIModel:
        """An `OpenAIModel` (the real `openai` SDK) pointed at this server with a test key."""
        from statemachine_agent.models.openai import OpenAIModel

        options.setdefault("api_key", "sk-test-key")
        return OpenAIModel(name, base_url=self.base_url, **options)

    def _answer(
        self, body: JSON, headers: Mapping[str, str] | None = None
    ) -> JSON | FakeOpenAIError:
        """A Messages API reply in the script (`replies.text(...)`) is sent as the
        chat completion saying the same, so one script serves both servers."""
        answer = super()._answer(body, headers)
        if isinstance(answer, dict) and answer.get("type") == "message":
            return chat_from_message(answer, model=str(body.get("model") or DEFAULT_CHAT_MODEL))
        return answer


def stream_chunks(completion: Mapping[str, Any], *, include_usage: bool) -> list[JSON]:
    """The chunks of a streamed completion whose final form is `completion`: the role,
    the content word by word, each tool call's id and name then its arguments in
    pieces, the finish reason, and (with `include_usage`) a last chunk with the usage."""
    head = {k: completion.get(k) for k in ("id", "created", "model", "system_fingerprint")}
    head["object"] = "chat.completion.chunk"
    choice = (completion.get("choices") or [{}])[0]
    message = choice.get("message") or {}

    def chunk(delta: JSON, finish: Any = None) -> JSON:
        return {**head, "choices": [{"index": 0, "delta": delta, "finish_reason": finish,
                                     "logprobs": None}]}  # fmt: skip

    chunks = [chunk({"role": "assistant", "content": ""})]
    content = message.get("content")
    if isinstance(content, str):
        chunks += [chunk({"content": piece}) for piece in re.findall(r"\S*\s*", content)[:-1]]
    if message.get("refusal"):
        chunks.append(chunk({"refusal": message["refusal"]}))
    for k, call in enumerate(message.get("tool_calls") or ()):
        function = call.get("function") or {}
        start = {"index": k, "id": call.get("id"), "type": "function",
                 "function": {"name": function.get("name"), "arguments": ""}}  # fmt: skip
        chunks.append(chunk({"tool_calls": [start]}))
        arguments = str(function.get("arguments") or "")
        for piece in (arguments[: len(arguments) // 2], arguments[len(arguments) // 2 :]):
            chunks.append(chunk({"tool_calls": [{"index": k, "function": {"arguments": piece}}]}))
    chunks.append(chunk({}, choice.get("finish_reason")))
    if include_usage:
        chunks.append({**head, "choices": [], "usage": completion.get("usage")})
    return chunks


class _Handler(ScriptedHandler):
    server_version = "FakeOpenAIServer/1"
    paths = frozenset({_CHAT_COMPLETIONS})
    request_id_header = "x-request-id"
    not_found_message = "Invalid URL ({method} {path})"
    bad_json_message = "We could not parse the JSON: {error}"
    not_object_message = "the request body must be an object"

    def answer(self, request: Posted) -> None:
        owner = cast("FakeOpenAIServer", self.scripted)
        body, headers, request_id = request.body, request.headers, request.request_id
        owner._record(body, headers)
        token = headers.get("authorization", "").removeprefix("Bearer ").strip()
        if not headers.get("authorization", "").startswith("Bearer ") or not token:
            message = "You didn't provide an API key (an authorization: Bearer header)."
            self._error(request_id, FakeOpenAIError(401, message, code="missing_api_key"))
            return
        answer = owner._answer(body)
        if isinstance(answer, FakeOpenAIError):
            self._error(request_id, answer)
        elif body.get("stream") is True:
            usage = bool((body.get("stream_options") or {}).get("include_usage"))
            chunks = stream_chunks(answer, include_usage=usage)
            frames = [*(sse(chunk) for chunk in chunks), sse("[DONE]")]
            self._events(request_id, frames)
        else:
            self._json(200, answer, request_id)
