"""The `runs` and `prune` commands: what a checkpoint store holds, and keeping it small.

`--store` is an SQLite file or a PostgreSQL URL (`postgresql://...`). A store
that cannot be read is one line naming the store, run and checkpoint, exit 2.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any

from statemachine_agent.cli.common import UsageError, add_key_option, encryption_keys

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def duration(text: str) -> float:
    """`30d`, `12h`, `45m`, `90s` or `2w` in seconds, for `--older-than`."""
    found = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*", text)
    if found is None:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a duration like 30d, 12h, 45m, 90s or 2w"
        )
    return float(found.group(1)) * _UNITS[found.group(2)]


def open_store(args: argparse.Namespace) -> Any:
    """The store `--store` names; a missing SQLite file is an error, not a new store, and
    one another user owns or others may write is refused (`UnsafeStoreError`)."""
    from statemachine_agent.persistence import (
        PostgresCheckpointer,
        SQLiteCheckpointer,
        UnsafeStoreError,
    )
    from statemachine_agent.persistence.postgres import masked

    target: str = args.store
    shown = masked(target, target)  # a URL's password is never printed
    keys = encryption_keys(args)
    try:
        if target.lower().startswith(("postgresql://", "postgres://")):
            return PostgresCheckpointer(target, encryption_key=keys)
        if not Path(target).is_file():
            raise UsageError(f"no store at {shown}")
        return SQLiteCheckpointer(target, encryption_key=keys)
    except UnsafeStoreError as exc:  # it names the file, its owner and mode, and the fix
        raise UsageError(_one_line(str(exc))) from None
    except (ImportError, ValueError, OSError) as exc:
        raise UsageError(
            _one_line(f"cannot open store {shown}: {masked(str(exc), target)}")
        ) from None
    except Exception as exc:
        if type(exc).__module__.startswith("psycopg"):  # server down, bad URL, no access
            raise UsageError(
                _one_line(f"cannot open store {shown}: {masked(str(exc), target)}")
            ) from None
        raise


def _one_line(text: str) -> str:
    """An error for the terminal: one line, whatever the driver's message spans."""
    return " ".join(text.split())


def metadata_pair(text: str) -> tuple[str, str]:
    """`key=value` for `--metadata` (the value may itself hold `=`)."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"{text!r} is not key=value")
    return key.strip(), value


def cmd_runs(args: argparse.Namespace) -> int:
    """List the runs of a store: id, state, model calls, cost, last update, metadata, driver."""
    import json

    from statemachine_agent.persistence.base import stamp

    wanted = dict(args.metadata or [])
    store = open_store(args)
    try:
        runs = store.runs(metadata=wanted) if wanted else store.runs()
        origins = _origins(store, [r.run_id for r in runs])
    finally:
        store.close()
    if not runs:
        print("(no runs)")
        return 0
    # Every column has a header and every cell a value (`-` for none), so the listing
    # reads (and splits) the same whatever a row holds; the metadata, the widest, is last.
    width = max(len(r.run_id) for r in runs)
    drivers = [r.lease_owner or "-" for r in runs]
    stamps = [stamp(r.updated_at) for r in runs]
    driven = max(len("DRIVER"), *map(len, drivers))
    updated = max(len("LAST UPDATE"), *map(len, stamps))
    forked = max(len("ORIGIN"), *map(len, origins))
    print(
        f"{'RUN':<{width}}  {'STATE':<17} {'ITER':>5} {'COST USD':>10}  "
        f"{'LAST UPDATE':<{updated}}  {'DRIVER':<{driven}}  {'ORIGIN':<{forked}}  METADATA"
    )
    for r, driver, when, origin in zip(runs, drivers, stamps, origins, strict=True):
        meta = json.dumps(r.metadata, ensure_ascii=False, sort_keys=True) if r.metadata else "-"
        print(
            f"{r.run_id:<{width}}  {r.state:<17} {r.iterations:>5} {r.cost_usd:>10.4f}  "
            f"{when:<{updated}}  {driver:<{driven}}  {origin:<{forked}}  {meta}"
        )
    return 0


def _origins(store: Any, run_ids: list[str]) -> list[str]:
    """Each run's origin as `RUN@SEQ` for a fork (`Agent.fork`: the run and transition
    it was forked from, as its record names them), `-` for any other run. The record
    is the only place that says so, so each listed run's record is read."""
    from statemachine_agent.persistence.base import load_record

    found = [load_record(store, run_id).forked_from for run_id in run_ids]
    return [f"{f['run_id']}@{f['seq']}" if f else "-" for f in found]


def cmd_prune(args: argparse.Namespace) -> int:
    """Delete the runs last updated longer ago than --older-than (only in --state, if given)."""
    store = open_store(args)
    try:
        gone = store.prune(older_than=args.older_than, states=args.state or None)
    finally:
        store.close()
    print(f"Pruned {len(gone)} run{'s' if len(gone) != 1 else ''}.")
    return 0


def add_commands(sub: Any) -> None:
    """Register `runs` and `prune` on the CLI's subcommand parser."""
    store = argparse.ArgumentParser(add_help=False)
    store.add_argument("--store", required=True, metavar="PATH|URL", help="SQLite file or URL")
    add_key_option(store)
    runs = sub.add_parser("runs", parents=[store], help="list the runs in a checkpoint store")
    runs.add_argument(
        "--metadata",
        action="append",
        type=metadata_pair,
        metavar="KEY=VALUE",
        help="only runs whose metadata has KEY=VALUE (repeatable: all must match)",
    )
    runs.set_defaults(func=cmd_runs)
    prune = sub.add_parser("prune", parents=[store], help="delete old runs from a store")
    prune.add_argument("--older-than", type=duration, required=True, metavar="AGE",
                       help="e.g. 30d, 12h, 45m")  # fmt: skip
    prune.add_argument("--state", action="append", metavar="STATE",
                       help="only runs in this state (repeatable)")  # fmt: skip
    prune.set_defaults(func=cmd_prune)
