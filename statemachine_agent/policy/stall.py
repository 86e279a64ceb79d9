"""Stall detection: noticing when the agent keeps doing the same thing.

A prompt that says "don't repeat yourself" does not stop a model that has run
out of ideas, so the loop has to watch the calls itself and intervene. The
detector only observes; the engine decides what to do with a finding (inject a
system message, call `acknowledge()`, and after `max_interventions` end the run
as `stalled`).

Recording and judging are deliberately separate: `record()` is the only method
that changes state and `is_stalled()` is a pure query. If the query recorded
too, the natural "record, then check" sequence would count every call twice and
a threshold of 3 would fire after 2 calls.

Four patterns are looked for, in this priority:

* ``repeat``: the same tool with the same arguments getting the same result
  `threshold` times. Polling whose result changes is progress, not a stall.
* ``cycle``: the latest calls are a block of 2..`max_cycle_period` calls
  (tool, arguments and result) repeated back to back `max(2, threshold - 1)`
  times (A, B, A, B at the default 3): one round fewer than `threshold`, since
  every round is already two or more calls.
* ``oscillation``: one tool's arguments keep changing but its result keeps
  returning to a value it had before, `threshold - 1` times (edit, revert, edit,
  revert: the first value is not a return, so the value was seen `threshold` times).
* ``near_duplicate``: the same tool called `threshold` times with arguments
  that differ only in wording ("weather Tokyo" / "tokyo  weather!").

Memory is bounded: only the last `StallDetector.HISTORY` observations are kept,
and a result is kept as a short hash, never as text.
"""

from __future__ import annotations

import difflib
import functools
import hashlib
import json
import unicodedata
from collections import Counter
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


class _Group:
    """Calls that fall together (same key), oldest first, with a count of their arguments.

    A list, not a deque: most groups hold one or two calls (a deque allocates a block of
    64 slots up front, ~0.6 KiB, which thousands of runs in one process each pay for
    every group), and a group never holds more than the window, so dropping its oldest
    call moves at most that many pointers."""

    __slots__ = ("args", "calls")

    def __init__(self) -> None:
        self.calls: list[_Observation] = []
        self.args: Counter[str] = Counter()

    def add(self, o: _Observation) -> None:
        self.calls.append(o)
        self.args[o.args] += 1

    def drop_oldest(self) -> _Observation:
        o = self.calls.pop(0)
        left = self.args[o.args] - 1
        if left:
            self.args[o.args] = left
        else:
            del self.args[o.args]
        return o


class _Repeats:
    """Identical calls (same tool, arguments and result), oldest first: a `_Group` whose
    arguments are one by construction, so it keeps no count of them (one dict fewer
    per distinct call, which thousands of runs in one process each hold)."""

    __slots__ = ("calls",)

    def __init__(self) -> None:
        self.calls: list[_Observation] = []

    def add(self, o: _Observation) -> None:
        self.calls.append(o)

    def drop_oldest(self) -> _Observation:
        return self.calls.pop(0)


class _ToolCalls(_Group):
    """One tool's calls in the window, as the oscillation pattern reads them.

    A call is a "return" when its outcome differs from the tool's previous call's and
    an earlier call of the tool (in the window) got that outcome with other arguments.
    `changed` is fixed when a call is recorded; "other arguments" only changes when the
    oldest call of the same outcome leaves the window, so only that outcome's calls are
    looked at again.
    """

    __slots__ = ("by_outcome", "changed", "returns")

    def __init__(self) -> None:
        super().__init__()
        self.by_outcome: dict[tuple[str, bool], _Group] = {}
        self.changed: dict[int, bool] = {}
        self.returns: set[int] = set()
        """Sequence numbers of the calls that are returns."""

    def add(self, o: _Observation) -> None:
        changed = not self.calls or self.calls[-1].outcome != o.outcome
        same = self.by_outcome.get(o.outcome)
        if same is None:
            same = self.by_outcome[o.outcome] = _Group()
        elif changed and _other_args(same.args, o.args):
            self.returns.add(o.seq)
        same.add(o)
        super().add(o)
        self.changed[o.seq] = changed

    def drop_oldest(self) -> _Observation:
        o = super().drop_oldest()
        del self.changed[o.seq]
        self.returns.discard(o.seq)
        same = self.by_outcome[o.outcome]
        same.drop_oldest()
        if not same.calls:
            del self.by_outcome[o.outcome]
            return o
        seen: Counter[str] = Counter()
        for c in same.calls:
            if self.changed[c.seq] and _other_args(seen, c.args):
                self.returns.add(c.seq)
            else:
                self.returns.discard(c.seq)
            seen[c.args] += 1
        return o


def _other_args(seen: Counter[str], args: str) -> bool:
    """Whether `seen` holds some arguments other than `args`."""
    return len(seen) > 1 or (len(seen) == 1 and args not in seen)


class _Index:
    """What the patterns read, kept up to date per observation instead of rescanned.

    Each pattern used to scan the whole window on every check (O(window) per tool
    call, the largest item of an iteration on long runs); now recording a call, or
    forgetting the oldest one, updates per-pattern counters in time proportional to
    the calls it touches, and a check reads only the groups that meet the threshold.
    """

    __slots__ = ("chains", "near", "near_hits", "policy", "repeat_hits", "repeats", "tools")

    def __init__(self, policy: StallPolicy) -> None:
        self.policy = policy
        self.repeats: dict[tuple[str, str, str, bool], _Repeats] = {}
        self.repeat_hits: set[tuple[str, str, str, bool]] = set()
        """Keys of the repeat groups with at least `threshold` calls."""
        self.near: dict[tuple[str, str], _Group] = {}
        self.near_hits: set[tuple[str, str]] = set()
        """Keys of near-duplicate groups with `threshold` calls and two argument variants."""
        self.tools: dict[str, _ToolCalls] = {}
        self.chains = [0] * (policy.max_cycle_period + 1)
        """chains[p]: how many calls back from the latest one match the call p earlier."""

    def add(self, observations: Sequence[_Observation]) -> None:
        """Take in `observations[-1]`, just appended."""
        o = observations[-1]
        threshold = self.policy.threshold
        repeats = self.repeats.get(o.key)
        if repeats is None:
            repeats = self.repeats[o.key] = _Repeats()
        repeats.add(o)
        if len(repeats.calls) >= threshold:
            self.repeat_hits.add(o.key)
        if self.policy.similarity is None:
            near_key = (o.tool, _normal_key(o.args))
            near = self.near.get(near_key)
            if near is None:
                near = self.near[near_key] = _Group()
            near.add(o)
            self._judge_near(near_key, near)
        tool = self.tools.get(o.tool)
        if tool is None:
            tool = self.tools[o.tool] = _ToolCalls()
        tool.add(o)
        n = len(observations)
        for period in range(2, len(self.chains)):
            matches = n > period and observations[n - 1 - period].key == o.key
            self.chains[period] = self.chains[period] + 1 if matches else 0

    def drop(self, o: _Observation, observations: Sequence[_Observation]) -> None:
        """Forget `o`, the oldest observation, already removed from `observations`."""
        group = self.repeats[o.key]
        group.drop_oldest()
        if len(group.calls) < self.policy.threshold:
            self.repeat_hits.discard(o.key)
        if not group.calls:
            del self.repeats[o.key]
        if self.policy.similarity is None:
            near_key = (o.tool, _normal_key(o.args))
            near = self.near[near_key]
            near.drop_oldest()
            self._judge_near(near_key, near)
            if not near.calls:
                del self.near[near_key]
        tool = self.tools[o.tool]
        tool.drop_oldest()
        if not tool.calls:
            del self.tools[o.tool]
        n = len(observations)
        for period in range(2, len(self.chains)):
            self.chains[period] = min(self.chains[period], max(0, n - period))

    def _judge_near(self, key: tuple[str, str], group: _Group) -> None:
        if len(group.calls) >= self.policy.threshold and len(group.args) >= 2:
            self.near_hits.add(key)
        else:
            self.near_hits.discard(key)


class StallDetector:
    """Records tool calls and reports the first stall pattern among them.

    A finding must rest on at least one offending call recorded after the last
    `acknowledge()`: older calls still count as evidence (the count keeps
    growing), but a stall the engine already intervened on does not fire again
    until the model does the offending thing once more.
    """

    HISTORY: ClassVar[int] = 200
    """Observations kept; older ones are forgotten, so memory stays bounded on long runs."""

    __slots__ = ("_acknowledged_at", "_index", "_next_seq", "_observations", "_plain", "_policy")

    def __init__(self, policy: StallPolicy = _DEFAULT_POLICY) -> None:
        self._policy = policy
        self._observations: list[_Observation] = []
        self._plain: list[dict[str, Any]] = []
        """Each kept observation as `to_state` lists it, built once when it is recorded:
        the state is written after every observation, and rebuilding a dict per kept
        call each time would cost what the whole window holds, not what is new."""
        self._index = _Index(policy)
        self._next_seq = 0
        self._acknowledged_at = 0
        """Sequence number of the first call recorded after the last acknowledge()."""

    @property
    def policy(self) -> StallPolicy:
        return self._policy

    def record(self, name: str, arguments: Any, result: str, *, is_error: bool = False) -> None:
        """Remember one finished tool call; the only method that changes what is judged."""
        self._keep(
            _Observation(
                seq=self._next_seq,
                tool=name,
                args=canonical_arguments(arguments),
                result=_result_hash(result),
                is_error=bool(is_error),
            )
        )
        self._next_seq += 1
        while len(self._observations) > self.HISTORY:
            del self._plain[0]
            self._index.drop(self._observations.pop(0), self._observations)

    def _keep(self, o: _Observation) -> None:
        self._observations.append(o)
        self._plain.append(
            {"seq": o.seq, "tool": o.tool, "arguments": o.args, "result": o.result,
             "is_error": o.is_error}
        )  # fmt: skip
        self._index.add(self._observations)

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
        """Plain JSON-ready data for a checkpoint; `from_state` restores it exactly.

        The observations' dicts are the detector's own, shared by every state it hands
        out (a new list each time): a state is a value to store, never to edit.
        """
        return {
            "version": _STATE_VERSION,
            "next_seq": self._next_seq,
            "acknowledged_at": self._acknowledged_at,
            "observations": list(self._plain),
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
        for observation in observations[-cls.HISTORY :]:
            detector._keep(observation)
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
        if not self._index.repeat_hits:
            return None
        repeats = self._index.repeats
        calls = self._pick(repeats[key].calls for key in self._index.repeat_hits)
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
        needed = max(2, self._policy.threshold - 1)
        for period in range(2, self._policy.max_cycle_period + 1):
            if n < needed * period:
                break
            run = period + self._index.chains[period]
            repetitions = run // period
            if repetitions < needed:
                continue
            if len({o.key for o in observations[n - period :]}) == 1:
                continue  # one call over and over is a `repeat`, not a cycle
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
        needed = self._policy.threshold - 1
        best: tuple[int, int, str] | None = None
        for name, calls in self._index.tools.items():
            returns = calls.returns
            if len(returns) < needed or not returns:
                continue
            last = max(returns)
            if last >= self._acknowledged_at and (best is None or (last, len(returns)) > best[:2]):
                best = (last, len(returns), name)
        if best is None:
            return None
        count, tool = best[1], best[2]
        variants = len(self._index.tools[tool].args)
        return StallFinding(
            pattern="oscillation",
            tool=tool,
            count=count,
            detail=(
                f"{tool} was called with {variants} different arguments but its result went "
                f"back to an earlier value {count} times, as if undoing its own changes"
            ),
        )

    def _near_duplicate(self) -> StallFinding | None:
        """Same tool, arguments reworded but not really changed: the same question again."""
        similarity = self._policy.similarity
        groups: Iterable[Sequence[_Observation]]
        if similarity is None:
            # Without a similarity ratio, "alike" is equality of normalized forms, kept
            # grouped by that key as calls are recorded.
            if not self._index.near_hits:
                return None
            near = self._index.near
            groups = [near[key].calls for key in self._index.near_hits]
        else:
            # A ratio is not an equivalence (clusters depend on their first member), so
            # this opt-in mode still clusters the window on each check.
            clusters: list[tuple[str, Any, list[_Observation]]] = []
            for o in self._observations:
                value = json.loads(o.args)
                for tool, anchor, members in clusters:
                    if tool == o.tool and _alike(anchor, value, similarity):
                        members.append(o)
                        break
                else:
                    clusters.append((o.tool, value, [o]))
            groups = [
                members
                for _, _, members in clusters
                if len(members) >= self._policy.threshold and len({m.args for m in members}) >= 2
            ]
        calls = self._pick(groups)
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


__all__ = [
    "Pattern",
    "StallDetector",
    "StallFinding",
    "StallPolicy",
    "canonical_arguments",
    "normalize_text",
]
