"""A DBOS worker in a child process, for the scale-out tests.

Usage: python -m tests.support.scale_dbos DATABASE_URL EXECUTOR_ID [WORKER_CONCURRENCY]

It registers the test agents, launches DBOS on the shared system database under
the given executor id (recovering that executor's unfinished runs first), serves
the default queue and prints one JSON line once ready. It runs until SIGTERM,
then shuts DBOS down, or until it SIGKILLs itself in a crash test.
"""

from __future__ import annotations

import json
import signal
import sys
import threading

import tests.support.scale_agents as agents  # (registers the agents)
from statemachine_agent.effects import dbos


def main(argv: list[str]) -> None:
    url, executor = argv[0], argv[1]
    concurrency = int(argv[2]) if len(argv) > 2 else None
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    agents.export_spans()
    dbos.launch(
        dbos.dbos_config(url, executor_id=executor, application_version="scale-tests"),
        worker_concurrency=concurrency,
        polling_interval_sec=0.1,
        model_attempts=2,
    )
    print(json.dumps({"ready": executor}), flush=True)
    stop.wait()
    dbos.shutdown()
    print(json.dumps({"stopped": executor}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
