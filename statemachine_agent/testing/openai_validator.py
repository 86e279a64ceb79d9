"""A strict, offline validator for Chat Completions *request* bodies.

An adapter bug that sends a history the API rejects (an unanswered tool call, a
tool message out of place, a leaked Anthropic-only key) only shows up against the
real API, as a 400 in production; `FakeOpenAIServer` runs every request through
this check so it shows up in the test instead. The parameter names are read from
the installed `openai` SDK when it is there (on first use, not at import), so the
check follows the SDK; the hard-coded set is only the fallback.
"""

from __future__ import annotations

import functools
import importlib
import json
import re
from collections.abc import Mapping
from typing import Any

__all__ = ["known_chat_params", "validate_chat_request"]

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


@functools.cache
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
