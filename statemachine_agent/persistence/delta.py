"""Append-only checkpoints: each one stores only what changed since the last.

Writing the whole record after every transition would make storage grow with
the square of a run's length. Instead each checkpoint holds:

- the messages from the first one that changed (usually just the newest; the
  engine marks older ones it rewrites, e.g. when compacting),
- the trail records fired since the last checkpoint,
- a JSON diff of everything else (counters, stall state, ...), in which lists
  that only grew or slid forward are stored as "drop k, append these".

Folding the checkpoints of a run in order gives back its full record.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields, is_dataclass
from typing import Any

from statemachine_agent.machine.run import RunError, RunRecord, checkpointing
from statemachine_agent.persistence.codec import Plain, to_plain

_LIST_FIELDS = tuple(f.name for f in fields(RunRecord) if checkpointing(f.name) == "appended")
"""Lists stored as their new items (`"appended"` fields); everything else is diffed."""


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def diff(old: Plain, new: Plain) -> Plain:
    """An operation turning `old` into `new` (callers skip equal values)."""
    if isinstance(old, dict) and isinstance(new, dict):
        changed = {k: diff(old[k], v) for k, v in new.items() if k in old and old[k] != v}
        added = {k: {"$set": v} for k, v in new.items() if k not in old}
        removed = [k for k in old if k not in new]
        op: dict[str, Plain] = {"$dict": {**changed, **added}}
        if removed:
            op["$del"] = removed
        return op
    if isinstance(old, list) and isinstance(new, list):
        for drop in range(len(old) + 1):
            kept = len(old) - drop
            if kept <= len(new) and old[drop:] == new[:kept]:
                return {"$list": {"drop": drop, "append": new[kept:]}}
    return {"$set": new}


def apply(old: Plain, op: Plain) -> Plain:
    """Apply an operation made by `diff`."""
    if "$set" in op:
        return op["$set"]
    if "$dict" in op:
        out = dict(old)
        for key in op.get("$del", ()):
            out.pop(key, None)
        for key, sub in op["$dict"].items():
            out[key] = apply(out.get(key), sub)
        return out
    if "$list" in op:
        spec = op["$list"]
        return list(old)[spec["drop"] :] + list(spec["append"])
    raise ValueError(f"not a checkpoint operation: {op!r}")


@dataclass(slots=True)
class CheckpointWriter:
    """Turns a run's successive states into the deltas a checkpointer appends."""

    saved_messages: int = 0
    last_message_json: str = ""
    saved_trail: int = 0
    last_state: dict[str, Plain] = field(default_factory=dict)
    frozen: dict[str, tuple[Any, Plain]] = field(default_factory=dict)

    @classmethod
    def resumed(cls, record: RunRecord) -> CheckpointWriter:
        """A writer that continues after the record's last checkpoint."""
        writer = cls()
        writer.last_state = state_plain(record)
        writer.saved_trail = len(record.trail)
        writer.saved_messages = len(record.messages)
        if record.messages:
            writer.last_message_json = _dumps(to_plain(record.messages[-1]))
        return writer

    def delta(self, record: RunRecord) -> dict[str, Plain]:
        """What changed since the last call, as one checkpoint body."""
        body: dict[str, Plain] = {"seq": record.seq, "state_name": record.state}
        messages = self._messages_delta(record)
        if messages is not None:
            body["messages"] = messages
        trail = record.trail[self.saved_trail :]
        if trail:
            body["trail"] = [_compact(t.to_dict()) for t in trail]
            self.saved_trail = len(record.trail)
        state = state_plain(record, self.frozen)
        if state != self.last_state:
            body["state"] = diff(self.last_state, state)
            self.last_state = state
        return body

    def _messages_delta(self, record: RunRecord) -> dict[str, Plain] | None:
        """Messages from the first changed one; None when nothing changed.

        Only the newest saved message is compared (phases extend the latest
        message in place); older ones are rewritten only when the engine marks
        them dirty, as compaction does.
        """
        messages = record.messages
        count = len(messages)
        start = min(self.saved_messages, count)
        if record.dirty_from is not None:
            start = min(start, record.dirty_from)
            record.dirty_from = None
        if 0 < start == self.saved_messages:
            previous = _dumps(to_plain(messages[start - 1], f"messages[{start - 1}]"))
            if previous != self.last_message_json:
                start -= 1
        shrank = count < self.saved_messages
        fresh = [to_plain(m, f"messages[{start + i}]") for i, m in enumerate(messages[start:])]
        self.saved_messages = count
        if fresh:
            self.last_message_json = _dumps(fresh[-1])
        elif shrank:
            self.last_message_json = _dumps(to_plain(messages[-1])) if messages else ""
        if not fresh and not shrank:
            return None
        return {"from": start, "items": fresh}


def state_plain(
    record: RunRecord, frozen: dict[str, tuple[Any, Plain]] | None = None
) -> dict[str, Plain]:
    """The record's plain form minus the lists checkpointed on their own.

    Each field is stored by its declared rule (`RunRecord` field metadata, see
    `machine.run.Checkpointing`): `replaced` values are converted once per value
    (`frozen` remembers them by identity), groups of fields are walked field by
    field, `not_stored` fields are left out. The last reply's content is usually
    the last message verbatim; it is then stored as a reference to that message
    instead of a second copy.
    """
    cache = frozen if frozen is not None else {}
    plain = _fields_plain(record, "", cache)
    del plain["seq"], plain["state"]  # in every body already, as seq and state_name
    reply, messages = record.last_reply, record.messages
    if reply is not None:
        content = list(reply.content)
        for index in range(len(messages) - 1, max(len(messages) - 3, -1), -1):
            if messages[index].get("role") == "assistant":
                if messages[index].get("content") == content:
                    plain["last_reply"] = {**plain["last_reply"], "content": {_MESSAGE_REF: index}}
                break
    return plain


def _fields_plain(obj: Any, prefix: str, cache: dict[str, tuple[Any, Plain]]) -> dict[str, Plain]:
    plain: dict[str, Plain] = {}
    for f in fields(obj):
        rule = f.metadata.get("checkpoint", "diffed")
        if not f.init or rule in ("appended", "not_stored"):
            continue
        value, path = getattr(obj, f.name), prefix + f.name
        if rule == "replaced":
            known = cache.get(path)
            if known is None or known[0] is not value:
                known = cache[path] = (value, to_plain(value, path))
            plain[f.name] = known[1]
        elif is_dataclass(value) and not isinstance(value, type):
            plain[f.name] = _fields_plain(value, path + ".", cache)
        else:
            plain[f.name] = to_plain(value, path)
    return plain


_MESSAGE_REF = "$message"

_DERIVED = ("iteration", "turn", "elapsed_s", "usage_total", "cost_usd")
"""Trail record fields equal to the record's counters at its checkpoint; not stored twice."""


def _compact(step: Mapping[str, Plain]) -> dict[str, Plain]:
    return {k: v for k, v in step.items() if k not in _DERIVED}


def _expand(step: Mapping[str, Plain], state: Mapping[str, Plain]) -> dict[str, Plain]:
    """A compact trail record with the counters of the state checkpointed with it."""
    return {
        **step,
        "iteration": state["iteration"],
        "turn": state["turn"],
        "elapsed_s": round(float(state["elapsed_s"]), 6),
        "usage_total": dict(state["usage"]),
        "cost_usd": state["cost_usd"],
    }


def fold(bodies: Iterable[Mapping[str, Plain]]) -> dict[str, Plain] | None:
    """The plain record after applying every checkpoint body in order."""
    state: dict[str, Plain] = {}
    messages: list[Plain] = []
    trail: list[Plain] = []
    seen = False
    for body in bodies:
        seen = True
        if "messages" in body:
            part = body["messages"]
            messages = messages[: part["from"]] + list(part["items"])
        if "state" in body:
            state = apply(state, body["state"])
        state = {**state, "seq": body["seq"], "state": body["state_name"]}
        trail.extend(_expand(step, state) for step in body.get("trail", ()))
    if not seen:
        return None
    reply = state.get("last_reply")
    if isinstance(reply, dict) and isinstance(reply.get("content"), dict):
        index = reply["content"][_MESSAGE_REF]
        state = {**state, "last_reply": {**reply, "content": messages[index]["content"]}}
    return {**state, "messages": messages, "trail": trail}


def tombstone(record: RunRecord, why: str) -> dict[str, Plain]:
    """A last, small checkpoint saying the run failed, for when its real one could not be stored.

    Without it the store would still show the state of the last checkpoint that
    got through, often mid-`act`, and a resume would trust that and run a
    side-effecting call again. It names the failure in plain ASCII, so the value
    that broke the full checkpoint cannot break this one.
    """
    message = why.encode("ascii", "backslashreplace").decode("ascii")
    error = to_plain(RunError(kind="CheckpointError", message=message), "error")
    return {
        "seq": record.seq,
        "state_name": "failed",
        "state": {"$dict": {"error": {"$set": error}}},
    }


def counters(body: Mapping[str, Plain]) -> tuple[int | None, float | None]:
    """The model calls and cost a checkpoint body sets, if it changes them.

    Lets a store keep a run's listing (`runs`) current without folding its checkpoints.
    """
    state = body.get("state")
    ops = state.get("$dict") if isinstance(state, dict) else None
    if not isinstance(ops, dict):
        return None, None
    found: list[Plain] = []
    for key in ("iteration", "cost_usd"):
        op = ops.get(key)
        found.append(op["$set"] if isinstance(op, dict) and "$set" in op else None)
    iteration, cost = found
    return (
        iteration if isinstance(iteration, int) else None,
        float(cost) if isinstance(cost, int | float) else None,
    )
