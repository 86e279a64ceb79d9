"""Golden trails: a run's control flow stored in a file and compared on every test run.

A golden trail is reviewed the way a snapshot is: when an agent's behaviour
changes, the test fails with a diff of what the machine did (states, triggers,
the rows that fired, every guard's verdict, the tools called and their inputs, each
approval decision and whether a person or the policy made it, and what became of each
staged call: committed, failed, discarded or kept),
and `pytest --update-golden` rewrites the file for the change to be committed.
Timings, ids, token counts and costs are left out: they change without the
behaviour changing.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from statemachine_agent.errors import Error
from statemachine_agent.machine.ends import RESUMABLE_STATES
from statemachine_agent.machine.result import RunResult

FORMAT = 1
"""The golden file format; a file of another format is an error, never a silent pass."""

UPDATE_HINT = "run `pytest --update-golden` to write it"


class GoldenFileError(Error, ValueError):
    """A golden file exists but is not a golden trail (bad JSON, wrong format)."""


@dataclass(frozen=True)
class GoldenMode:
    """How `assert_trail_matches` treats files: compare them, or rewrite them."""

    update: bool = False
    written: list[Path] = field(default_factory=list)
    """Files rewritten because they differed (or were missing), in order."""


_MODE: ContextVar[GoldenMode | None] = ContextVar("statemachine_agent_golden", default=None)
"""Set while golden files are being rewritten; unset, they are compared."""


@contextmanager
def updating_golden() -> Iterator[GoldenMode]:
    """Within the block, `assert_trail_matches` rewrites files instead of comparing.

    The pytest plugin enters this for the whole session under `--update-golden`.
    """
    mode = GoldenMode(update=True)
    token = _MODE.set(mode)
    try:
        yield mode
    finally:
        _MODE.reset(token)


def trail_snapshot(result: RunResult) -> dict[str, Any]:
    """What a golden file stores of a run: its control flow, its tool calls and, when
    it had any, its approval decisions (kind, and whether a person, the policy or
    nobody decided: an approved and a denied run are different runs; who and when
    are left out, as timings are)."""
    snapshot: dict[str, Any] = {
        "format": FORMAT,
        "end_state": result.end_state,
        "steps": [
            {
                "source": step.source,
                "trigger": step.trigger,
                "dest": step.dest,
                "row": list(step.via),
                "guards": dict(step.guards),
            }
            for step in result.trail
        ],
        "tool_calls": [
            {"name": block["name"], "input": block.get("input", {})}
            for message in result.messages
            if message.get("role") == "assistant" and isinstance(message.get("content"), list)
            for block in message["content"]
            if isinstance(block, Mapping) and block.get("type") == "tool_use"
        ],
    }
    commit = _commit_snapshot(result)
    if commit:  # absent when nothing was staged, as approvals are
        snapshot["commit"] = commit
    if result.approvals:  # absent rather than empty: files of runs without any stand
        snapshot["approvals"] = [
            {"tool": a.tool, "decision": a.decision, "decided_by": a.decided_by}
            for a in result.approvals
        ]
    return snapshot


def _commit_snapshot(result: RunResult) -> list[dict[str, Any]]:
    """Side effects last (issue 34): each staged call's fate, by reference: `committed`
    (or `failed`) when commit ran it, else `discarded` or, on a resumable end, `kept`
    staged. What it returned and when are left out, as timings are."""
    details = result.details or {}
    fates = [
        {"ref": c.get("ref"), "tool": c.get("tool"),
         "kind": "failed" if c.get("is_error") else "committed"}
        for c in details.get("committed") or ()
    ]  # fmt: skip
    kept = result.end_state in RESUMABLE_STATES
    fates += [
        {"ref": c.get("ref"), "tool": c.get("tool"), "kind": "kept" if kept else "discarded"}
        for c in details.get("staged") or ()
    ]
    return fates


def assert_trail_matches(result: RunResult, path: str | Path) -> None:
    """The run did exactly what the golden file at `path` says, or the diff is shown.

    A relative `path` is relative to the current directory, as `open` reads it
    (pytest runs from the project root). Under `pytest --update-golden` (or inside
    `updating_golden()`) a differing or missing file is rewritten instead.
    """
    __tracebackhide__ = True  # pytest shows the caller's line and the diff, not this frame
    target = Path(path)
    actual = trail_snapshot(result)
    mode = _MODE.get()
    update = mode is not None and mode.update
    try:
        stored = _load(target) if target.exists() else None
    except GoldenFileError:
        if not update:
            raise
        stored = None  # rewritten below
    if stored == actual:
        return
    if mode is not None and update:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(dumps(actual), encoding="utf-8")
        mode.written.append(target)
        return
    if stored is None:
        raise AssertionError(f"no golden trail at {target}: {UPDATE_HINT}")
    diff = difflib.unified_diff(
        render(stored), render(actual), f"{target} (golden)", "this run", lineterm="", n=2
    )
    raise AssertionError(
        f"run {result.run_id} does not match the golden trail {target} "
        "(- golden, + this run); if the change is intended, run `pytest --update-golden` "
        "to rewrite the file:\n" + "\n".join(diff)
    )


def render(snapshot: Mapping[str, Any]) -> list[str]:
    """One line per fact, so a diff points at the step or tool call that changed."""
    lines = [f"end_state: {snapshot.get('end_state')}"]
    for n, step in enumerate(snapshot.get("steps") or (), 1):
        row = " & ".join(step.get("row") or ()) or "fallback"
        verdicts = ", ".join(f"{k}={v}" for k, v in (step.get("guards") or {}).items())
        lines.append(
            f"step {n}: {step.get('source')} --{step.get('trigger')}--> {step.get('dest')}"
            f"  row [{row}]" + (f"  guards {verdicts}" if verdicts else "")
        )
    for n, call in enumerate(snapshot.get("tool_calls") or (), 1):
        shown = json.dumps(call.get("input"), ensure_ascii=False, sort_keys=True)
        lines.append(f"tool {n}: {call.get('name')} {shown}")
    for fate in snapshot.get("commit") or ():
        lines.append(f"staged {fate.get('ref')}: {fate.get('tool')} {fate.get('kind')}")
    for n, decision in enumerate(snapshot.get("approvals") or (), 1):
        lines.append(
            f"approval {n}: {decision.get('tool')} {decision.get('decision')} "
            f"by {decision.get('decided_by')}"
        )
    return lines


def dumps(snapshot: Mapping[str, Any]) -> str:
    """The file's text: one step or tool call per line, so a reviewed diff reads like `render`."""
    parts = []
    for key, value in snapshot.items():
        if isinstance(value, list):
            items = ",\n".join(f"    {json.dumps(v, ensure_ascii=False)}" for v in value)
            text = f"[\n{items}\n  ]" if value else "[]"
        else:
            text = json.dumps(value, ensure_ascii=False)
        parts.append(f"  {json.dumps(key)}: {text}")
    return "{\n" + ",\n".join(parts) + "\n}\n"


def _load(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise GoldenFileError(f"{path} is not a golden trail: {exc}") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise GoldenFileError(
            f"{path} is not a golden trail of format {FORMAT} (delete it and {UPDATE_HINT})"
        )
    return data
