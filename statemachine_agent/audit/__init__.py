"""The audit trail: every event a run emits, and where it goes.

`events` is the emitter every phase and handler reports through; `sink` the
sinks (JSONL files, memory) and `read_events`; `redact` masks secrets before
anything is written or streamed; `chain` the hash chain `verify` checks;
`config` the `Audit` settings; `telemetry` the OpenTelemetry spans that listen
to the same events.
"""
