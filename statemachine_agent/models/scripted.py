"""A model that answers from a script: for tests, demos and replay.

Each script entry is exactly the JSON the Messages API returns (or an exception
to raise, or a function of the request), so a scripted run exercises the same
engine paths as a live one. By default every request is checked by the strict
request validator first and rejected like the real API would reject it. When a
run is streamed, the reply is handed out in the pieces a streaming adapter hands
out (text, thinking, a tool call started, its input complete), so a scripted
stream yields the same kinds of events as the same script through the real SDK.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from statemachine_agent._args import described
from statemachine_agent.models.base import DEFAULT_MODEL, ModelError, ModelReply, ModelRequest
from statemachine_agent.models.streaming import ReplyDelta, begin_reply, deliver, listener

ScriptEntry = Mapping[str, Any] | BaseException | Callable[[ModelRequest], Any]


class ScriptedModel:
    """Replies with the next entry of its script, in order."""

    def __init__(
        self,
        replies: Iterable[ScriptEntry],
        *,
        name: str = DEFAULT_MODEL,
        validate: bool = True,
    ) -> None:
        self.name = name
        self.validate = validate
        self._script: list[ScriptEntry] = list(replies)
        for index, entry in enumerate(self._script):
            check_entry(index, entry)
        self._next = 0
        self.requests: list[ModelRequest] = []
        """Every request received, in order, for assertions."""

    def __repr__(self) -> str:
        return f"<ScriptedModel {self.name} {self._next}/{len(self._script)} replies used>"

    @property
    def remaining(self) -> int:
        return len(self._script) - self._next

    def complete(self, request: ModelRequest) -> ModelReply:
        self.requests.append(request)
        if self.validate:
            check_request(request)
        if self._next >= len(self._script):
            raise ModelError(
                f"the scripted model has no reply left ({len(self._script)} used)",
                error_type="ScriptExhausted",
            )
        entry = self._script[self._next]
        self._next += 1
        return reply_of(entry, request, request_id=f"req_scripted_{self._next}")

    async def acomplete(self, request: ModelRequest) -> ModelReply:
        return handed_out(self.complete(request))


def check_request(request: ModelRequest) -> None:
    """Refuse a request the real API would refuse, as it would (a 400 `ModelError`)."""
    from statemachine_agent.testing.validator import validate_request

    problems = validate_request(request.to_api())
    if problems:
        raise ModelError(
            "invalid request: " + "; ".join(problems),
            status=400,
            error_type="invalid_request_error",
        )


def reply_of(entry: ScriptEntry, request: ModelRequest, *, request_id: str) -> ModelReply:
    """A script entry's reply to `request`: the response dict, what a function of the
    request returns, or the exception it is (raised)."""
    body: Any = (
        entry(request) if callable(entry) and not isinstance(entry, BaseException) else entry
    )
    if isinstance(body, BaseException):
        raise body
    return ModelReply.from_api(body, request_id=request_id)


def handed_out(reply: ModelReply) -> ModelReply:
    """`reply`, after handing its pieces to whoever listens (a streamed run), if anyone."""
    if listener() is not None:
        _hand_out(reply)
    return reply


def _hand_out(reply: ModelReply) -> None:
    """Deliver the reply's blocks as a streaming adapter delivers them, block by block."""
    begin_reply()
    for index, block in enumerate(reply.content):
        kind = block.get("type")
        if kind == "text":
            deliver(ReplyDelta("text", index, text=str(block.get("text", ""))))
        elif kind == "thinking":
            deliver(ReplyDelta("thinking", index, text=str(block.get("thinking", ""))))
        elif kind == "tool_use":
            call_id, name = str(block.get("id", "")), str(block.get("name", ""))
            deliver(ReplyDelta("tool_use_started", index, tool_use_id=call_id, name=name))
            deliver(ReplyDelta("tool_use_complete", index, tool_use_id=call_id, name=name,
                               input=block.get("input")))  # fmt: skip


_RESPONSE_KEYS = ("type", "role", "content", "stop_reason")


def check_entry(index: int, entry: object) -> None:
    """A script entry checked when the script is given, not when the run reaches it:
    a Messages API response dict (`replies.text(...)`, `replies.tool_use(...)`), an
    exception to raise, or a function of the request."""
    if isinstance(entry, BaseException) or (callable(entry) and not isinstance(entry, Mapping)):
        return
    if not isinstance(entry, Mapping):
        raise TypeError(
            f"replies[{index}] must be a Messages API response dict (e.g. "
            f"replies.text('hi') from statemachine_agent.testing), an exception, or a "
            f"function of the request, got {described(entry)}"
        )
    missing = [key for key in _RESPONSE_KEYS if key not in entry]
    if missing:
        raise ValueError(
            f"replies[{index}] is not a Messages API response: it lacks "
            f"{', '.join(missing)} (build it with statemachine_agent.testing.replies, "
            f"e.g. replies.text('hi')), got {described(entry)}"
        )
    if entry["type"] != "message" or entry["role"] != "assistant":
        raise ValueError(
            f"replies[{index}] must have type 'message' and role 'assistant', got "
            f"type {entry['type']!r} and role {entry['role']!r}"
        )
    if not isinstance(entry["content"], list):
        raise TypeError(
            f"replies[{index}]['content'] must be a list of content blocks, got "
            f"{described(entry['content'])}"
        )
