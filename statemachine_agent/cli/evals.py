"""`statemachine-agent eval EVAL_FILE.py`: evaluate loop policies from the command line.

The file is Python that defines, at module level, `dataset` (a `Dataset` or a list
of `Case`s), `variants` (a list of `Variant`s) and optionally `scorers`. Everything
goes under `--out`: `report.json`, `report.html`, the runs' audit files (`runs/`)
and the store of finished runs, so the same command after an interruption resumes
without running (or paying for) a finished run again.

Exit status: 0 when every planned run finished, 2 for bad input (a missing file, a
file without `dataset`/`variants`, bad values), and `COST_LIMIT_EXIT` (3, the exit
status of a run that ended `budget_exhausted`) when it stopped at `--max-cost-usd`;
the report then covers the runs it measured.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path
from typing import Any

from statemachine_agent.cli.common import UsageError
from statemachine_agent.machine.ends import EXIT_CODES

COST_LIMIT_EXIT = EXIT_CODES["budget_exhausted"]
"""The exit status of an evaluation stopped at `--max-cost-usd` (a limit was reached,
as for a run's `budget_exhausted`)."""


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be more than 0, not {text}")
    return value


def add_command(sub: Any) -> None:
    """Register `eval` on the CLI's subcommand parser."""
    command = sub.add_parser(
        "eval",
        help="evaluate loop policies: cases under several agent variants, compared",
        description=__doc__.split("\n\n", 1)[1] if __doc__ else None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    command.add_argument("file", metavar="EVAL_FILE.py", help="defines dataset, variants, scorers")
    command.add_argument(
        "--repeats",
        type=_positive_int,
        default=1,
        metavar="N",
        help="runs of each case under each variant (default: 1)",
    )
    command.add_argument(
        "--concurrency",
        type=_positive_int,
        default=4,
        metavar="N",
        help="runs at a time (default: 4)",
    )
    command.add_argument(
        "--max-cost-usd",
        type=_positive_float,
        default=None,
        metavar="USD",
        help=f"start no run once this much is spent; exit {COST_LIMIT_EXIT}",
    )
    command.add_argument(
        "--out",
        default="eval-out",
        metavar="DIR",
        help="report, audit files and the resume store (default: eval-out)",
    )
    command.add_argument("--json", action="store_true", help="print report.json, not the table")
    command.set_defaults(func=cmd_eval)


def load_eval_file(path: str) -> tuple[Any, list[Any], list[Any] | None]:
    """The file's `dataset`, `variants` and `scorers` (`None` when it has none)."""
    from statemachine_agent.evals import Dataset, Variant

    source = Path(path)
    if not source.is_file():
        raise UsageError(f"no such eval file: {path}")
    spec = importlib.util.spec_from_file_location(f"eval_file_{source.stem}", source)
    if spec is None or spec.loader is None:
        raise UsageError(f"cannot load {path} as Python")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses defined in the file look it up
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # the user's file: any error is theirs, named in one line
        raise UsageError(f"{path} failed to load: {type(exc).__name__}: {exc}") from exc
    missing = [name for name in ("dataset", "variants") if not hasattr(module, name)]
    if missing:
        raise UsageError(f"{path} defines no {' and no '.join(missing)} at module level")
    dataset = module.dataset
    if not isinstance(dataset, Dataset):
        dataset = Dataset(dataset)
    variants = list(module.variants)
    if not variants or not all(isinstance(v, Variant) for v in variants):
        raise UsageError(f"{path}: variants must be a non-empty list of Variant(name, agent)")
    scorers = getattr(module, "scorers", None)
    return dataset, variants, list(scorers) if scorers is not None else None


def cmd_eval(args: argparse.Namespace) -> int:
    from statemachine_agent.evals import EvalError, evaluate, write_html
    from statemachine_agent.private_files import make_private_dirs

    out = Path(args.out)
    try:
        dataset, variants, scorers = load_eval_file(args.file)
        make_private_dirs(out)
    except EvalError as exc:
        raise UsageError(f"{args.file}: {exc}") from exc
    except OSError as exc:
        raise UsageError(f"cannot use --out {out}: {exc.strerror or exc}") from exc
    progress = _progress_bar()
    try:
        report = evaluate(
            dataset,
            variants,
            scorers,
            repeats=args.repeats,
            concurrency=args.concurrency,
            max_cost_usd=args.max_cost_usd,
            out=out,
            progress=progress,
        )
    except EvalError as exc:
        raise UsageError(str(exc)) from exc
    finally:
        sys.stderr.write("\n")
    (out / "report.json").write_text(report.to_json(), encoding="utf-8")
    write_html(report, out / "report.html")
    sys.stdout.write(report.to_json() if args.json else report.table())
    if not args.json:
        sys.stdout.write(f"report: {out / 'report.html'}\n")
    return COST_LIMIT_EXIT if report.stopped == "cost_limit" else 0


def _progress_bar() -> Any:
    """A one-line bar on stderr, redrawn as runs finish."""

    def show(done: int, total: int) -> None:
        width = 30
        filled = width * done // total if total else width
        sys.stderr.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{total} runs")
        sys.stderr.flush()

    return show
