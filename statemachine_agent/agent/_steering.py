"""Steering a run that is going (`Agent.steer`): check the run may take a message,
then queue it where its next `perceive` reads it (see `persistence/steering.py`)."""

from __future__ import annotations

from statemachine_agent.agent._parts import AgentParts
from statemachine_agent.machine.ends import END_STATES, RESUMABLE_STATES
from statemachine_agent.machine.ids import check_run_id
from statemachine_agent.machine.resume import RunAlreadyEndedError
from statemachine_agent.persistence.base import RunNotFoundError, load_record


def steer(parts: AgentParts, run_id: str, text: str, by: str | None) -> int:
    """Queue `text` for the run; returns its number in the run's queue.

    A run this agent drives in this process takes it at once; any other is looked up
    in the store: running elsewhere, paused for approval or cancelled, it takes the
    message (delivered when it next reaches `perceive`); ended, it refuses.
    """
    check_run_id(run_id)
    check_message(text, by)
    if run_id not in parts.driving:
        store = parts.checkpointer
        if store is None:
            raise RunNotFoundError(
                f"run {run_id!r} is not being driven by this agent, and the agent has no "
                "store to find it in"
            )
        state = load_record(store, run_id).state
        if state in END_STATES and state not in RESUMABLE_STATES:
            raise RunAlreadyEndedError(
                f"run {run_id!r} has ended ({state}): a steered message would never be read"
            )
    return parts.mailbox.steer(run_id, text, by=by)


def check_message(text: str, by: str | None) -> None:
    """Refuse what could never be a user message (before anything is queued)."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"steer: text must be a non-empty string, not {text!r}")
    if by is not None and not isinstance(by, str):
        raise TypeError(f"steer: by must be a string or None, not {type(by).__name__}")


def queue(parts: AgentParts, run_id: str, text: str, by: str | None) -> int:
    """Queue `text` for a run the caller knows is going (a `RunStream` whose run has not
    ended: it may not have reached the store yet, so no look-up there)."""
    check_message(text, by)
    return parts.mailbox.steer(run_id, text, by=by)
