"""Taint: what a run may do once untrusted text has entered it.

A fence around outside text (`Tool(untrusted=True)`) asks the model to read it as
data; it cannot make it. Prompt injection works exactly when the model obeys text
it should only have read, and what an injection wants is a side effect: send the
mail, pay the invoice, delete the file. So the engine tracks where the history's
text came from, and once any of it came from an untrusted source the run is
*tainted* for good (compaction and summaries keep it; a summary of tainted text is
tainted text). `TaintPolicy` then says what a call of a `side_effect=True` tool in
a tainted run gets: a person's decision (`"approve"`), a refusal (`"deny"`), or
nothing special (`"allow"`). Calls of tools without side effects are never gated.

The policy is plain frozen data carried in every run record's settings, so the
guard that routes a gated call to `awaiting_approval` reads only the record.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, get_args

SideEffects = Literal["approve", "deny", "allow"]
"""What a side-effect call of a tainted run gets (see `TaintPolicy.side_effects`)."""

EXCERPT_CHARS = 120
"""How much of an untrusted result a taint source quotes, for the reviewer."""


@dataclass(frozen=True, slots=True)
class TaintPolicy:
    """What a tainted run may do: `Agent(..., taint=TaintPolicy(side_effects="approve"))`.

    - `"approve"` (the default): each call of a `side_effect=True` tool goes to the
      agent's approval policy with `call.tainted_by` naming the untrusted sources;
      without a policy the run pauses in `awaiting_approval` for a person.
    - `"deny"`: the call is answered with an `is_error` result naming the taint, and
      the run goes on (the model may finish without the side effect).
    - `"allow"`: no gate (the behaviour before taint tracking).

    `trusted_tools` names side-effect tools the host accepts even in a tainted run
    (an append-only log, a notification to the run's own owner): choose tools whose
    worst use under an attacker's arguments is harmless (see docs/security.md).
    """

    side_effects: SideEffects = "approve"
    trusted_tools: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        """Refuse a mode or a tool list that cannot work, naming the parameter."""
        if self.side_effects not in get_args(SideEffects):
            choices = ", ".join(repr(c) for c in get_args(SideEffects))
            raise ValueError(
                f"TaintPolicy: side_effects must be one of {choices}, got {self.side_effects!r}"
            )
        names: object = self.trusted_tools
        if isinstance(names, str) or not all(isinstance(n, str) for n in names):  # type: ignore[attr-defined]
            raise TypeError(
                f"TaintPolicy: trusted_tools must be a collection of tool names, got {names!r}"
            )
        object.__setattr__(self, "trusted_tools", tuple(names))  # type: ignore[arg-type]

    def gates(self, tool: str, *, side_effect: bool) -> bool:
        """Whether a call of `tool` in a tainted run is gated by this policy."""
        return side_effect and self.side_effects != "allow" and tool not in self.trusted_tools


DEFAULT_TAINT = TaintPolicy()
"""The agent's default (`"approve"`): it only acts in a run that has an untrusted source
and calls a side-effect tool. A sub-agent left with this default takes its parent's
policy instead (an explicit `TaintPolicy()` of its own is kept)."""


def excerpt(text: str) -> str:
    """A short, one-line quote of an untrusted result for the reviewer."""
    flat = " ".join(text.split())
    return flat if len(flat) <= EXCERPT_CHARS else flat[: EXCERPT_CHARS - 1] + "…"


def carries_free_text(schema: Mapping[str, Any], *, extras_dropped: bool = False) -> bool:
    """Whether a value valid under this JSON schema can carry free text.

    Free text is what an injection travels in. Not free: booleans, numbers, null,
    strings from an `enum`/`const` (a `Literal`, an `Enum`), and strings bounded by
    both a `pattern` and a `maxLength`; arrays and objects of such values, with no
    keys beyond their declared properties (`additionalProperties: false`; with
    `extras_dropped`, for a type pydantic validates, which drops undeclared keys,
    leaving it out is as good). Anything unknown counts as free text: the safe answer.
    """
    defs = schema.get("$defs") or schema.get("definitions") or {}
    return _free(schema, defs, depth=0, closed=extras_dropped)


def _free(node: Any, defs: Mapping[str, Any], *, depth: int, closed: bool = False) -> bool:
    if depth > 32 or not isinstance(node, Mapping):
        return True
    ref = node.get("$ref")
    if isinstance(ref, str):
        name = ref.rsplit("/", 1)[-1]
        return name not in defs or _free(defs[name], defs, depth=depth + 1, closed=closed)
    if "const" in node or "enum" in node:
        return False
    for combined in ("anyOf", "oneOf", "allOf"):
        if combined in node:
            options = node[combined]
            return not isinstance(options, list) or any(
                _free(o, defs, depth=depth + 1, closed=closed) for o in options
            )
    kind = node.get("type")
    if isinstance(kind, list):
        return any(_free({**node, "type": k}, defs, depth=depth + 1, closed=closed) for k in kind)
    if kind in ("boolean", "integer", "number", "null"):
        return False
    if kind == "string":
        return not ("pattern" in node and isinstance(node.get("maxLength"), int))
    if kind == "array":
        return _free(node.get("items", {}), defs, depth=depth + 1, closed=closed)
    if kind == "object":
        extra = node.get("additionalProperties", True)
        # extra keys are free text themselves, whatever their values
        if extra is not False and (not closed or "additionalProperties" in node):
            return True
        props = node.get("properties") or {}
        return any(_free(p, defs, depth=depth + 1, closed=closed) for p in props.values())
    return True
