"""Where a resumed run carries on, decided from its record alone.

Checkpoints are written after every transition, so a record's state is the
state the run had just entered. What its phase had already done is in the
record too, and decides how to go on without doing anything twice.
"""

from __future__ import annotations

from collections.abc import Mapping

from statemachine_agent.machine.run import RunRecord
from statemachine_agent.machine.table import END_STATES
from statemachine_agent.policy.approval import Decision, decision_to_plain

RERUN_IS_SAFE = frozenset({"perceive", "act"})
"""Phases that can simply run again: perceive rebuilds its request; act skips recorded calls."""


class RunAlreadyEndedError(ValueError):
    """The run reached an end state that cannot be resumed."""


def prepare_resume(record: RunRecord, decisions: Mapping[str, Decision]) -> str | None:
    """Set the record up to continue; returns a trigger to fire first, if any."""
    if record.state == "awaiting_approval":
        unknown = sorted(set(decisions) - set(record.awaiting))
        if unknown:
            raise ValueError(
                f"run {record.run_id} has no call waiting with id(s) {', '.join(unknown)}; "
                f"waiting: {', '.join(record.awaiting)}"
            )
        record.decisions.update({k: decision_to_plain(v) for k, v in decisions.items()})
        record.awaiting = []
        record.state = "act"
        return None
    if record.state == "cancelled":
        record.cancel_requested = False
        source, trigger = record.cancelled_at or ("perceive", "prepared")
        record.cancelled_at = None
        if trigger == "model_failed" or source in RERUN_IS_SAFE:
            record.error = None
            record.state = "perceive" if source == "reason" else source
            return None
        record.state = source
        return trigger
    if decisions:
        raise ValueError(f"run {record.run_id} is not waiting for approval ({record.state})")
    if record.state in END_STATES:
        raise RunAlreadyEndedError(
            f"run {record.run_id} already ended in {record.state!r}; only runs awaiting "
            "approval, cancelled or interrupted can be resumed"
        )
    return None
