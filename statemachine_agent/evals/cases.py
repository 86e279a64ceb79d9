"""What an evaluation runs: cases, gathered in a dataset (in code, from JSONL, or from
the audit files of recorded runs).

A case is plain data, so a dataset can live in a JSONL file next to the code that
evaluates it, and a team can turn last week's recorded runs into cases
(`cases_from_audit`) to try a new policy on real traffic.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from statemachine_agent.evals.errors import EvalError
from statemachine_agent.models.base import JSON

ToolCallRef = str | Mapping[str, Any]
"""One call of a reference trajectory: a tool name, or `{"name": ..., "input": {...}}`."""

CASE_ID = re.compile(r"[A-Za-z0-9_-]{1,80}")
"""A case id: it becomes part of run ids and file names, so no separators or dots."""


@dataclass(frozen=True, slots=True)
class Case:
    """One thing to ask, and what a good run of it looks like.

    `prompt` is the user's text, or a whole conversation (a list of messages whose last
    one is the user's turn: the earlier ones are the run's history). `expected` is the
    answer (text) or typed output (a dict or an object) the scorers compare with, and
    `trajectory` the reference tool calls; both are optional, and a scorer with nothing
    to compare says so instead of failing.
    """

    id: str
    prompt: str | tuple[JSON, ...]
    expected: Any = None
    trajectory: tuple[ToolCallRef, ...] | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not CASE_ID.fullmatch(self.id):
            raise EvalError(f"case id {self.id!r} is not 1-80 letters, digits, '_' or '-'")
        if not isinstance(self.prompt, str):
            messages = tuple(self.prompt)
            if not messages or not all(isinstance(m, Mapping) for m in messages):
                raise EvalError(f"case {self.id}: a conversation is a non-empty list of messages")
            if messages[-1].get("role") != "user":
                raise EvalError(f"case {self.id}: a conversation must end with a user message")
            object.__setattr__(self, "prompt", tuple(dict(m) for m in messages))
        if self.trajectory is not None:
            calls = tuple(self.trajectory)
            for call in calls:
                if not isinstance(call, str) and not (
                    isinstance(call, Mapping) and isinstance(call.get("name"), str)
                ):
                    raise EvalError(
                        f"case {self.id}: a trajectory call is a tool name or "
                        f'{{"name": ..., "input": {{...}}}}, not {call!r}'
                    )
            object.__setattr__(self, "trajectory", calls)

    @property
    def history(self) -> list[JSON]:
        """The messages before the prompt (empty for a plain prompt)."""
        return [] if isinstance(self.prompt, str) else list(self.prompt[:-1])

    @property
    def message(self) -> Any:
        """What the run is started with: the text, or the last message's content."""
        return self.prompt if isinstance(self.prompt, str) else self.prompt[-1]["content"]

    def to_dict(self) -> JSON:
        return {
            "id": self.id,
            "prompt": self.prompt if isinstance(self.prompt, str) else list(self.prompt),
            "expected": _plain(self.expected),
            "trajectory": None if self.trajectory is None else [_plain(c) for c in self.trajectory],
            "metadata": _plain(self.metadata),
        }


@dataclass(frozen=True, slots=True)
class Dataset:
    """Cases under a name, their ids unique (a run id is made of one)."""

    cases: tuple[Case, ...]
    name: str = "dataset"

    def __init__(self, cases: Iterable[Case], name: str = "dataset") -> None:
        object.__setattr__(self, "cases", tuple(cases))
        object.__setattr__(self, "name", name)
        seen: set[str] = set()
        for case in self.cases:
            if not isinstance(case, Case):
                raise EvalError(f"dataset {name!r} holds {case!r}, not a Case")
            if case.id in seen:
                raise EvalError(f"dataset {name!r} has two cases with id {case.id!r}")
            seen.add(case.id)
        if not self.cases:
            raise EvalError(f"dataset {name!r} has no cases")

    def __iter__(self) -> Iterator[Case]:
        return iter(self.cases)

    def __len__(self) -> int:
        return len(self.cases)

    @classmethod
    def from_jsonl(cls, path: str | os.PathLike[str], name: str | None = None) -> Dataset:
        """One case per line: `{"id", "prompt", "expected", "trajectory", "metadata"}`
        (only `prompt` is required; a missing id is `case-<line number>`)."""
        source = Path(path)
        cases: list[Case] = []
        for number, line in enumerate(source.read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise EvalError(f"{source}:{number}: not JSON ({exc.msg})") from exc
            if not isinstance(row, dict) or "prompt" not in row:
                raise EvalError(f"{source}:{number}: a case is an object with a 'prompt'")
            unknown = set(row) - {"id", "prompt", "expected", "trajectory", "metadata"}
            if unknown:
                raise EvalError(f"{source}:{number}: unknown field(s) {sorted(unknown)}")
            cases.append(
                Case(
                    id=row.get("id", f"case-{number}"),
                    prompt=row["prompt"],
                    expected=row.get("expected"),
                    trajectory=row.get("trajectory"),
                    metadata=row.get("metadata") or {},
                )
            )
        return cls(cases, name=name or source.stem)


def cases_from_audit(paths: Iterable[str | os.PathLike[str]]) -> Dataset:
    """Recorded runs as cases: each audit file's (first) run gives its prompt, its
    final answer (the typed output or finish data when there is one, else the text)
    as the expected value, and its tool calls as the reference trajectory.

    A file whose run never ended is skipped: it has no answer to expect."""
    from statemachine_agent.audit.sink import read_events

    cases: list[Case] = []
    for path in paths:
        events = read_events(path)
        started = next((e for e in events if e.get("event") == "run.started"), None)
        if started is None:
            continue
        run_id = started.get("run_id")
        ended = next(
            (e for e in events if e.get("event") == "run.ended" and e.get("run_id") == run_id),
            None,
        )
        if ended is None:
            continue
        messages = [m for m in started.get("messages") or () if isinstance(m, dict)]
        while messages and messages[-1].get("role") != "user":
            messages.pop()
        if not messages:
            continue
        calls = tuple(
            {"name": e["tool"], "input": e.get("input") or {}}
            for e in events
            if e.get("event") == "tool.called" and e.get("run_id") == run_id
        )
        prompt = messages[0]["content"] if len(messages) == 1 else tuple(messages)
        if not isinstance(prompt, str | tuple):
            prompt = tuple(messages)
        data = ended.get("data")
        cases.append(
            Case(
                id=_case_id(str(run_id), len(cases)),
                prompt=prompt,
                expected=data if data is not None else ended.get("text"),
                trajectory=calls,
                metadata={"source": str(path), "run_id": run_id},
            )
        )
    return Dataset(cases, name="audit")


def _case_id(run_id: str, index: int) -> str:
    cleaned = re.sub(r"[^A-Za-z0-9_-]", "_", run_id)[:70]
    return f"{index:03d}-{cleaned}" if cleaned else f"case-{index:03d}"


def _plain(value: Any) -> Any:
    """`value` as JSON data (a typed expected value through its fields)."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return fields_of(value)


def fields_of(value: Any) -> Any:
    """A typed value (pydantic model, dataclass, mapping) as a plain dict of its fields."""
    import dataclasses

    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json")
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _plain(dataclasses.asdict(value))
    if isinstance(value, Mapping):
        return _plain(value)
    return repr(value)
