"""Durable runs: the record as JSON, append-only checkpoints and their stores."""

from statemachine_agent.persistence.base import (
    Checkpointer,
    MemoryCheckpointer,
    RunNotFoundError,
    RunSummary,
    load_record,
)
from statemachine_agent.persistence.codec import SerializationError
from statemachine_agent.persistence.postgres import PostgresCheckpointer
from statemachine_agent.persistence.sqlite import SQLiteCheckpointer

__all__ = [
    "Checkpointer",
    "MemoryCheckpointer",
    "PostgresCheckpointer",
    "RunNotFoundError",
    "RunSummary",
    "SQLiteCheckpointer",
    "SerializationError",
    "load_record",
]
