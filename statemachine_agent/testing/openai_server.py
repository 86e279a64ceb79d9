"""A local fake of OpenAI Chat Completions, for driving the *real* `openai` SDK in tests.

Like `FakeAnthropicServer`, it lets the real client do its real work (auth
header, retries with `retry-after-ms`, error classes, parsing) against scripted
answers, and checks every request strictly: an adapter bug that sends a history
the API rejects (an unanswered tool call, a tool message out of place, a leaked
Anthropic-only key) comes back as a 400 here instead of in production. It only
ever binds 127.0.0.1, on a port the OS picks; `base_url` ends in `/v1`, as the
SDK expects.

The reply builders (`chat_text`, `chat_tool_calls`, `chat_completion`) return
exactly the JSON the API sends, so a test scripts what a real model could say.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import itertools
import json
import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias, cast

from statemachine_agent.testing.scripted_http import ScriptedHandler, ScriptedServer

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

DEFAULT_CHAT_MODEL = "gpt-4o-mini"

DEFAULT_CHAT_USAGE: Mapping[str, int] = {"prompt_tokens": 10, "completion_tokens": 5}
"""What a built reply reports unless told otherwise: small, non-zero, uncached."""

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
_TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
_ROLES = ("system", "developer", "user", "assistant", "tool")
_MESSAGE_KEYS: Mapping[str, frozenset[str]] = {
    "system": frozenset({"role", "content", "name"}),
    "developer": frozenset({"role", "content", "name"}),
    "user": frozenset({"role", "content", "name"}),
    "assistant": frozenset(
        {"role", "content", "name", "tool_calls", "refusal", "audio", "function_call"}
    ),
    "tool": frozenset({"role", "content", "tool_call_id"}),
}
_USER_PART_TYPES = frozenset({"text", "image_url", "input_audio", "file"})
_TOOL_CHOICE_STRINGS = ("none", "auto", "required")
_FALLBACK_PARAMS = frozenset(
    {
        "model", "messages", "max_tokens", "max_completion_tokens", "tools", "tool_choice",
        "parallel_tool_calls", "temperature", "top_p", "stop", "seed", "n", "user",
        "response_format", "stream", "stream_options", "logprobs", "top_logprobs",
        "presence_penalty", "frequency_penalty", "logit_bias", "metadata", "store",
        "reasoning_effort", "service_tier", "modalities", "audio", "prediction",
        "prompt_cache_key", "safety_identifier", "verbosity", "web_search_options",
    }
)  # fmt: skip
"""Used only when the installed SDK cannot be asked for its parameter names."""

_counter = itertools.count(1)


def _new_id(prefix: str, sep: str = "_") -> str:
    """An id shaped like the API's, reproducible per process (a counter, hashed)."""
    digest = hashlib.sha256(f"{prefix}{next(_counter)}".encode()).hexdigest()
    return f"{prefix}{sep}{digest[:24]}"


# -- reply builders -------------------------------------------------------------------


def tool_call(name: str, arguments: Mapping[str, Any] | str = "{}", id: str | None = None) -> JSON:
    """One entry of `message.tool_calls`; `arguments` may be a raw (even malformed) string."""
    raw = (
        arguments if isinstance(arguments, str) else json.dumps(dict(arguments), ensure_ascii=False)
    )
    return {
        "id": id if id is not None else _new_id("call"),
        "type": "function",
        "function": {"name": name, "arguments": raw},
    }


def chat_completion(
    *,
    content: str | None = None,
    tool_calls: Sequence[Mapping[str, Any]] = (),
    finish_reason: str | None = "stop",
    refusal: str | None = None,
    usage: Mapping[str, Any] | None = None,
    model: str = DEFAULT_CHAT_MODEL,
    id: str | None = None,
) -> JSON:
    """A `chat.completion` body with any message and finish_reason, even ones no API sends.

    `usage` is merged over `DEFAULT_CHAT_USAGE`; `total_tokens` is filled in, and
    `cached_tokens` (a key of `usage` here) lands in `prompt_tokens_details`.
    """
    counts = {**DEFAULT_CHAT_USAGE, **(usage or {})}
    cached = int(counts.pop("cached_tokens", 0))
    counts.setdefault("total_tokens", counts["prompt_tokens"] + counts["completion_tokens"])
    counts.setdefault("prompt_tokens_details", {"cached_tokens": cached, "audio_tokens": 0})
    counts.setdefault("completion_tokens_details", {"reasoning_tokens": 0, "audio_tokens": 0})
    message: JSON = {"role": "assistant", "content": content, "refusal": refusal}
    if tool_calls:
        message["tool_calls"] = [dict(call) for call in tool_calls]
    return {
        "id": id if id is not None else _new_id("chatcmpl", "-"),
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {"index": 0, "message": message, "logprobs": None, "finish_reason": finish_reason}
        ],
        "usage": counts,
        "system_fingerprint": None,
    }


def chat_text(
    text: str = "Done.",
    *,
    finish_reason: str = "stop",
    usage: Mapping[str, Any] | None = None,
    model: str = DEFAULT_CHAT_MODEL,
    id: str | None = None,
) -> JSON:
    """A plain text answer: the usual last reply of a run."""
    return chat_completion(
        content=text, finish_reason=finish_reason, usage=usage, model=model, id=id
    )


def chat_tool_calls(
    *calls: tuple[str, Mapping[str, Any] | str],
    content: str | None = None,
    ids: Sequence[str] | None = None,
    usage: Mapping[str, Any] | None = None,
    model: str = DEFAULT_CHAT_MODEL,
    id: str | None = None,
) -> JSON:
    """A reply calling one or more tools, with `content: null` unless text is given.

    `ids`, when given, names the tool call ids in order (to replay a transcript).
    """
    if ids is not None and len(ids) != len(calls):
        raise ValueError(f"got {len(ids)} ids for {len(calls)} tool calls")
    built = [
        tool_call(name, arguments, ids[k] if ids is not None else None)
        for k, (name, arguments) in enumerate(calls)
    ]
    return chat_completion(
        content=content,
        tool_calls=built,
        finish_reason="tool_calls",
        usage=usage,
        model=model,
        id=id,
    )


STOP_TO_FINISH: Mapping[str, str] = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "tool_use": "tool_calls",
    "max_tokens": "length",
    "refusal": "content_filter",
}
"""Messages API stop_reason -> Chat Completions finish_reason (others pass through)."""


def chat_from_message(message: Mapping[str, Any], *, model: str = DEFAULT_CHAT_MODEL) -> JSON:
    """The chat completion saying what a Messages API reply says: its text, its tool
    calls (ids kept), its stop reason and token counts (cache reads as cached tokens)."""
    content = [b for b in message.get("content") or () if isinstance(b, Mapping)]
    text = "".join(str(b.get("text", "")) for b in content if b.get("type") == "text")
    calls = [
        tool_call(str(b["name"]), dict(b.get("input") or {}), id=str(b["id"]))
        for b in content
        if b.get("type") == "tool_use"
    ]
    usage = message.get("usage") or {}
    cached = int(usage.get("cache_read_input_tokens") or 0)
    stop = str(message.get("stop_reason"))
    return chat_completion(
        content=text or None,
        tool_calls=calls,
        finish_reason=STOP_TO_FINISH.get(stop, stop),
        usage={
            "prompt_tokens": int(usage.get("input_tokens") or 0) + cached,
            "completion_tokens": int(usage.get("output_tokens") or 0),
            "cached_tokens": cached,
        },
        model=model,
    )


# -- errors ---------------------------------------------------------------------------


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


# -- the request validator ------------------------------------------------------------


def known_chat_params() -> frozenset[str]:
    """The request parameters the installed SDK declares, so the check follows the SDK."""
    try:
        params = importlib.import_module("openai.types.chat.completion_create_params")
        base = params.CompletionCreateParamsBase
    except (ImportError, AttributeError):
        return _FALLBACK_PARAMS
    keys = frozenset(base.__required_keys__) | frozenset(base.__optional_keys__)
    return keys | {"stream"}


def validate_chat_request(body: Mapping[str, Any]) -> list[str]:
    """Every reason the API would reject this Chat Completions body; empty when valid.

    Stricter than the API in one way on purpose: tool call arguments must be JSON,
    since a history that replays malformed arguments confuses models and some
    OpenAI-compatible servers reject it.
    """
    problems: list[str] = []
    unknown = sorted(set(body) - known_chat_params())
    if unknown:
        problems.append(f"unrecognized request arguments: {', '.join(unknown)}")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        problems.append("model: a non-empty string is required")
    if "stream" in body and not isinstance(body["stream"], bool):
        problems.append(f"stream: expected a boolean, got {body['stream']!r}")
    options = body.get("stream_options")
    if options is not None:
        if not body.get("stream"):
            problems.append("stream_options: only allowed when stream is true")
        if not isinstance(options, dict) or set(options) - {"include_usage", "include_obfuscation"}:
            problems.append(f"stream_options: unrecognized options {options!r}")
        elif not isinstance(options.get("include_usage", False), bool):
            problems.append("stream_options.include_usage: expected a boolean")
    if "max_tokens" in body and "max_completion_tokens" in body:
        problems.append("max_tokens and max_completion_tokens cannot both be set")
    for key in ("max_tokens", "max_completion_tokens"):
        value = body.get(key)
        if key in body and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            problems.append(f"{key}: expected an integer >= 1, got {value!r}")
    tool_names = _check_tools(body, problems)
    _check_tool_choice(body, tool_names, problems)
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        problems.append("messages: a non-empty array is required")
        return problems
    has_tool_calls = _check_messages(messages, problems)
    if has_tool_calls and tool_names is None:
        problems.append("messages contain tool_calls but the request defines no tools")
    return problems


def _check_tools(body: Mapping[str, Any], problems: list[str]) -> set[str] | None:
    """Check `tools`; the names it defines, or None when there are none."""
    if "tools" not in body:
        return None
    tools = body["tools"]
    if not isinstance(tools, list) or not tools:
        problems.append("tools: a non-empty array is required when the parameter is given")
        return None
    names: set[str] = set()
    for k, tool in enumerate(tools):
        where = f"tools[{k}]"
        if not isinstance(tool, dict) or tool.get("type") != "function":
            problems.append(f"{where}: expected {{'type': 'function', 'function': {{...}}}}")
            continue
        extra = sorted(set(tool) - {"type", "function"})
        if extra:
            problems.append(f"{where}: unknown keys {extra}")
        function = tool.get("function")
        if not isinstance(function, dict):
            problems.append(f"{where}.function: an object is required")
            continue
        extra = sorted(set(function) - {"name", "description", "parameters", "strict"})
        if extra:
            problems.append(f"{where}.function: unknown keys {extra}")
        name = function.get("name")
        if not isinstance(name, str) or not _TOOL_NAME.fullmatch(name):
            problems.append(f"{where}.function.name: must match {_TOOL_NAME.pattern}")
        elif name in names:
            problems.append(f"{where}.function.name: duplicate tool name {name!r}")
        else:
            names.add(name)
        if "description" in function and not isinstance(function["description"], str):
            problems.append(f"{where}.function.description: a string is required")
        parameters = function.get("parameters")
        if "parameters" in function and (
            not isinstance(parameters, dict) or parameters.get("type") != "object"
        ):
            problems.append(f"{where}.function.parameters: a JSON Schema of type object")
    return names


def _check_tool_choice(
    body: Mapping[str, Any], tool_names: set[str] | None, problems: list[str]
) -> None:
    for key in ("tool_choice", "parallel_tool_calls"):
        if key in body and tool_names is None:
            problems.append(f"{key} is only allowed when 'tools' are specified")
    choice = body.get("tool_choice")
    if choice is None or choice in _TOOL_CHOICE_STRINGS:
        return
    if isinstance(choice, dict) and choice.get("type") == "function":
        function = choice.get("function")
        name = function.get("name") if isinstance(function, dict) else None
        if tool_names is not None and name not in tool_names:
            problems.append(f"tool_choice: names tool {name!r}, which is not defined")
        return
    problems.append(f"tool_choice: expected none/auto/required or a function, got {choice!r}")


def _check_messages(messages: list[Any], problems: list[str]) -> bool:
    """Check roles, keys, content and tool-call pairing; whether any tool call was made."""
    pending: dict[str, int] = {}
    """Tool call ids of the latest assistant message still waiting for their tool message."""
    seen_ids: set[str] = set()
    has_tool_calls = False
    for i, message in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(message, dict) or message.get("role") not in _ROLES:
            problems.append(f"{where}: expected an object with a role in {list(_ROLES)}")
            continue
        role = message["role"]
        extra = sorted(set(message) - _MESSAGE_KEYS[role])
        if extra:
            problems.append(f"{where}: unknown keys {extra} for a {role} message")
        if role == "tool":
            _check_tool_message(message, where, pending, problems)
            continue
        if pending:
            problems.append(
                f"{where}: an assistant message with 'tool_calls' must be followed by tool "
                "messages responding to each 'tool_call_id'; these had none: "
                + ", ".join(sorted(pending))
            )
            pending.clear()
        if role == "assistant":
            calls = _check_assistant(message, where, seen_ids, problems)
            has_tool_calls = has_tool_calls or bool(calls)
            pending = dict.fromkeys(calls, i)
        else:
            _check_content(message.get("content"), where, role, problems)
    if pending:
        problems.append(
            "the last assistant message's tool calls have no tool messages: "
            + ", ".join(sorted(pending))
        )
    return has_tool_calls


def _check_tool_message(
    message: Mapping[str, Any], where: str, pending: dict[str, int], problems: list[str]
) -> None:
    call_id = message.get("tool_call_id")
    if not isinstance(call_id, str) or not call_id:
        problems.append(f"{where}: a tool message needs a tool_call_id")
    elif call_id not in pending:
        problems.append(
            f"{where}: messages with role 'tool' must be a response to a preceding message "
            f"with 'tool_calls' (no pending tool call {call_id!r})"
        )
    else:
        del pending[call_id]
    _check_content(message.get("content"), where, "tool", problems)


def _check_assistant(
    message: Mapping[str, Any], where: str, seen_ids: set[str], problems: list[str]
) -> list[str]:
    """Check an assistant message; the ids of its tool calls."""
    content = message.get("content")
    calls = message.get("tool_calls")
    ids: list[str] = []
    if calls is not None:
        if not isinstance(calls, list) or not calls:
            problems.append(f"{where}.tool_calls: a non-empty array when given")
            calls = []
        for k, call in enumerate(calls):
            ids.extend(_check_tool_call(call, f"{where}.tool_calls[{k}]", seen_ids, problems))
    if content is None:
        if not ids:
            problems.append(f"{where}: an assistant message needs content or tool_calls")
    elif isinstance(content, str):
        if not content and not ids:
            problems.append(f"{where}.content: empty text with no tool_calls")
    elif isinstance(content, list):
        for k, part in enumerate(content):
            kind = part.get("type") if isinstance(part, dict) else None
            if kind not in ("text", "refusal"):
                problems.append(f"{where}.content[{k}]: assistant parts are text or refusal")
    else:
        problems.append(f"{where}.content: a string, an array of parts, or null")
    return ids


def _check_tool_call(call: Any, where: str, seen_ids: set[str], problems: list[str]) -> list[str]:
    if not isinstance(call, dict) or call.get("type") != "function":
        problems.append(f"{where}: expected {{'id', 'type': 'function', 'function'}}")
        return []
    extra = sorted(set(call) - {"id", "type", "function"})
    if extra:
        problems.append(f"{where}: unknown keys {extra}")
    function = call.get("function")
    if not isinstance(function, dict) or not isinstance(function.get("name"), str):
        problems.append(f"{where}.function: needs a name and arguments")
    else:
        arguments = function.get("arguments")
        if not isinstance(arguments, str):
            problems.append(f"{where}.function.arguments: must be a JSON string")
        else:
            try:
                json.loads(arguments)
            except ValueError:
                problems.append(f"{where}.function.arguments: not valid JSON: {arguments!r}")
    call_id = call.get("id")
    if not isinstance(call_id, str) or not call_id:
        problems.append(f"{where}.id: a non-empty string is required")
        return []
    if call_id in seen_ids:
        problems.append(f"{where}.id: duplicate tool call id {call_id!r}")
    seen_ids.add(call_id)
    return [call_id]


def _check_content(content: Any, where: str, role: str, problems: list[str]) -> None:
    """Non-empty text, or a non-empty array of parts the role accepts."""
    if isinstance(content, str):
        if not content.strip():
            problems.append(f"{where}.content: must not be empty for a {role} message")
        return
    if not isinstance(content, list) or not content:
        problems.append(f"{where}.content: non-empty text or a non-empty array of parts")
        return
    allowed = _USER_PART_TYPES if role == "user" else frozenset({"text"})
    for k, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind not in allowed:
            problems.append(f"{where}.content[{k}]: part type {kind!r} is not allowed here")
        elif kind == "text" and not (isinstance(part.get("text"), str) and part["text"].strip()):
            problems.append(f"{where}.content[{k}]: text parts must not be empty")
        elif kind == "image_url" and not isinstance((part.get("image_url") or {}).get("url"), str):
            problems.append(f"{where}.content[{k}]: image_url parts need image_url.url")
        if isinstance(part, dict) and "cache_control" in part:
            problems.append(f"{where}.content[{k}]: unknown key 'cache_control'")


# -- the server -----------------------------------------------------------------------


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

    @property
    def owner(self) -> FakeOpenAIServer:
        return cast("FakeOpenAIServer", self.scripted)

    def do_POST(self) -> None:  # noqa: N802 (http.server dispatches on this name)
        owner = self.owner
        request_id = owner._next_request_id()
        path = self.path.split("?", 1)[0].rstrip("/")
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        if path != _CHAT_COMPLETIONS:
            self._not_found(request_id)
            return
        headers = {name.lower(): value for name, value in self.headers.items()}
        try:
            body = json.loads(raw or b"null")
        except ValueError as exc:
            self._error(request_id, FakeOpenAIError(400, f"We could not parse the JSON: {exc}"))
            return
        if not isinstance(body, dict):
            self._error(request_id, FakeOpenAIError(400, "the request body must be an object"))
            return
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
            self._stream(answer, request_id, include_usage=usage)
        else:
            self._json(200, answer, request_id)

    def _stream(
        self, completion: Mapping[str, Any], request_id: str, *, include_usage: bool
    ) -> None:
        """Send a scripted completion as the `chat.completion.chunk` events of a stream,
        ended by `data: [DONE]`, as the API does."""
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("x-request-id", request_id)
        self.send_header("connection", "close")
        self.close_connection = True
        self.end_headers()
        with contextlib.suppress(ConnectionError):
            for chunk in stream_chunks(completion, include_usage=include_usage):
                self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                self.wfile.flush()
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()

    def _not_found(self, request_id: str) -> None:
        message = f"Invalid URL ({self.command} {self.path})"
        self._error(request_id, FakeOpenAIError(404, message))

    def _error(self, request_id: str, error: FakeOpenAIError) -> None:
        self._json(error.status, error.body(), request_id, error.headers)

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
        self.send_header("x-request-id", request_id)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        with contextlib.suppress(ConnectionError):
            self.wfile.write(payload)
