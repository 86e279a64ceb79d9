"""Daemon worker threads for sync tool handlers, reused while idle.

Not `asyncio.to_thread`: the default executor is joined by `asyncio.run` at
shutdown (and its workers at interpreter exit), so one hung handler would hang
the whole program after its timeout was already answered. Daemon threads are
never waited for. Starting one per call costs more than the rest of an
iteration, so a thread that finished its call waits for the next one; a hung
handler keeps only its own thread, and a new one is started for other calls.

A forked child has none of its parent's threads: the idle ones it inherited are
forgotten at its first call (and the lock made anew, since a parent's thread may have
held it at the fork), so its calls start threads of its own instead of waiting on a
queue nobody reads.
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable

Job = Callable[[], None]


class DaemonWorkers:
    """Runs jobs on daemon threads, keeping up to `max_idle` finished ones for reuse."""

    def __init__(self, max_idle: int = 16) -> None:
        self._max_idle = max_idle
        self._idle: list[queue.SimpleQueue[Job]] = []
        self._lock = threading.Lock()
        self._pid = os.getpid()

    def submit(self, job: Job) -> None:
        if self._pid != os.getpid():  # a forked child: its parent's threads are not here
            self._idle, self._lock, self._pid = [], threading.Lock(), os.getpid()
        with self._lock:
            inbox = self._idle.pop() if self._idle else None
        if inbox is None:
            inbox = queue.SimpleQueue()
            worker = threading.Thread(target=self._serve, args=(inbox,), daemon=True)
            worker.name = "statemachine-agent-tool"
            worker.start()
        inbox.put(job)

    def _serve(self, inbox: queue.SimpleQueue[Job]) -> None:
        while True:
            inbox.get()()
            with self._lock:
                if len(self._idle) >= self._max_idle:
                    return
                self._idle.append(inbox)
