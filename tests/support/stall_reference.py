"""The stall detector as it was before it became incremental: every check scans the window.

Kept verbatim (only this docstring and the trailing exports differ) as the reference for
tests/test_stall_incremental.py, which checks that the incremental detector finds exactly
what this one finds on any sequence of calls and acknowledgements.
"""

from __future__ import annotations

import difflib
import functools
import hashlib
import json
import unicodedata
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Final, Literal, TypeGuard, cast, get_args

Pattern = Literal["repeat", "cycle", "near_duplicate", "oscillation"]
_PATTERNS: Final[frozenset[str]] = frozenset(get_args(Pattern))
_STATE_VERSION: Final = 1
_SHOWN_ARGS: Final = 80
"""Longest argument text quoted in a finding's detail; the model needs a hint, not the payload."""


def _is_int(value: object) -> TypeGuard[int]:
    """bool is an int subclass, but True is not a count."""
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True, slots=True)
class StallPolicy:
    """How eager stall detection is, and what the engine does about a stall."""

    threshold: int = 3
    """N: how many times a pattern must show before it counts as a stall."""
    max_interventions: int = 2
    """K: intervention messages before the run ends as `stalled` (used by the engine)."""
    max_cycle_period: int = 4
    """Longest block length looked for in A/B/... cycles."""
    similarity: float | None = None
    """Opt-in fuzzy matching (difflib ratio, 0 < s <= 1) for near-duplicate string arguments.

    Off by default because a ratio also matches things that are genuinely different
    ("a.txt" and "b.txt" score 0.8)."""
    salvage: bool = True
    """Whether the engine writes a salvage summary when the run ends stalled."""

    def __post_init__(self) -> None:
        if not _is_int(self.threshold) or self.threshold < 2:
            raise ValueError(
                f"StallPolicy.threshold must be an int of at least 2, got {self.threshold!r}"
                " (1 would call every single tool call a stall)"
            )
        if not _is_int(self.max_interventions) or self.max_interventions < 0:
            raise ValueError(
                "StallPolicy.max_interventions must be an int of at least 0, "
                f"got {self.max_interventions!r}"
            )
        if not _is_int(self.max_cycle_period) or self.max_cycle_period < 2:
            raise ValueError(
                "StallPolicy.max_cycle_period must be an int of at least 2 "
                f"(a period of 1 is a plain repeat), got {self.max_cycle_period!r}"
            )
        if self.similarity is not None and (
            isinstance(self.similarity, bool)
            or not isinstance(self.similarity, int | float)
            or not 0.0 < self.similarity <= 1.0
        ):
            raise ValueError(
                "StallPolicy.similarity must be None or a number with 0 < similarity <= 1, "
                f"got {self.similarity!r}"
            )
        if not isinstance(self.salvage, bool):
            raise ValueError(f"StallPolicy.salvage must be a bool, got {self.salvage!r}")


@dataclass(frozen=True, slots=True)
class StallFinding:
    """One detected stall, worded for both the model and the audit trail."""

    pattern: Pattern
    tool: str
    """The tool's name, or for a cycle the block's names joined with " -> "."""
    count: int
    """How many times the pattern showed (calls, repetitions or returns; see `detail`)."""
    detail: str
    """One sentence saying what was seen, so the model can change course."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "pattern": self.pattern,
            "tool": self.tool,
            "count": self.count,
            "detail": self.detail,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> StallFinding:
        pattern = data.get("pattern")
        if pattern not in _PATTERNS:
            raise ValueError(f"unknown stall pattern {pattern!r}")
        tool, count, detail = data.get("tool"), data.get("count"), data.get("detail")
        if not isinstance(tool, str) or not _is_int(count) or not isinstance(detail, str):
            raise ValueError(f"malformed stall finding {dict(data)!r}")
        return cls(pattern=cast(Pattern, pattern), tool=tool, count=count, detail=detail)


@dataclass(frozen=True, slots=True)
class _Observation:
    """One recorded call; the result is a hash because only equality matters."""

    seq: int
    tool: str
    args: str
    """Canonical JSON of the arguments."""
    result: str
    """Short hash of the result text."""
    is_error: bool
    outcome: tuple[str, bool] = field(init=False, repr=False, compare=False)
    """(result, is_error), built once: every pattern compares it on every check."""
    key: tuple[str, str, str, bool] = field(init=False, repr=False, compare=False)
    """(tool, args, result, is_error), built once likewise."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "outcome", (self.result, self.is_error))
        object.__setattr__(self, "key", (self.tool, self.args, self.result, self.is_error))


_DEFAULT_POLICY: Final = StallPolicy()


class StallDetector:
    """Records tool calls and reports the first stall pattern among them.

    A finding must rest on at least one offending call recorded after the last
    `acknowledge()`: older calls still count as evidence (the count keeps
    growing), but a stall the engine already intervened on does not fire again
    until the model does the offending thing once more.
    """

    HISTORY: ClassVar[int] = 200
    """Observations kept; older ones are forgotten, so memory stays bounded on long runs."""

    __slots__ = ("_acknowledged_at", "_next_seq", "_observations", "_policy")

    def __init__(self, policy: StallPolicy = _DEFAULT_POLICY) -> None:
        self._policy = policy
        self._observations: list[_Observation] = []
        self._next_seq = 0
        self._acknowledged_at = 0
        """Sequence number of the first call recorded after the last acknowledge()."""

    @property
    def policy(self) -> StallPolicy:
        return self._policy

    def record(self, name: str, arguments: Any, result: str, *, is_error: bool = False) -> None:
        """Remember one finished tool call; the only method that changes what is judged."""
        self._observations.append(
            _Observation(
                seq=self._next_seq,
                tool=name,
                args=canonical_arguments(arguments),
                result=_result_hash(result),
                is_error=bool(is_error),
            )
        )
        self._next_seq += 1
        if len(self._observations) > self.HISTORY:
            del self._observations[: len(self._observations) - self.HISTORY]

    def acknowledge(self) -> None:
        """Note that the engine intervened, so the current finding needs new evidence to recur."""
        self._acknowledged_at = self._next_seq

    def is_stalled(self) -> StallFinding | None:
        """The first pattern that holds (repeat, cycle, oscillation, near_duplicate), or None.

        Pure: it changes nothing, so calling it twice gives the same answer.
        """
        checks: tuple[Callable[[], StallFinding | None], ...] = (
            self._repeat,
            self._cycle,
            self._oscillation,
            self._near_duplicate,
        )
        for check in checks:
            finding = check()
            if finding is not None:
                return finding
        return None

    def to_state(self) -> dict[str, Any]:
        """Plain JSON-ready data for a checkpoint; `from_state` restores it exactly."""
        return {
            "version": _STATE_VERSION,
            "next_seq": self._next_seq,
            "acknowledged_at": self._acknowledged_at,
            "observations": [
                {
                    "seq": o.seq,
                    "tool": o.tool,
                    "arguments": o.args,
                    "result": o.result,
                    "is_error": o.is_error,
                }
                for o in self._observations
            ],
        }

    @classmethod
    def from_state(cls, policy: StallPolicy, state: Mapping[str, Any]) -> StallDetector:
        """Rebuild a detector from `to_state()` output, refusing anything malformed.

        An empty mapping means "nothing recorded yet" (a run's initial checkpoint),
        so the engine need not special-case its first observation.
        """
        if not state:
            return cls(policy)
        if state.get("version") != _STATE_VERSION:
            raise ValueError(f"unsupported stall state version {state.get('version')!r}")
        next_seq, acknowledged_at = state.get("next_seq"), state.get("acknowledged_at")
        raw = state.get("observations")
        if not (_is_int(next_seq) and _is_int(acknowledged_at) and isinstance(raw, list)):
            raise ValueError("malformed stall state")
        if not 0 <= acknowledged_at <= next_seq:
            raise ValueError("malformed stall state: acknowledged_at out of range")
        observations: list[_Observation] = []
        for item in raw:
            observation = _observation_from_dict(item)
            if observation.seq >= next_seq or (
                observations and observation.seq <= observations[-1].seq
            ):
                raise ValueError("malformed stall state: observations out of order")
            observations.append(observation)
        detector = cls(policy)
        detector._observations = observations[-cls.HISTORY :]
        detector._next_seq = next_seq
        detector._acknowledged_at = acknowledged_at
        return detector

    # -- the patterns ---------------------------------------------------------------

    def _is_new(self, observation: _Observation) -> bool:
        return observation.seq >= self._acknowledged_at

    def _pick(self, candidates: Iterable[Sequence[_Observation]]) -> Sequence[_Observation] | None:
        """Among offending call groups with new evidence, the most recent one (then the largest)."""
        fresh = [c for c in candidates if c and self._is_new(c[-1])]
        if not fresh:
            return None
        return max(fresh, key=lambda c: (c[-1].seq, len(c)))

    def _repeat(self) -> StallFinding | None:
        """Same tool, same arguments, same result: the call taught the model nothing new."""
        groups: dict[tuple[str, str, str, bool], list[_Observation]] = {}
        for o in self._observations:
            groups.setdefault(o.key, []).append(o)
        calls = self._pick(g for g in groups.values() if len(g) >= self._policy.threshold)
        if calls is None:
            return None
        first = calls[0]
        got = "error" if first.is_error else "result"
        return StallFinding(
            pattern="repeat",
            tool=first.tool,
            count=len(calls),
            detail=(
                f"{first.tool} was called {len(calls)} times with the same arguments "
                f"{_shorten(first.args)} and got the same {got} each time"
            ),
        )

    def _cycle(self) -> StallFinding | None:
        """The latest calls repeat a block of 2+ calls back to back; results included,
        so a loop whose results change is still making progress."""
        observations = self._observations
        n = len(observations)
        if n == 0 or not self._is_new(observations[-1]):
            return None
        keys = [o.key for o in observations]
        needed = max(2, self._policy.threshold - 1)
        for period in range(2, self._policy.max_cycle_period + 1):
            if n < needed * period:
                break
            if len(set(keys[n - period :])) == 1:
                continue  # one call over and over is a `repeat`, not a cycle
            run = period
            while run < n and keys[n - 1 - run] == keys[n - 1 - run + period]:
                run += 1
            repetitions = run // period
            if repetitions < needed:
                continue
            block = observations[n - run : n - run + period]
            names = " -> ".join(o.tool for o in block)
            return StallFinding(
                pattern="cycle",
                tool=names,
                count=repetitions,
                detail=(
                    f"the calls {names} were repeated {repetitions} times in a row with the "
                    "same arguments and the same results, so the run is going round in a circle"
                ),
            )
        return None

    def _oscillation(self) -> StallFinding | None:
        """Edit/revert: different arguments, yet the result keeps returning to an old value.

        A "return" is a call whose result differs from that tool's previous result
        and was produced before by the same tool with different arguments. A tool
        that always answers the same ("ok") never returns, and neither does one
        whose every result is new.
        """
        by_tool: dict[str, list[_Observation]] = {}
        for o in self._observations:
            by_tool.setdefault(o.tool, []).append(o)
        returns_by_tool: dict[str, list[_Observation]] = {}
        for tool, calls in by_tool.items():
            seen: dict[tuple[str, bool], set[str]] = {}
            previous: tuple[str, bool] | None = None
            returns: list[_Observation] = []
            for o in calls:
                producers = seen.get(o.outcome)
                other_args = producers is not None and (
                    len(producers) > 1 or o.args not in producers
                )  # some earlier call with different arguments got this same outcome
                if o.outcome != previous and other_args:
                    returns.append(o)
                seen.setdefault(o.outcome, set()).add(o.args)
                previous = o.outcome
            returns_by_tool[tool] = returns
        needed = self._policy.threshold - 1
        picked = self._pick(r for r in returns_by_tool.values() if len(r) >= needed)
        if picked is None:
            return None
        tool = picked[0].tool
        variants = len({o.args for o in by_tool[tool]})
        return StallFinding(
            pattern="oscillation",
            tool=tool,
            count=len(picked),
            detail=(
                f"{tool} was called with {variants} different arguments but its result went "
                f"back to an earlier value {len(picked)} times, as if undoing its own changes"
            ),
        )

    def _near_duplicate(self) -> StallFinding | None:
        """Same tool, arguments reworded but not really changed: the same question again."""
        similarity = self._policy.similarity
        groups: list[list[_Observation]]
        if similarity is None:
            # Without a similarity ratio, "alike" is equality of normalized forms: group
            # by that key in one pass instead of comparing every pair of calls.
            by_key: dict[tuple[str, str], list[_Observation]] = {}
            for o in self._observations:
                by_key.setdefault((o.tool, _normal_key(o.args)), []).append(o)
            groups = list(by_key.values())
        else:
            clusters: list[tuple[str, Any, list[_Observation]]] = []
            for o in self._observations:
                value = json.loads(o.args)
                for tool, anchor, members in clusters:
                    if tool == o.tool and _alike(anchor, value, similarity):
                        members.append(o)
                        break
                else:
                    clusters.append((o.tool, value, [o]))
            groups = [members for _, _, members in clusters]
        calls = self._pick(
            members
            for members in groups
            if len(members) >= self._policy.threshold and len({m.args for m in members}) >= 2
        )
        if calls is None:
            return None
        first = calls[0]
        variants = len({m.args for m in calls})
        return StallFinding(
            pattern="near_duplicate",
            tool=first.tool,
            count=len(calls),
            detail=(
                f"{first.tool} was called {len(calls)} times with arguments that differ only "
                f"in wording ({variants} variants, starting with {_shorten(first.args)}), "
                "so it keeps asking the same thing"
            ),
        )


# -- helpers ------------------------------------------------------------------------


def canonical_arguments(arguments: Any) -> str:
    """Arguments as canonical JSON, so key order and spacing never make calls differ.

    Anything JSON cannot represent is kept as its repr, as a JSON string, so
    recording never fails on odd input.
    """
    try:
        return json.dumps(arguments, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    except (TypeError, ValueError):
        return json.dumps(repr(arguments), ensure_ascii=False)


def normalize_text(text: str) -> str:
    """Wording-insensitive form of a string: casefolded, punctuation dropped, words sorted."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    spaced = "".join(" " if unicodedata.category(ch).startswith("P") else ch for ch in folded)
    return " ".join(sorted(spaced.split()))


@functools.lru_cache(maxsize=4096)
def _normal_key(args: str) -> str:
    """A key equal for exactly the arguments `_alike` matches when no ratio is set."""
    return json.dumps(_normal_form(json.loads(args)), separators=(",", ":"))


def _normal_form(value: Any) -> Any:
    if isinstance(value, str):
        return ["s", normalize_text(value)]
    if isinstance(value, dict):
        return ["d", sorted((k, _normal_form(v)) for k, v in value.items())]
    if isinstance(value, list):
        return ["l", [_normal_form(v) for v in value]]
    return [type(value).__name__, value]


def _alike(anchor: Any, value: Any, similarity: float | None) -> bool:
    """Structural match: strings by normalized form (or ratio), everything else exactly."""
    if isinstance(anchor, str) and isinstance(value, str):
        a, b = normalize_text(anchor), normalize_text(value)
        if a == b:
            return True
        return similarity is not None and difflib.SequenceMatcher(None, a, b).ratio() >= similarity
    if isinstance(anchor, dict) and isinstance(value, dict):
        return anchor.keys() == value.keys() and all(
            _alike(anchor[k], value[k], similarity) for k in anchor
        )
    if isinstance(anchor, list) and isinstance(value, list):
        return len(anchor) == len(value) and all(
            _alike(a, b, similarity) for a, b in zip(anchor, value, strict=True)
        )
    return type(anchor) is type(value) and bool(anchor == value)


def _result_hash(result: str) -> str:
    return hashlib.sha256(result.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def _shorten(text: str) -> str:
    return text if len(text) <= _SHOWN_ARGS else text[: _SHOWN_ARGS - 1] + "…"


def _observation_from_dict(item: object) -> _Observation:
    if not isinstance(item, Mapping):
        raise ValueError(f"malformed stall observation {item!r}")
    seq, tool, args = item.get("seq"), item.get("tool"), item.get("arguments")
    result, is_error = item.get("result"), item.get("is_error")
    if not (
        _is_int(seq)
        and isinstance(tool, str)
        and isinstance(args, str)
        and isinstance(result, str)
        and isinstance(is_error, bool)
    ):
        raise ValueError(f"malformed stall observation {dict(item)!r}")
    try:
        json.loads(args)
    except ValueError as exc:
        raise ValueError(f"stall observation arguments are not JSON: {args!r}") from exc
    return _Observation(seq=seq, tool=tool, args=args, result=result, is_error=is_error)


__all__ = ["StallDetector"]
