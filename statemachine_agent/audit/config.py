"""`Audit`: where an agent's events go and what is kept out of them.

The audit folder, the extra sinks, the redacted keys and the logger are one
feature, the audit trail, so they are configured as one value:
`Agent(..., audit=Audit(dir="audit", sinks=[...], redact=["email"]))`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from os import PathLike
from pathlib import Path
from typing import Any

from statemachine_agent.audit.chain import AuditKey, Chain
from statemachine_agent.audit.sink import AuditSink
from statemachine_agent.machine.ids import check_run_id


@dataclass(frozen=True, slots=True)
class Audit:
    """The audit trail of an agent's runs; the default writes nowhere but the logger."""

    dir: str | PathLike[str] | None = None
    """Each run's events go to `<dir>/<run_id>.jsonl` (a resumed run appends to it).
    Kept as a `Path`."""
    sinks: Sequence[AuditSink] = ()
    """Further sinks that receive every redacted event of every run (kept as a tuple;
    the agent does not close them)."""
    redact: Iterable[str] = ()
    """Extra event keys whose values are never written (kept as a tuple)."""
    secrets: Iterable[str] = ()
    """Values never written, wherever they occur (as the model's API key is): passwords,
    tokens a tool uses, ... (kept as a tuple; values shorter than 4 characters are not
    masked, as they would mask ordinary words)."""
    logger: Any = None
    """A structlog logger for the events; `None`: the application's structlog pipeline
    if configured, else the stdlib `statemachine_agent` logger."""
    audit_key: AuditKey | None = field(default=None, repr=False)
    """An HMAC key for the hash chain of every audit file and sink (docs/audit.md): only
    a holder of the key can write a chain that verifies (`verify --key`). Never written
    to any sink (it is redacted) nor shown by `repr`."""
    tracer_provider: Any = None
    """An OpenTelemetry `TracerProvider` the runs' spans go to (see
    `statemachine_agent.audit.telemetry`); `None`: the application's global one, if it set
    one; `False`: no tracing for this agent. Needs the `otel` extra."""

    def __post_init__(self) -> None:
        if isinstance(self.redact, str):
            raise TypeError("Audit.redact takes a list of keys, not one string")
        if self.dir is not None:
            object.__setattr__(self, "dir", Path(self.dir))
        object.__setattr__(self, "sinks", tuple(self.sinks))
        object.__setattr__(self, "redact", tuple(self.redact))
        if isinstance(self.secrets, str):
            raise TypeError("Audit.secrets takes a list of values, not one string")
        object.__setattr__(self, "secrets", tuple(self.secrets))
        Chain(self.audit_key)  # an unusable key is an error now, not at the first event

    def run_file(self, run_id: str) -> Path | None:
        """Where the run's own audit file goes, if the audit has a folder.

        The id is checked here too (`ValueError`), so no caller can name a file
        outside the folder."""
        return None if self.dir is None else Path(self.dir) / f"{check_run_id(run_id)}.jsonl"
