"""The `fork` command: a new run in a store from a transition of a recorded one.

It only creates the fork (`Agent.fork(..., start=False)`): the new run keeps the
original's recorded settings, its audit file (in `--audit-dir`) begins with the
original's events up to the fork point, and its id is printed for a host whose
agent has the model and tools to `resume` it. Nothing is driven here, so no model
is needed: the agent used to write the fork has a scripted model that is never
called. A refused fork point, an unknown run or a taken id is one line, exit 2.
"""

from __future__ import annotations

import argparse
from typing import Any

from statemachine_agent.cli.common import UsageError, add_key_option
from statemachine_agent.cli.store import open_store


def cmd_fork(args: argparse.Namespace) -> int:
    """Create the fork and print its run id."""
    from statemachine_agent.agent._fork import ForkPointError, create_fork
    from statemachine_agent.agent.core import Agent
    from statemachine_agent.audit.config import Audit
    from statemachine_agent.errors import Error
    from statemachine_agent.models.scripted import ScriptedModel

    store = open_store(args)
    try:
        writer = Agent(ScriptedModel([]), checkpointer=store, audit=Audit(dir=args.audit_dir))
        parts = writer._parts
        new_id = create_fork(parts, parts, args.run_id, args.at, new_run_id_=args.new_run_id,
                             prompt=args.prompt, changed=(),
                             recorded_settings=True)  # fmt: skip
    except ForkPointError as exc:
        raise UsageError(str(exc)) from None
    except (Error, ValueError, TypeError) as exc:
        said = exc.args[0] if exc.args and isinstance(exc.args[0], str) else str(exc)
        raise UsageError(f"fork: {said}") from None  # (a KeyError's str() is quoted)
    finally:
        store.close()
    print(new_id)
    return 0


def _seq(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a transition number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: transitions are counted from 1")
    return value


def add_command(sub: Any) -> None:
    """Register `fork` on the CLI's subcommand parser."""
    fork = sub.add_parser(
        "fork",
        help="create a run from a transition of a recorded run; prints the new run id",
        description="The new run's history is RUN_ID's up to transition SEQ (the seq of "
        "`inspect` and the report, from 1), in the state it entered; the original is not "
        "changed. Drive it with agent.resume(NEW_ID).",
    )
    fork.add_argument("--store", required=True, metavar="PATH|URL", help="SQLite file or URL")
    fork.add_argument("run_id", metavar="RUN_ID", help="the recorded run to fork")
    fork.add_argument("--at", required=True, type=_seq, metavar="SEQ",
                      help="the transition to fork at")  # fmt: skip
    fork.add_argument("--new-run-id", metavar="ID", help="the fork's id (default: a new one)")
    fork.add_argument("--prompt", help="replace the history's last user prompt")
    fork.add_argument("--audit-dir", default="audit",
                      help="where the runs' audit files are (default: audit)")  # fmt: skip
    add_key_option(fork)
    fork.set_defaults(func=cmd_fork)
