"""Durable runs: the record as JSON, append-only checkpoints and their stores."""

from statemachine_agent.persistence.base import (
    CheckpointCorruptError,
    Checkpointer,
    MemoryCheckpointer,
    RunNotFoundError,
    RunSummary,
    UnsafeStoreError,
    load_record,
)
from statemachine_agent.persistence.codec import SerializationError
from statemachine_agent.persistence.crypto import generate_key
from statemachine_agent.persistence.lease import Lease, LeaseLostError, RunLockedError
from statemachine_agent.persistence.postgres import PostgresCheckpointer
from statemachine_agent.persistence.sqlite import SQLiteCheckpointer

__all__ = [
    "CheckpointCorruptError",
    "Checkpointer",
    "Lease",
    "LeaseLostError",
    "MemoryCheckpointer",
    "PostgresCheckpointer",
    "RunLockedError",
    "RunNotFoundError",
    "RunSummary",
    "SQLiteCheckpointer",
    "SerializationError",
    "UnsafeStoreError",
    "generate_key",
    "load_record",
]
