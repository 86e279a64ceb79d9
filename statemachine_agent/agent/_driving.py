"""Driving one run of an agent: its lease, its audit trail, and the engine.

Every way a run goes (`Agent.arun`, `astream`, `stream`, `aresume`, and a
sub-agent's call in `subagents.drive_child`) ends in `drive`: the record, the
agent's services and an emitter (the run's own audit file and sinks, or for a
sub-agent its parent's trail) make the run's context, and the agent's engine
drives it to an end state. A run id others may know is leased around that
(`lease_for`, `release`), so only one worker drives it at a time. What of the
agent they need comes as its `AgentParts`, never the `Agent` itself.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from statemachine_agent.agent import _steering
from statemachine_agent.audit.chain import Chain
from statemachine_agent.audit.events import Emitter
from statemachine_agent.audit.sink import AuditSink, JsonlSink
from statemachine_agent.audit.telemetry import TraceSink, provider_name, tracer_provider
from statemachine_agent.machine import observers
from statemachine_agent.machine.cancel import CancelToken
from statemachine_agent.machine.phase_env import AgentDeps, PhaseEnv
from statemachine_agent.machine.result import RunResult
from statemachine_agent.machine.run import RunRecord
from statemachine_agent.persistence.base import Checkpointer, LeasingCheckpointer
from statemachine_agent.persistence.delta import CheckpointWriter
from statemachine_agent.persistence.lease import Lease, take_lease
from statemachine_agent.phases.perceive import refresh_tools
from statemachine_agent.stream.run import RunStream, StreamTap

if TYPE_CHECKING:
    from statemachine_agent.agent._parts import AgentParts


async def lease_for(store: Checkpointer | None, run_id: str | None, wait: float) -> Lease | None:
    """The lease of a run id others may know (given, or resumed); None for a store
    that does not lease (or none at all)."""
    if run_id is None or not isinstance(store, LeasingCheckpointer):
        return None
    return await take_lease(store, run_id, wait)


def release(store: Checkpointer | None, lease: Lease | None) -> None:
    if lease is not None and isinstance(store, LeasingCheckpointer):
        store.release(lease)


def stream(
    parts: AgentParts,
    record: RunRecord,
    *,
    cancel: CancelToken | None,
    deadline: float | None,
    deps: AgentDeps,
    host_deps: Any,
    writer: CheckpointWriter | None = None,
    leased: bool = False,
    wait: float = 0.0,
) -> RunStream:
    """The run of `record` as a stream of its events (see `Agent.astream`); `leased`:
    its id was given, so it is leased while driven (waiting up to `wait` seconds for
    the lease), as `arun` leases it."""
    token = cancel or CancelToken()

    async def start(tap: StreamTap, token: CancelToken) -> RunResult:
        held = await lease_for(parts.checkpointer, record.run_id if leased else None, wait)
        try:
            return await drive(parts, record, cancel=token, deadline=deadline, writer=writer,
                               deps=deps, host_deps=host_deps, sinks=[tap],
                               lease=held)  # fmt: skip
        finally:
            release(parts.checkpointer, held)

    def steer(text: str, by: str | None) -> int:
        return _steering.queue(parts, record.run_id, text, by)

    return RunStream(record.run_id, start, token, parts.redactor.redact, steer)


async def drive(
    parts: AgentParts,
    record: RunRecord,
    *,
    cancel: CancelToken | None,
    deadline: float | None = None,
    writer: CheckpointWriter | None = None,
    deps: AgentDeps | None = None,
    host_deps: Any = None,
    sinks: Sequence[AuditSink] = (),
    parent: PhaseEnv | None = None,
    lease: Lease | None = None,
) -> RunResult:
    """Drive a record to its end; `writer` (of its checkpoints so far) means a resume;
    `host_deps` are the host's `deps=` for its tools; `sinks` this run's own audit
    sinks, after the agent's; `parent` is the run that started this one as a
    sub-agent (its events then join the parent's trail)."""
    if deadline is not None:
        cancel = cancel or CancelToken()
        cancel.cancel_after(deadline)
    own: JsonlSink | None = None
    if parent is not None:
        emitter = child_emitter(parts, record, parent, sinks)
    else:
        audit = parts.audit
        every: list[AuditSink] = [*audit.sinks, *sinks]
        tracers = tracer_provider(audit.tracer_provider)
        if tracers is not None:
            every.append(TraceSink(tracers, parts.name, provider_name(parts.deps.model)))
        chain = Chain(audit.audit_key)
        run_file = audit.run_file(record.run_id)
        if run_file is not None:
            record.audit_path = run_file
            cipher = getattr(parts.checkpointer, "cipher", None)
            own = JsonlSink(run_file, audit_key=audit.audit_key, cipher=cipher)
            every.append(own)
            chain = own.chain
        emitter = Emitter(record.run_id, sinks=every, redactor=parts.redactor,
                          logger=audit.logger, metadata=record.metadata,
                          chain=chain)  # fmt: skip
    if lease is not None and lease.taken_over_from is not None:
        taken = {"previous_owner": lease.taken_over_from, "expired_at": lease.expired_at}
        emitter.emit("lease.taken_over", owner=lease.owner, **taken)
    services = deps or parts.deps
    expected = services.output is not None  # the agent's output type, or the run's own
    if record.settings.output_expected != expected:
        record.settings = dataclasses.replace(record.settings, output_expected=expected)
    ctx = PhaseEnv(state=record, deps=services, emitter=emitter,
                       host_deps=host_deps)  # fmt: skip
    ctx.writer = writer
    ctx.mailbox = parts.mailbox
    parts.driving.add(record.run_id)
    try:
        await refresh_tools(ctx, cancel)  # a toolset's tools, before the run lists them
        if observers.watching_runs():  # transition coverage: which configurations ran
            observers.notify_run(record.run_id, record.settings, services.tools)
        return await parts.engine.drive(
            ctx,
            cancel=cancel,
            resumed=writer is not None,
        )
    finally:
        parts.driving.discard(record.run_id)
        if own is not None:
            own.close()


def child_emitter(
    parts: AgentParts, record: RunRecord, parent: PhaseEnv, extra: Sequence[AuditSink]
) -> Emitter:
    """A sub-agent run's emitter: the parent's audit file, hash chain, sinks and logger
    (and this agent's own sinks), both agents' secrets masked, every event linked.
    The parent's trace sink is its run's alone: the child gets one of its own, its
    run span a child of the parent's span of the tool call."""
    up = parent.emitter
    shared = [s for s in up.sinks if not isinstance(s, TraceSink)]
    sinks = [*shared, *(s for s in (*parts.audit.sinks, *extra) if s not in shared)]
    call = record.parent["tool_use_id"] if record.parent is not None else ""
    traced = next((s for s in up.sinks if isinstance(s, TraceSink)), None)
    if traced is not None:
        sinks.append(traced.for_child(parts.name, provider_name(parts.deps.model), call))
    record.audit_path = parent.state.audit_path
    links = {"parent_run_id": parent.state.run_id}
    if record.parent is not None:
        links["parent_tool_use_id"] = call
    return Emitter(record.run_id, sinks=sinks, redactor=up.redactor.joined(parts.redactor),
                   logger=up.logger if up.logger_chosen else parts.audit.logger,
                   metadata=record.metadata, chain=up.chain, links=links)  # fmt: skip
