"""The `Agent` facade and what drives its runs.

`core` is the public face (`Agent`, `RunHandle`); the private modules beside it
do the work, each taking a small typed bundle of what it needs rather than the
agent itself: `_building` turns the constructor's arguments into services,
`_records` makes a fresh run's record, `_resume` sets a stored run up to go on,
and `_driving` drives a run (its lease, its audit trail, the engine). The run
features built on single runs live here too: `conversation` (the outer loop of
turns) and `subagents` (an agent as another agent's tool).
"""

from statemachine_agent.agent.core import SETTINGS, Agent, RunHandle, Storage, new_run_id

__all__ = ["SETTINGS", "Agent", "RunHandle", "Storage", "new_run_id"]
