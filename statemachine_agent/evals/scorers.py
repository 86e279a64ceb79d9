"""Scorers: whether one run of one case did what the case asks, each with its reasons.

A scorer is any object with a `name` and an `async score(case, result) -> Score`.
A case passes when every scorer that applies to it passes; a scorer with nothing to
compare (no expected answer, no reference trajectory) answers `passed=None` and is
left out of the case's verdict and of its own success rate, so a dataset can mix
cases with and without references.

The trajectory scorers read the run's tool calls (every `tool_use` block of its
history, in order) against the case's reference. A reference call is a tool name
(any call of that tool matches it) or `{"name", "input"}` (that call exactly, by
canonical JSON, when arguments are compared). Repeated tool names are matched
optimally: the pairing of run calls with reference calls is a maximum bipartite
matching, not a first-come greedy one, so a name-only reference never takes the one
call an exact reference needed.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

from statemachine_agent.evals.cases import Case, ToolCallRef, fields_of
from statemachine_agent.evals.errors import EvalError
from statemachine_agent.machine.result import RunResult
from statemachine_agent.models.base import JSON, Model, ModelRequest


@dataclass(frozen=True, slots=True)
class Score:
    """One scorer's verdict on one run: pass/fail (`None`: not applicable), a value
    in [0, 1] (an F1, a share of fields), what it found, and what judging cost."""

    scorer: str
    passed: bool | None
    value: float
    detail: str = ""
    cost_usd: float = 0.0

    def to_dict(self) -> JSON:
        return {
            "scorer": self.scorer,
            "passed": self.passed,
            "value": round(self.value, 6),
            "detail": self.detail,
            "cost_usd": round(self.cost_usd, 8),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Score:
        return cls(data["scorer"], data["passed"], data["value"], data["detail"], data["cost_usd"])


@runtime_checkable
class Scorer(Protocol):
    """What `evaluate` calls on each finished run."""

    @property
    def name(self) -> str:
        """Unique within an evaluation: the report's column."""
        ...

    async def score(self, case: Case, result: RunResult) -> Score: ...


def _not_applicable(name: str, why: str) -> Score:
    return Score(name, None, 0.0, why)


# -- answers -------------------------------------------------------------------------


def normalize(text: str) -> str:
    """Case, accents' composition, surrounding punctuation and runs of white space
    do not count: `"  The answer is 42. "` and `"the answer is 42"` are equal."""
    text = unicodedata.normalize("NFKC", text).casefold()
    text = re.sub(r"\s+", " ", text).strip()
    return text.strip(" .,;:!?\"'`")


@dataclass(frozen=True, slots=True)
class AnswerMatch:
    """The run's answer text equals the case's expected text (normalized, or exactly)."""

    normalized: bool = True
    contains: bool = False
    """Pass when the expected text appears anywhere in the answer."""
    name: str = "answer"

    async def score(self, case: Case, result: RunResult) -> Score:
        if not isinstance(case.expected, str):
            return _not_applicable(self.name, "the case expects no text answer")
        got, want = result.text, case.expected
        if self.normalized:
            got, want = normalize(got), normalize(want)
        ok = want in got if self.contains else got == want
        detail = "" if ok else f"expected {case.expected!r}, got {result.text[:200]!r}"
        return Score(self.name, ok, 1.0 if ok else 0.0, detail)


def answer_match(*, normalized: bool = True, contains: bool = False) -> AnswerMatch:
    """An `AnswerMatch` scorer (see its fields)."""
    return AnswerMatch(normalized=normalized, contains=contains)


@dataclass(frozen=True, slots=True)
class Predicate:
    """Any test of the `RunResult` (an end state, a cost ceiling, a phrase)."""

    test: Callable[[RunResult], bool]
    name: str

    async def score(self, case: Case, result: RunResult) -> Score:
        ok = bool(self.test(result))
        return Score(self.name, ok, 1.0 if ok else 0.0, "" if ok else "predicate false")


def predicate(test: Callable[[RunResult], bool], name: str | None = None) -> Predicate:
    """A `Predicate` scorer, named after the function unless `name` is given."""
    return Predicate(test, name or str(getattr(test, "__name__", "predicate")))


@dataclass(frozen=True, slots=True)
class OutputFields:
    """The run's typed output compared with the expected one field by field; `value`
    is the share of fields that match, the first differing field is named."""

    fields: tuple[str, ...] | None = None
    """Only these fields (default: every field of the expected value)."""
    name: str = "output"

    async def score(self, case: Case, result: RunResult) -> Score:
        if case.expected is None or isinstance(case.expected, str):
            return _not_applicable(self.name, "the case expects no typed output")
        want = fields_of(case.expected)
        if not isinstance(want, dict):
            return _not_applicable(self.name, "the expected value has no fields")
        got_value = result.output if result.output is not None else result.data
        got = fields_of(got_value) if got_value is not None else {}
        names = list(self.fields) if self.fields is not None else list(want)
        if not names:
            return Score(self.name, True, 1.0)
        wrong = [n for n in names if not isinstance(got, dict) or got.get(n) != want.get(n)]
        value = 1 - len(wrong) / len(names)
        if not wrong:
            return Score(self.name, True, 1.0)
        first = wrong[0]
        found = got.get(first) if isinstance(got, dict) else None
        return Score(
            self.name,
            False,
            value,
            f"field {first!r}: expected {want.get(first)!r}, got {found!r}"
            + (f" (and {len(wrong) - 1} more)" if len(wrong) > 1 else ""),
        )


def output_fields(fields: Sequence[str] | None = None) -> OutputFields:
    """An `OutputFields` scorer over `fields` (default: all the expected value's)."""
    return OutputFields(tuple(fields) if fields is not None else None)


# -- trajectories --------------------------------------------------------------------


def tool_calls(result: RunResult) -> list[JSON]:
    """The run's tool calls in order, as `{"name", "input"}`."""
    return [
        {"name": block.get("name"), "input": block.get("input") or {}}
        for message in result.messages
        if message.get("role") == "assistant" and isinstance(message.get("content"), list)
        for block in message["content"]
        if isinstance(block, dict) and block.get("type") == "tool_use"
    ]


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def _matches(reference: ToolCallRef, call: Mapping[str, Any], args: bool) -> bool:
    """Whether a run call satisfies a reference call (a bare name: any of its calls)."""
    if isinstance(reference, str):
        return call.get("name") == reference
    if call.get("name") != reference.get("name"):
        return False
    if not args or "input" not in reference:
        return True
    return _canonical(call.get("input") or {}) == _canonical(reference.get("input") or {})


def matching(
    reference: Sequence[ToolCallRef], calls: Sequence[Mapping[str, Any]], args: bool = True
) -> dict[int, int]:
    """A maximum matching of reference calls to run calls (reference index -> call
    index), found by augmenting paths (Kuhn's algorithm; trajectories are short)."""
    edges = [[j for j, c in enumerate(calls) if _matches(r, c, args)] for r in reference]
    owner: dict[int, int] = {}  # call index -> reference index

    def augment(i: int, seen: set[int]) -> bool:
        for j in edges[i]:
            if j in seen:
                continue
            seen.add(j)
            if j not in owner or augment(owner[j], seen):
                owner[j] = i
                return True
        return False

    for i in range(len(reference)):
        augment(i, set())
    return {i: j for j, i in owner.items()}


def _describe(reference: ToolCallRef) -> str:
    if isinstance(reference, str):
        return reference
    return f"{reference.get('name')}({_canonical(reference.get('input') or {})})"


TrajectoryMode = Literal["exact", "unordered", "ordered", "subset", "superset"]


@dataclass(frozen=True, slots=True)
class Trajectory:
    """The run's tool calls against the case's reference, by `mode`:

    - `exact`: the same calls in the same order;
    - `unordered`: the same calls as multisets (order does not matter);
    - `ordered`: the reference calls appear in the run in order (others may come between);
    - `subset`: every call of the run is in the reference (nothing uncalled-for);
    - `superset`: every reference call is in the run (nothing missing).
    """

    mode: TrajectoryMode = "unordered"
    args: bool = True
    """Compare arguments too (a reference given as a bare name never does)."""
    name: str = ""

    def __post_init__(self) -> None:
        if self.mode not in ("exact", "unordered", "ordered", "subset", "superset"):
            raise EvalError(f"unknown trajectory mode {self.mode!r}")
        if not self.name:
            object.__setattr__(self, "name", f"trajectory_{self.mode}")

    async def score(self, case: Case, result: RunResult) -> Score:
        if case.trajectory is None:
            return _not_applicable(self.name, "the case has no reference trajectory")
        ref, calls = case.trajectory, tool_calls(result)
        if self.mode == "ordered" or self.mode == "exact":
            position, missing = 0, None
            for r in ref:  # greedy leftmost matching is optimal for a subsequence
                while position < len(calls) and not _matches(r, calls[position], self.args):
                    position += 1
                if position == len(calls):
                    missing = r
                    break
                position += 1
            ok = missing is None and (self.mode == "ordered" or len(calls) == len(ref))
            if missing is not None:
                return Score(self.name, False, 0.0, f"missing in order: {_describe(missing)}")
            if not ok:
                return Score(self.name, False, 0.0, f"{len(calls)} calls, reference has {len(ref)}")
            return Score(self.name, True, 1.0)
        pairs = matching(ref, calls, self.args)
        unmatched_ref = [r for i, r in enumerate(ref) if i not in pairs]
        used = set(pairs.values())
        extra = [c for j, c in enumerate(calls) if j not in used]
        if self.mode == "subset":
            problem = f"not in the reference: {_describe(extra[0])}" if extra else ""
        elif self.mode == "superset":
            problem = f"missing: {_describe(unmatched_ref[0])}" if unmatched_ref else ""
        else:
            problem = (
                f"missing: {_describe(unmatched_ref[0])}"
                if unmatched_ref
                else f"not in the reference: {_describe(extra[0])}"
                if extra
                else ""
            )
        return Score(self.name, not problem, 0.0 if problem else 1.0, problem)


def trajectory(mode: TrajectoryMode = "unordered", *, args: bool = True) -> Trajectory:
    """A `Trajectory` scorer (see its modes)."""
    return Trajectory(mode, args)


@dataclass(frozen=True, slots=True)
class ToolF1:
    """Tool-call precision (share of the run's calls in the reference), recall (share of
    the reference called) and their F1, over names and, with `args`, arguments; passes
    at `threshold` (F1), and names the first reference call the run missed."""

    args: bool = False
    threshold: float = 1.0
    name: str = "tool_f1"

    async def score(self, case: Case, result: RunResult) -> Score:
        if case.trajectory is None:
            return _not_applicable(self.name, "the case has no reference trajectory")
        ref, calls = case.trajectory, tool_calls(result)
        if not ref and not calls:
            return Score(self.name, True, 1.0, "precision 1.00, recall 1.00")
        pairs = matching(ref, calls, self.args)
        hit = len(pairs)
        precision = hit / len(calls) if calls else 0.0
        recall = hit / len(ref) if ref else 0.0
        f1 = 2 * precision * recall / (precision + recall) if hit else 0.0
        detail = f"precision {precision:.2f}, recall {recall:.2f}"
        missed = next((r for i, r in enumerate(ref) if i not in pairs), None)
        if missed is not None:
            detail += f"; first miss: {_describe(missed)}"
        return Score(self.name, f1 >= self.threshold - 1e-12, f1, detail)


def tool_f1(*, args: bool = False, threshold: float = 1.0) -> ToolF1:
    """A `ToolF1` scorer."""
    if not 0.0 <= threshold <= 1.0:
        raise EvalError(f"threshold must be in [0, 1], not {threshold}")
    return ToolF1(args, threshold)


# -- a model as judge ----------------------------------------------------------------

JUDGE_PROMPT = (
    "You grade an assistant's answer. Reply with PASS or FAIL on the first line, then "
    "one sentence why.\n\nCriteria: {rubric}\n\nQuestion:\n{question}\n\n"
    "Expected (may be empty):\n{expected}\n\nAnswer:\n{answer}"
)


@dataclass(frozen=True, slots=True)
class LLMJudge:
    """Any `Model` grades the answer against `rubric` (and the expected value, if any):
    its reply's first word, PASS or FAIL, is the verdict. What the judge's call cost is
    on the score (`cost_usd`), counted apart from the runs' cost."""

    model: Model
    rubric: str = "The answer is correct and complete."
    name: str = "judge"
    max_tokens: int = 256

    async def score(self, case: Case, result: RunResult) -> Score:
        from statemachine_agent.policy.pricing import DEFAULT_PRICE_TABLE

        question = case.message if isinstance(case.message, str) else _canonical(case.message)
        expected = "" if case.expected is None else str(fields_of_text(case.expected))
        prompt = JUDGE_PROMPT.format(
            rubric=self.rubric, question=question, expected=expected, answer=result.text
        )
        reply = await self.model.acomplete(
            ModelRequest(
                model=self.model.name,
                max_tokens=self.max_tokens,
                messages=[{"role": "user", "content": prompt}],
            )
        )
        cost = DEFAULT_PRICE_TABLE.cost(self.model.name, reply.usage)
        verdict = reply.text.strip()
        first = verdict.split(maxsplit=1)[0].strip(".:").upper() if verdict else ""
        if first not in ("PASS", "FAIL"):
            return Score(
                self.name,
                False,
                0.0,
                f"the judge said neither PASS nor FAIL: {verdict[:120]!r}",
                cost,
            )
        ok = first == "PASS"
        return Score(self.name, ok, 1.0 if ok else 0.0, verdict[:300], cost)


def fields_of_text(value: Any) -> Any:
    return value if isinstance(value, str) else _canonical(fields_of(value))


def llm_judge(model: Model, rubric: str = "The answer is correct and complete.") -> LLMJudge:
    """An `LLMJudge` scorer on `model`."""
    return LLMJudge(model, rubric)


DEFAULT_SCORERS: tuple[Scorer, ...] = (AnswerMatch(),)
"""What `evaluate` scores with when given no scorers: the normalized answer."""
