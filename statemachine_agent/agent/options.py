"""The per-run options, declared once for every way a run starts.

`Agent.run`, `arun`, `stream`, `astream` and `start` take `**options:
Unpack[RunOptions]`; `Agent.resume`/`aresume` take `ResumeOptions`; a
`Conversation`'s turns (`send`, `asend`, `stream`, `astream`, `resume`,
`aresume`) take `TurnOptions`, the options both share (the conversation keeps
the history and names the run). A type checker reads each keyword's type from
here, so a misspelled option is caught before the code runs; at run time
`given` checks the keys (an unknown one raises `TypeError` naming it, as Python
does) and fills in the defaults, declared once on `Given`.

The families are generic in the type of their `output_type` option, so the
entry points can type their result by it: without the option (or with `None`)
a run's result has the agent's own output type (`RunResult[T]` for an
`Agent[T]`); with a class `U` it is a `RunResult[U]`; with anything else (a JSON
schema dict, a union) a `RunResult[Any]`. A bare `RunOptions` means
`RunOptions[Any]`, so options kept in a variable so annotated type the result
`Any`; annotate it `RunOptions[None]` (no `output_type` in it) to keep the
agent's type.
"""

from __future__ import annotations

import difflib
import inspect
import textwrap
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, Generic, TypedDict, TypeVar

import typing_extensions

if TYPE_CHECKING:
    from statemachine_agent.machine.cancel import CancelToken
    from statemachine_agent.models.base import JSON
    from statemachine_agent.policy.approval import Decision


OPTIONS: Mapping[str, str] = {
    "history": "the messages before the prompt (an earlier result's `messages`).",
    "cancel": "a `CancelToken` the host cancels from anywhere (`token.cancel()`); "
    "the run ends in `cancelled` at the next boundary.",
    "deadline": "seconds after which the run is cancelled the same way.",
    "run_id": "the run's id (a fresh one by default); a given id is leased in the "
    "store while the run is driven, so only one worker drives it at a time.",
    "decisions": "for a run awaiting approval, a `Decision` (`Approve()`, "
    "`Deny(message)`, `Edit(input)`) by pending tool_use id.",
    "output_type": "the answer's type for this run, over the agent's own (pass it "
    "again when resuming the run); a class `U` types the result `RunResult[U]`, "
    "anything else (a JSON schema dict) `RunResult[Any]`.",
    "deps": "any object (a user, a database handle) handed to every tool that declares "
    "a `RunContext` parameter; never stored, so pass it again to resume.",
    "metadata": "JSON (tenant, user, request id) for the tools too, stamped on every "
    "audit event and checkpoint of the run (on resume: merged over the run's own).",
    "wait": "seconds to wait for the run's lease (a conversation's: its turn's) while "
    "another worker holds it, before raising `RunLockedError`; 0 by default.",
}
"""What each option means: the one text the families' and entry points' docs show."""


OptionOutputT = typing_extensions.TypeVar("OptionOutputT", default=Any)
"""The type of the `output_type` option (`type[U]`, `None`, ...): what the entry
points' overloads read the result's type from."""


class TurnOptions(TypedDict, Generic[OptionOutputT], total=False):
    """The options of one run, however it starts (a conversation's turn takes these)."""

    cancel: CancelToken | None
    deadline: float | None
    output_type: OptionOutputT
    deps: Any
    metadata: Mapping[str, Any] | None
    wait: float


# `TypedDict` named again: on Python < 3.12 a TypedDict subclass's __mro__ drops its
# TypedDict bases, and the API reference (pdoc) then cannot tell where each key comes from.
class RunOptions(TurnOptions[OptionOutputT], TypedDict, total=False):
    """The options of a fresh run (`Agent.run`, `arun`, `stream`, `astream`, `start`)."""

    history: Sequence[JSON]
    run_id: str | None


# `TypedDict` named again: on Python < 3.12 a TypedDict subclass's __mro__ drops its
# TypedDict bases, and the API reference (pdoc) then cannot tell where each key comes from.
class ResumeOptions(TurnOptions[OptionOutputT], TypedDict, total=False):
    """The options of a resumed run (`Agent.resume`, `aresume`)."""

    decisions: Mapping[str, Decision] | None


@dataclass(frozen=True, slots=True)
class Given:
    """Every option with its default filled in: what an entry point hands on.

    Its fields are the keys of the option families, the defaults declared here
    once (a test keeps the two in step).
    """

    history: Sequence[JSON] = ()
    cancel: CancelToken | None = None
    deadline: float | None = None
    run_id: str | None = None
    output_type: Any = None
    deps: Any = None
    metadata: Mapping[str, Any] | None = None
    wait: float = 0.0
    decisions: Mapping[str, Decision] | None = None


def keys_of(family: Any) -> frozenset[str]:
    """The keys an options `TypedDict` declares (its bases' too)."""
    return frozenset(family.__required_keys__ | family.__optional_keys__)


_FIELDS = frozenset(f.name for f in fields(Given))


def given(where: str, options: Mapping[str, Any], family: Any) -> Given:
    """`options` checked against `family`'s keys, the rest defaulted.

    A key the family does not declare raises `TypeError` naming it (and the option
    it is likely a misspelling of), as Python does for an unknown keyword.
    """
    allowed = keys_of(family)
    unknown = [name for name in options if name not in allowed]
    if unknown:
        raise TypeError(_unknown(where, unknown, allowed))
    return Given(**{name: value for name, value in options.items() if name in _FIELDS})


def _unknown(where: str, unknown: Sequence[str], allowed: frozenset[str]) -> str:
    names = ", ".join(repr(name) for name in unknown)
    plural = "s" if len(unknown) > 1 else ""
    close = {
        name: match[0]
        for name in unknown
        if (match := difflib.get_close_matches(name, sorted(allowed), n=1))
    }
    if len(unknown) == 1 and close:
        hint = f" (did you mean {close[unknown[0]]!r}?)"
    else:
        pairs = ", ".join(f"{name!r} -> {match!r}" for name, match in close.items())
        hint = f" (did you mean {pairs}?)" if close else ""
    return (
        f"{where}() got {'an ' if not plural else ''}unexpected keyword argument{plural} "
        f"{names}{hint}; its options are: {', '.join(sorted(allowed))}"
    )


F = TypeVar("F", bound=Callable[..., Any])


def describe(family: Any) -> str:
    """The option lines of `family`, in declaration order (its bases' first)."""
    return "\n".join(
        textwrap.fill(f"{name}: {OPTIONS[name]}", 84, initial_indent="    ",
                      subsequent_indent="        ")
        for name in family.__annotations__
    )  # fmt: skip


def documented(family: Any) -> Callable[[F], F]:
    """Append `family`'s options to an entry point's docstring, so `help(Agent.run)`
    lists what the signature only names (`**options: Unpack[RunOptions]`)."""

    def mark(function: F) -> F:
        own = inspect.cleandoc(function.__doc__ or "")
        function.__doc__ = f"{own}\n\nOptions ({family.__name__}):\n{describe(family)}"
        return function

    return mark


def _document_families() -> None:
    """Each family's docstring lists its options, so `help(RunOptions)` says them."""
    for family in (TurnOptions, RunOptions, ResumeOptions):
        family.__doc__ = f"{family.__doc__}\n\n{describe(family)}"


_document_families()
