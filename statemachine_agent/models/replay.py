"""A model that answers from an audit file, to re-run a recorded run offline.

The audit file holds every model request (its shape) and reply (verbatim), so
the engine can be driven through the same run again with no network. Each
request is checked against the recorded one; the first that differs is a
`ReplayDivergenceError` naming the step, since from there on the recorded
answers no longer belong to the questions.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from statemachine_agent.audit.sink import read_events, run_events
from statemachine_agent.errors import Error
from statemachine_agent.models.base import ModelError, ModelReply, ModelRequest, Usage


class ReplayDivergenceError(Error, RuntimeError):
    """The engine asked something the record does not have."""


class ReplayModel:
    """Replays the recorded calls of one purpose (the loop's own and salvage, or the
    critic's, or the summaries')."""

    def __init__(
        self, audit: str | Path | Iterable[Mapping[str, Any]], *, purpose: str | None = None
    ) -> None:
        events = run_events(read_events(Path(audit)) if isinstance(audit, str | Path) else audit)
        wanted = {None, "salvage"} if purpose is None else {purpose}
        self._calls: list[tuple[Mapping[str, Any], Mapping[str, Any]]] = []
        pending: Mapping[str, Any] | None = None
        for event in events:
            if event.get("purpose") not in wanted:
                continue
            if event["event"] == "model.requested":
                pending = event
            elif event["event"] in ("model.replied", "model.failed") and pending is not None:
                self._calls.append((pending, event))
                pending = None
        started = next((e for e in events if e["event"] == "run.started"), {})
        self.name = str(started.get("model") or "replay")
        self._next = 0
        self.divergence: str | None = None

    def __repr__(self) -> str:
        return f"<ReplayModel {self._next}/{len(self._calls)} calls replayed>"

    @property
    def remaining(self) -> int:
        return len(self._calls) - self._next

    async def acomplete(self, request: ModelRequest) -> ModelReply:
        step = self._next + 1
        if self._next >= len(self._calls):
            self._diverge(f"call {step}: the record has only {len(self._calls)} model calls")
        asked, answer = self._calls[self._next]
        self._next += 1
        tools = [t.get("name") for t in request.tools]
        expected = (asked.get("message_count"), asked.get("tools"))
        if (len(request.messages), tools) != expected:
            self._diverge(
                f"call {step}: the engine sent {len(request.messages)} messages and tools "
                f"{tools}, the record has {expected[0]} messages and tools {expected[1]}"
            )
        if answer["event"] == "model.failed":
            raise ModelError(
                str(answer.get("error") or "recorded failure"),
                status=answer.get("status"),
                request_id=answer.get("request_id"),
                retryable=bool(answer.get("retryable")),
                context_exceeded="too long" in str(answer.get("error", "")).lower(),
            )
        return ModelReply(
            content=tuple(dict(b) for b in answer.get("content") or ()),
            stop_reason=answer.get("stop_reason"),
            usage=Usage.from_dict(answer.get("usage") or {}),
            model=str(answer.get("model") or self.name),
            id=str(answer.get("message_id") or ""),
            request_id=answer.get("request_id"),
        )

    def _diverge(self, message: str) -> None:
        self.divergence = self.divergence or message
        raise ReplayDivergenceError(message)
