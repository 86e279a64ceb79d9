"""The emitter: one call per event, fanned out to the run's sinks and to structlog.

Event names are `noun.verb` and their keys are documented in docs/events.md.
Every event carries `run_id`, a wall-clock `ts` and, when the host gave any, the
run's `metadata` (tenant, user, request id); the emitter adds them so phases only
say what happened. Each event is sealed once into the run's hash chain
(`chain.py`) before any sink sees it, so every sink receives the same `prev`
and `digest` members the audit file holds.
`capture_events` collects the events of the runs started inside a `with` block
(the `audit_events` fixture of the pytest plugin).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import structlog

from statemachine_agent.audit.chain import Chain
from statemachine_agent.audit.redact import Redactor
from statemachine_agent.audit.sink import AuditSink, JsonlSink

LOGGER_NAME = "statemachine_agent"

FLUSH_AFTER = frozenset({"model.requested", "tool.called", "run.ended"})
"""Events after which buffering sinks are flushed: the run is about to wait on the
model, a tool is about to act on the world, or the run is over. Checkpoints flush
too (`PhaseEnv.checkpoint`), so the audit file never lags what the store holds."""

_CAPTURES: ContextVar[tuple[list[dict[str, Any]], ...]] = ContextVar(
    "statemachine_agent_captures", default=()
)
"""The lists collecting events in this context; a run's emitter takes them when it is made."""


@contextmanager
def capture_events() -> Iterator[list[dict[str, Any]]]:
    """Collect every event of every run started in this block, as its audit file has it.

    Like structlog's `capture_logs`, but scoped to the current context rather than
    global: runs started here (also on the worker thread `Agent.run` uses under a
    running loop, which inherits the context) are captured, runs of other tests or
    threads are not. Events are recorded after redaction, exactly as sinks get them.
    """
    events: list[dict[str, Any]] = []
    token = _CAPTURES.set((*_CAPTURES.get(), events))
    try:
        yield events
    finally:
        _CAPTURES.reset(token)


def default_logger() -> Any:
    """The application's structlog pipeline if it set one up, else stdlib logging.

    structlog, left unconfigured, prints every event to stdout; a library must not
    do that to its host, so until the application configures structlog the events
    go to the `statemachine_agent` stdlib logger, silent unless logging is set up.
    """
    if structlog.is_configured():
        return structlog.get_logger(LOGGER_NAME)
    return structlog.wrap_logger(
        logging.getLogger(LOGGER_NAME),
        processors=[structlog.stdlib.render_to_log_kwargs],
        wrapper_class=structlog.stdlib.BoundLogger,
    )


class Emitter:
    """Emits the events of one run."""

    def __init__(
        self,
        run_id: str,
        *,
        sinks: Sequence[AuditSink] = (),
        redactor: Redactor | None = None,
        logger: Any = None,
        metadata: Mapping[str, Any] | None = None,
        chain: Chain | None = None,
        links: Mapping[str, Any] | None = None,
    ) -> None:
        """`chain` is the run's hash chain: the audit file's own, so its lines and what
        every other sink receives carry the same digests; a fresh one by default.
        `links` are stamped on every event after `run_id` (a sub-agent's run carries
        `parent_run_id` and `parent_tool_use_id`)."""
        self.run_id = run_id
        self.links = dict(links or {})
        self.metadata = dict(metadata or {})
        self.sinks = list(sinks)
        self.chain = chain if chain is not None else Chain()
        self.redactor = redactor or Redactor()
        self._captures = _CAPTURES.get()
        self._chosen_logger = logger is not None
        self.logger = logger if logger is not None else default_logger()
        self._stdlib = logging.getLogger(LOGGER_NAME)
        self.failure: str | None = None
        """Why a sink or the logger failed, if one did; the engine then ends the run in
        `failed`, because a run whose audit trail has a hole must not carry on."""
        self._to_logger = self.logger is not None and self._logger_listens()
        self._listening = bool(self.sinks or self._captures or self._to_logger)

    @property
    def logger_chosen(self) -> bool:
        """Whether the host chose the logger (else it is the default one)."""
        return self._chosen_logger

    def listened(self) -> bool:
        """Whether any sink or logger would receive an event (else emitting is skipped).

        Building, redacting and passing on an event nobody receives costs more than
        the machine's transition itself, so a run with no audit pays nothing for it.
        Decided once, when the run's emitter is made (and again when a sink or the
        logger fails and is dropped), not asked of structlog and logging per event:
        logging configured while a run is in flight applies from the next run.
        """
        return self._listening

    def _logger_listens(self) -> bool:
        """Whether the logger would keep an event: one chosen by the host, structlog
        configured, or the stdlib logger enabled for INFO. Otherwise a run that writes
        an audit file does not also pay for passing each event through structlog to
        a logger that drops it."""
        return bool(
            self._chosen_logger
            or structlog.is_configured()
            or self._stdlib.isEnabledFor(logging.INFO)
        )

    def emit(self, event: str, **payload: Any) -> None:
        if not self.listened():
            return
        record: dict[str, Any] = {"event": event, "run_id": self.run_id}
        if self.links:
            record.update(self.links)
        record["ts"] = time.time()
        if self.metadata:
            record["metadata"] = self.metadata
        record.update(payload)
        record = self.redactor.redact(record)
        if self.sinks:
            sealed = self.chain.seal(record)
            record = sealed.event
            for sink in list(self.sinks):
                try:
                    if isinstance(sink, JsonlSink) and sink.chain is self.chain:
                        sink.write_line(sealed.line)
                    else:
                        sink.write(record)
                except Exception as exc:
                    self._failed(f"audit sink {type(sink).__name__}", exc, drop=sink)
            if event in FLUSH_AFTER:
                self.flush()
        for captured in self._captures:
            captured.append(dict(record))
        if not self._to_logger:
            return
        fields = {k: v for k, v in record.items() if k != "event"}
        try:
            self.logger.info(event, **fields)
        except Exception as exc:
            self._failed("the audit logger", exc)
            self.logger = None
            self._to_logger = False
            self._listening = bool(self.sinks or self._captures)

    def flush(self) -> None:
        """Have every sink that buffers write what it holds (a failure is noted, as for
        `write`, and that sink is dropped)."""
        for sink in list(self.sinks):
            flush = getattr(sink, "flush", None)
            if flush is None:
                continue
            try:
                flush()
            except Exception as exc:
                self._failed(f"audit sink {type(sink).__name__}", exc, drop=sink)

    def _failed(self, component: str, exc: Exception, *, drop: AuditSink | None = None) -> None:
        """Note the first failure, and stop using a sink that failed (the others go on)."""
        if self.failure is None:
            self.failure = f"{component} raised {type(exc).__name__}: {exc}"
        if drop is not None:
            self.sinks.remove(drop)
            self._listening = bool(self.sinks or self._captures or self._to_logger)
            with contextlib.suppress(Exception):
                drop.close()

    def close(self) -> None:
        for sink in self.sinks:
            try:
                sink.close()
            except Exception as exc:
                self._failed(f"audit sink {type(sink).__name__}", exc)
