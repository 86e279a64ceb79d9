"""Steering messages: what a host adds to a run that is already going, queued until
its next `perceive` delivers them.

A queue is per run and append-only; each message is numbered 1, 2, 3... in the
order it was queued. Delivery never changes the queue: the run record keeps the
highest number it has read (`SteeringTrack.seen`), and that number is checkpointed
with the history the messages were added to. So a run resumed after a crash reads
exactly the messages its last checkpoint had not, and a message is delivered once
whatever happens between queueing and delivery.

The SQL stores and `MemoryCheckpointer` keep the queue beside the checkpoints
(`Mailbox`), so a message steered from another process reaches the run through the
store; an agent without a store keeps it in the process (`LocalMailbox`).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable


@dataclass(frozen=True, slots=True)
class SteerMessage:
    """One queued message for a run."""

    number: int
    """Its place in the run's queue, from 1."""
    text: str
    by: str | None = None
    """Who sent it (a person, a supervisor process), as the host named them."""
    sent_at: float = 0.0
    """Unix time it was queued."""

    def to_plain(self) -> dict[str, Any]:
        return {"number": self.number, "text": self.text, "by": self.by, "sent_at": self.sent_at}

    @classmethod
    def from_plain(cls, plain: dict[str, Any]) -> SteerMessage:
        return cls(int(plain["number"]), str(plain["text"]), plain.get("by"),
                   float(plain.get("sent_at", 0.0)))  # fmt: skip


@runtime_checkable
class Mailbox(Protocol):
    """Where a run's steering messages wait (a store that has one, or the process)."""

    def steer(self, run_id: str, text: str, *, by: str | None = None) -> int:
        """Queue `text` for the run; returns its number in the run's queue."""
        ...

    def steered(self, run_id: str, after: int = 0) -> list[SteerMessage]:
        """The run's messages numbered above `after`, in order."""
        ...


class LocalMailbox:
    """The steering queues of an agent without a store: this process only."""

    def __init__(self) -> None:
        self._queues: dict[str, list[SteerMessage]] = {}
        self._lock = threading.Lock()

    def steer(self, run_id: str, text: str, *, by: str | None = None) -> int:
        with self._lock:
            queue = self._queues.setdefault(run_id, [])
            queue.append(SteerMessage(len(queue) + 1, text, by, time.time()))
            return len(queue)

    def steered(self, run_id: str, after: int = 0) -> list[SteerMessage]:
        with self._lock:
            return list(self._queues.get(run_id, ())[after:])


__all__ = ["LocalMailbox", "Mailbox", "SteerMessage"]
