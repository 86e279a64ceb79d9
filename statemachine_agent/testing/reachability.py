"""Which rows of the table an agent can take: `reachable_rows(agent)` and `Reachability`.

The analysis lives in `statemachine_agent.agent.reachability` (where `Agent.diagram`
reads it too); the testing kit offers it here, beside the witnesses that fire each
reachable row.
"""

from __future__ import annotations

from statemachine_agent.agent.reachability import (
    DEFECT_TRIGGER,
    Reachability,
    analyse,
    missing_rule_message,
    missing_rules,
    reachable_rows,
    setup_from,
    setup_of,
)

__all__ = [
    "DEFECT_TRIGGER",
    "Reachability",
    "analyse",
    "missing_rule_message",
    "missing_rules",
    "reachable_rows",
    "setup_from",
    "setup_of",
]
