"""Reply builders for OpenAI Chat Completions: exactly the JSON the API sends.

A test scripts `FakeOpenAIServer` with these (`chat_text`, `chat_tool_calls`,
`chat_completion`), so what it scripts is what a real model could say; and
`chat_from_message` says a Messages API reply in Chat Completions terms, so one
script of `replies` serves both fake servers. Nothing here imports an SDK.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from typing import Any

from statemachine_agent.testing.replies import new_id

__all__ = [
    "DEFAULT_CHAT_MODEL",
    "DEFAULT_CHAT_USAGE",
    "STOP_TO_FINISH",
    "chat_completion",
    "chat_from_message",
    "chat_text",
    "chat_tool_calls",
    "tool_call",
]

JSON = dict[str, Any]

DEFAULT_CHAT_MODEL = "gpt-4o-mini"

DEFAULT_CHAT_USAGE: Mapping[str, int] = {"prompt_tokens": 10, "completion_tokens": 5}
"""What a built reply reports unless told otherwise: small, non-zero, uncached."""


def tool_call(name: str, arguments: Mapping[str, Any] | str = "{}", id: str | None = None) -> JSON:
    """One entry of `message.tool_calls`; `arguments` may be a raw (even malformed) string."""
    raw = (
        arguments if isinstance(arguments, str) else json.dumps(dict(arguments), ensure_ascii=False)
    )
    return {
        "id": id if id is not None else new_id("call"),
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
        "id": id if id is not None else new_id("chatcmpl", "-"),
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
