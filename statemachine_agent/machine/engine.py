"""Build the `transitions` machine from the table and drive a run through it.

The machine stays synchronous and pure: a phase does its I/O and names a
trigger; the engine refreshes the record's clock and cancel flag, then fires the
trigger, and `transitions` picks the first row whose guards pass. One machine
serves every run of an agent: runs are its models, passed per trigger, so a run
costs no machine construction and no `add_model` bookkeeping.
"""

from __future__ import annotations

import dataclasses
import traceback
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, TypeVar, runtime_checkable

from transitions import Machine, State, Transition

from statemachine_agent.context.notices import (
    close_pending,
    not_run,
    unanswered_tool_uses,
)
from statemachine_agent.machine import observers
from statemachine_agent.machine.cancel import CancelToken
from statemachine_agent.machine.endings import ENDINGS, Ending, reason_problems, with_staged
from statemachine_agent.machine.ends import END_BY_NAME, END_STATES, RESUMABLE_STATES
from statemachine_agent.machine.failures import ComponentError, GuardError
from statemachine_agent.machine.guards import GUARDS, Guard
from statemachine_agent.machine.phase_env import PhaseEnv
from statemachine_agent.machine.result import RunResult
from statemachine_agent.machine.run import RunError, RunRecord, TransitionRecord
from statemachine_agent.machine.table import ROWS, STATES, Row
from statemachine_agent.persistence.codec import to_plain
from statemachine_agent.phases.act import Act
from statemachine_agent.phases.commit import Commit
from statemachine_agent.phases.compact import Compact
from statemachine_agent.phases.continuation import Continue
from statemachine_agent.phases.intervene import Intervene
from statemachine_agent.phases.observe import Observe
from statemachine_agent.phases.perceive import Perceive
from statemachine_agent.phases.reason import Reason
from statemachine_agent.phases.reflect import Reflect
from statemachine_agent.phases.summarize import Summarize
from statemachine_agent.phases.verify import Verify

T = TypeVar("T")


class MachineDefinitionError(RuntimeError):
    """The table and the code disagree (a bug in the engine, never in a run)."""


class Phase(Protocol):
    """What runs a working state: it does its work and names a trigger of its rows."""

    async def run(self, ctx: PhaseEnv) -> str: ...


@runtime_checkable
class Interruptible(Protocol):
    """A phase whose work a cancel may abandon (an in-flight model call).

    The phase, not the engine or the cancel token, says what abandoning means
    for it: it records why and names the trigger its rows expect.
    """

    def interrupted(self, ctx: PhaseEnv) -> str: ...


PHASES: Mapping[str, Phase] = {
    "perceive": Perceive(),
    "reason": Reason(),
    "act": Act(),
    "observe": Observe(),
    "intervene": Intervene(),
    "reflect": Reflect(),
    "verify": Verify(),
    "continue": Continue(),
    "compact": Compact(),
    "summarize": Summarize(),
    "commit": Commit(),
}

CARRIED: frozenset[str] = frozenset(
    name for name, phase in PHASES.items() if getattr(phase, "carried_exit", False)
)
"""Working states whose way out is not checkpointed on its own but carried in the
run's next write: their phases do work the record alone determines (perceive builds
a request, observe files results) or have written what they did as they went (act
checkpoints each outcome). A crash after such a transition resumes at the last write
and re-does the transitions since, never a recorded model call or tool effect
(docs/durability.md, "What a crash re-does"). A transition into an end state is
always written.
"""


class _Row(Transition):
    """A table row as `transitions` runs it: its guards judged in order, each verdict
    noted for the audit trail, then the library's own `execute` changes the state.

    The guards are judged here rather than handed to the library as conditions: a
    row whose guards fail (most rows tried, since the fallback row is last) then
    costs one call per guard judged, instead of the library's condition objects,
    callback lists and debug log lines (~12 calls a row). The row that fires is
    noted the same way, so the trail names the row and not only the states. The
    library's `execute` still does the change (it finds no conditions left), so
    state exit and entry stay its own.
    """

    def __init__(
        self, source: str, dest: str, *callbacks: Any, row: Row, guards: Mapping[str, Guard]
    ) -> None:
        super().__init__(source, dest, *callbacks)  # the library's (all None here)
        self.row = row
        self.guards: tuple[tuple[str, Guard], ...] = tuple(
            (name, guards[name]) for name in row.guards
        )

    def __repr__(self) -> str:
        return f"<row {self.row.key}>"

    def execute(self, event_data: Any) -> bool:
        verdicts: dict[str, bool] = event_data.kwargs["verdicts"]
        run = event_data.model
        for name, guard in self.guards:
            try:
                verdict = bool(guard(run))
            except Exception as exc:
                raise GuardError(name, exc) from exc
            verdicts[name] = verdict
            if not verdict:
                return False
        if not super().execute(event_data):  # pragma: no cover - no conditions left to fail
            return False
        event_data.kwargs["fired"].append(self.row)
        return True


class _TableMachine(Machine):
    """A `transitions.Machine` whose transitions are the table's rows (`_Row`)."""

    transition_cls = _Row


def build_machine(rows: Sequence[Row] = ROWS, guards: Mapping[str, Guard] = GUARDS) -> Machine:
    """A `transitions.Machine` with exactly the table's states and rows, and no models.

    `rows` and `guards` are the table's unless a test builds a variant of it (a row
    added, to prove the engine and the end handlers obey rows they have never seen).
    """
    states = [State(name, final=name in END_STATES) for name in STATES]
    machine = _TableMachine(
        model=None,
        states=states,
        initial=None,
        auto_transitions=False,
        send_event=True,
        ignore_invalid_triggers=False,
    )
    unrun = [name for name in STATES if name not in END_STATES and name not in PHASES]
    if unrun:
        raise MachineDefinitionError(f"no phase runs working state(s) {unrun}")
    problems = reason_problems(rows)
    if problems:
        raise MachineDefinitionError("; ".join(problems))
    for row in rows:
        unknown = [name for name in row.guards if name not in guards]
        if unknown:
            raise MachineDefinitionError(f"row {row.key} names unknown guard {unknown[0]!r}")
        machine.add_transition(row.trigger, row.source, row.dest, row=row, guards=guards)
    return machine


_VERDICTS_KEPT = 4096
"""Distinct sets of guard verdicts an engine keeps to share (a table has a few dozen
in practice; the cap bounds a table whose guards are judged in many combinations)."""


class Engine:
    """Drives runs through one machine."""

    def __init__(self, rows: Sequence[Row] = ROWS, guards: Mapping[str, Guard] = GUARDS) -> None:
        self.rows: tuple[Row, ...] = tuple(rows)
        self.machine = build_machine(self.rows, guards)
        self._verdicts: dict[tuple[tuple[str, bool], ...], dict[str, bool]] = {}
        """Each set of guard verdicts the engine has recorded, kept once: most
        transitions repeat one seen before, so a trail's records share their verdicts
        (never changed once recorded) instead of holding a dict each (`_shared`)."""

    def fire(self, ctx: PhaseEnv, trigger: str) -> TransitionRecord:
        """Fire `trigger` from the run's state and record the transition."""
        run = ctx.state
        source = run.state
        verdicts: dict[str, bool] = {}
        fired: list[Row] = []
        event = self.machine.events.get(trigger)
        if event is None:
            raise MachineDefinitionError(f"phase {source!r} named unknown trigger {trigger!r}")
        if not event.trigger(run, verdicts=verdicts, fired=fired) or not fired:
            raise MachineDefinitionError(f"no row fires for {source!r} on {trigger!r}")
        run.seq += 1
        usage = run.usage.to_dict()
        last = run.trail[-1] if run.trail else None
        record = TransitionRecord(
            seq=run.seq,
            source=source,
            trigger=trigger,
            dest=run.state,
            guards=self._shared(verdicts),
            via=fired[0].guards,
            iteration=run.iteration,
            turn=run.turn,
            elapsed_s=round(run.elapsed_s, 6),
            # the usage changes at a reply only: records between two replies share one
            usage_total=last.usage_total if last and last.usage_total == usage else usage,
            cost_usd=run.cost_usd,
        )
        run.trail.append(record)
        if observers.watching():
            observers.notify(run.run_id, fired[0], record)
        if run.state in END_STATES and run.state not in RESUMABLE_STATES:
            run.reporting_end = True  # until run.ended is out (`_end`)
        if run.state == "cancelled":
            run.cancelled_at = (source, trigger)
        elif source == "cancelled":
            run.cancelled_at = None  # the resumed row has read it
        ctx.entered_by = fired[0]
        if ctx.emitter.listened():  # the payload's copies are made only for a receiver
            ctx.emitter.emit("transition.fired", **record.to_dict())
        if source not in CARRIED or run.state in END_STATES or ctx.outside_input:
            ctx.outside_input = False
            ctx.checkpoint()
        return record

    def _shared(self, verdicts: dict[str, bool]) -> dict[str, bool]:
        """The recorded copy of `verdicts` (a run holding thousands of transitions, and a
        process holding thousands of runs, pay for each distinct set once)."""
        key = tuple(verdicts.items())
        known = self._verdicts.get(key)
        if known is not None:
            return known
        if len(self._verdicts) < _VERDICTS_KEPT:
            self._verdicts[key] = verdicts
        return verdicts

    async def drive(
        self,
        ctx: PhaseEnv,
        *,
        cancel: CancelToken | None = None,
        resumed: bool = False,
    ) -> RunResult:
        """Run phases and fire their triggers until an end state, then run its handler.

        A resumed run in a resumable end state (paused for approval, cancelled)
        leaves it by the `resumed` trigger: its rows say where it carries on. A run
        that crashed carries on in the state its last checkpoint recorded; one that
        died after entering a final end state and before its `run.ended` was out
        (`RunRecord.reporting_end`) stays there, and its end handler reports it.
        """
        run = ctx.state
        ctx.started_at = ctx.deps.effects.monotonic() - run.elapsed_s
        ctx.cancel = cancel
        if ctx.emitter.listened():  # encoding the settings alone is ~50-150 us a run
            _announce(ctx, resumed)
        ctx.checkpoint()
        trigger: str | None = "resumed" if resumed and run.state in RESUMABLE_STATES else None
        while True:
            if trigger is None:
                if run.state in END_STATES:
                    break
                trigger = await self._step(ctx, cancel)
            run.elapsed_s = ctx.deps.effects.monotonic() - ctx.started_at
            if cancel is not None and cancel.cancelled:
                run.cancel_requested = True
            trigger = self._fire_or_crash(ctx, trigger)
            if run.state not in END_STATES and trigger is None:
                failure = _component_failure(ctx)
                if failure is not None:
                    run.error = failure
                    self.fire(ctx, "crashed")
        return await self._end(ctx)

    def _fire_or_crash(self, ctx: PhaseEnv, trigger: str) -> str | None:
        """Fire `trigger`; a row or guard defect ends the run through `crashed`.

        Returns the trigger to fire next without running a phase: the `carry_on`
        of the row that fired (a resumed run whose phase had done its work).
        """
        run = ctx.state
        try:
            self.fire(ctx, trigger)
        except (MachineDefinitionError, GuardError) as exc:
            run.error = RunError(kind=type(exc).__name__, message=str(exc))
            if run.state in END_STATES:  # a resumed row's guard failed: nothing to crash
                ctx.emitter.emit("resume.failed", state=run.state, error=run.error.message)
                return None
            self.fire(ctx, "crashed")
            return None
        return ctx.entered_by.carry_on if ctx.entered_by is not None else None

    async def _step(self, ctx: PhaseEnv, cancel: CancelToken | None) -> str:
        """Run the current phase; a defect in it, or in a component it calls, becomes the
        `crashed` trigger, with the component named when it was one."""
        run = ctx.state
        phase = PHASES.get(run.state)
        try:
            if phase is None:
                raise MachineDefinitionError(f"no phase runs state {run.state!r}")
            if (
                cancel is None
                or not isinstance(phase, Interruptible)
                or not cancel.interrupts(phase)
            ):
                return await phase.run(ctx)
            finished, trigger = await cancel.race(phase.run(ctx))
            return trigger if finished and trigger is not None else phase.interrupted(ctx)
        except ComponentError as exc:
            run.error = RunError(kind="ComponentError", message=str(exc))
        except Exception as exc:
            run.error = RunError(kind=type(exc).__name__, message=_describe_defect(exc))
        ctx.emitter.emit("phase.crashed", state=run.state, error=run.error.message)
        return "crashed"

    def _entering_row(self, ctx: PhaseEnv) -> Row | None:
        """The row that entered the run's end state: the one just fired, or, for a run
        that was already over when loaded, the one its last transition record names."""
        run = ctx.state
        if ctx.entered_by is not None and ctx.entered_by.dest == run.state:
            return ctx.entered_by
        last = run.trail[-1] if run.trail else None
        if last is None or last.dest != run.state:
            return None
        return next((row for row in self.rows if row.key == last.key), None)

    async def _end(self, ctx: PhaseEnv) -> RunResult:
        run = ctx.state
        handler = ENDINGS[run.state]
        ctx.entered_by = self._entering_row(ctx)  # the handler reports this row's cause
        answers = {o.tool_use_id: o.to_block() for o in run.outcomes}
        last = run.trail[-1] if run.trail else None
        # A defect inside act leaves calls that may have run without a recorded outcome.
        interrupted = last is not None and (last.source, last.trigger) == ("act", "crashed")
        pending = [] if run.state in RESUMABLE_STATES else unanswered_tool_uses(run.messages)
        if pending:
            why = f"the run ended ({run.state})"
            closed = close_pending(run.messages, why, answers, interrupted=interrupted)
            run.pending_calls, run.outcomes = [], []  # now in the history
            if closed:
                calls = [{"tool_use_id": str(b.get("id", "")), "tool": str(b.get("name", ""))}
                         for b in pending if b.get("id") not in answers]  # fmt: skip
                ctx.emitter.emit("tool.skipped", count=closed, end_state=run.state, calls=calls,
                                 content=not_run(why),
                                 iteration=run.iteration)  # fmt: skip
            ctx.checkpoint()
        try:
            ending = await handler(ctx)
        except Exception as exc:
            ending = Ending("", f"the {run.state} handler failed: {_describe_defect(exc)}")
        ending = with_staged(ctx, ending)
        ctx.checkpoint()
        messages = [dict(m) for m in run.messages]
        if run.state == "cancelled":
            close_pending(messages, "the run was cancelled", answers, interrupted=interrupted)
        run.elapsed_s = ctx.deps.effects.monotonic() - ctx.started_at
        result = RunResult(
            end_state=END_BY_NAME[run.state].name,
            text=ending.text,
            reason=ending.reason,
            run_id=run.run_id,
            iterations=_iterations(run, ctx.entered_by),
            turn=run.turn,
            usage=run.usage,
            cost_usd=run.cost_usd,
            elapsed_s=run.elapsed_s,
            messages=messages,
            trail=tuple(run.trail),
            data=ending.data,
            audit_path=run.audit_path,
            details=ending.details,
            chat_ended=run.chat_ended,
            output=ending.output,
            approvals=tuple(run.approval.log),
        )
        ctx.emitter.emit(
            "run.ended",
            end_state=result.end_state,
            reason=result.reason,
            details=result.details,
            text=result.text,
            data=result.data,
            iterations=result.iterations,
            turn=result.turn,
            usage_total=result.usage.to_dict(),
            cost_usd=result.cost_usd,
            elapsed_s=round(result.elapsed_s, 6),
        )
        if run.reporting_end:
            run.reporting_end = False
            ctx.checkpoint()
        late = {
            key: value
            for key, value in (
                ("audit_error", ctx.emitter.failure),
                ("checkpoint_error", ctx.checkpoint_error),
            )
            if value is not None
        }
        if late:
            # The run had already ended when its audit or store failed: the end state
            # stands (no row leaves it), and the result says what could not be written.
            result = dataclasses.replace(result, details={**(result.details or {}), **late})
        return result


def _announce(ctx: PhaseEnv, resumed: bool) -> None:
    """`run.started` or `run.resumed`, with what the run was given. Its own function so
    that its payload (the history, the settings, the tools) is freed once emitted, not
    kept alive by the driving coroutine's frame for the whole run."""
    run = ctx.state
    fields = {
        "state": run.state,
        "model": ctx.deps.model.name,
        "system": ctx.deps.system,
        "tools": ctx.deps.tools.definitions(),
        "tool_flags": {
            t.name: {
                "ends_run": t.ends_run,
                "requires_approval": t.requires_approval,
                "side_effect": t.side_effect,
                "deferrable": t.deferrable,
            }
            for t in ctx.deps.tools
        },
        "messages": list(run.messages),
        "budget": _budget_fields(run),
        "settings": to_plain(run.settings, "settings"),
    }
    if resumed:
        ctx.emitter.emit("run.resumed", **fields, seq=run.seq)
    else:
        ctx.emitter.emit("run.started", **fields)


def _iterations(run: RunRecord, row: Row | None) -> int:
    """The loop calls the run made, counted as its audit events count them: a call that
    was attempted and failed (the row that ended the run left `reason` on `model_failed`)
    counts, though the budget (`run.iteration`) counts completed calls only."""
    attempted = row is not None and (row.source, row.trigger) == ("reason", "model_failed")
    return run.iteration + int(attempted)


def _component_failure(ctx: PhaseEnv) -> RunError | None:
    """A failed checkpoint or audit write: the run must not go on without them."""
    if ctx.checkpoint_error is not None:
        return RunError(kind="CheckpointError", message=ctx.checkpoint_error)
    if ctx.emitter.failure is not None:
        return RunError(kind="AuditError", message=ctx.emitter.failure)
    return None


def _budget_fields(run: RunRecord) -> dict[str, Any]:
    budget = run.budget
    return {
        "max_iterations": budget.max_iterations,
        "max_cost_usd": budget.max_cost_usd,
        "max_total_tokens": budget.max_total_tokens,
        "max_seconds": budget.max_seconds,
    }


def _describe_defect(exc: BaseException) -> str:
    where = traceback.extract_tb(exc.__traceback__)[-1:] if exc.__traceback__ else []
    place = f" at {where[0].filename}:{where[0].lineno}" if where else ""
    return f"{type(exc).__name__}: {exc}{place}"
