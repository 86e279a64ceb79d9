"""Running an evaluation: every case under every variant, `repeats` times, scored,
with its results kept so that an interrupted evaluation resumes where it stopped.

With `out`, each finished run's record (end state, scores, cost, counts) is written
to a small SQLite table under `out` (`evals.sqlite`) the moment it is scored, in one
transaction: a killed evaluation loses at most the runs that were in flight, and the
same call again skips every (variant, case, repeat) already there, so no finished
run is paid for twice. The store remembers which evaluation it holds (the cases,
the variants' and the scorers' names): another evaluation pointed at the same folder
is refused rather than mixed in.

Run ids are derived, not drawn: `<variant>.<case>.r<repeat>`, so a run's audit file
(`out/runs/<variant>/<run id>.jsonl`) has the same name in every evaluation.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import re
import sqlite3
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from statemachine_agent.agent.core import Agent
from statemachine_agent.evals.cases import Case, Dataset
from statemachine_agent.evals.errors import EvalError
from statemachine_agent.evals.report import Report, RunRecord
from statemachine_agent.evals.scorers import DEFAULT_SCORERS, Scorer
from statemachine_agent.machine.result import RunResult

VARIANT_NAME = re.compile(r"[A-Za-z0-9_-]{1,60}")
"""A variant's name: part of run ids and a folder name."""

STORE_FILE = "evals.sqlite"
"""The store's file name under `out`."""

Progress = Callable[[int, int], None]
"""Called with (runs finished, runs planned) as the evaluation goes."""


@dataclass(frozen=True, slots=True)
class Variant:
    """One configuration under evaluation: a name and an agent (usually
    `base.replace(...)` of one base agent, changing the policy being compared)."""

    name: str
    agent: Agent

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not VARIANT_NAME.fullmatch(self.name):
            raise EvalError(f"variant name {self.name!r} is not 1-60 letters, digits, '_' or '-'")
        if not isinstance(self.agent, Agent):
            raise EvalError(f"variant {self.name}: agent must be an Agent, not {self.agent!r}")


def run_id_of(variant: str, case: str, repeat: int) -> str:
    """The derived id of one run of the evaluation."""
    return f"{variant}.{case}.r{repeat}"


def evaluate(
    dataset: Dataset | Iterable[Case],
    variants: Sequence[Variant],
    scorers: Sequence[Scorer] | None = None,
    *,
    repeats: int = 1,
    concurrency: int = 4,
    max_cost_usd: float | None = None,
    out: str | os.PathLike[str] | None = None,
    progress: Progress | None = None,
) -> Report:
    """Run every case of `dataset` under every variant `repeats` times, score each run
    with `scorers` (default: the normalized answer), and report.

    At most `concurrency` runs at a time. Once the runs' cost (judges included)
    reaches `max_cost_usd`, no further run starts; the report says it stopped there
    (`report.stopped == "cost_limit"`) and covers what was measured (runs in flight
    finish, so the total can pass the limit by what they cost). With `out`, the runs'
    audit files go under it and finished runs are kept there, so the same call after
    an interruption resumes (see the module's docstring).
    """
    return asyncio.run(
        aevaluate(
            dataset,
            variants,
            scorers,
            repeats=repeats,
            concurrency=concurrency,
            max_cost_usd=max_cost_usd,
            out=out,
            progress=progress,
        )
    )


async def aevaluate(
    dataset: Dataset | Iterable[Case],
    variants: Sequence[Variant],
    scorers: Sequence[Scorer] | None = None,
    *,
    repeats: int = 1,
    concurrency: int = 4,
    max_cost_usd: float | None = None,
    out: str | os.PathLike[str] | None = None,
    progress: Progress | None = None,
) -> Report:
    """`evaluate`, on the running event loop."""
    data = dataset if isinstance(dataset, Dataset) else Dataset(dataset)
    variants = tuple(variants)
    chosen = tuple(DEFAULT_SCORERS if scorers is None else scorers)
    _check(variants, chosen, repeats, concurrency, max_cost_usd)
    folder = Path(out) if out is not None else None
    store = _Store(folder, _fingerprint(data, variants, chosen)) if folder else None
    done: dict[tuple[str, str, int], RunRecord] = store.load() if store else {}
    agents = {
        v.name: v.agent.replace(
            checkpointer=False, **({"audit": folder / "runs" / v.name} if folder else {})
        )
        for v in variants
    }
    plan = [(v.name, case, repeat) for v in variants for case in data for repeat in range(repeats)]
    spent = sum(r.cost_usd + r.judge_cost_usd for r in done.values())
    stopped: str | None = None
    gate = asyncio.Semaphore(concurrency)
    lock = asyncio.Lock()
    finished = len([k for k in done if k in {(v, c.id, r) for v, c, r in plan}])
    if progress:
        progress(finished, len(plan))

    async def one(variant: str, case: Case, repeat: int) -> None:
        nonlocal spent, stopped, finished
        async with gate:
            if max_cost_usd is not None and spent >= max_cost_usd:
                stopped = "cost_limit"
                return
            run_id = run_id_of(variant, case.id, repeat)
            if folder:  # a run cut short by a kill left a partial audit file: start afresh
                (folder / "runs" / variant / f"{run_id}.jsonl").unlink(missing_ok=True)
            result = await agents[variant].arun(case.message, history=case.history, run_id=run_id)
            scores = tuple([await s.score(case, result) for s in chosen])
            record = _record(variant, case, repeat, result, scores, folder)
            async with lock:
                spent += record.cost_usd + record.judge_cost_usd
                done[(variant, case.id, repeat)] = record
                if store:
                    store.save(record)
                finished += 1
                if progress:
                    progress(finished, len(plan))

    try:
        await asyncio.gather(*(one(v, c, r) for v, c, r in plan if (v, c.id, r) not in done))
    finally:
        if store:
            store.close()
    order = {key: i for i, key in enumerate((v, c.id, r) for v, c, r in plan)}
    runs = tuple(
        sorted(
            (r for k, r in done.items() if k in order),
            key=lambda r: order[(r.variant, r.case, r.repeat)],
        )
    )
    if stopped is None and max_cost_usd is not None and len(runs) < len(plan):
        stopped = "cost_limit"
    return Report(
        dataset=data.name,
        cases=tuple(c.id for c in data),
        variants=tuple(v.name for v in variants),
        scorers=tuple(s.name for s in chosen),
        repeats=repeats,
        runs=runs,
        stopped=stopped,
        max_cost_usd=max_cost_usd,
        out=str(folder) if folder else None,
    )


def _check(
    variants: Sequence[Variant],
    scorers: Sequence[Scorer],
    repeats: int,
    concurrency: int,
    max_cost_usd: float | None,
) -> None:
    if not variants:
        raise EvalError("an evaluation needs at least one variant")
    names = [v.name for v in variants]
    if len(set(names)) != len(names):
        raise EvalError(f"variant names must be unique, got {names}")
    for variant in variants:
        if not isinstance(variant, Variant):
            raise EvalError(f"variants must be Variant(name, agent), not {variant!r}")
    scorer_names = [getattr(s, "name", None) for s in scorers]
    if any(not isinstance(n, str) or not n for n in scorer_names):
        raise EvalError("every scorer needs a name and an async score(case, result)")
    if len(set(scorer_names)) != len(scorer_names):
        raise EvalError(f"scorer names must be unique, got {scorer_names}")
    if not isinstance(repeats, int) or repeats < 1:
        raise EvalError(f"repeats must be at least 1, not {repeats!r}")
    if not isinstance(concurrency, int) or concurrency < 1:
        raise EvalError(f"concurrency must be at least 1, not {concurrency!r}")
    if max_cost_usd is not None and not max_cost_usd > 0:
        raise EvalError(f"max_cost_usd must be more than 0, not {max_cost_usd!r}")


def _record(
    variant: str,
    case: Case,
    repeat: int,
    result: RunResult,
    scores: tuple[object, ...],
    folder: Path | None,
) -> RunRecord:
    trail = result.trail
    audit = None
    if result.audit_path is not None:
        path = Path(result.audit_path)
        audit = (
            str(path.relative_to(folder)) if folder and path.is_relative_to(folder) else str(path)
        )
    return RunRecord(
        variant=variant,
        case=case.id,
        repeat=repeat,
        run_id=result.run_id,
        end_state=result.end_state,
        reason=result.reason,
        scores=scores,  # type: ignore[arg-type]
        cost_usd=result.cost_usd,
        tokens=result.usage.total_tokens,
        iterations=result.iterations,
        elapsed_s=result.elapsed_s,
        interventions=sum(1 for t in trail if t.dest == "intervene"),
        reflections=sum(1 for t in trail if t.dest == "reflect"),
        rejections=sum(
            1 for t in trail if t.source == "verify" and t.dest in ("perceive", "failed")
        ),
        audit=audit,
    )


def _fingerprint(data: Dataset, variants: Sequence[Variant], scorers: Sequence[Scorer]) -> str:
    """What identifies an evaluation in its store: the cases, variant and scorer names."""
    body = json.dumps(
        {
            "cases": [c.to_dict() for c in data],
            "variants": [v.name for v in variants],
            "scorers": [s.name for s in scorers],
        },
        sort_keys=True,
        default=str,
    )
    return hashlib.sha256(body.encode("utf-8")).hexdigest()


class _Store:
    """Finished runs' records under `out`, one committed row per run."""

    def __init__(self, folder: Path, fingerprint: str) -> None:
        from statemachine_agent.private_files import make_private_dirs

        make_private_dirs(folder)
        self._db = sqlite3.connect(folder / STORE_FILE, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT)")
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS results (variant TEXT, case_id TEXT, repeat INTEGER, "
            "record TEXT, PRIMARY KEY (variant, case_id, repeat))"
        )
        row = self._db.execute("SELECT value FROM meta WHERE key = 'fingerprint'").fetchone()
        if row is None:
            self._db.execute("INSERT INTO meta VALUES ('fingerprint', ?)", (fingerprint,))
        elif row[0] != fingerprint:
            self._db.close()
            raise EvalError(
                f"{folder} holds the results of another evaluation (other cases, variants "
                "or scorers); give a fresh out folder, or delete that one"
            )

    def load(self) -> dict[tuple[str, str, int], RunRecord]:
        rows = self._db.execute("SELECT record FROM results").fetchall()
        records = (RunRecord.from_dict(json.loads(r[0])) for r in rows)
        return {(r.variant, r.case, r.repeat): r for r in records}

    def save(self, record: RunRecord) -> None:
        self._db.execute(
            "INSERT OR REPLACE INTO results VALUES (?, ?, ?, ?)",
            (record.variant, record.case, record.repeat, json.dumps(record.to_dict())),
        )

    def close(self) -> None:
        self._db.close()
