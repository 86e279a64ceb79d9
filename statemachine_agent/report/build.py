"""Turn an audit file's events into the iterations a person reads.

The report and `inspect` are built from the events alone (never from the engine's
objects), so they work for any audit file: an old one, one from another machine,
one cut short by a crash. Every lookup is therefore forgiving: a missing or
oddly typed key gives an empty value, not a traceback.

An iteration is one trip through the model-calling state: it starts with the
transition into `reason` and holds everything up to the next one (the reply, the
tools it asked for, the guards that chose where to go next). Events before the
first model call, if any transitions happen there, form the `preamble`.

What is kept is bounded by what a person can read, not by the file (`fold.py` has the
caps): of each iteration, the first `ROWS_CAP` model calls, tool calls, transitions
and notes, the rest counted (`LeftOut`); of a run, the first and last iterations
(`ITERATIONS_CAP` in all), those between counted (`Gap`). The figures (iterations,
transitions, tool calls, tokens, cost) stay exact, so a file of millions of tiny
events is reported in bounded memory.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from statemachine_agent.errors import Error
from statemachine_agent.report._lenient import as_str
from statemachine_agent.report._reading import (
    MODEL_CALL_EVENTS,
    MODEL_STATE,
    PURPOSES_CAP,
    SUBAGENT_CALLS,
    RunReader,
    tally,
)
from statemachine_agent.report._records import (
    Gap,
    Iteration,
    LeftOut,
    ModelCall,
    Note,
    Outcome,
    Point,
    Report,
    SummaryStep,
    Tokens,
    ToolRun,
    Transition,
)
from statemachine_agent.report.fold import RUNS_CAP

__all__ = [
    "MODEL_CALL_EVENTS",
    "MODEL_STATE",
    "PURPOSES_CAP",
    "SUBAGENT_CALLS",
    "Gap",
    "Iteration",
    "LeftOut",
    "ModelCall",
    "Note",
    "Outcome",
    "Point",
    "Report",
    "ReportError",
    "SummaryStep",
    "Tokens",
    "ToolRun",
    "Transition",
    "build",
    "describe_calls",
    "model_calls",
]


def model_calls(events: Iterable[Mapping[str, Any]]) -> Counter[str]:
    """The model calls a run made, by purpose (`loop` for its own, `salvage`, `critic`):
    every call the budget was charged for, not only the loop's iterations. In an audit
    file with sub-agent runs, the calls of runs other than the file's first are counted
    as `sub-agent` calls (the first run was charged for them). The events may be a stream."""
    calls: Counter[str] = Counter()
    first: list[Any] = []
    for event in events:
        if not first:
            first.append(event.get("run_id"))
        if event.get("event") in MODEL_CALL_EVENTS:
            own = event.get("run_id") == first[0]
            tally(calls, (as_str(event.get("purpose")) or "loop") if own else SUBAGENT_CALLS)
    return calls


def describe_calls(calls: Counter[str]) -> str:
    """`4 model calls (1 salvage)`: the total, and the calls that were not the loop's."""
    total = sum(calls.values())
    others = ", ".join(
        f"{n} {purpose}" for purpose, n in sorted(calls.items()) if purpose != "loop"
    )
    return f"{total} model call{'s' if total != 1 else ''}" + (f" ({others})" if others else "")


class ReportError(Error, ValueError):
    """The file holds audit events, but nothing a report can be built from."""


def build(events: Iterable[Mapping[str, Any]], run_id: str | None = None) -> Report:
    """Gather a report from a run's events, in the order they were written.

    An audit file may hold sub-agent runs besides its own (their events carry a
    `parent_run_id`): the report is of `run_id`'s run (by default the file's first),
    and each sub-agent run it started is a report of its own, nested under the tool
    call that started it (`ToolRun.child`).

    The events are taken one at a time (a stream is fine), and each run's builder keeps
    only what the report shows (see the module's docstring), so its memory is bounded
    whatever the file's size or number of events. Runs that are neither `run_id`'s nor
    started by it, and runs past `RUNS_CAP`, are not gathered.
    """
    builders: dict[str, RunReader] = {}
    parents: dict[str, tuple[str, str]] = {}
    """Each sub-agent run: its parent's run id and the tool call that started it."""
    agents: dict[str, str] = {}
    chosen = run_id
    for event in events:
        rid = as_str(event.get("run_id"))
        if chosen is None:
            chosen = rid
        if (run_id is None and event.get("event") == "run.forked"
                and event.get("forked_from") == chosen and chosen in builders):  # fmt: skip
            builders[rid] = builders.pop(chosen)  # a fork's file: the original's events
            chosen = rid  # up to the fork point are the fork's history
        parent = event.get("parent_run_id")
        builder = builders.get(rid)
        if builder is None:
            if len(builders) >= RUNS_CAP or not (rid == chosen or as_str(parent) in builders):
                continue  # not a run this report shows
            builder = builders[rid] = RunReader()
        if parent is not None and as_str(parent) != rid and rid not in parents:
            parents[rid] = (as_str(parent), as_str(event.get("parent_tool_use_id")))
        if event.get("event") == "subagent.started" and len(agents) < RUNS_CAP:
            agents.setdefault(as_str(event.get("child_run_id")), as_str(event.get("agent")))
        builder.add(event)
    if chosen is None:
        raise ReportError("the audit file holds no events")
    if chosen not in builders:
        raise ReportError(f"the audit file holds no events of run {chosen!r}")
    return _assemble(chosen, builders, parents, agents, frozenset({chosen}))


def _assemble(
    run_id: str,
    builders: Mapping[str, RunReader],
    parents: Mapping[str, tuple[str, str]],
    agents: Mapping[str, str],
    above: frozenset[str],
) -> Report:
    """The report of `run_id`, with the reports of the sub-agent runs it started (`above`:
    the runs it was started under, so a file whose runs claim each other ends)."""
    children: dict[str, Report] = {}
    for child, (parent, call) in parents.items():
        if parent == run_id and child not in above and call not in children:
            children[call] = _assemble(child, builders, parents, agents, above | {child})
    return builders[run_id].report(children, agents.get(run_id) or None)
