"""Forking a recorded run (`Agent.fork`): a new run whose history is the original's up
to one of its transitions, stored (and its audit file begun) so that `resume` drives it.

The fork is rebuilt from the original's checkpoints. A transition the engine wrote
has a checkpoint right after it: the record as that transition left it (the state it
entered, before that state's phase ran). A transition the engine carried (out of
perceive, observe or act, whose work the record alone determines) has none: the fork
starts from the last checkpoint before it and re-does the carried transitions up to
`at`, as a resume after a crash there would, but under the fork's own settings.
Nothing of the original is written: its store rows and audit file stay byte for byte
as they were.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from statemachine_agent.agent._parts import AgentParts
from statemachine_agent.agent._records import new_run_id
from statemachine_agent.audit.events import Emitter
from statemachine_agent.audit.sink import JsonlSink, iter_numbered
from statemachine_agent.errors import Error
from statemachine_agent.machine.ends import END_STATES, RESUMABLE_STATES
from statemachine_agent.machine.ids import check_run_id
from statemachine_agent.machine.run import RunRecord
from statemachine_agent.persistence.base import (
    Checkpointer,
    RunNotFoundError,
    load_record,
)
from statemachine_agent.persistence.codec import record_from_plain
from statemachine_agent.persistence.delta import CheckpointWriter, fold
from statemachine_agent.private_files import make_private_dirs, open_private


class ForkPointError(Error, ValueError):
    """The transition named cannot start a fork: out of range, entering `act` (between
    a tool's call and its recorded result), entering an end state no resume leaves,
    or `prompt=` where the last user message holds
    tool results. The message names the nearest transitions that can; no run is made."""


def _allowed(trail: Sequence[Mapping[str, Any]], seq: int) -> str | None:
    """Why transition `seq` cannot start a fork (None: it can)."""
    if seq < 1 or seq > len(trail):
        return f"the run has transitions 1 to {len(trail)}"
    dest = str(trail[seq - 1]["dest"])
    if dest == "act":
        return "it enters act, between the tools' calls and their recorded results"
    if dest in END_STATES and dest not in RESUMABLE_STATES:
        return f"it enters {dest}, an end state no resume leaves"
    return None


def _nearest(trail: Sequence[Mapping[str, Any]], seq: int) -> list[int]:
    ok = [s for s in range(1, len(trail) + 1) if _allowed(trail, s) is None]
    below = [s for s in ok if s < seq][-1:]
    above = [s for s in ok if s > seq][:1]
    return below + above


def forked_record(
    store: Checkpointer, run_id: str, at: int, new_id: str, prompt: str | None
) -> RunRecord:
    """The fork's record: the original's as transition `at` left it, or as the last
    checkpoint before it left it when `at` was carried (see the module's docstring),
    renamed."""
    if isinstance(at, bool) or not isinstance(at, int):
        raise TypeError(f"fork: at must be a transition number (int), not {at!r}")
    bodies = list(store.bodies(run_id))
    if not bodies:
        raise RunNotFoundError(f"no checkpoints for run {run_id!r}")
    whole = load_record(store, run_id)
    trail = [step.to_dict() for step in whole.trail]
    why = _allowed(trail, at)
    if why is not None:
        near = _nearest(trail, at)
        allowed = f"the nearest that can: {', '.join(map(str, near))}" if near else "none can"
        raise ForkPointError(f"cannot fork run {run_id!r} at transition {at}: {why} ({allowed})")
    plain = fold(bodies[: _base(bodies, at) + 1])
    assert plain is not None
    record = record_from_plain(plain)
    if prompt is not None:
        replace_prompt(record, prompt, run_id, at)
    record.run_id = new_id
    record.forked_from = {"run_id": run_id, "seq": at}
    record.audit_path = None
    record.parent = None
    return record


def _base(bodies: Sequence[Mapping[str, Any]], at: int) -> int:
    """The index of the checkpoint a fork at `at` starts from: the first written right
    after transition `at`, else (a carried transition) the last written before it."""
    seqs = [int(body["seq"]) for body in bodies]
    if at in seqs:
        return seqs.index(at)
    return max(index for index, seq in enumerate(seqs) if seq < at)


def replace_prompt(record: RunRecord, prompt: str, run_id: str, at: int) -> None:
    """Put `prompt` in place of the history's last user prompt (not tool results)."""
    if not isinstance(prompt, str) or not prompt:
        raise ValueError(f"fork: prompt must be a non-empty string, not {prompt!r}")
    last = next((m for m in reversed(record.messages) if m.get("role") == "user"), None)
    content = None if last is None else last.get("content")
    holds_results = isinstance(content, list) and any(
        isinstance(b, dict) and b.get("type") == "tool_result" for b in content
    )
    if last is None or holds_results:
        raise ForkPointError(
            f"cannot replace the prompt of run {run_id!r} at transition {at}: its last user "
            "message holds tool results, not a prompt (fork where a prompt is last)"
        )
    index = record.messages.index(last)
    record.messages[index] = {**last, "content": prompt}


def create_fork(
    source: AgentParts,
    target: AgentParts,
    run_id: str,
    at: int,
    *,
    new_run_id_: str | None,
    prompt: str | None,
    changed: Sequence[str],
    recorded_settings: bool = False,
) -> str:
    """Store the fork of `run_id` at `at` (settings from `target`, or with
    `recorded_settings` the original's as recorded: the CLI has no agent to take them
    from) and begin its audit file with the original's events up to that transition;
    returns the fork's id."""
    store = source.checkpointer
    if store is None:
        raise ValueError("fork needs a checkpointer: the original run is read from the store")
    new_id = check_run_id(new_run_id_) if new_run_id_ is not None else new_run_id()
    if store is not target.checkpointer:
        raise ValueError("fork: the changed agent must keep the original's checkpointer")
    if any(True for _ in store.bodies(new_id)):
        raise ValueError(f"fork: run {new_id!r} exists already; name a new run id")
    record = forked_record(store, check_run_id(run_id), at, new_id, prompt)
    if not recorded_settings:
        record.settings = dataclasses.replace(
            target.settings, output_expected=record.settings.output_expected
        )
    _begin_audit(source, target, record, run_id, at, prompt is not None, changed)
    store.append(new_id, CheckpointWriter().delta(record))
    return new_id


def _begin_audit(
    source: AgentParts,
    target: AgentParts,
    record: RunRecord,
    run_id: str,
    at: int,
    prompt_replaced: bool,
    changed: Sequence[str],
) -> None:
    """The fork's audit file: the original's lines up to transition `at` verbatim (so a
    replay of the fork follows the original that far), then `run.forked`."""
    original = source.audit.run_file(run_id)
    mine = target.audit.run_file(record.run_id)
    if mine is None:
        return
    cipher = getattr(source.checkpointer, "cipher", None)
    if original is not None and original.exists():
        _copy_until(original, mine, record.seq, cipher, step_done=record.seq != at)
    sink = JsonlSink(mine, audit_key=target.audit.audit_key, cipher=cipher)
    try:
        emitter = Emitter(record.run_id, sinks=[sink], redactor=target.redactor,
                          logger=None, metadata=record.metadata,
                          chain=sink.chain)  # fmt: skip
        emitter.emit("run.forked", forked_from=run_id, forked_at=at, state=record.state,
                     prompt_replaced=prompt_replaced, changed=sorted(changed),
                     iteration=record.iteration)  # fmt: skip
        emitter.flush()
    finally:
        sink.close()
    record.audit_path = mine


def _copy_until(original: Path, mine: Path, seq: int, cipher: Any, *, step_done: bool) -> None:
    """The original's lines through its `transition.fired` of `seq`, bytes unchanged;
    with `step_done` (the fork starts from the last checkpoint before a carried
    transition) also the events of the phase that followed, up to the next transition.

    The last `transition.fired` of `seq` is the one the store kept: a crash re-does
    carried transitions, so an earlier process may have written the same number.
    """
    last_line = 0
    found = seq == 0  # the run's first checkpoint comes before any transition
    for number, event in iter_numbered(original, cipher):
        fired = event.get("event") == "transition.fired"
        if fired and event.get("seq") == seq:
            last_line, found = number, True
        elif fired and found and step_done:
            if int(event.get("seq") or 0) > seq:
                found = False  # the phase's events end here
        elif found and step_done and not fired:
            last_line = number
    if not last_line:
        return
    with original.open("rb") as handle:
        lines = [handle.readline() for _ in range(last_line)]
    make_private_dirs(mine.parent)
    handle_out = open_private(mine, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    with os.fdopen(handle_out, "wb") as out:
        out.writelines(lines)


__all__ = ["ForkPointError", "create_fork", "forked_record"]
