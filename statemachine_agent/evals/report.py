"""What an evaluation found: per run, per variant, and per pair of variants.

The report is built from the finished runs' records alone (`RunRecord`), which is
also what the store under `out` keeps, so a resumed evaluation reports exactly what
an uninterrupted one would. Everything in it is a function of the dataset, the
variants' behaviour and the seed, except the fields listed in `VOLATILE` (wall
times and file paths): `to_dict(volatile=False)` leaves those out, and two
evaluations of a deterministic model then give equal JSON.
"""

from __future__ import annotations

import json
import math
import random
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from statemachine_agent.evals.scorers import Score
from statemachine_agent.machine.ends import END_STATES
from statemachine_agent.models.base import JSON

VOLATILE: tuple[str, ...] = (
    "out",
    "runs[].elapsed_s",
    "runs[].audit",
    "variants[].wall_s",
)
"""The report's fields that differ between two evaluations of the same thing: the
folder written to, each run's wall time and audit file, and the wall-time figures."""

BOOTSTRAP_SAMPLES = 2000
"""Resamples of the paired differences for a comparison's confidence interval."""


@dataclass(frozen=True, slots=True)
class RunRecord:
    """One finished run of one case under one variant (what the store keeps)."""

    variant: str
    case: str
    repeat: int
    run_id: str
    end_state: str
    reason: str
    scores: tuple[Score, ...]
    cost_usd: float
    tokens: int
    iterations: int
    elapsed_s: float
    interventions: int
    reflections: int
    rejections: int
    audit: str | None = None

    @property
    def success(self) -> bool:
        """Every scorer that applies passed (a run no scorer applies to passes)."""
        return all(s.passed for s in self.scores if s.passed is not None)

    @property
    def judge_cost_usd(self) -> float:
        return sum(s.cost_usd for s in self.scores)

    def to_dict(self, volatile: bool = True) -> JSON:
        data: JSON = {
            "variant": self.variant,
            "case": self.case,
            "repeat": self.repeat,
            "run_id": self.run_id,
            "end_state": self.end_state,
            "reason": self.reason,
            "success": self.success,
            "scores": [s.to_dict() for s in self.scores],
            "cost_usd": round(self.cost_usd, 8),
            "tokens": self.tokens,
            "iterations": self.iterations,
            "interventions": self.interventions,
            "reflections": self.reflections,
            "rejections": self.rejections,
        }
        if volatile:
            data["elapsed_s"] = round(self.elapsed_s, 4)
            data["audit"] = self.audit
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RunRecord:
        return cls(
            variant=data["variant"],
            case=data["case"],
            repeat=data["repeat"],
            run_id=data["run_id"],
            end_state=data["end_state"],
            reason=data["reason"],
            scores=tuple(Score.from_dict(s) for s in data["scores"]),
            cost_usd=data["cost_usd"],
            tokens=data["tokens"],
            iterations=data["iterations"],
            elapsed_s=data.get("elapsed_s", 0.0),
            interventions=data["interventions"],
            reflections=data["reflections"],
            rejections=data["rejections"],
            audit=data.get("audit"),
        )


def quantile(values: Sequence[float], q: float) -> float:
    """The `q` quantile by linear interpolation (numpy's default); 0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    at = (len(ordered) - 1) * q
    low = math.floor(at)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (at - low)


def _spread(values: Sequence[float], digits: int = 6) -> JSON:
    return {
        "total": round(sum(values), digits),
        "median": round(quantile(values, 0.5), digits),
        "p90": round(quantile(values, 0.9), digits),
    }


@dataclass(frozen=True, slots=True)
class VariantSummary:
    """How one variant's runs went."""

    name: str
    runs: tuple[RunRecord, ...]

    @property
    def success_rate(self) -> float:
        return sum(r.success for r in self.runs) / len(self.runs) if self.runs else 0.0

    def scorer_rates(self, scorers: Sequence[str]) -> dict[str, float | None]:
        """Per scorer, the share of runs it passed among those it applied to."""
        rates: dict[str, float | None] = {}
        for name in scorers:
            verdicts = [s.passed for r in self.runs for s in r.scores if s.scorer == name]
            applied = [v for v in verdicts if v is not None]
            rates[name] = round(sum(applied) / len(applied), 6) if applied else None
        return rates

    def to_dict(self, scorers: Sequence[str], volatile: bool = True) -> JSON:
        ends = Counter(r.end_state for r in self.runs)
        data: JSON = {
            "name": self.name,
            "runs": len(self.runs),
            "success_rate": round(self.success_rate, 6),
            "by_scorer": self.scorer_rates(scorers),
            "end_states": {s: ends[s] for s in END_STATES if ends[s]},
            "cost_usd": _spread([r.cost_usd for r in self.runs], 8),
            "judge_cost_usd": round(sum(r.judge_cost_usd for r in self.runs), 8),
            "tokens": _spread([float(r.tokens) for r in self.runs], 1),
            "iterations": _spread([float(r.iterations) for r in self.runs], 2),
            "interventions": sum(r.interventions for r in self.runs),
            "reflections": sum(r.reflections for r in self.runs),
            "rejections": sum(r.rejections for r in self.runs),
        }
        if volatile:
            data["wall_s"] = _spread([r.elapsed_s for r in self.runs], 4)
        return data


@dataclass(frozen=True, slots=True)
class Comparison:
    """Variant `b` against `a` on the runs both finished (same case, same repeat).

    `difference` is b's success rate minus a's over those pairs, and `low`/`high`
    its bootstrap confidence interval (percentiles of `BOOTSTRAP_SAMPLES` resamples
    of the pairs, drawn from a fixed seed, so the interval is reproducible)."""

    a: str
    b: str
    pairs: int
    rate_a: float
    rate_b: float
    difference: float
    low: float
    high: float
    confidence: float
    changed: tuple[JSON, ...]
    """The pairs whose outcome differs, with each side's scorers' verdicts."""

    def to_dict(self) -> JSON:
        return {
            "a": self.a,
            "b": self.b,
            "pairs": self.pairs,
            "success_rate_a": round(self.rate_a, 6),
            "success_rate_b": round(self.rate_b, 6),
            "difference": round(self.difference, 6),
            "ci": [round(self.low, 6), round(self.high, 6)],
            "confidence": self.confidence,
            "changed": list(self.changed),
        }


def compare(
    a: str,
    b: str,
    runs: Iterable[RunRecord],
    *,
    seed: int = 0,
    confidence: float = 0.95,
    samples: int = BOOTSTRAP_SAMPLES,
) -> Comparison:
    """The paired comparison of variants `a` and `b` (see `Comparison`)."""
    by_key: dict[tuple[str, int], dict[str, RunRecord]] = {}
    for run in runs:
        if run.variant in (a, b):
            by_key.setdefault((run.case, run.repeat), {})[run.variant] = run
    pairs = [(k, v[a], v[b]) for k, v in sorted(by_key.items()) if a in v and b in v]
    diffs = [int(rb.success) - int(ra.success) for _, ra, rb in pairs]
    n = len(diffs)
    if n == 0:
        return Comparison(a, b, 0, 0.0, 0.0, 0.0, 0.0, 0.0, confidence, ())
    rng = random.Random(seed)
    means = sorted(sum(rng.choices(diffs, k=n)) / n for _ in range(samples))
    tail = (1 - confidence) / 2
    changed = tuple(
        {
            "case": case,
            "repeat": repeat,
            a: {"success": ra.success, "scores": {s.scorer: s.passed for s in ra.scores}},
            b: {"success": rb.success, "scores": {s.scorer: s.passed for s in rb.scores}},
        }
        for (case, repeat), ra, rb in pairs
        if ra.success != rb.success
    )
    return Comparison(
        a=a,
        b=b,
        pairs=n,
        rate_a=sum(r.success for _, r, _ in pairs) / n,
        rate_b=sum(r.success for _, _, r in pairs) / n,
        difference=sum(diffs) / n,
        low=quantile(means, tail),
        high=quantile(means, 1 - tail),
        confidence=confidence,
        changed=changed,
    )


@dataclass(frozen=True, slots=True)
class Report:
    """An evaluation's findings (see the module's docstring for what is reproducible)."""

    dataset: str
    cases: tuple[str, ...]
    variants: tuple[str, ...]
    scorers: tuple[str, ...]
    repeats: int
    runs: tuple[RunRecord, ...]
    stopped: str | None = None
    """`"cost_limit"` when the evaluation stopped at `max_cost_usd`; else `None`."""
    max_cost_usd: float | None = None
    out: str | None = None

    @property
    def planned(self) -> int:
        return len(self.cases) * len(self.variants) * self.repeats

    @property
    def complete(self) -> bool:
        return len(self.runs) == self.planned

    @property
    def cost_usd(self) -> float:
        """What the runs cost, judges included."""
        return sum(r.cost_usd + r.judge_cost_usd for r in self.runs)

    def summary(self, variant: str) -> VariantSummary:
        return VariantSummary(variant, tuple(r for r in self.runs if r.variant == variant))

    def comparisons(self) -> list[Comparison]:
        """Every later variant against every earlier one (the first is the baseline)."""
        return [
            compare(a, b, self.runs)
            for i, a in enumerate(self.variants)
            for b in self.variants[i + 1 :]
        ]

    def to_dict(self, volatile: bool = True) -> JSON:
        data: JSON = {
            "dataset": self.dataset,
            "cases": len(self.cases),
            "variants": [self.summary(v).to_dict(self.scorers, volatile) for v in self.variants],
            "scorers": list(self.scorers),
            "repeats": self.repeats,
            "planned_runs": self.planned,
            "finished_runs": len(self.runs),
            "complete": self.complete,
            "stopped": self.stopped,
            "max_cost_usd": self.max_cost_usd,
            "cost_usd": round(self.cost_usd, 8),
            "comparisons": [c.to_dict() for c in self.comparisons()],
            "runs": [r.to_dict(volatile) for r in self.runs],
            "volatile": list(VOLATILE),
        }
        if volatile:
            data["out"] = self.out
        return data

    def to_json(self, volatile: bool = True) -> str:
        return json.dumps(self.to_dict(volatile), indent=2, sort_keys=False) + "\n"

    def table(self) -> str:
        """The per-variant figures and the comparisons as a plain-text table."""
        rows = [
            (
                "variant",
                "runs",
                "success",
                "cost $",
                "median $",
                "p90 iter",
                "stalls",
                "reflect",
                "rejects",
                "end states",
            )
        ]
        for name in self.variants:
            s = self.summary(name)
            d = s.to_dict(self.scorers, volatile=False)
            ends = ", ".join(f"{k} {v}" for k, v in d["end_states"].items())
            rows.append(
                (
                    name,
                    str(d["runs"]),
                    f"{d['success_rate']:.0%}",
                    f"{d['cost_usd']['total']:.4f}",
                    f"{d['cost_usd']['median']:.4f}",
                    f"{d['iterations']['p90']:g}",
                    str(d["interventions"]),
                    str(d["reflections"]),
                    str(d["rejections"]),
                    ends,
                )
            )
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        lines = [
            "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows
        ]
        lines.insert(1, "  ".join("-" * w for w in widths))
        for c in self.comparisons():
            lines.append(
                f"{c.b} vs {c.a}: success {c.rate_b:.0%} vs {c.rate_a:.0%}, difference "
                f"{c.difference:+.0%} ({c.confidence:.0%} CI {c.low:+.0%} to {c.high:+.0%}), "
                f"{len(c.changed)} of {c.pairs} pairs changed outcome"
            )
        if self.stopped == "cost_limit":
            lines.append(
                f"stopped at the cost limit (${self.max_cost_usd}): {len(self.runs)} of "
                f"{self.planned} runs measured"
            )
        return "\n".join(lines) + "\n"
