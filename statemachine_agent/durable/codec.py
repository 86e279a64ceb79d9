"""What crosses an engine's boundary, as plain JSON data.

A durable engine stores every step's input and output (DBOS in its system
database, Temporal in the workflow history) and hands them back on replay,
possibly to another process running a newer build. Plain data decoded against
the engine's own dataclasses survives that; pickled objects tie the history to
one version of the code. A model error becomes data too, so the failure a
replay sees is the one the first execution saw, with its retry class intact.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from statemachine_agent.machine.result import RunResult
from statemachine_agent.models.base import JSON, ModelError, ModelReply, ModelRequest
from statemachine_agent.persistence.codec import SerializationError, from_plain, to_plain
from statemachine_agent.tools.base import ToolCall, ToolOutcome

Prompt = str | list[JSON]
"""A run's prompt as it travels: text, or content blocks."""


def prompt_to_plain(prompt: str | Sequence[Mapping[str, Any]]) -> Prompt:
    return prompt if isinstance(prompt, str) else [dict(block) for block in prompt]


def request_to_plain(request: ModelRequest) -> JSON:
    return dict(to_plain(request, "request"))


def request_from_plain(data: Mapping[str, Any]) -> ModelRequest:
    request: ModelRequest = from_plain(ModelRequest, dict(data), "request")
    return request


def reply_to_plain(reply: ModelReply) -> JSON:
    return dict(to_plain(reply, "reply"))


def reply_from_plain(data: Mapping[str, Any]) -> ModelReply:
    reply: ModelReply = from_plain(ModelReply, dict(data), "reply")
    return reply


def call_to_plain(call: ToolCall) -> JSON:
    return dict(to_plain(call, "call"))


def call_from_plain(data: Mapping[str, Any]) -> ToolCall:
    call: ToolCall = from_plain(ToolCall, dict(data), "call")
    return call


def outcome_to_plain(outcome: ToolOutcome) -> JSON:
    """The outcome as data; a result the engine cannot store fails the call, by name.

    In process such a value (a set, an open file) only fails the run at its
    checkpoint; here it would fail inside the engine's serializer, far from the
    tool that made it, so the call is answered as a fatal error naming it.
    """
    try:
        return dict(to_plain(outcome, "outcome"))
    except SerializationError as exc:
        failed = dataclasses.replace(
            outcome,
            content=f"{outcome.name} returned a result the durable engine cannot store: {exc}",
            is_error=True,
            error_kind="raised",
            data=None,
            extra={},
            fatal=True,
        )
        return dict(to_plain(failed, "outcome"))


def outcome_from_plain(data: Mapping[str, Any]) -> ToolOutcome:
    outcome: ToolOutcome = from_plain(ToolOutcome, dict(data), "outcome")
    return outcome


def model_error_to_plain(error: ModelError) -> JSON:
    return {
        "message": error.message,
        "status": error.status,
        "request_id": error.request_id,
        "error_type": error.error_type,
        "retryable": error.retryable,
        "context_exceeded": error.context_exceeded,
    }


def model_error_from_plain(data: Mapping[str, Any]) -> ModelError:
    status = data.get("status")
    return ModelError(
        str(data.get("message") or "the model call failed"),
        status=int(status) if status is not None else None,
        request_id=data.get("request_id"),
        error_type=data.get("error_type"),
        retryable=bool(data.get("retryable")),
        context_exceeded=bool(data.get("context_exceeded")),
    )


def result_to_plain(result: RunResult) -> JSON:
    return dict(to_plain(result, "result"))


def result_from_plain(data: Mapping[str, Any]) -> RunResult:
    """A run's result as a workflow returned it (messages, trail and all)."""
    result: RunResult = from_plain(RunResult, dict(data), "result")
    if result.audit_path is not None and not isinstance(result.audit_path, Path):
        result = dataclasses.replace(result, audit_path=Path(result.audit_path))
    return result
