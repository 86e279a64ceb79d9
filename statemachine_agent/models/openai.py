"""OpenAI Chat Completions, and any server that speaks it, through the official `openai` SDK.

The engine keeps its history as Messages API JSON whatever the backend, so one
run record, one audit format and one set of guards serve every model. This
adapter translates at the boundary, both ways: the request the engine built
becomes a Chat Completions body, and the completion comes back as Messages API
blocks with an Anthropic stop_reason, so the machine's rows (tool use, cut-off,
refusal, empty reply) apply unchanged.

The SDK does the HTTP, the auth header and the retries (408, 409, 429 and 5xx,
with backoff and `retry-after-ms`); replies are read as raw JSON so fields the
SDK does not model (from OpenAI-compatible servers) cannot break parsing.
Install it with the `openai` extra: `pip install 'statemachine-agent[openai]'`.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from typing import Any, Literal, cast

try:
    import openai
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "OpenAIModel needs the openai SDK: pip install 'statemachine-agent[openai]'"
    ) from exc

from statemachine_agent.models.anthropic import MissingAPIKeyError
from statemachine_agent.models.base import JSON, ModelError, ModelReply, ModelRequest, Usage
from statemachine_agent.models.loop_clients import LoopClients
from statemachine_agent.models.streaming import ReplyDelta, begin_reply, deliver, listener

__all__ = [
    "DEFAULT_OPENAI_MODEL",
    "FINISH_REASONS",
    "MissingOpenAIKeyError",
    "OpenAIModel",
    "from_chat_completion",
    "to_chat_request",
    "to_model_error",
]

DEFAULT_OPENAI_MODEL = "gpt-4o-mini"

FINISH_REASONS: Mapping[str, str] = {
    "stop": "end_turn",
    "tool_calls": "tool_use",
    "length": "max_tokens",
    "content_filter": "refusal",
}
"""Chat Completions finish_reason -> Messages API stop_reason. Others pass through as they
are, so the engine's unknown-stop_reason row names them instead of guessing."""

RETRYABLE_STATUSES = frozenset({408, 409, 429})
"""Besides every 5xx: statuses where trying again later (or a fallback model) may help."""

RAW_ARGUMENTS_KEY = "_raw_arguments"
"""Tool input key holding arguments that were not a JSON object's text; no tool schema
accepts it, so the registry answers the model with an is_error result instead of a crash."""

ANTHROPIC_ONLY_PARAMS = frozenset(
    {
        "top_k", "thinking", "context_management", "container", "mcp_servers",
        "output_config", "cache_control", "inference_geo", "betas", "metadata",
        "service_tier",
    }
)  # fmt: skip
"""Messages API parameters with no Chat Completions meaning (or a different one): dropped.
Anything else in `request_options` (temperature, seed, response_format, ...) is sent."""

MaxTokensParam = Literal["max_completion_tokens", "max_tokens"]


class MissingOpenAIKeyError(MissingAPIKeyError):
    """No API key was given and OPENAI_API_KEY is not set."""


class OpenAIModel:
    """A Chat Completions model, called synchronously (`complete`) or asynchronously.

    `base_url` (or OPENAI_BASE_URL) points it at any OpenAI-compatible server
    (OpenRouter, vLLM, Ollama, a local fake). `max_tokens_param` names how the
    output limit is sent: OpenAI's current `max_completion_tokens` (required by its
    reasoning models), or the older `max_tokens` some compatible servers still want.
    """

    def __init__(
        self,
        name: str = DEFAULT_OPENAI_MODEL,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        max_retries: int = 2,
        timeout: float = 600.0,
        max_tokens_param: MaxTokensParam = "max_completion_tokens",
        client: openai.OpenAI | None = None,
        async_client: openai.AsyncOpenAI | None = None,
        stream: bool | None = None,
    ) -> None:
        """`stream`: True streams every call, False none; None (the default) streams when
        someone listens to the reply as it is written (`Agent.astream`)."""
        self.name = name
        self.stream = stream
        key = api_key or os.environ.get("OPENAI_API_KEY")
        if client is None and async_client is None and not key:
            raise MissingOpenAIKeyError(
                "OPENAI_API_KEY is not set: export it, or pass api_key= to OpenAIModel"
            )
        if max_tokens_param not in ("max_completion_tokens", "max_tokens"):
            raise ValueError(
                "max_tokens_param must be 'max_completion_tokens' or 'max_tokens', "
                f"got {max_tokens_param!r}"
            )
        self.max_tokens_param: MaxTokensParam = max_tokens_param
        self._options: dict[str, Any] = {
            "api_key": key,
            "base_url": base_url or os.environ.get("OPENAI_BASE_URL") or None,
            "max_retries": max_retries,
            "timeout": timeout,
        }
        self._client = client
        self._async_client = async_client
        self._loop_clients = LoopClients(lambda: openai.AsyncOpenAI(**self._options), _close)

    def __repr__(self) -> str:
        return f"<OpenAIModel {self.name}>"

    @property
    def api_key(self) -> str | None:
        """The key in use, so audit redaction can mask it wherever it might appear."""
        return cast("str | None", self._options["api_key"])

    @property
    def client(self) -> openai.OpenAI:
        if self._client is None:
            self._client = openai.OpenAI(**self._options)
        return self._client

    async def _async_client_for_loop(self) -> openai.AsyncOpenAI:
        """The async client for the running event loop (the one given, if one was)."""
        if self._async_client is not None:
            return self._async_client
        return await self._loop_clients.get()

    def complete(self, request: ModelRequest) -> ModelReply:
        body = to_chat_request(request, max_tokens_param=self.max_tokens_param)
        completions = cast(Any, self.client.chat.completions)
        try:
            raw = completions.with_raw_response.create(**body)
        except openai.OpenAIError as exc:
            raise to_model_error(exc) from exc
        return from_chat_completion(_json_body(raw), request_id=raw.request_id)

    def streams(self) -> bool:
        """Whether the next call is streamed (see `stream`)."""
        return self.stream if self.stream is not None else listener() is not None

    async def acomplete(self, request: ModelRequest) -> ModelReply:
        body = to_chat_request(request, max_tokens_param=self.max_tokens_param)
        client = await self._async_client_for_loop()
        completions = cast(Any, client.chat.completions)
        if self.streams():
            begin_reply()
            assembly = _Assembly()
            try:
                chunks = await completions.create(
                    **body, stream=True, stream_options={"include_usage": True}
                )
                async for chunk in chunks:
                    assembly.add(chunk.to_dict(mode="json"))
            except openai.OpenAIError as exc:
                raise to_model_error(exc) from exc
            request_id = getattr(getattr(chunks, "response", None), "headers", {}).get(
                "x-request-id"
            )
            return from_chat_completion(assembly.completion(), request_id=request_id)
        try:
            raw = await completions.with_raw_response.create(**body)
        except openai.OpenAIError as exc:
            raise to_model_error(exc) from exc
        return from_chat_completion(_json_body(raw), request_id=raw.request_id)


class _Assembly:
    """A streamed completion put back together as the body a plain call returns, its
    pieces delivered to the run's listener on the way."""

    def __init__(self) -> None:
        self.head: JSON = {}
        self.text: list[str] = []
        self.refusal: list[str] = []
        self.calls: dict[int, JSON] = {}
        self.finish: Any = None
        self.usage: Any = None

    def add(self, chunk: Mapping[str, Any]) -> None:
        if not self.head:
            self.head = {k: chunk.get(k) for k in ("id", "created", "model")}
        if chunk.get("usage"):
            self.usage = chunk["usage"]
        for choice in chunk.get("choices") or ():
            delta = choice.get("delta") or {}
            if delta.get("content"):
                self.text.append(delta["content"])
                deliver(ReplyDelta("text", 0, text=delta["content"]))
            if delta.get("refusal"):
                self.refusal.append(delta["refusal"])
            for part in delta.get("tool_calls") or ():
                self._call_part(part)
            if choice.get("finish_reason"):
                self.finish = choice["finish_reason"]
                for index, call in sorted(self.calls.items()):
                    deliver(ReplyDelta("tool_use_complete", index + 1, tool_use_id=call["id"],
                                       name=call["function"]["name"],
                                       input=_parsed(call["function"]["arguments"])))  # fmt: skip

    def _call_part(self, part: Mapping[str, Any]) -> None:
        index = int(part.get("index") or 0)
        function = part.get("function") or {}
        call = self.calls.get(index)
        if call is None:
            call = self.calls[index] = {"id": part.get("id") or "", "type": "function",
                                        "function": {"name": function.get("name") or "",
                                                     "arguments": ""}}  # fmt: skip
            deliver(ReplyDelta("tool_use_started", index + 1, tool_use_id=call["id"],
                               name=call["function"]["name"]))  # fmt: skip
        call["function"]["arguments"] += function.get("arguments") or ""

    def completion(self) -> JSON:
        message: JSON = {"role": "assistant", "content": "".join(self.text) or None}
        if self.refusal:
            message["refusal"] = "".join(self.refusal)
        if self.calls:
            message["tool_calls"] = [self.calls[k] for k in sorted(self.calls)]
        choice = {"index": 0, "message": message, "finish_reason": self.finish}
        return {**self.head, "object": "chat.completion", "choices": [choice],
                "usage": self.usage}  # fmt: skip


def _parsed(arguments: str) -> Any:
    try:
        return json.loads(arguments or "{}")
    except ValueError:
        return arguments


async def _close(client: openai.AsyncOpenAI) -> None:
    await client.close()


def _json_body(raw: Any) -> Mapping[str, Any]:
    """The response's JSON object; a proxy's HTML page or a bare list is a failed call."""
    try:
        data = raw.http_response.json()
    except ValueError as exc:
        raise ModelError(
            f"the response is not JSON: {exc}",
            request_id=raw.request_id,
            error_type="invalid_response",
        ) from exc
    if not isinstance(data, Mapping):
        raise ModelError(
            f"the response is JSON but not an object: {type(data).__name__}",
            request_id=raw.request_id,
            error_type="invalid_response",
        )
    return data


# -- request: Messages API -> Chat Completions -----------------------------------------


def to_chat_request(
    request: ModelRequest, *, max_tokens_param: MaxTokensParam = "max_completion_tokens"
) -> JSON:
    """The keyword arguments of `client.chat.completions.create` for this request.

    Raises `ModelError` for content Chat Completions cannot carry (a document
    block, a server tool), so the run fails naming it instead of sending less.
    """
    messages: list[JSON] = []
    system = _join_text(request.system, where="system")
    if system:
        messages.append({"role": "system", "content": system})
    for message in request.messages:
        messages.extend(_to_chat_messages(message))
    body: JSON = {"model": request.model, "messages": messages}
    body[max_tokens_param] = request.max_tokens
    if request.tools:
        body["tools"] = [_to_chat_tool(tool) for tool in request.tools]
        if request.tool_choice is not None:
            choice, parallel = _to_chat_tool_choice(request.tool_choice)
            body["tool_choice"] = choice
            if parallel is not None:
                body["parallel_tool_calls"] = parallel
    for key, value in request.extra.items():
        if key == "stop_sequences":
            body["stop"] = list(value)
        elif key not in ANTHROPIC_ONLY_PARAMS:
            body[key] = value
    return body


def _to_chat_messages(message: Mapping[str, Any]) -> list[JSON]:
    """One Messages API message as the Chat Completions messages that say the same."""
    role = message.get("role")
    content = message.get("content")
    if role == "assistant":
        return _assistant_messages(content)
    if role != "user":
        raise _unsupported(f"a message with role {role!r}")
    if isinstance(content, str):
        return [{"role": "user", "content": content}]
    tool_messages: list[JSON] = []
    parts: list[JSON] = []
    for block in content or ():
        kind = block.get("type")
        if kind == "tool_result":
            tool_message, images = _tool_message(block)
            tool_messages.append(tool_message)
            parts.extend(images)
        else:
            parts.append(_user_part(block))
    # Every tool message must directly follow the assistant's tool calls, so any text the
    # engine added after the results (a notice, feedback) becomes the next user message.
    if parts:
        tool_messages.append({"role": "user", "content": _compact_parts(parts)})
    return tool_messages


def _assistant_messages(content: Any) -> list[JSON]:
    if isinstance(content, str):
        return [{"role": "assistant", "content": content}] if content else []
    texts: list[str] = []
    calls: list[JSON] = []
    for block in content or ():
        kind = block.get("type")
        if kind == "text" and block.get("text"):
            texts.append(str(block["text"]))
        elif kind == "tool_use":
            calls.append(
                {
                    "id": str(block.get("id", "")),
                    "type": "function",
                    "function": {
                        "name": str(block.get("name", "")),
                        "arguments": _arguments_text(block.get("input")),
                    },
                }
            )
        # thinking and server-tool blocks have no Chat Completions form; they are left out.
    if not texts and not calls:
        return []
    out: JSON = {"role": "assistant", "content": "\n\n".join(texts) if texts else None}
    if calls:
        out["tool_calls"] = calls
    return [out]


def _arguments_text(given: Any) -> str:
    """The tool call's arguments as the JSON text the API wants (always valid JSON)."""
    return json.dumps({} if given is None else given, ensure_ascii=False)


def _tool_message(block: Mapping[str, Any]) -> tuple[JSON, list[JSON]]:
    """A tool_result block as a `tool` message, plus any images it held (for a user message).

    Tool messages carry text only; an error is said in words, since there is no
    `is_error` flag to carry it.
    """
    content = block.get("content")
    images: list[JSON] = []
    if isinstance(content, str):
        text = content
    else:
        texts: list[str] = []
        for part in content or ():
            if part.get("type") == "text":
                texts.append(str(part.get("text", "")))
            elif part.get("type") == "image":
                images.append(_image_part(part))
                texts.append("(image attached in the next user message)")
            else:
                raise _unsupported(f"a {part.get('type')!r} block inside a tool result")
        text = "\n\n".join(t for t in texts if t)
    text = text or "(empty result)"
    if block.get("is_error"):
        text = f"Error: {text}"
    message = {"role": "tool", "tool_call_id": str(block.get("tool_use_id", "")), "content": text}
    return message, images


def _user_part(block: Mapping[str, Any]) -> JSON:
    kind = block.get("type")
    if kind == "text":
        return {"type": "text", "text": str(block.get("text", ""))}
    if kind == "image":
        return _image_part(block)
    raise _unsupported(f"a {kind!r} block in a user message")


def _image_part(block: Mapping[str, Any]) -> JSON:
    source = block.get("source") or {}
    if source.get("type") == "base64":
        url = f"data:{source.get('media_type')};base64,{source.get('data')}"
    elif source.get("type") == "url":
        url = str(source.get("url"))
    else:
        raise _unsupported(f"an image with source type {source.get('type')!r}")
    return {"type": "image_url", "image_url": {"url": url}}


def _compact_parts(parts: list[JSON]) -> str | list[JSON]:
    """Text-only content as one string, which every OpenAI-compatible server accepts."""
    if all(part["type"] == "text" for part in parts):
        return "\n\n".join(str(part["text"]) for part in parts)
    return parts


def _join_text(blocks: Sequence[Mapping[str, Any]], *, where: str) -> str:
    texts: list[str] = []
    for block in blocks:
        if block.get("type") != "text":
            raise _unsupported(f"a {block.get('type')!r} block in the {where}")
        texts.append(str(block.get("text", "")))
    return "\n\n".join(t for t in texts if t)


def _to_chat_tool(tool: Mapping[str, Any]) -> JSON:
    """A Messages API tool definition as a function tool (cache_control left behind)."""
    if tool.get("type") not in (None, "custom"):
        raise _unsupported(f"the server tool {tool.get('name')!r} ({tool.get('type')})")
    function: JSON = {"name": tool.get("name"), "parameters": dict(tool.get("input_schema") or {})}
    if tool.get("description"):
        function["description"] = tool["description"]
    return {"type": "function", "function": function}


def _to_chat_tool_choice(choice: Mapping[str, Any]) -> tuple[Any, bool | None]:
    """The Chat Completions `tool_choice`, and `parallel_tool_calls` when the choice sets it."""
    kind = choice.get("type")
    mapped: Any
    if kind == "none":
        return "none", None
    if kind == "auto":
        mapped = "auto"
    elif kind == "any":
        mapped = "required"
    elif kind == "tool":
        mapped = {"type": "function", "function": {"name": choice.get("name")}}
    else:
        raise _unsupported(f"tool_choice {dict(choice)!r}")
    parallel = False if choice.get("disable_parallel_tool_use") else None
    return mapped, parallel


def _unsupported(what: str) -> ModelError:
    return ModelError(
        f"OpenAI Chat Completions cannot carry {what}",
        error_type="unsupported_content",
    )


# -- reply: Chat Completions -> Messages API ---------------------------------------------


def from_chat_completion(body: Mapping[str, Any], *, request_id: str | None = None) -> ModelReply:
    """Build a reply from the JSON body of a Chat Completions response.

    Some compatible servers answer an upstream failure with status 200 and an
    `error` object instead of choices; that becomes the `ModelError` it is.
    """
    choices = body.get("choices")
    if not choices:
        raise _error_in_body(body, request_id)
    choice = choices[0]
    message = choice.get("message") or {}
    content: list[JSON] = []
    text = _reply_text(message.get("content"))
    if text:
        content.append({"type": "text", "text": text})
    calls = [_tool_use_block(call, k) for k, call in enumerate(message.get("tool_calls") or ())]
    content.extend(calls)
    finish = choice.get("finish_reason")
    stop_reason = FINISH_REASONS.get(finish, finish) if isinstance(finish, str) else finish
    if stop_reason == "end_turn" and calls:
        # Some compatible servers say "stop" on a reply that calls tools; the calls decide.
        stop_reason = "tool_use"
    stop_details: JSON | None = None
    refusal = message.get("refusal")
    if isinstance(refusal, str) and refusal:
        stop_reason = "refusal"
        stop_details = {"type": "refusal", "explanation": refusal}
        if not content:
            content.append({"type": "text", "text": refusal})
    elif finish == "content_filter":
        stop_details = {
            "type": "content_filter",
            "explanation": "the provider's content filter stopped the reply",
        }
        if isinstance(choice.get("content_filter_results"), Mapping):
            stop_details["content_filter_results"] = dict(choice["content_filter_results"])
    return ModelReply(
        content=tuple(content),
        stop_reason=stop_reason,
        usage=usage_from_chat(body.get("usage")),
        model=str(body.get("model") or ""),
        id=str(body.get("id") or ""),
        stop_details=stop_details,
        request_id=request_id,
    )


def usage_from_chat(usage: Mapping[str, Any] | None) -> Usage:
    """Chat Completions usage as the engine's: cached prompt tokens are cache reads.

    `prompt_tokens` includes the cached ones, while the engine (like the Messages
    API) counts uncached input apart, so they are taken out of `input_tokens`.
    """
    if not usage:
        return Usage()
    prompt = int(usage.get("prompt_tokens") or 0)
    details = usage.get("prompt_tokens_details") or {}
    cached = int(details.get("cached_tokens") or 0) if isinstance(details, Mapping) else 0
    return Usage(
        input_tokens=max(prompt - cached, 0),
        output_tokens=int(usage.get("completion_tokens") or 0),
        cache_read_tokens=cached,
    )


def _reply_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # some compatible servers send parts
        return "".join(
            str(part.get("text", ""))
            for part in content
            if isinstance(part, Mapping) and part.get("type") in ("text", "output_text")
        )
    return ""


def _tool_use_block(call: Mapping[str, Any], index: int) -> JSON:
    """A tool call as a tool_use block; arguments that are not JSON are kept, not fatal."""
    function = call.get("function") or {}
    name = str(function.get("name") or "")
    raw = function.get("arguments")
    arguments: Any
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        arguments = {}  # some servers send "" for a call without arguments
    elif isinstance(raw, str):
        try:
            arguments = json.loads(raw)
        except ValueError:
            arguments = {RAW_ARGUMENTS_KEY: raw}
    else:
        arguments = raw
    call_id = call.get("id")
    if not isinstance(call_id, str) or not call_id:
        # Without an id the result could not be matched; make a stable one.
        digest = hashlib.sha256(f"{index}:{name}:{raw}".encode()).hexdigest()[:24]
        call_id = f"call_{digest}"
    return {"type": "tool_use", "id": call_id, "name": name, "input": arguments}


def _error_in_body(body: Mapping[str, Any], request_id: str | None) -> ModelError:
    error = body.get("error")
    if isinstance(error, Mapping):
        code = error.get("code")
        status = code if isinstance(code, int) else None
        message = str(error.get("message") or "the server returned an error")
        return ModelError(
            message,
            status=status,
            request_id=request_id,
            error_type=str(error.get("type") or code or "api_error"),
            retryable=status is not None and _is_retryable(status, None),
            context_exceeded=_is_context_exceeded(None, message),
        )
    return ModelError(
        "the response has no choices", request_id=request_id, error_type="invalid_response"
    )


# -- errors --------------------------------------------------------------------------


def to_model_error(exc: openai.OpenAIError) -> ModelError:
    """Classify an SDK error: what failed, whether it may pass, whether the prompt is too long."""
    if isinstance(exc, openai.APIStatusError):
        body = exc.body if isinstance(exc.body, Mapping) else {}
        message = str(body.get("message") or exc.message)
        code = exc.code
        return ModelError(
            message,
            status=exc.status_code,
            request_id=exc.request_id,
            error_type=code or exc.type or type(exc).__name__,
            retryable=_is_retryable(exc.status_code, code),
            context_exceeded=exc.status_code in (400, 413) and _is_context_exceeded(code, message),
        )
    if isinstance(exc, openai.APIConnectionError):
        return ModelError(str(exc), error_type=type(exc).__name__, retryable=True)
    return ModelError(str(exc), error_type=type(exc).__name__)


def _is_retryable(status: int, code: str | None) -> bool:
    """Overload and rate limits pass; an exhausted quota does not, however long one waits."""
    if code == "insufficient_quota":
        return False
    return status in RETRYABLE_STATUSES or status >= 500


def _is_context_exceeded(code: str | None, message: str) -> bool:
    if code == "context_length_exceeded":
        return True
    text = message.lower()
    return any(
        phrase in text
        for phrase in (
            "maximum context length",
            "context_length_exceeded",
            "context length",
            "context window",
            "prompt is too long",
            "too many tokens",
        )
    )
