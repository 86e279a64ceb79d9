"""The events of a streamed run: typed, frozen, and each with a documented JSON form.

They are observations, never control: the reply's pieces as the model writes
them (from the model adapter's `ReplyDelta`s), and the run's own audit events
(tool results, transitions) as the emitter emits them. The JSON forms are in
docs/events.md; `to_json()` gives them, ready for Server-Sent Events.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Generic, Literal

from statemachine_agent.machine.result import OutputT, RunResult
from statemachine_agent.persistence.codec import to_plain

EventType = Literal[
    "reply_started",
    "text_delta",
    "thinking_delta",
    "tool_call_started",
    "tool_input_complete",
    "reply_restarted",
    "tool_result",
    "run_tainted",
    "call_gated",
    "transition",
    "run_ended",
]


@dataclass(frozen=True, slots=True)
class ReplyStarted:
    """A streamed model call began: the events that follow with this `iteration` and
    `purpose` belong to its reply.

    `iteration` alone does not name a call: the salvage call that closes a run is made
    after the last loop call and carries that call's number, so a consumer that joins
    deltas by iteration alone would glue the two replies together.
    """

    run_id: str
    iteration: int
    purpose: str
    """Why the model was called: `loop` (a step of the run) or `salvage` (the closing
    summary of a run stopped early); (`iteration`, `purpose`) names exactly one call."""
    type: Literal["reply_started"] = field(default="reply_started", init=False)


@dataclass(frozen=True, slots=True)
class TextDelta:
    """Text the model added to its reply (block `index` of the reply of call `iteration`)."""

    run_id: str
    iteration: int
    index: int
    text: str
    purpose: str = "loop"
    type: Literal["text_delta"] = field(default="text_delta", init=False)


@dataclass(frozen=True, slots=True)
class ThinkingDelta:
    """Thinking the model added (a `thinking` block)."""

    run_id: str
    iteration: int
    index: int
    text: str
    purpose: str = "loop"
    type: Literal["thinking_delta"] = field(default="thinking_delta", init=False)


@dataclass(frozen=True, slots=True)
class ToolCallStarted:
    """The model began a call of tool `name`; its input follows."""

    run_id: str
    iteration: int
    tool_use_id: str
    name: str
    purpose: str = "loop"
    type: Literal["tool_call_started"] = field(default="tool_call_started", init=False)


@dataclass(frozen=True, slots=True)
class ToolInputComplete:
    """The call's input is complete (it runs once the reply is, if it may)."""

    run_id: str
    iteration: int
    tool_use_id: str
    name: str
    input: Any
    purpose: str = "loop"
    type: Literal["tool_input_complete"] = field(default="tool_input_complete", init=False)


@dataclass(frozen=True, slots=True)
class ReplyRestarted:
    """The reply's stream died and the call is made again: drop what it streamed so far."""

    run_id: str
    iteration: int
    purpose: str = "loop"
    type: Literal["reply_restarted"] = field(default="reply_restarted", init=False)


@dataclass(frozen=True, slots=True)
class ToolResult:
    """A tool call was answered (ran, failed, refused or denied), as the model will read it;
    a call that will never run (a salvage reply's) is answered too, with `error_kind`
    `not_run`, so nobody waits for the result of a started call."""

    run_id: str
    iteration: int
    tool_use_id: str
    name: str
    content: str
    is_error: bool
    error_kind: str | None = None
    purpose: str = "loop"
    type: Literal["tool_result"] = field(default="tool_result", init=False)


@dataclass(frozen=True, slots=True)
class RunTainted:
    """Untrusted text entered the run for the first time (from the call named, whose
    `tool_result` follows): from now on its `TaintPolicy` gates side-effect calls.

    A client shows it so a person watching knows why a later call waits for them."""

    run_id: str
    iteration: int
    tool: str
    tool_use_id: str
    excerpt: str
    """The start of the untrusted result, on one line (redacted like the audit's)."""
    type: Literal["run_tainted"] = field(default="run_tainted", init=False)


@dataclass(frozen=True, slots=True)
class CallGated:
    """The run's `TaintPolicy` gated a side-effect call of the tainted run: `action` is
    `approve` (it goes to the approval policy, or waits for a person) or `deny` (it is
    answered with an error and never runs)."""

    run_id: str
    iteration: int
    tool: str
    tool_use_id: str
    action: str
    type: Literal["call_gated"] = field(default="call_gated", init=False)


@dataclass(frozen=True, slots=True)
class Transition:
    """The machine fired a row: from `source` on `trigger` to `dest`, with each guard's verdict."""

    run_id: str
    seq: int
    source: str
    trigger: str
    dest: str
    guards: dict[str, bool]
    iteration: int
    type: Literal["transition"] = field(default="transition", init=False)


@dataclass(frozen=True, slots=True)
class RunEnded(Generic[OutputT]):
    """The last event: the run's result (typed as the agent's: a `RunResult[OutputT]`)."""

    run_id: str
    result: RunResult[OutputT]
    type: Literal["run_ended"] = field(default="run_ended", init=False)


StreamEvent = (
    ReplyStarted
    | TextDelta
    | ThinkingDelta
    | ToolCallStarted
    | ToolInputComplete
    | ReplyRestarted
    | ToolResult
    | RunTainted
    | CallGated
    | Transition
    | RunEnded[OutputT]
)
"""Any event of a streamed run, generic in the output type its closing `RunEnded`
carries (`agent.stream(...)` of an `Agent[T]` yields `StreamEvent[T]`; a bare
`StreamEvent` means `StreamEvent[Any]`)."""


def to_json(event: StreamEvent) -> dict[str, Any]:
    """The event's JSON form (docs/events.md): its fields, `type` first; a `run_ended`
    event carries the result without its messages and trail (they are in the audit)."""
    if isinstance(event, RunEnded):
        result = event.result
        return {
            "type": event.type,
            "run_id": event.run_id,
            "end_state": result.end_state,
            "reason": result.reason,
            "text": result.text,
            "ok": result.ok,
            "data": to_plain(result.data, "data"),
            "details": to_plain(result.details, "details"),
            "iterations": result.iterations,
            "usage": result.usage.to_dict(),
            "cost_usd": result.cost_usd,
        }
    fields = {f.name: getattr(event, f.name) for f in dataclasses.fields(event)}
    body = {"type": fields.pop("type"), **fields}
    return {key: to_plain(value, key) for key, value in body.items()}
