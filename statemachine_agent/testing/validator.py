"""A strict, offline validator for Messages API *request* bodies.

An engine bug that builds a history the API rejects (an unanswered tool_use, a
tool_result in the wrong place, an empty result) only shows up against the real
API, as a 400 in production. This validator applies the same rules locally, so
every scripted test run checks every request the engine would have sent.

Where the SDK describes a rule (parameter names, block fields, tool_result
content types) the rule comes from the SDK's own types, so it follows the SDK as
it changes. It is read once, into the committed module `_sdk_tables.py`
(`python scripts/docgen.py sdk`), not at each check: reading the types imports
the SDK, hundreds of modules, which a scripted run should not pay for (issue 26).
A test compares that module with the installed SDK, so the copy cannot drift.
"""

from __future__ import annotations

import importlib
import json
import re
import typing
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import typing_extensions

from statemachine_agent.errors import Error
from statemachine_agent.testing import _sdk_tables

__all__ = [
    "MAX_CACHE_BREAKPOINTS",
    "InvalidRequestError",
    "assert_valid_request",
    "describe_problems",
    "error_body",
    "known_request_params",
    "validate_headers",
    "validate_request",
]

MAX_CACHE_BREAKPOINTS = 4

_TOOL_USE_ID = re.compile(r"^[a-zA-Z0-9_-]+$")
_TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,128}$")
_ROLES = ("user", "assistant")
_TOOL_CHOICE_TYPES = ("auto", "any", "tool", "none")
_MIN_THINKING_BUDGET = 1024

_FALLBACK_PARAMS = frozenset(
    {
        "model",
        "messages",
        "max_tokens",
        "system",
        "tools",
        "tool_choice",
        "stop_sequences",
        "metadata",
        "stream",
        "thinking",
        "service_tier",
        "context_management",
        "container",
        "mcp_servers",
        "output_config",
        "cache_control",
        "inference_geo",
        "betas",
    }
)
_SAMPLING_PARAMS = frozenset({"temperature", "top_p", "top_k"})
"""Accepted although the installed SDK no longer declares them: older callers still send them."""

_FALLBACK_TOOL_RESULT_CONTENT = frozenset(
    {"text", "image", "document", "search_result", "tool_reference"}
)


def _typed_dict_keys(module: str, name: str) -> frozenset[str]:
    """Every key of an SDK TypedDict, or nothing when the SDK does not have it."""
    try:
        cls = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        return frozenset()
    required: Iterable[str] = getattr(cls, "__required_keys__", ())
    optional: Iterable[str] = getattr(cls, "__optional_keys__", ())
    return frozenset(required) | frozenset(optional)


def _model_fields(module: str, name: str) -> frozenset[str]:
    """The field names of an SDK response model, or nothing when the SDK does not have it."""
    try:
        cls = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        return frozenset()
    fields: Mapping[str, Any] = getattr(cls, "model_fields", {})
    return frozenset(fields)


def _literal_types(module: str, name: str) -> frozenset[str]:
    """The `type` literals of the TypedDicts in an SDK union alias (empty if unreadable)."""
    try:
        union = getattr(importlib.import_module(module), name)
        found: set[str] = set()
        for member in typing.get_args(union):
            hint = typing_extensions.get_type_hints(member)["type"]
            found.update(str(value) for value in typing.get_args(hint))
    except Exception:  # the SDK's typing internals are not an API; fall back quietly
        return frozenset()
    return frozenset(found)


def _read_request_params() -> frozenset[str]:
    """Top-level parameter names the Messages API accepts, read from the installed SDK."""
    names: set[str] = set()
    for module in (
        "anthropic.types.message_create_params",
        "anthropic.types.beta.message_create_params",
    ):
        for cls in ("MessageCreateParamsNonStreaming", "MessageCreateParamsStreaming"):
            names |= _typed_dict_keys(module, cls)
    return frozenset(names or _FALLBACK_PARAMS) | _SAMPLING_PARAMS


def known_request_params() -> frozenset[str]:
    """Top-level parameter names the Messages API accepts (the SDK's, as committed)."""
    return _sdk_tables.PARAMS


@dataclass(frozen=True)
class SdkRules:
    """The rules the validator takes from the `anthropic` SDK's types."""

    params: frozenset[str]
    tool_result_content: frozenset[str]
    block_keys: Mapping[str, frozenset[str]]
    """Fields the API accepts on the blocks the engine itself writes; empty means
    "not checked"."""


def committed_sdk_rules() -> SdkRules:
    """The rules as committed in `_sdk_tables.py`: what every check uses."""
    return SdkRules(
        params=_sdk_tables.PARAMS,
        tool_result_content=_sdk_tables.TOOL_RESULT_CONTENT,
        block_keys=dict(_sdk_tables.BLOCK_KEYS),
    )


def read_sdk_rules() -> SdkRules:
    """The rules read now from the installed SDK's types (imports the SDK).

    Only the generator of `_sdk_tables.py` and the test that keeps it current call
    this; a check never does.
    """
    return SdkRules(
        params=_read_request_params(),
        tool_result_content=(
            _literal_types("anthropic.types.tool_result_block_param", "Content")
            or _FALLBACK_TOOL_RESULT_CONTENT
        ),
        block_keys={
            "text": _typed_dict_keys("anthropic.types.text_block_param", "TextBlockParam")
            | _model_fields("anthropic.types.text_block", "TextBlock"),
            "tool_use": _typed_dict_keys(
                "anthropic.types.tool_use_block_param", "ToolUseBlockParam"
            )
            | _model_fields("anthropic.types.tool_use_block", "ToolUseBlock"),
            "tool_result": _typed_dict_keys(
                "anthropic.types.tool_result_block_param", "ToolResultBlockParam"
            ),
        },
    )


def _names(values: Iterable[str], indent: str) -> str:
    inner = "".join(f"{indent}        {json.dumps(name)},\n" for name in sorted(values))
    return f"frozenset(\n{indent}    {{\n{inner}{indent}    }}\n{indent})"


def sdk_tables_source(rules: SdkRules, sdk_version: str) -> str:
    """The text of `_sdk_tables.py` holding `rules`, formatted as `ruff format` leaves it."""
    blocks = "".join(
        f"        {json.dumps(kind)}: {_names(keys, '        ')},\n"
        for kind, keys in sorted(rules.block_keys.items())
    )
    return (
        '"""The Messages API rules read from the `anthropic` SDK\'s types, committed.\n\n'
        "Generated by `python scripts/docgen.py sdk`; do not edit by hand. The request\n"
        "validator checks against this copy so that validating a request never imports\n"
        "the SDK (issue 26); tests/test_testing_imports.py fails when the installed SDK\n"
        'reads differently, and regenerating brings the copy up to date.\n"""\n\n'
        "from __future__ import annotations\n\n"
        "from collections.abc import Mapping\n"
        "from types import MappingProxyType\n\n"
        f"SDK_VERSION = {json.dumps(sdk_version)}\n"
        '"""The `anthropic` version these tables were read from."""\n\n'
        f"PARAMS = {_names(rules.params, '')}\n"
        '"""Top-level request parameters."""\n\n'
        f"TOOL_RESULT_CONTENT = {_names(rules.tool_result_content, '')}\n"
        '"""Block types a tool_result\'s content may hold."""\n\n'
        "BLOCK_KEYS: Mapping[str, frozenset[str]] = MappingProxyType(\n"
        f"    {{\n{blocks}    }}\n)\n"
        '"""Fields accepted on the blocks the engine writes, by block type."""\n'
    )


_MESSAGE_KEYS = frozenset({"role", "content"})


class InvalidRequestError(Error, ValueError):
    """A request the real API would answer with a 400 `invalid_request_error`."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = list(problems)
        super().__init__(describe_problems(self.problems))

    @property
    def message(self) -> str:
        return str(self)

    def error_body(self, request_id: str | None = None) -> dict[str, Any]:
        """The JSON body the real API sends with its 400."""
        return error_body("invalid_request_error", self.message, request_id)


def describe_problems(problems: Sequence[str]) -> str:
    """One message listing every problem, the way a 400 body would carry it."""
    count = f"{len(problems)} problem{'s' if len(problems) != 1 else ''}"
    return f"invalid Messages API request ({count}):\n" + "\n".join(f"- {p}" for p in problems)


def error_body(error_type: str, message: str, request_id: str | None = None) -> dict[str, Any]:
    """The API's error envelope: `{"type": "error", "error": {...}, "request_id": ...}`."""
    body: dict[str, Any] = {"type": "error", "error": {"type": error_type, "message": message}}
    if request_id is not None:
        body["request_id"] = request_id
    return body


def validate_request(body: Mapping[str, Any]) -> list[str]:
    """Every problem the real API would reject `body` for; an empty list means valid.

    Each problem is one sentence starting with where it is, e.g.
    `messages[3].content[0]: tool_result for 'toolu_x' does not answer ...`.
    """
    if not isinstance(body, Mapping):
        return [f"request: the body must be a JSON object, got {_kind(body)}"]
    return _Checker(body).run()


def validate_headers(body: Mapping[str, Any], headers: Mapping[str, str]) -> list[str]:
    """What the API would reject an HTTP request for beyond its body: beta features.

    Over HTTP the betas are the `anthropic-beta` header (the SDK's beta surface sends
    its `betas` argument there), never a body field, and a gated feature without its
    beta is an unknown parameter to the API.
    """
    problems: list[str] = []
    if "betas" in body:
        problems.append(
            "betas: unknown Messages API parameter (extra inputs are not permitted); "
            "betas are sent in the anthropic-beta header"
        )
    from statemachine_agent.models.sdk_args import missing_betas  # loads the SDK: on use

    lowered = {name.lower(): value for name, value in headers.items()}
    for param, beta in missing_betas(body, lowered.get("anthropic-beta", "")):
        problems.append(
            f"{param}: extra inputs are not permitted without the beta header "
            f"anthropic-beta: {beta}"
        )
    return problems


def assert_valid_request(body: Mapping[str, Any]) -> None:
    """Raise `InvalidRequestError` listing every problem of `body`, if it has any."""
    problems = validate_request(body)
    if problems:
        raise InvalidRequestError(problems)


def _kind(value: object) -> str:
    """A JSON-ish name for a value's type, for messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, Mapping):
        return "an object"
    if isinstance(value, list | tuple):
        return "a list"
    return type(value).__name__


def _is_list(value: object) -> bool:
    return isinstance(value, list | tuple)


def _is_blank(value: object) -> bool:
    return not isinstance(value, str) or not value.strip()


class _Checker:
    """One validation pass; collects problems instead of stopping at the first."""

    def __init__(self, body: Mapping[str, Any]) -> None:
        self.body = body
        self.problems: list[str] = []
        self.tool_names: dict[str, str] = {}
        """Defined tool name -> where it is defined."""
        self.has_toolset = False
        self.cache_breakpoints: list[str] = []
        self.tool_block_at: str | None = None
        """Where the first tool_use or tool_result block is, if any."""
        self.tool_use_ids: dict[str, str] = {}
        self.new_tool_uses: dict[str, str] = {}
        """tool_use id -> where, for the assistant message being checked."""

    def add(self, where: str, problem: str) -> None:
        self.problems.append(f"{where}: {problem}")

    def run(self) -> list[str]:
        self.check_top_level()
        self.check_tools()
        self.check_tool_choice()
        self.check_thinking()
        self.check_system()
        self.check_messages()
        if self.tool_block_at is not None and not self.tool_names and not self.has_toolset:
            self.add(
                "tools",
                "requests which include tool_use or tool_result blocks must define tools "
                f"(the first such block is {self.tool_block_at})",
            )
        if self.body.get("cache_control") is not None:
            self.cache_breakpoints.append("cache_control")
        if len(self.cache_breakpoints) > MAX_CACHE_BREAKPOINTS:
            self.add(
                "cache_control",
                f"a request may have at most {MAX_CACHE_BREAKPOINTS} cache_control breakpoints, "
                f"found {len(self.cache_breakpoints)} ({', '.join(self.cache_breakpoints)})",
            )
        return self.problems

    # -- top level ---------------------------------------------------------------

    def check_top_level(self) -> None:
        body = self.body
        for key in body:
            if key not in _sdk_tables.PARAMS:
                self.add(
                    str(key), "unknown Messages API parameter (extra inputs are not permitted)"
                )
        model = body.get("model")
        if "model" not in body:
            self.add("model", "field required")
        elif _is_blank(model):
            self.add("model", f"must be a non-empty string, got {model!r}")
        max_tokens = body.get("max_tokens")
        if "max_tokens" not in body:
            self.add("max_tokens", "field required")
        elif isinstance(max_tokens, bool) or not isinstance(max_tokens, int):
            self.add("max_tokens", f"must be an integer, got {_kind(max_tokens)}")
        elif max_tokens < 0:
            # 0 is valid: the SDK documents it for pre-warming the prompt cache.
            self.add("max_tokens", f"must be greater than or equal to 0, got {max_tokens}")
        if "stream" in body and not isinstance(body["stream"], bool):
            self.add("stream", f"must be a boolean, got {_kind(body['stream'])}")
        if "stop_sequences" in body:
            stops = body["stop_sequences"]
            if not _is_list(stops) or not all(isinstance(s, str) for s in stops):
                self.add("stop_sequences", "must be a list of strings")
        if "metadata" in body and not isinstance(body["metadata"], Mapping):
            self.add("metadata", f"must be an object, got {_kind(body['metadata'])}")
        for key in ("temperature", "top_p"):
            if key in body:
                value = body[key]
                if isinstance(value, bool) or not isinstance(value, int | float):
                    self.add(key, f"must be a number, got {_kind(value)}")
                elif not 0 <= value <= 1:
                    self.add(key, f"must be between 0 and 1, got {value}")
        if "top_k" in body:
            top_k = body["top_k"]
            if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 0:
                self.add("top_k", f"must be a non-negative integer, got {top_k!r}")

    def check_thinking(self) -> None:
        thinking = self.body.get("thinking")
        if thinking is None:
            return
        if not isinstance(thinking, Mapping) or not isinstance(thinking.get("type"), str):
            self.add("thinking", "must be an object with a 'type'")
            return
        if thinking["type"] == "enabled":
            budget = thinking.get("budget_tokens")
            if isinstance(budget, bool) or not isinstance(budget, int):
                self.add("thinking.budget_tokens", "field required when thinking is enabled")
            elif budget < _MIN_THINKING_BUDGET:
                self.add(
                    "thinking.budget_tokens",
                    f"must be at least {_MIN_THINKING_BUDGET}, got {budget}",
                )
        choice = self.body.get("tool_choice")
        if (
            thinking["type"] in ("enabled", "adaptive")
            and isinstance(choice, Mapping)
            and choice.get("type") in ("any", "tool")
        ):
            self.add(
                "tool_choice",
                f"thinking may not be enabled when tool_choice forces tool use "
                f"(type {choice.get('type')!r}); use 'auto' or 'none'",
            )

    # -- tools -------------------------------------------------------------------

    def check_tools(self) -> None:
        if "tools" not in self.body or self.body["tools"] is None:
            return
        tools = self.body["tools"]
        if not _is_list(tools):
            self.add("tools", f"must be a list of tool definitions, got {_kind(tools)}")
            return
        for k, tool in enumerate(tools):
            where = f"tools[{k}]"
            if not isinstance(tool, Mapping):
                self.add(where, f"must be a tool definition object, got {_kind(tool)}")
                continue
            if tool.get("cache_control") is not None:
                self.cache_breakpoints.append(where)
            kind = tool.get("type")
            if kind in (None, "custom") or "input_schema" in tool:
                self.check_custom_tool(where, tool)
            elif not isinstance(kind, str) or not kind:
                self.add(f"{where}.type", f"must be a non-empty string, got {kind!r}")
            else:
                # A server or built-in tool (web search, bash, a toolset...): its
                # schema is the API's business, but a name must still be unique.
                if "toolset" in kind:
                    self.has_toolset = True
                if "name" in tool:
                    self.define_tool_name(where, tool["name"], strict=False)

    def check_custom_tool(self, where: str, tool: Mapping[str, Any]) -> None:
        self.define_tool_name(where, tool.get("name"), strict=True)
        if "input_schema" not in tool:
            self.add(f"{where}.input_schema", "field required for a custom tool")
        else:
            schema = tool["input_schema"]
            if not isinstance(schema, Mapping):
                self.add(f"{where}.input_schema", f"must be an object, got {_kind(schema)}")
            elif schema.get("type") != "object":
                self.add(
                    f"{where}.input_schema.type",
                    f"must be 'object', got {schema.get('type')!r}",
                )
        if "description" in tool and not isinstance(tool["description"], str):
            self.add(f"{where}.description", f"must be a string, got {_kind(tool['description'])}")

    def define_tool_name(self, where: str, name: object, *, strict: bool) -> None:
        if not isinstance(name, str) or (strict and not _TOOL_NAME.match(name)):
            self.add(
                f"{where}.name",
                f"must be a string matching {_TOOL_NAME.pattern}, got {name!r}",
            )
            if not isinstance(name, str):
                return
        if name in self.tool_names:
            self.add(
                f"{where}.name",
                f"tool names must be unique; {name!r} is also defined at {self.tool_names[name]}",
            )
            return
        self.tool_names[name] = where

    def check_tool_choice(self) -> None:
        if "tool_choice" not in self.body or self.body["tool_choice"] is None:
            return
        choice = self.body["tool_choice"]
        if not isinstance(choice, Mapping):
            self.add("tool_choice", f"must be an object, got {_kind(choice)}")
            return
        kind = choice.get("type")
        if kind not in _TOOL_CHOICE_TYPES:
            self.add(
                "tool_choice.type",
                f"must be one of {', '.join(_TOOL_CHOICE_TYPES)}, got {kind!r}",
            )
        if not self.tool_names and not self.has_toolset:
            self.add("tool_choice", "a tool_choice may only be given when tools are defined")
        elif kind == "tool":
            name = choice.get("name")
            if not isinstance(name, str):
                self.add("tool_choice.name", "field required when type is 'tool'")
            elif name not in self.tool_names:
                self.add("tool_choice.name", f"names tool {name!r}, which is not defined in tools")
        flag = choice.get("disable_parallel_tool_use")
        if "disable_parallel_tool_use" in choice and not isinstance(flag, bool):
            self.add(
                "tool_choice.disable_parallel_tool_use", f"must be a boolean, got {_kind(flag)}"
            )

    # -- system ------------------------------------------------------------------

    def check_system(self) -> None:
        if "system" not in self.body:
            return
        system = self.body["system"]
        if isinstance(system, str):
            return
        if not _is_list(system):
            self.add("system", f"must be a string or a list of text blocks, got {_kind(system)}")
            return
        for k, block in enumerate(system):
            where = f"system[{k}]"
            if not isinstance(block, Mapping) or block.get("type") != "text":
                self.add(where, "system blocks must be text blocks")
                continue
            if block.get("cache_control") is not None:
                self.cache_breakpoints.append(where)
            if _is_blank(block.get("text")):
                self.add(f"{where}.text", "text content blocks must contain non-whitespace text")

    # -- messages ----------------------------------------------------------------

    def check_messages(self) -> None:
        if "messages" not in self.body:
            self.add("messages", "field required")
            return
        messages = self.body["messages"]
        if not _is_list(messages):
            self.add("messages", f"must be a list of messages, got {_kind(messages)}")
            return
        if not messages:
            self.add("messages", "must contain at least one message")
            return
        previous_role: object = None
        pending: dict[str, str] = {}
        """tool_use id -> where, for the tool_uses of the previous assistant message."""
        for i, message in enumerate(messages):
            where = f"messages[{i}]"
            if not isinstance(message, Mapping):
                self.add(where, f"must be a message object, got {_kind(message)}")
                self.unanswered(
                    pending,
                    f"it must be answered by a tool_result in the next message, but messages[{i}] "
                    "is not a user message",
                )
                pending, previous_role = {}, None
                continue
            role = message.get("role")
            self.check_role(where, i, role, previous_role)
            for key in message:
                if key not in _MESSAGE_KEYS:
                    self.add(f"{where}.{key}", "extra inputs are not permitted in a message")
            answered = self.check_content(where, role, message, pending)
            if role == "user":
                self.unanswered(
                    {k: v for k, v in pending.items() if k not in answered},
                    f"messages[{i}] has no tool_result for it "
                    "(each tool_use must be answered in the next message)",
                )
            else:
                self.unanswered(
                    pending,
                    f"it must be answered by a tool_result in the next message, but messages[{i}] "
                    "is not a user message",
                )
            pending = self.new_tool_uses if role == "assistant" else {}
            previous_role = role
        self.unanswered(
            pending,
            "the request ends with it, and each tool_use needs a tool_result in a following "
            "user message",
        )

    def unanswered(self, pending: Mapping[str, str], why: str) -> None:
        for tool_use_id, where in pending.items():
            self.add(where, f"tool_use {tool_use_id!r} is not answered: {why}")

    def check_role(self, where: str, i: int, role: object, previous_role: object) -> None:
        if role not in _ROLES:
            self.add(f"{where}.role", f"must be 'user' or 'assistant', got {role!r}")
            return
        if i == 0 and role != "user":
            self.add(f"{where}.role", f"the first message must be a user message, got {role!r}")
        elif role == previous_role:
            self.add(
                f"{where}.role",
                f"roles must alternate between user and assistant, but messages[{i - 1}] "
                f"is also {'an' if role == 'assistant' else 'a'} {role} message",
            )

    def check_content(
        self,
        where: str,
        role: object,
        message: Mapping[str, Any],
        pending: Mapping[str, str],
    ) -> set[str]:
        """Check one message's content; returns the tool_use ids its tool_results answer."""
        self.new_tool_uses = {}
        answered: set[str] = set()
        if "content" not in message:
            self.add(f"{where}.content", "field required")
            return answered
        content = message["content"]
        if isinstance(content, str):
            if not content.strip():
                self.add(f"{where}.content", "text content must contain non-whitespace text")
            return answered
        if not _is_list(content):
            self.add(
                f"{where}.content",
                f"must be a string or a list of content blocks, got {_kind(content)}",
            )
            return answered
        if not content:
            self.add(f"{where}.content", "must not be empty")
            return answered
        other_block_at: str | None = None
        for j, block in enumerate(content):
            at = f"{where}.content[{j}]"
            if not isinstance(block, Mapping):
                self.add(at, f"must be a content block object, got {_kind(block)}")
                continue
            kind = block.get("type")
            if not isinstance(kind, str) or not kind:
                self.add(f"{at}.type", f"every content block needs a 'type', got {kind!r}")
                continue
            if block.get("cache_control") is not None:
                self.cache_breakpoints.append(at)
            self.check_block_keys(at, kind, block)
            if kind == "tool_result":
                if other_block_at is not None:
                    self.add(
                        at,
                        "tool_result blocks must come first in the user message's content, "
                        f"before any other block (found {other_block_at} before it)",
                    )
                self.check_tool_result(at, role, block, pending, answered)
                continue
            other_block_at = other_block_at or at
            if kind == "text":
                if _is_blank(block.get("text")):
                    self.add(f"{at}.text", "text content blocks must contain non-whitespace text")
            elif kind == "tool_use":
                self.check_tool_use(at, role, block)
            elif kind == "image" and not isinstance(block.get("source"), Mapping):
                self.add(f"{at}.source", "an image block needs a 'source' object")
            # Anything else (thinking, server_tool_use, web_search_tool_result, documents,
            # block types newer than this code) is kept as-is: the API owns its shape.
        return answered

    def check_block_keys(self, at: str, kind: str, block: Mapping[str, Any]) -> None:
        allowed = _sdk_tables.BLOCK_KEYS.get(kind)
        if not allowed:
            return
        for key in block:
            if key not in allowed:
                self.add(f"{at}.{key}", f"extra inputs are not permitted in a {kind} block")

    def check_tool_use(self, at: str, role: object, block: Mapping[str, Any]) -> None:
        self.tool_block_at = self.tool_block_at or at
        if role != "assistant":
            self.add(at, "tool_use blocks may only appear in assistant messages")
        tool_use_id = block.get("id")
        if not isinstance(tool_use_id, str) or not _TOOL_USE_ID.match(tool_use_id):
            self.add(
                f"{at}.id", f"must be a string matching {_TOOL_USE_ID.pattern}, got {tool_use_id!r}"
            )
        if isinstance(tool_use_id, str) and tool_use_id in self.tool_use_ids:
            self.add(
                f"{at}.id",
                f"tool_use ids must be unique; {tool_use_id!r} is also used at "
                f"{self.tool_use_ids[tool_use_id]}",
            )
        elif isinstance(tool_use_id, str):
            # Tracked even when malformed, so its tool_result is not reported a second time.
            self.tool_use_ids[tool_use_id] = at
            if role == "assistant":
                self.new_tool_uses[tool_use_id] = at
        name = block.get("name")
        # A tool_use naming a tool that is not defined is allowed: models do call
        # tools that do not exist, and the answer is an is_error tool_result.
        if not isinstance(name, str) or not name:
            self.add(f"{at}.name", f"must be a non-empty string, got {name!r}")
        if not isinstance(block.get("input"), Mapping):
            self.add(f"{at}.input", f"must be an object, got {_kind(block.get('input'))}")

    def check_tool_result(
        self,
        at: str,
        role: object,
        block: Mapping[str, Any],
        pending: Mapping[str, str],
        answered: set[str],
    ) -> None:
        self.tool_block_at = self.tool_block_at or at
        if role != "user":
            self.add(at, "tool_result blocks may only appear in user messages")
        tool_use_id = block.get("tool_use_id")
        if not isinstance(tool_use_id, str) or not tool_use_id:
            self.add(f"{at}.tool_use_id", f"must be a non-empty string, got {tool_use_id!r}")
        elif tool_use_id in answered:
            self.add(at, f"duplicate tool_result for {tool_use_id!r}: it is already answered")
        elif tool_use_id not in pending:
            self.add(
                at,
                f"tool_result for {tool_use_id!r} does not answer a tool_use of the previous "
                "assistant message",
            )
        else:
            answered.add(tool_use_id)
        if "is_error" in block and not isinstance(block["is_error"], bool):
            self.add(f"{at}.is_error", f"must be a boolean, got {_kind(block['is_error'])}")
        self.check_tool_result_content(at, block)

    def check_tool_result_content(self, at: str, block: Mapping[str, Any]) -> None:
        where = f"{at}.content"
        if "content" not in block:
            self.add(
                where, "missing; an empty result must say so explicitly, e.g. '(empty result)'"
            )
            return
        content = block["content"]
        if isinstance(content, str):
            if not content.strip():
                self.add(
                    where,
                    "empty tool_result content; an empty result must say so explicitly, "
                    "e.g. '(empty result)'",
                )
            return
        if not _is_list(content):
            self.add(where, f"must be a string or a list of content blocks, got {_kind(content)}")
            return
        if not content:
            self.add(
                where,
                "empty tool_result content; an empty result must say so explicitly, "
                "e.g. '(empty result)'",
            )
            return
        for k, inner in enumerate(content):
            inner_at = f"{where}[{k}]"
            if not isinstance(inner, Mapping):
                self.add(inner_at, f"must be a content block object, got {_kind(inner)}")
                continue
            kind = inner.get("type")
            if kind not in _sdk_tables.TOOL_RESULT_CONTENT:
                allowed = ", ".join(sorted(_sdk_tables.TOOL_RESULT_CONTENT))
                self.add(f"{inner_at}.type", f"must be one of {allowed}, got {kind!r}")
                continue
            if inner.get("cache_control") is not None:
                self.cache_breakpoints.append(inner_at)
            if kind == "text" and _is_blank(inner.get("text")):
                self.add(f"{inner_at}.text", "text content blocks must contain non-whitespace text")
            elif kind == "image" and not isinstance(inner.get("source"), Mapping):
                self.add(f"{inner_at}.source", "an image block needs a 'source' object")
