"""Which rows of the table an agent can take: reachability under its configuration.

`--transition-coverage` used to divide by every row of the table, so an agent that
can never summarize or reflect could not reach 100%, and a gap in its tests looked
like a row it can never take. `reachable_rows(agent)` folds the rule each guard
declares (`@requires` beside it in `machine/guards.py`) over the table:

- a row is reachable when its source is, every guard's rule allows it, and no row
  above it in its group always catches the same runs (a guard that reads only the
  settings, such as `verifier_configured`, holds for every run once allowed);
- a row ruled out is listed with the reason: the setting that rules it out;
- the `crashed` rows are reachable only through a defect and are kept apart.

The analysis assumes a model that honours the request (it calls only tools it is
offered); the reasons it gives say so where that matters. It lives in the agent's
room because `Agent.diagram` draws what it finds; the testing kit re-exports it
(`statemachine_agent.testing.reachable_rows`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from statemachine_agent.machine.guards import GUARDS
from statemachine_agent.machine.reach import Setup, is_constant, rule_of
from statemachine_agent.machine.table import INITIAL_STATE, ROWS, Row

if TYPE_CHECKING:
    from statemachine_agent.agent.core import Agent
    from statemachine_agent.machine.settings import RunSettings
    from statemachine_agent.tools.base import Tool

DEFECT_TRIGGER = "crashed"
"""The trigger of rows only a defect fires (a bug in a phase, not a model or tool failure)."""


@dataclass(frozen=True)
class Reachability:
    """The table's rows split by what an agent's configuration allows."""

    reachable: tuple[Row, ...]
    """Rows a run of the agent can fire, in table order."""
    unreachable: Mapping[Row, str] = field(default_factory=dict)
    """Each row the configuration rules out, with the reason (the setting that does)."""
    defect_rows: tuple[Row, ...] = ()
    """The `crashed` rows of reachable states: fired only by a defect."""

    def union(self, other: Reachability) -> Reachability:
        """What either configuration can reach (a suite that runs several agents)."""
        keys = {row.key for row in (*self.reachable, *other.reachable)}
        defects = {row.key for row in (*self.defect_rows, *other.defect_rows)}
        unreachable = {
            row: why
            for row, why in {**other.unreachable, **self.unreachable}.items()
            if row.key not in keys and row.key not in defects
        }
        return Reachability(
            reachable=tuple(r for r in ROWS if r.key in keys),
            unreachable={r: unreachable[r] for r in ROWS if r in unreachable},
            defect_rows=tuple(r for r in ROWS if r.key in defects),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "reachable": [_row_dict(r) for r in self.reachable],
            "unreachable": [{**_row_dict(r), "reason": why} for r, why in self.unreachable.items()],
            "defect_rows": [_row_dict(r) for r in self.defect_rows],
        }


def setup_of(agent: Agent[Any]) -> Setup:
    """What the guards' rules read of `agent`: its run settings and its tools."""
    return setup_from(agent._parts.settings, agent.tools, typed=agent.output_type is not None)


def setup_from(settings: RunSettings, offered: Iterable[Tool], *, typed: bool = False) -> Setup:
    """What the guards' rules read of a run driven with `settings` and the tools
    `offered` (what the engine's run observers are told: `observers.watch_runs`)."""
    from statemachine_agent.agent.subagents import may_pause

    tools = list(offered)
    typed = typed or settings.output_expected
    if typed and not settings.output_expected:
        import dataclasses

        settings = dataclasses.replace(settings, output_expected=True)
    staged = [t for t in tools if settings.commit is not None and t.deferrable]
    acting = [t for t in tools if t not in staged]  # run (or paused on) in `act`
    taint = settings.taint
    gated_in_commit = (
        taint is not None
        and taint.side_effects == "approve"
        and _may_taint(tools)
        and any(t.side_effect and t.name not in taint.trusted_tools for t in staged)
    )
    return Setup(
        settings=settings,
        offers_tools=bool(tools) or typed,
        may_pause=any(may_pause(t) for t in acting),
        commit_pauses=any(t.requires_approval for t in staged) or gated_in_commit,
        staged_approval=any(t.requires_approval for t in staged),
        fatal_tools=any(t.on_error == "fail" for t in tools),
        ends_run=typed or any(t.ends_run for t in tools),
        may_taint=_may_taint(tools),
        taint_gates=_taint_gates(settings, tools),
    )


def _children(tools: Iterable[Any]) -> list[Agent[Any]]:
    from statemachine_agent.agent.subagents import delegate_of

    found = (delegate_of(t) for t in tools)
    return [d.agent for d in found if d is not None]


def _may_taint(tools: list[Any]) -> bool:
    """Untrusted text can enter: an untrusted tool here or in a sub-agent (whose tainted
    answer in free text taints this run)."""
    return any(t.untrusted for t in tools) or any(
        _may_taint(list(child.tools)) for child in _children(tools)
    )


def _taint_gates(settings: RunSettings, tools: list[Tool]) -> bool:
    """A call this agent's `TaintPolicy` gates can come: its own side-effect tool outside
    `trusted_tools`, or a sub-agent's own taint-gated pause."""
    from statemachine_agent.machine.reach import taint_pause

    policy = settings.taint
    trusted = set(policy.trusted_tools) if policy is not None else set()
    staged = settings.commit is not None  # a deferrable call is gated in `commit`, not `act`
    own = any(
        t.side_effect and not t.ends_run and t.name not in trusted and not (staged and t.deferrable)
        for t in tools
    )
    return own or any(taint_pause(setup_of(child)) is None for child in _children(tools))


def reachable_rows(agent: Agent[Any]) -> Reachability:
    """The rows `agent` can fire, those its configuration rules out (and why), and the
    defect rows, kept apart."""
    return analyse(setup_of(agent))


def analyse(setup: Setup, rows: Iterable[Row] = ROWS) -> Reachability:
    """Reachability under `setup` (the form `reachable_rows` reads from an agent)."""
    table = tuple(rows)
    states = frozenset({INITIAL_STATE})
    while True:
        verdicts = _verdicts(Setup(**{**_fields(setup), "states": states}), table)
        entered = states | {row.dest for row, why in verdicts.items() if why is None}
        if entered == states:
            break
        states = entered
    defects = [r for r in table if r.trigger == DEFECT_TRIGGER]
    ruled_out = {r: why for r, why in verdicts.items() if why is not None}
    ruled_out.update({r: f"`{r.source}` is unreachable" for r in defects if r.source not in states})
    return Reachability(
        reachable=tuple(r for r, why in verdicts.items() if why is None),
        unreachable={r: ruled_out[r] for r in table if r in ruled_out},
        defect_rows=tuple(r for r in defects if r.source in states),
    )


_ONLY_OLD_RECORDS: Mapping[tuple[str, str, str, tuple[str, ...]], str] = {
    ("cancelled", "resumed", "perceive", ()): (
        "every cancel records where the run was (`cancelled_at`), so a resumed run takes "
        "one of the rows above; only a record written before that was kept takes this one"
    ),
}
"""Fallback rows the rows above them cover completely, with why (no guard to carry it)."""


_RowKey = tuple[str, str, str, tuple[str, ...]]
_TEXT_CLAIM: _RowKey = ("reason", "replied", "verify", ("is_end_turn", "verifier_configured"))
_TEXT_STAGED: _RowKey = ("reason", "replied", "commit", ("is_end_turn", "calls_staged"))

_ONLY_AFTER: Mapping[_RowKey, tuple[_RowKey, ...]] = {
    ("verify", "verified", "completed", ("verdict_passed",)): (_TEXT_CLAIM,),
    ("commit", "committed", "completed", ()): (_TEXT_STAGED, _TEXT_CLAIM),
    ("awaiting_approval", "resumed", "act", ()): (
        ("act", "tools_done", "awaiting_approval", ("taint_approval_pending",)),
        ("act", "tools_done", "awaiting_approval", ("approval_pending",)),
    ),
}
"""Rows only a run that came in by one of some rows can take, with those rows: a claim
`verify` passes (or a commit ends) without `finish_called` came from a plain end_turn, so
with those rows ruled out (an `output_type` takes every end_turn) only the finish tool's
claims get there; a run resumed into `act` paused in `act` (one paused in `commit` takes
the `committing` row)."""


def _verdicts(setup: Setup, table: tuple[Row, ...]) -> dict[Row, str | None]:
    """Each non-defect row: `None` when reachable under `setup`, else why not."""
    verdicts: dict[Row, str | None] = {}
    allowed: dict[Row, bool] = {}
    for row in table:
        if row.trigger == DEFECT_TRIGGER:
            continue
        why = None if row.source in setup.states else f"`{row.source}` is unreachable"
        if why is None:
            why = _ONLY_OLD_RECORDS.get(row.key) or _ruled_out(setup, row)
        came_by = _ONLY_AFTER.get(row.key, ())
        if why is None and came_by:
            open_ = [r for r in verdicts if r.key in came_by and verdicts[r] is None]
            if not open_:
                ways = " or ".join(
                    f"{k[0]} --{k[1]} [{' & '.join(k[3])}]--> {k[2]}" for k in came_by
                )
                rows = "that row is" if len(came_by) == 1 else "those rows are"
                why = f"only a run that came in by {ways} takes it, and {rows} unreachable"
        allowed[row] = why is None
        if why is None:
            why = _shadowed(setup, row, [e for e in table if allowed.get(e) and e is not row])
        verdicts[row] = why
    return verdicts


def _ruled_out(setup: Setup, row: Row) -> str | None:
    setup = Setup(**{**_fields(setup), "source": row.source})
    for name in row.guards:
        guard = GUARDS[name]
        rule = rule_of(guard)
        if rule is None:  # kept reachable (never wrongly ruled out); `missing_rules` names it
            continue
        why = rule(setup)
        if why is not None:
            return f"{name}: {why}"
    return None


def _shadowed(setup: Setup, row: Row, allowed_above: list[Row]) -> str | None:
    """A row above in the group whose guards always hold when this row's do catches
    every run this row would: the ones it adds are constant (settings only)."""
    constant = {
        name for name, guard in GUARDS.items() if is_constant(guard) and rule_of(guard) is not None
    }
    for above in allowed_above:
        if (above.source, above.trigger) != (row.source, row.trigger):
            continue
        extra = set(above.guards) - set(row.guards)
        if extra <= constant:
            names = " & ".join(sorted(extra))
            return (
                f"the row above, {_describe(above)}, takes every such run ({names} always "
                "holds in this configuration)"
            )
    return None


def missing_rules() -> list[str]:
    """What to add for each guard the table names without a reachability rule."""
    return [missing_rule_message(name) for name, guard in GUARDS.items() if rule_of(guard) is None]


def missing_rule_message(name: str) -> str:
    """What to do about a guard without a reachability rule (the test's message too)."""
    return (
        f"guard {name!r} declares no reachability rule: decorate it in "
        f"statemachine_agent/machine/guards.py with @requires(reach.<rule>) (a rule of "
        f"statemachine_agent/machine/reach.py, e.g. reach.always if any configuration can "
        f"make it true, or a new one returning the setting that rules it out), adding "
        f"constant=True if it reads only the settings"
    )


def _fields(setup: Setup) -> dict[str, Any]:
    return {name: getattr(setup, name) for name in Setup.__slots__}


def _describe(row: Row) -> str:
    via = f" [{' & '.join(row.guards)}]" if row.guards else ""
    return f"{row.source} --{row.trigger}{via}--> {row.dest}"


def _row_dict(row: Row) -> dict[str, Any]:
    return {
        "source": row.source,
        "trigger": row.trigger,
        "guards": list(row.guards),
        "dest": row.dest,
    }
