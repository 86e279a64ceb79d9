"""A fresh run's record: its id, its messages (the history with the prompt) and its
metadata, each checked before anything is driven or stored."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

from statemachine_agent.context.notices import add_user_text
from statemachine_agent.machine.ids import check_run_id
from statemachine_agent.machine.run import RunRecord
from statemachine_agent.models.base import JSON
from statemachine_agent.persistence.codec import to_plain
from statemachine_agent.unicode import repair

if TYPE_CHECKING:
    from statemachine_agent.agent._parts import AgentParts


def new_record(
    parts: AgentParts,
    prompt: str | Sequence[JSON],
    history: Sequence[JSON],
    run_id: str | None,
    metadata: Mapping[str, Any] | None,
) -> RunRecord:
    """A fresh run's record (its id checked unused, its metadata checked JSON)."""
    run_id = check_run_id(run_id or new_run_id())
    if parts.checkpointer is not None and parts.checkpointer.bodies(run_id):
        raise ValueError(f"run id {run_id!r} is already stored; resume it or use a new id")
    return RunRecord(
        run_id=run_id,
        settings=parts.settings,
        messages=with_prompt(history, prompt),
        turn=1 + sum(1 for m in history if is_user_prompt(m)),
        metadata=checked_metadata(metadata),
    )


def with_prompt(history: Sequence[JSON], prompt: str | Sequence[JSON]) -> list[JSON]:
    """The history with the new prompt as the last user message.

    A history ending with a user message (a turn cancelled after its tool
    results) gets the prompt added to that message, so roles keep alternating.
    """
    messages = [dict(m) for m in repair(list(history))]
    prompt = repair(prompt)
    if isinstance(prompt, str):
        if not messages or messages[-1].get("role") != "user":
            return [*messages, {"role": "user", "content": prompt}]
        add_user_text(messages, prompt)
        return messages
    blocks = [dict(b) for b in prompt]
    if messages and messages[-1].get("role") == "user":
        last = messages[-1]
        content = last.get("content")
        earlier = [{"type": "text", "text": content}] if isinstance(content, str) else content
        last["content"] = [*list(earlier or []), *blocks]
        return messages
    return [*messages, {"role": "user", "content": blocks}]


def checked_metadata(metadata: Mapping[str, Any] | None) -> dict[str, Any]:
    """The run's metadata checked: a mapping of JSON values, as every checkpoint holds it."""
    if metadata is None:
        return {}
    if not isinstance(metadata, Mapping):
        raise TypeError(f"metadata must be a mapping, got {type(metadata).__name__}")
    return cast("dict[str, Any]", to_plain(dict(metadata), "metadata"))


def new_run_id() -> str:
    return f"run_{uuid.uuid4().hex[:16]}"


def is_user_prompt(message: Mapping[str, Any]) -> bool:
    """A user message that asks something (not one that only carries tool results)."""
    if message.get("role") != "user":
        return False
    content = message.get("content")
    if isinstance(content, str):
        return True
    return any(isinstance(b, Mapping) and b.get("type") != "tool_result" for b in content or ())
