"""Resuming is rows of the table: a paused or cancelled run leaves its end state by
`resumed`, and the row that fires says where it carries on.

Each case cancels a whole run in one state, resumes it from its checkpoints and
checks that the matching `resumed` row fired, that no tool ran twice and that the
run then finishes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from statemachine_agent import (
    Agent,
    Approve,
    Audit,
    CancelToken,
    MemoryCheckpointer,
    ReflectionPolicy,
    ScriptedModel,
    Verdict,
    tool,
)
from statemachine_agent.testing import replies
from statemachine_agent.testing.assertions import assert_end_state, assert_fired
from statemachine_agent.testing.validator import validate_request

CALL = replies.tool_use("count", {"n": 1})
CUT = replies.text("The first half", stop_reason="max_tokens")
OVERFLOWED = replies.text("x", stop_reason="model_context_window_exceeded")
STALLING = [replies.tool_use("count", {"n": 1}) for _ in range(3)]
DONE = [replies.text("done") for _ in range(6)]


class CancelOnEntry:
    """An audit sink that cancels the run once, when it enters `state`."""

    def __init__(self, token: CancelToken, state: str, event: str = "transition.fired") -> None:
        self.token, self.state, self.event, self.done = token, state, event, False

    def write(self, event: Any) -> None:
        if self.done or event["event"] != self.event:
            return
        if self.event != "transition.fired" or event.get("dest") == self.state:
            self.done = True
            self.token.cancel()

    def close(self) -> None:
        return None


# (state cancelled in, event that cancels, guard of the resumed row, dest, script, options)
CASES: list[tuple[str, str, str, str, list[Any], dict[str, Any]]] = [
    ("perceive", "transition.fired", "cancelled_before_reply", "perceive", [CALL], {}),
    ("reason", "model.replied", "cancelled_after_reply", "reason", [CALL], {}),
    ("act", "tool.finished", "cancelled_in_act", "act", [CALL], {}),
    ("observe", "transition.fired", "cancelled_in_observe", "observe", [CALL], {}),
    ("intervene", "transition.fired", "cancelled_in_intervene", "intervene", STALLING,
     {"reflection": None}),
    ("reflect", "transition.fired", "cancelled_in_reflect", "reflect", [CALL],
     {"reflection": ReflectionPolicy(1)}),
    ("verify", "transition.fired", "cancelled_in_verify", "verify", [], {}),
    ("continue", "transition.fired", "cancelled_in_continue", "continue", [CUT],
     {"max_continuations": 1}),
    ("compact", "transition.fired", "cancelled_in_compact", "compact", [OVERFLOWED], {}),
]  # fmt: skip


@pytest.mark.parametrize(
    ("state", "event", "guard", "dest", "script", "options"), CASES, ids=[c[0] for c in CASES]
)
def test_cancelled_run_resumes_by_its_row(
    state: str, event: str, guard: str, dest: str, script: list[Any], options: dict[str, Any]
) -> None:
    """The `resumed` row for where the run was cancelled fires, and the run finishes."""
    ran: list[int] = []

    @tool(side_effect=True)
    def count(n: int) -> str:
        """Count a call (side-effecting, so a second run of the same call would show)."""
        ran.append(n)
        return "counted"

    token = CancelToken()
    watch = "transition.fired" if state == "perceive" else event
    sink = CancelOnEntry(token, state, watch)
    model = ScriptedModel([*script, *DONE])
    agent = Agent(
        model,
        tools=[count],
        checkpointer=MemoryCheckpointer(),
        verify=lambda claim: Verdict(ok=True),
        audit=Audit(sinks=[sink]),
        **options,
    )
    first = agent.run("q", cancel=token)
    assert_end_state(first, "cancelled")
    calls_before = list(ran)
    resumed = agent.resume(first.run_id)
    assert_fired(resumed, "cancelled", "resumed", dest, via=[guard])
    assert resumed.end_state in ("completed", "stalled"), resumed.reason
    recorded = sum(
        1
        for m in resumed.messages
        for b in (m.get("content") if isinstance(m.get("content"), list) else [])
        if b.get("type") == "tool_result"
    )
    assert len(ran) == recorded  # every call that ran is in the history once, none ran twice
    assert len(ran) >= len(calls_before)
    assert all(validate_request(r.to_api()) == [] for r in model.requests)


def test_fallback_resumed_row_when_the_cancel_point_is_unknown(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A cancelled record that does not say where it stopped (written by an older
    version) starts again from a fresh request."""
    from statemachine_agent.persistence import base

    loaded = base.record_from_plain

    def forgetful(plain: Mapping[str, Any]) -> Any:
        record = loaded(plain)
        record.cancelled_at = None
        return record

    token = CancelToken()
    token.cancel()
    agent = Agent(ScriptedModel([replies.text("done")]), checkpointer=MemoryCheckpointer())
    first = agent.run("q", cancel=token)
    assert_end_state(first, "cancelled")
    monkeypatch.setattr(base, "record_from_plain", forgetful)
    resumed = agent.resume(first.run_id)
    assert_fired(resumed, "cancelled", "resumed", "perceive", via=[])
    assert_end_state(resumed, "completed")


def test_approval_pause_resumes_by_its_row() -> None:
    """A run paused for approval leaves `awaiting_approval` by `resumed` into `act`."""

    @tool(requires_approval=True)
    def deploy(target: str) -> str:
        """Deploy (needs a human's approval)."""
        return f"deployed {target}"

    script = [replies.tool_use("deploy", {"target": "prod"}), replies.text("done")]
    agent = Agent(ScriptedModel(script), tools=[deploy], checkpointer=MemoryCheckpointer())
    paused = agent.run("q")
    assert_end_state(paused, "awaiting_approval")
    (pending,) = (paused.details or {})["pending"]
    resumed = agent.resume(paused.run_id, decisions={pending["tool_use_id"]: Approve()})
    assert_fired(resumed, "awaiting_approval", "resumed", "act")
    assert_end_state(resumed, "completed")
