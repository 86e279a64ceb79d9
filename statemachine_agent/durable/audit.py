"""Audit events under replay: written when the run really does something, not again.

A durable engine recovers a run by executing its workflow again from the top,
answering the steps it recorded from the record. The machine then fires the
same transitions a second time and its emitter reports them a second time;
written straight to the sinks, every recovered run would have its first half
twice in its audit file. Each engine knows when it is replaying (Temporal says
so; DBOS shows it when a step is answered from the record), so the agent's
sinks and logger are wrapped in a gate that asks the engine before writing.

Events emitted after the last recorded step and before a crash cannot be told
apart from new ones, so they may be written twice: audit delivery is *at least
once*, and `run_id` with `seq` (transitions) or `tool_use_id` (tools) identifies
a duplicate.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol

from statemachine_agent.agent import Agent
from statemachine_agent.audit.chain import AuditKey
from statemachine_agent.audit.events import default_logger
from statemachine_agent.audit.sink import AuditSink, JsonlSink
from statemachine_agent.audit.telemetry import RunTraces, provider_name


class Gate(Protocol):
    """Decides when (and whether) an event of a run is delivered."""

    def admit(self, run_id: str | None, deliver: Callable[[], None]) -> None:
        """Call `deliver` now, later, or never."""
        ...


class GatedSink:
    """An audit sink that writes only what its gate lets through."""

    def __init__(self, inner: AuditSink, gate: Gate) -> None:
        self.inner = inner
        self.gate = gate

    def write(self, event: Mapping[str, Any]) -> None:
        frozen = dict(event)
        self.gate.admit(_run_id(frozen), lambda: self.inner.write(frozen))

    def close(self) -> None:
        self.inner.close()


class GatedLogger:
    """A structlog-style logger whose `info` calls pass the gate (the emitter uses only `info`)."""

    def __init__(self, inner: Any, gate: Gate) -> None:
        self.inner = inner
        self.gate = gate

    def info(self, event: str, **fields: Any) -> None:
        self.gate.admit(_run_id(fields), lambda: self.inner.info(event, **fields))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class RunFiles:
    """`<folder>/<run_id>.jsonl` for each run, as `Agent(audit=folder)` writes them.

    The agent opens its own file per run and writes to it directly; on an
    engine that file is gated like any sink, so the folder moves here. Files
    are written a line at a time (the gate, not the emitter, decides when an event is
    delivered, so the emitter's flush points do not apply here), opened for
    appending (a recovered run continues its file and its hash
    chain: each file re-seals what it writes, so events dropped or delivered twice
    under replay never break it) and closed at the run's `run.ended`.
    """

    def __init__(self, folder: Path, audit_key: AuditKey | None = None) -> None:
        self.folder = folder
        self.audit_key = audit_key
        self._open: dict[str, JsonlSink] = {}
        self._lock = threading.Lock()

    def path(self, run_id: str) -> Path:
        return self.folder / f"{run_id}.jsonl"

    def write(self, event: Mapping[str, Any]) -> None:
        run_id = _run_id(event) or "unknown"
        with self._lock:
            sink = self._open.get(run_id)
            if sink is None:
                sink = self._open[run_id] = JsonlSink(
                    self.path(run_id), audit_key=self.audit_key, batch=1
                )
            sink.write(event)
            if event.get("event") == "run.ended":
                self._open.pop(run_id).close()

    def close(self) -> None:
        with self._lock:
            for sink in self._open.values():
                sink.close()
            self._open.clear()


def gate_agent(agent: Agent, gate: Gate) -> tuple[Agent, RunFiles | None]:
    """The agent with its sinks, audit folder and logger routed through `gate`.

    Returns that agent (a copy: agents are read-only) and the per-run file writer
    that replaces its audit folder, if there is one, so the caller can put each
    run's file back into its result. Its runs' spans (`RunTraces`) pass the gate too,
    so a replay does not trace a run's first half twice.
    """
    audit = agent.audit
    sinks: list[AuditSink] = [GatedSink(sink, gate) for sink in audit.sinks]
    if audit.tracer_provider is not False:
        traces = RunTraces(audit.tracer_provider, agent.name, provider_name(agent.model))
        sinks.append(GatedSink(traces, gate))
    files = None
    if audit.dir is not None:
        files = RunFiles(Path(audit.dir), audit.audit_key)
        sinks.append(GatedSink(files, gate))
    logger = audit.logger if audit.logger is not None else default_logger()
    gated = dataclasses.replace(audit, dir=None, sinks=sinks, logger=GatedLogger(logger, gate),
                                tracer_provider=False)  # fmt: skip
    return agent.replace(audit=gated), files


def _run_id(event: Mapping[str, Any]) -> str | None:
    value = event.get("run_id")
    return str(value) if value is not None else None
