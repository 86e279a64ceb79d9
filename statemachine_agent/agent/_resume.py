"""What `Agent.aresume` does under the run's lease before driving it on: the stored
record loaded, the tools it needs checked, and the record set up to go on."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from statemachine_agent.agent._parts import AgentParts, deps_for
from statemachine_agent.agent._records import checked_metadata
from statemachine_agent.machine.ids import check_run_id
from statemachine_agent.machine.phase_env import AgentDeps
from statemachine_agent.machine.resume import check_tools, prepare_resume
from statemachine_agent.machine.run import RunRecord
from statemachine_agent.persistence.base import Checkpointer, load_record
from statemachine_agent.persistence.delta import CheckpointWriter
from statemachine_agent.policy.approval import Decision


async def resumed(
    parts: AgentParts,
    store: Checkpointer,
    run_id: str,
    *,
    decisions: Mapping[str, Decision],
    output_type: Any,
    metadata: Mapping[str, Any] | None,
) -> tuple[RunRecord, CheckpointWriter, AgentDeps]:
    """The stored run set up to go on, the writer of its checkpoints so far, and the
    services it runs with; `metadata` is merged over the run's own."""
    extra = checked_metadata(metadata)
    record = load_record(store, check_run_id(run_id))
    services = deps_for(parts, output_type)
    if services.tools.toolsets:
        await services.tools.refresh()  # a toolset's tools count (its failures: drive's)
    check_tools(record, services.tools.names)
    writer = CheckpointWriter.resumed(record)  # before the record is set up to go on,
    prepare_resume(record, decisions)  # so that setup is checkpointed too
    if extra:
        record.metadata = {**record.metadata, **extra}
    return record, writer, services
