"""Builders for Messages API *response* bodies, for scripting fake models.

Tests script a run as a list of replies; building them here, in exactly the JSON
shape the API returns, keeps every test honest about what the engine will really
receive and spares each one from spelling out ids, usage and stop reasons.

Ids are random by default, so they are unique across processes: a run scripted
in one process and resumed from its checkpoint in another (or two test workers
sharing a store) never reuses a tool_use id, which the API (and the strict
server) refuse. A test that needs the same ids on every run (a transcript
compared byte for byte) asks for them: inside `with deterministic_ids("seed"):`
every id is derived from the seed and a counter of that block alone.
"""

from __future__ import annotations

import hashlib
import itertools
import secrets
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from statemachine_agent.models.base import DEFAULT_MODEL

JSON = dict[str, Any]

DEFAULT_USAGE: Mapping[str, int] = {
    "input_tokens": 10,
    "output_tokens": 5,
    "cache_creation_input_tokens": 0,
    "cache_read_input_tokens": 0,
}
"""The usage a built reply reports unless told otherwise: small, non-zero, uncached."""

_ID_LENGTH = 24


class IdSequence:
    """Ids derived from a seed and a counter: the same seed gives the same ids, in the
    same order, in any process (what `deterministic_ids` hands the builders)."""

    def __init__(self, seed: str = "") -> None:
        self.seed = seed
        self._counter = itertools.count(1)

    def __call__(self, prefix: str, sep: str = "_") -> str:
        digest = hashlib.sha256(f"{self.seed}\0{prefix}{next(self._counter)}".encode())
        return f"{prefix}{sep}{digest.hexdigest()[:_ID_LENGTH]}"


_sequence: ContextVar[IdSequence | None] = ContextVar("statemachine_agent_ids", default=None)


@contextmanager
def deterministic_ids(seed: str = "") -> Iterator[IdSequence]:
    """Within the block, every generated id comes from `IdSequence(seed)`: the same
    script built under the same seed has the same ids in every process. Scoped to the
    block (and to the current thread or task), so no other test is affected."""
    sequence = IdSequence(seed)
    token = _sequence.set(sequence)
    try:
        yield sequence
    finally:
        _sequence.reset(token)


def new_id(prefix: str, sep: str = "_") -> str:
    """A fresh id shaped like the API's (`toolu_…`, `msg_…`; OpenAI's `chatcmpl-…` with
    `sep="-"`): random, so unique across processes, unless inside `deterministic_ids`."""
    sequence = _sequence.get()
    if sequence is not None:
        return sequence(prefix, sep)
    return f"{prefix}{sep}{secrets.token_hex(_ID_LENGTH // 2)}"


def text_block(text: str) -> JSON:
    """A `text` content block."""
    return {"type": "text", "text": text}


def tool_use_block(
    name: str, input: Mapping[str, Any] | None = None, id: str | None = None
) -> JSON:
    """A `tool_use` content block; the id is generated when not given."""
    return {
        "type": "tool_use",
        "id": id if id is not None else new_id("toolu"),
        "name": name,
        "input": dict(input or {}),
    }


def thinking_block(thinking: str, signature: str = "c2lnbmF0dXJl") -> JSON:
    """A `thinking` block, for tests of how the engine keeps blocks it does not act on."""
    return {"type": "thinking", "thinking": thinking, "signature": signature}


def reply(
    *blocks: Mapping[str, Any],
    stop_reason: str | None,
    usage: Mapping[str, Any] | None = None,
    model: str = DEFAULT_MODEL,
    id: str | None = None,
    stop_details: Mapping[str, Any] | None = None,
) -> JSON:
    """A response with any blocks and any stop reason, including ones the engine never saw.

    `usage` is merged over `DEFAULT_USAGE`, so a test names only the counts it cares about.
    """
    body: JSON = {
        "id": id if id is not None else new_id("msg"),
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [dict(block) for block in blocks],
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": {**DEFAULT_USAGE, **(usage or {})},
    }
    if stop_details is not None:
        body["stop_details"] = dict(stop_details)
    return body


def text(
    text: str = "Done.",
    *,
    stop_reason: str = "end_turn",
    usage: Mapping[str, Any] | None = None,
    model: str = DEFAULT_MODEL,
    id: str | None = None,
) -> JSON:
    """A plain text answer: the usual last reply of a run."""
    return reply(text_block(text), stop_reason=stop_reason, usage=usage, model=model, id=id)


def tool_use(
    name: str,
    input: Mapping[str, Any] | None = None,
    *,
    id: str | None = None,
    text: str | None = None,
    usage: Mapping[str, Any] | None = None,
    model: str = DEFAULT_MODEL,
    message_id: str | None = None,
) -> JSON:
    """A reply calling one tool, optionally after some text, as the model usually does.

    `id` is the tool_use id (what the tool_result must answer); `message_id` the reply's.
    """
    return tool_uses(
        (name, dict(input or {})),
        text=text,
        usage=usage,
        model=model,
        id=message_id,
        ids=(id,) if id is not None else None,
    )


def tool_uses(
    *calls: tuple[str, Mapping[str, Any]],
    text: str | None = None,
    usage: Mapping[str, Any] | None = None,
    model: str = DEFAULT_MODEL,
    id: str | None = None,
    ids: tuple[str, ...] | None = None,
) -> JSON:
    """A reply calling several tools at once (parallel tool use).

    `ids`, when given, names the tool_use ids in order; `id` is the reply's own id.
    """
    if ids is not None and len(ids) != len(calls):
        raise ValueError(f"got {len(ids)} ids for {len(calls)} tool calls")
    blocks: list[JSON] = [text_block(text)] if text is not None else []
    for k, (name, input) in enumerate(calls):
        blocks.append(tool_use_block(name, input, ids[k] if ids is not None else None))
    return reply(*blocks, stop_reason="tool_use", usage=usage, model=model, id=id)
