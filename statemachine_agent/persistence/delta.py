"""Append-only checkpoints: each one stores only what changed since the last.

Writing the whole record after every transition would make storage grow with
the square of a run's length. Instead each checkpoint holds:

- the messages from the first one that changed (usually just the newest; the
  engine marks older ones it rewrites, e.g. when compacting),
- the trail records fired since the last checkpoint,
- a JSON diff of everything else (counters, stall state, ...), in which lists
  that only grew or slid forward are stored as "drop k, append these".

Nothing is stored twice where the fold can rebuild it (what keeps a run's payload
within about twice its transcript):

- a `tool_result` whose text is the text of a tool outcome already stored (the
  outcomes of `act`, checkpointed before `observe` appends them to the history)
  is stored as a reference to that outcome (`{"$outcome": i}`);
- a diff sets a number, string, boolean or null as the bare value (`{"$set": v}`
  only for objects and lists);
- a trail record leaves out its counters (the state's at its checkpoint), its
  `source` when it is the previous record's `dest`, its `seq` when it follows the
  previous one, its `dest` when it is the body's `state_name` (the last record of
  a body), an empty `via`, and its guards' names when an earlier record had
  the same ones: `guards` is then `[k, bits]`, the k-th set of names seen in the
  run and their verdicts as bits (names[i] is bit i);
- the pending calls, when they are the tool_use blocks of the last assistant
  message, are stored as a reference to it (`{"$calls": i}`, plus any
  idempotency keys); a tool outcome leaves out its fields at their defaults, and
  the call's id and name when they are the pending call's at the same place.

Folding the checkpoints of a run in order gives back its full record.
"""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import MISSING, dataclass, field, fields, is_dataclass
from typing import Any

from statemachine_agent.machine.run import RunError, RunRecord, checkpointing
from statemachine_agent.persistence.codec import Plain, to_plain

_LIST_FIELDS = tuple(f.name for f in fields(RunRecord) if checkpointing(f.name) == "appended")
"""Lists stored as their new items (`"appended"` fields); everything else is diffed."""


_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))
"""Made once (`json.dumps` with options builds an encoder per call): a message's text,
compared at every checkpoint to see whether a phase changed it in place."""


def _dumps(value: Any) -> str:
    return _ENCODER.encode(value)


def diff(old: Plain, new: Plain) -> Plain:
    """An operation turning `old` into `new` (callers skip equal values)."""
    if isinstance(old, dict) and isinstance(new, dict):
        changed = {
            k: diff(old[k], v)
            for k, v in new.items()
            if k in old and old[k] is not v and old[k] != v
        }
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
                if not new:
                    return {"$set": []}
                spec: dict[str, Plain] = {"drop": drop} if drop else {}
                if new[kept:]:
                    spec["append"] = new[kept:]
                return {"$list": spec}
    return {"$set": new} if isinstance(new, dict | list) else new


def apply(old: Plain, op: Plain) -> Plain:
    """Apply an operation made by `diff`: a value that is not an object is set as it is
    (a number, a string, ...), an object is `$set`, `$dict` or `$list`."""
    if not isinstance(op, dict):
        return op
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
        return list(old)[spec.get("drop", 0) :] + list(spec.get("append", ()))
    raise ValueError(f"not a checkpoint operation: {op!r}")


@dataclass(slots=True)
class CheckpointWriter:
    """Turns a run's successive states into the deltas a checkpointer appends."""

    saved_messages: int = 0
    last_message_json: str = ""
    saved_trail: int = 0
    last_state: dict[str, Plain] = field(default_factory=dict)
    frozen: dict[str, tuple[Any, Plain]] = field(default_factory=dict)
    trail: TrailCodec = field(default_factory=lambda: TrailCodec())

    @classmethod
    def resumed(cls, record: RunRecord) -> CheckpointWriter:
        """A writer that continues after the record's last checkpoint."""
        writer = cls()
        writer.last_state = state_plain(record)
        for step in record.trail:
            writer.trail.saw(step.to_dict())
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
            body["messages"] = _outcome_refs(messages, self.last_state.get("outcomes"))
        trail = record.trail[self.saved_trail :]
        if trail:
            counters = _counters(record)
            body["trail"] = steps = [self.trail.encode(t.to_dict(), counters) for t in trail]
            if steps[-1].get("dest") == record.state:
                del steps[-1]["dest"]  # the body's state_name
            self.saved_trail = len(record.trail)
        last = self.last_state
        state = state_plain(record, self.frozen, last)
        if state is not last:
            op = diff(last, state)
            changes = op["$dict"]
            if changes or "$del" in op:
                body["state"] = op
                if "metadata" in changes:
                    changes["metadata"] = {"$set": state["metadata"]}  # whole: stores list by it
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
    record: RunRecord,
    frozen: dict[str, tuple[Any, Plain]] | None = None,
    last: dict[str, Plain] | None = None,
) -> dict[str, Plain]:
    """The record's plain form minus the lists checkpointed on their own.

    Each field is stored by its declared rule (`RunRecord` field metadata, see
    `machine.run.Checkpointing`): `replaced` values are converted once per value
    (`frozen` remembers them by identity), groups of fields are walked field by
    field, `not_stored` fields are left out. The last reply's content is usually
    the last message verbatim; it is then stored as a reference to that message
    instead of a second copy.

    With `last`, the form this returned at the previous checkpoint, each value
    equal to the one there is that very object, and so is a group none of whose
    values changed, and the whole form when nothing did: `diff` then passes over
    what did not change by identity, and a checkpoint costs what changed rather
    than the record's size. (Equal here is the `==` the diff has always used, so
    the bodies are the same as without `last`.)
    """
    cache = frozen if frozen is not None else {}
    plain = _fields_plain(record, "", cache, last)  # a new dict: `last` has no seq or state
    del plain["seq"], plain["state"]  # in every body already, as seq and state_name
    reply, messages = record.last_reply, record.messages
    if reply is not None:
        content = list(reply.content)
        for index in range(len(messages) - 1, max(len(messages) - 3, -1), -1):
            if messages[index].get("role") == "assistant":
                if messages[index].get("content") == content:
                    plain["last_reply"] = {**plain["last_reply"], "content": {_MESSAGE_REF: index}}
                break
    calls = plain.get("pending_calls")
    if isinstance(calls, list) and calls:
        plain["pending_calls"] = _calls_ref(calls, messages) or calls
    outcomes = plain.get("outcomes")
    if isinstance(outcomes, list) and outcomes:
        plain["outcomes"] = _outcomes_plain(outcomes, calls if isinstance(calls, list) else [])
    return plain if last is None else _reuse(plain, last)


_ABSENT: Any = object()


def _reuse(new: dict[str, Plain], last: dict[str, Plain]) -> dict[str, Plain]:
    """`new` (a dict this module just built) with each value that equals `last`'s
    replaced by `last`'s; `last` itself when that is every value, under the same keys.

    Only `new`'s own entries are replaced, never anything inside them (a value may
    be a `replaced` field's cached form). An equal value of another type (1 and
    True) is kept as it is.
    """
    same = len(new) == len(last)
    for key, value in new.items():
        old = last.get(key, _ABSENT)
        if old is value:
            continue
        if type(old) is type(value) and old == value:
            new[key] = old
            continue
        same = False
    return last if same else new


def _outcomes_plain(outcomes: list[Plain], calls: list[Plain]) -> list[Plain]:
    """The outcomes without their fields at defaults, and without the call's id and
    name when they are those of the pending call at the same place."""
    stored: list[Plain] = []
    for index, outcome in enumerate(outcomes):
        kept = _without_defaults(outcome)
        call = calls[index] if index < len(calls) else None
        if (
            isinstance(kept, dict)
            and isinstance(call, dict)
            and (kept.get("tool_use_id"), kept.get("name")) == (call.get("id"), call.get("name"))
        ):
            kept = {k: v for k, v in kept.items() if k not in ("tool_use_id", "name")}
        stored.append(kept)
    return stored


def _outcomes_of(outcomes: list[Plain], calls: Plain) -> list[Plain]:
    """The stored outcomes with their call's id and name back (`_outcomes_plain`)."""
    pending = calls if isinstance(calls, list) else []
    full: list[Plain] = []
    for index, outcome in enumerate(outcomes):
        if not isinstance(outcome, dict):
            full.append(outcome)
            continue
        whole = {**copy.deepcopy(_OUTCOME_DEFAULTS), **outcome}
        if "tool_use_id" not in outcome and index < len(pending):
            call = pending[index]
            whole = {"tool_use_id": call["id"], "name": call["name"], **whole}
        full.append(whole)
    return full


def _outcome_defaults() -> dict[str, Plain]:
    from statemachine_agent.tools.base import ToolOutcome

    found: dict[str, Plain] = {}
    for f in fields(ToolOutcome):
        if f.default is not MISSING:
            found[f.name] = to_plain(f.default)
        elif f.default_factory is not MISSING:
            found[f.name] = to_plain(f.default_factory())
    return found


_OUTCOME_DEFAULTS = _outcome_defaults()
"""A tool outcome's fields at their defaults, left out of a stored outcome (the record's
codec fills them back in)."""


def _without_defaults(outcome: Plain) -> Plain:
    if not isinstance(outcome, dict):
        return outcome
    return {
        k: v
        for k, v in outcome.items()
        if k not in _OUTCOME_DEFAULTS or v != _OUTCOME_DEFAULTS[k] or k == "content"
    }


_CALLS_REF = "$calls"


def _calls_ref(calls: list[Plain], messages: list[Any]) -> dict[str, Plain] | None:
    """The pending calls as a reference to the assistant message whose tool_use blocks
    they are (with their idempotency keys), when they are exactly those blocks."""
    for index in range(len(messages) - 1, max(len(messages) - 3, -1), -1):
        message = messages[index]
        if message.get("role") != "assistant":
            continue
        content = message.get("content")
        blocks = (
            [b for b in content if b.get("type") == "tool_use"] if isinstance(content, list) else []
        )
        same = len(blocks) == len(calls) and all(
            isinstance(c, dict)
            and set(c) == {"id", "name", "input", "idempotency_key"}
            and (c["id"], c["name"], c["input"]) == (b.get("id"), b.get("name"), b.get("input"))
            for c, b in zip(calls, blocks, strict=True)
        )
        if not same:
            return None
        ref: dict[str, Plain] = {_CALLS_REF: index}
        keys = [c["idempotency_key"] for c in calls]
        if any(keys):
            ref["keys"] = keys
        return ref
    return None


def _calls_of(ref: Mapping[str, Plain], messages: list[Plain]) -> list[Plain]:
    """The pending calls a `_calls_ref` stands for."""
    content = messages[ref[_CALLS_REF]]["content"]
    blocks = [b for b in content if b.get("type") == "tool_use"]
    keys = ref.get("keys") or [""] * len(blocks)
    return [
        {"id": b["id"], "name": b["name"], "input": b["input"], "idempotency_key": key}
        for b, key in zip(blocks, keys, strict=True)
    ]


_SCALARS = frozenset({type(None), bool, int, str})
"""Values that are their own plain form (a finite float too): taken without a call."""


def _fields_plain(
    obj: Any, prefix: str, cache: dict[str, tuple[Any, Plain]], last: Plain
) -> dict[str, Plain]:
    """`obj`'s stored fields in plain form; with `last`, its form at the previous
    checkpoint, what did not change is `last`'s (`_reuse`)."""
    previous = last if type(last) is dict else None
    plain: dict[str, Plain] = {}
    for name, replaced, nested in _stored_fields(type(obj)):
        value = getattr(obj, name)
        kind = type(value)
        if kind in _SCALARS or (kind is float and math.isfinite(value)):
            plain[name] = value
            continue
        path = prefix + name
        if replaced:
            known = cache.get(path)
            if known is None:
                known = cache[path] = (value, to_plain(value, path))
            elif known[0] is not value:
                known = cache[path] = (value, _plain_again(value, known[0], known[1], path))
            plain[name] = known[1]
        elif nested and is_dataclass(value) and not isinstance(value, type):
            group = previous.get(name) if previous is not None else None
            plain[name] = _fields_plain(value, path + ".", cache, group)
        else:
            plain[name] = to_plain(value, path)
    return plain if previous is None else _reuse(plain, previous)


def _plain_again(value: Any, old: Any, old_plain: Plain, path: str) -> Plain:
    """The plain form of a `replaced` field's new value, taking the old value's plain
    form of every part the two share (the same object).

    Sound by the `replaced` rule: a value is never changed in place, so neither is
    any part of it, and a part still held by the new value is as it was converted.
    The stall detector's state, a new dict each iteration holding a new list of the
    same observation dicts (up to 200), then costs its newest observation, not all.
    """
    if value is old:
        return old_plain
    if type(value) is dict and type(old) is dict and type(old_plain) is dict:
        out: dict[str, Plain] = {}
        for key, item in value.items():
            if type(key) is not str:
                return to_plain(value, path)  # names the bad key
            was = old.get(key, _ABSENT)
            out[key] = (
                to_plain(item, f"{path}.{key}")
                if was is _ABSENT
                else _plain_again(item, was, old_plain[key], f"{path}.{key}")
            )
        return out
    if type(value) is list and type(old) is list and type(old_plain) is list:
        known = {id(part): form for part, form in zip(old, old_plain, strict=True)}
        return [
            known[id(item)] if id(item) in known else to_plain(item, f"{path}[{index}]")
            for index, item in enumerate(value)
        ]
    return to_plain(value, path)


_STORED: dict[type[Any], tuple[tuple[str, bool, bool], ...]] = {}


def _stored_fields(kind: type[Any]) -> tuple[tuple[str, bool, bool], ...]:
    """A record type's stored fields, read from its declarations once: (name, whether
    its value is replaced rather than changed, whether it may hold a dataclass)."""
    found = _STORED.get(kind)
    if found is None:
        found = _STORED[kind] = tuple(
            (f.name, f.metadata.get("checkpoint", "diffed") == "replaced", _may_nest(f.type))
            for f in fields(kind)
            if f.init and f.metadata.get("checkpoint", "diffed") not in ("appended", "not_stored")
        )
    return found


def _may_nest(hint: Any) -> bool:
    """False only for fields declared as a plain scalar, which never hold a dataclass."""
    return hint not in ("int", "float", "str", "bool", int, float, str, bool)


_MESSAGE_REF = "$message"

_DERIVED = ("iteration", "turn", "elapsed_s", "usage_total", "cost_usd")
"""Trail record fields that usually equal the record's counters at its checkpoint: not
stored when they do. A transition carried into a later write (the engine writes a cheap
transition with the next one) keeps those that differ."""


def _counters(record: RunRecord) -> dict[str, Plain]:
    """The record's counters as its last trail record would show them (`_DERIVED`)."""
    return {
        "iteration": record.iteration,
        "turn": record.turn,
        "elapsed_s": round(record.elapsed_s, 6),
        "usage_total": record.usage.to_dict(),
        "cost_usd": record.cost_usd,
    }


_OUTCOME_REF = "$outcome"


def _outcome_refs(part: dict[str, Plain], outcomes: Plain) -> dict[str, Plain]:
    """The messages delta with each tool_result text that an outcome already stored
    holds replaced by a reference to that outcome (the text is all the fold takes)."""
    if not isinstance(outcomes, list) or not outcomes:
        return part
    known = {
        o["content"]: i
        for i, o in enumerate(outcomes)
        if isinstance(o, dict) and isinstance(o.get("content"), str)
    }
    items: list[Plain] = []
    for message in part["items"]:
        content = message.get("content") if isinstance(message, dict) else None
        if message.get("role") != "user" or not isinstance(content, list):
            items.append(message)
            continue
        blocks: list[Plain] = []
        for block in content:
            index = None
            if isinstance(block, dict) and block.get("type") == "tool_result":
                text = block.get("content")
                index = known.get(text) if isinstance(text, str) else None
            blocks.append(block if index is None else {**block, "content": {_OUTCOME_REF: index}})
        items.append({**message, "content": blocks})
    return {**part, "items": items}


def _outcome_texts(part: Mapping[str, Plain], outcomes: Plain) -> list[Plain]:
    """The messages of a stored delta with its outcome references resolved (`_outcome_refs`)."""
    items: list[Plain] = []
    for message in part["items"]:
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, list) or not any(_is_ref(b) for b in content):
            items.append(message)
            continue
        blocks = [
            {**b, "content": outcomes[b["content"][_OUTCOME_REF]]["content"]} if _is_ref(b) else b
            for b in content
        ]
        items.append({**message, "content": blocks})
    return items


def _is_ref(block: Plain) -> bool:
    return (
        isinstance(block, dict)
        and isinstance(block.get("content"), dict)
        and _OUTCOME_REF in block["content"]
    )


class TrailCodec:
    """Writes (and reads back) trail records without what the fold can rebuild.

    Both sides keep the same table: every set of guard names in the order the run
    first fired it, and the record before, so a stored record can refer to them.
    """

    def __init__(self) -> None:
        self.names: list[tuple[str, ...]] = []
        self._index: dict[tuple[str, ...], int] = {}
        self.previous: Mapping[str, Plain] | None = None

    def saw(self, step: Mapping[str, Plain]) -> None:
        """Take a full record (one written, read, or of a resumed record) into the table."""
        guards = step.get("guards")
        if isinstance(guards, dict):
            names = tuple(guards)
            if names not in self._index:
                self._index[names] = len(self.names)
                self.names.append(names)
        self.previous = step

    def encode(self, step: Mapping[str, Plain], counters: Mapping[str, Plain]) -> dict[str, Plain]:
        """The stored form of a full trail record, written with a record whose counters
        are `counters` (those it shares with them are left out)."""
        out = {k: v for k, v in step.items() if k not in _DERIVED or v != counters.get(k)}
        previous = self.previous
        if previous is not None and out.get("source") == previous.get("dest"):
            del out["source"]
        if previous is not None and out.get("seq") == _next_seq(previous):
            del out["seq"]
        if out.get("via") == []:
            del out["via"]
        guards = step.get("guards")
        if isinstance(guards, dict) and all(isinstance(v, bool) for v in guards.values()):
            index = self._index.get(tuple(guards))
            if index is not None:
                bits = sum(1 << i for i, verdict in enumerate(guards.values()) if verdict)
                out["guards"] = [index, bits]
        self.saw(step)
        return out

    def decode(self, stored: Mapping[str, Plain], state: Mapping[str, Plain]) -> dict[str, Plain]:
        """The full trail record of a stored one, with the counters of `state`."""
        step = dict(stored)
        previous = self.previous
        if "source" not in step and previous is not None:
            step["source"] = previous.get("dest")
        if "seq" not in step and previous is not None:
            step["seq"] = _next_seq(previous)
        step.setdefault("via", [])
        guards = step.get("guards")
        if isinstance(guards, list):
            index, bits = guards
            names = self.names[index]
            step["guards"] = {name: bool(bits >> i & 1) for i, name in enumerate(names)}
        full = _expand(_ordered(step), state)
        self.saw(full)
        return full


_TRAIL_ORDER = ("seq", "source", "trigger", "dest", "row", "guards", "via")


def _ordered(step: Mapping[str, Plain]) -> dict[str, Plain]:
    """A record's keys in the order `TransitionRecord.to_dict` gives them."""
    first = {k: step[k] for k in _TRAIL_ORDER if k in step}
    return {**first, **{k: v for k, v in step.items() if k not in first}}


def _next_seq(step: Mapping[str, Plain]) -> Plain:
    seq = step.get("seq")
    return seq + 1 if isinstance(seq, int) and not isinstance(seq, bool) else None


def _expand(step: Mapping[str, Plain], state: Mapping[str, Plain]) -> dict[str, Plain]:
    """A compact trail record with the counters of the state checkpointed with it."""
    counters: dict[str, Plain] = {
        "iteration": state["iteration"],
        "turn": state["turn"],
        "elapsed_s": round(float(state["elapsed_s"]), 6),
        "usage_total": dict(state["usage"]),
        "cost_usd": state["cost_usd"],
    }
    base = {k: v for k, v in step.items() if k not in counters}
    return {**base, **{k: step.get(k, v) for k, v in counters.items()}}


def fold(bodies: Iterable[Mapping[str, Plain]]) -> dict[str, Plain] | None:
    """The plain record after applying every checkpoint body in order."""
    state: dict[str, Plain] = {}
    messages: list[Plain] = []
    trail: list[Plain] = []
    codec = TrailCodec()
    seen = False
    for body in bodies:
        seen = True
        if "messages" in body:
            part = body["messages"]
            messages = messages[: part["from"]] + _outcome_texts(part, state.get("outcomes"))
        if "state" in body:
            state = apply(state, body["state"])
        state = {**state, "seq": body["seq"], "state": body["state_name"]}
        steps = list(body.get("trail", ()))
        if steps and "dest" not in steps[-1]:
            steps[-1] = {**steps[-1], "dest": body["state_name"]}
        trail.extend(codec.decode(step, state) for step in steps)
    if not seen:
        return None
    reply = state.get("last_reply")
    if isinstance(reply, dict) and isinstance(reply.get("content"), dict):
        index = reply["content"][_MESSAGE_REF]
        state = {**state, "last_reply": {**reply, "content": messages[index]["content"]}}
    calls = state.get("pending_calls")
    if isinstance(calls, dict) and _CALLS_REF in calls:
        state = {**state, "pending_calls": _calls_of(calls, messages)}
    outcomes = state.get("outcomes")
    if isinstance(outcomes, list) and outcomes:
        state = {**state, "outcomes": _outcomes_of(outcomes, state.get("pending_calls"))}
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
        found.append(op["$set"] if isinstance(op, dict) and "$set" in op else op)
    iteration, cost = found
    return (
        iteration if isinstance(iteration, int) else None,
        float(cost) if isinstance(cost, int | float) else None,
    )


def stamped_metadata(body: Mapping[str, Plain]) -> dict[str, Plain] | None:
    """The host's `metadata=` a checkpoint body sets (the run's first, or a resume that
    merged new metadata), if it sets it: lets a store list runs by it without folding."""
    state = body.get("state")
    ops = state.get("$dict") if isinstance(state, dict) else None
    op = ops.get("metadata") if isinstance(ops, dict) else None
    value = op.get("$set") if isinstance(op, dict) else None
    return value if isinstance(value, dict) else None
