"""Where a resumed run carries on, decided from its record alone.

Checkpoints are written after every transition, so a record's state is the
state the run had just entered. A run that crashed carries on in that state (its
phase skips what the record shows as done); a paused or cancelled one leaves its
end state by a `resumed` row of the table.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping

from statemachine_agent.errors import Error
from statemachine_agent.machine.ends import END_STATES
from statemachine_agent.machine.run import RunRecord
from statemachine_agent.phases.staging import UNSTAGE_TOOL
from statemachine_agent.policy.approval import Decision, decision_to_plain


class RunAlreadyEndedError(Error, ValueError):
    """The run reached an end state that cannot be resumed."""


class MissingToolsError(Error, ValueError):
    """A resumed run has pending or recorded calls of tools the agent does not have."""

    def __init__(self, run_id: str, missing: Iterable[str]) -> None:
        self.run_id, self.missing = run_id, sorted(missing)
        super().__init__(
            f"run {run_id!r} cannot be resumed without the tool(s) it has called: "
            f"{', '.join(self.missing)}; give the agent those tools"
        )


def check_tools(record: RunRecord, available: Iterable[str]) -> None:
    """Refuse a resume whose tools lack one the run has pending or recorded calls of."""
    called = {call.name for call in record.pending_calls}
    for message in record.messages:
        content = message.get("content")
        if message.get("role") == "assistant" and isinstance(content, list):
            called.update(
                str(block.get("name"))
                for block in content
                if isinstance(block, Mapping) and block.get("type") == "tool_use"
            )
    if record.settings.commit is not None:  # the built-in `unstage` comes with staging
        called.discard(UNSTAGE_TOOL)
    missing = called - set(available)
    if missing:
        raise MissingToolsError(record.run_id, missing)


def prepare_resume(record: RunRecord, decisions: Mapping[str, Decision]) -> None:
    """Check that the run can go on and hand it what it needs; never sets its state.

    Where a paused or cancelled run carries on is decided by the table's
    `resumed` rows, fired by the engine; here the record only receives the
    decisions and forgets the cancel request that stopped it.
    """
    if record.state == "awaiting_approval":
        keyed = {_waiting_key(record, key): decision for key, decision in decisions.items()}
        unknown = sorted(k for k in decisions if _waiting_key(record, k) is None)
        if unknown:
            raise ValueError(
                f"run {record.run_id} has no call waiting with id(s) {', '.join(unknown)}; "
                f"waiting: {', '.join(record.approval.awaiting)}"
            )
        received = time.time()  # the person's decision time, for the audit trail
        record.approval.decisions.update(
            {
                k: decision_to_plain(v, decided_at=received)
                for k, v in keyed.items()
                if k is not None
            }
        )
        record.approval.awaiting = []
        return
    if decisions:
        raise ValueError(f"run {record.run_id} is not waiting for approval ({record.state})")
    if record.state == "cancelled":
        record.cancel_requested = False
        if record.error is not None and record.error.kind == "Cancelled":
            record.error = None  # the abandoned model call is made again
        return
    if record.state in END_STATES and not record.reporting_end:
        raise RunAlreadyEndedError(
            f"run {record.run_id} already ended in {record.state!r}; only runs awaiting "
            "approval, cancelled or interrupted can be resumed"
        )


def _waiting_key(record: RunRecord, key: str) -> str | None:
    """The waiting call a decision's key names: its key as listed, or a sub-agent's call
    by its own tool_use id alone (the last part of `<parent id>/<child id>`) when no
    other waiting call ends with it."""
    awaiting = record.approval.awaiting
    if key in awaiting:
        return key
    ends = [k for k in awaiting if k.rpartition("/")[2] == key]
    return ends[0] if len(ends) == 1 else None
