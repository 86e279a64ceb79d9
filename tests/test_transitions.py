"""One test per row of the transition table.

Each row gets an *arrangement*: a run record in the row's source state for which
the row's guards hold and every row above it in its group fails. Firing the
row's trigger must then fire exactly that row. A row without an arrangement
fails `test_every_row_has_an_arrangement`, so the table cannot grow untested.
"""

from __future__ import annotations

import typing
from collections.abc import Callable
from dataclasses import replace

import pytest

from statemachine_agent.audit.events import Emitter
from statemachine_agent.audit.sink import MemorySink
from statemachine_agent.effects.base import InProcessEffects
from statemachine_agent.machine.ends import END_STATES, RESUMABLE_STATES
from statemachine_agent.machine.engine import PHASES, Engine, Interruptible
from statemachine_agent.machine.phase_env import AgentDeps, PhaseEnv
from statemachine_agent.machine.run import RunError, RunRecord
from statemachine_agent.machine.settings import RunSettings
from statemachine_agent.machine.table import (
    ENGINE_TRIGGERS,
    HELPER_STATES,
    ROWS,
    WORKING_STATES,
    Row,
)
from statemachine_agent.models.base import ModelReply
from statemachine_agent.models.scripted import ScriptedModel
from statemachine_agent.policy.budget import Budget
from statemachine_agent.policy.commit import CommitPolicy
from statemachine_agent.policy.context import ContextPolicy
from statemachine_agent.policy.pricing import DEFAULT_PRICE_TABLE
from statemachine_agent.testing import replies
from statemachine_agent.tools.registry import ToolRegistry

Arrange = Callable[[RunRecord], None]


def _reply(body: dict[str, object]) -> ModelReply:
    return ModelReply.from_api(body)


def _last(body: dict[str, object]) -> Arrange:
    def arrange(run: RunRecord) -> None:
        run.last_reply = _reply(body)

    return arrange


def _cancel(run: RunRecord) -> None:
    run.cancel_requested = True


def _spent(run: RunRecord) -> None:
    run.iteration = run.budget.max_iterations


def _nothing(run: RunRecord) -> None:
    return None


def _error(context_exceeded: bool) -> Arrange:
    def arrange(run: RunRecord) -> None:
        run.error = RunError(
            kind="invalid_request_error" if context_exceeded else "authentication_error",
            message="prompt is too long" if context_exceeded else "invalid x-api-key",
            status=400 if context_exceeded else 401,
            context_exceeded=context_exceeded,
        )

    return arrange


def _finish(run: RunRecord) -> None:
    run.finish = {"status": "completed", "summary": "done", "result": 42}


def _with(*arrangements: Arrange, **settings: object) -> Arrange:
    """Combine arrangements, after switching on the settings the guards read."""

    def arrange(run: RunRecord) -> None:
        run.settings = replace(run.settings, **settings)  # type: ignore[arg-type]
        for step in arrangements:
            step(run)

    return arrange


def _cancelled_at(state: str, trigger: str) -> Arrange:
    def arrange(run: RunRecord) -> None:
        run.cancelled_at = (state, trigger)

    return arrange


def _asked_for(max_tokens: int) -> Arrange:
    """The last reply's call asked for up to `max_tokens` output tokens."""

    def arrange(run: RunRecord) -> None:
        run.reply_max_tokens = max_tokens

    return arrange


def _retried(run: RunRecord) -> None:
    run.overflow_retried = True


def _answers_rejected(run: RunRecord) -> None:
    run.invalid_answers = run.settings.output_retries + 1


def _text_answers(n: int) -> Arrange:
    """`n` invalid answers so far, the last (just counted by `reason`) a text reply."""

    def arrange(run: RunRecord) -> None:
        run.invalid_answers = n
        run.notes["answer_errors"] = "That answer was plain text"

    return arrange


def _awaiting(run: RunRecord) -> None:
    run.approval.awaiting = ["toolu_1"]


def _taint_awaiting(run: RunRecord) -> None:
    """A side-effect call the run's TaintPolicy sent for approval, after untrusted text."""
    run.taint.sources = [{"tool": "fetch_page", "tool_use_id": "toolu_0", "excerpt": "x"}]
    run.taint.gated = ["toolu_1"]
    run.approval.awaiting = ["toolu_1"]


def _fatal(run: RunRecord) -> None:
    run.fatal_tool = "deploy"


def _stalled(interventions: int) -> Arrange:
    def arrange(run: RunRecord) -> None:
        run.stall.finding = {"pattern": "repeat", "tool": "search", "count": 3, "detail": "d"}
        run.stall.interventions = interventions

    return arrange


def _at_iteration(n: int) -> Arrange:
    def arrange(run: RunRecord) -> None:
        run.iteration = n

    return arrange


def _verdict(ok: bool, rejections: int = 0) -> Arrange:
    def arrange(run: RunRecord) -> None:
        run.verification.verdict = {"ok": ok, "feedback": "" if ok else "tests fail"}
        run.verification.rejections = rejections

    return arrange


def _summary_due(run: RunRecord) -> None:
    """The prompt perceive measured passed the threshold, with older messages to replace."""
    run.settings = replace(run.settings, context=ContextPolicy(summarize_at_tokens=100))
    run.summary.prompt_tokens = 150
    run.summary.replaceable = 3


def _steered(run: RunRecord) -> None:
    """A message steered into the run was read from its queue and waits."""
    run.steering.waiting = [{"number": 1, "text": "also check March", "by": None}]


def _staged(run: RunRecord) -> None:
    """A deferrable write waits, staged (side effects last)."""
    run.staged.calls = [{"ref": "S1", "tool_use_id": "toolu_s", "tool": "refund",
                         "input": {"order": "A-1"}, "iteration": 1}]  # fmt: skip


def _commit_failed(on_failure: str) -> Arrange:
    """A staged call failed when committed, under `CommitPolicy(on_failure=...)`."""

    def arrange(run: RunRecord) -> None:
        run.settings = replace(run.settings, commit=CommitPolicy(on_failure=on_failure))  # type: ignore[arg-type]
        run.staged.failure = {"ref": "S1", "tool": "refund", "error": "card declined"}

    return arrange


def _committing(run: RunRecord) -> None:
    run.staged.committing = True


ARRANGEMENTS: dict[tuple[str, str, str, tuple[str, ...]], Arrange] = {
    ("perceive", "prepared", "cancelled", ("cancel_requested",)): _cancel,
    ("perceive", "prepared", "budget_exhausted", ("budget_exceeded",)): _spent,
    ("perceive", "prepared", "perceive", ("steering_waiting",)): _steered,
    ("perceive", "prepared", "summarize", ("summary_due",)): _summary_due,
    ("perceive", "prepared", "reason", ()): _nothing,
    ("reason", "replied", "cancelled", ("cancel_requested",)): _cancel,
    ("reason", "replied", "act", ("is_tool_use",)): _last(replies.tool_use("calculate")),
    ("reason", "replied", "failed", ("is_empty_reply",)): _last(
        replies.reply(stop_reason="end_turn")
    ),
    ("reason", "replied", "perceive", ("is_end_turn", "output_expected", "output_retry_left")): (
        _with(_last(replies.text("approved")), _text_answers(1), output_expected=True)
    ),
    ("reason", "replied", "failed", ("is_end_turn", "output_expected")): _with(
        _last(replies.text("approved")), _text_answers(4), output_expected=True
    ),
    ("reason", "replied", "verify", ("is_end_turn", "verifier_configured")): _with(
        _last(replies.text("hi")), has_verifier=True
    ),
    ("reason", "replied", "commit", ("is_end_turn", "calls_staged")): _with(
        _last(replies.text("hi")), _staged
    ),
    ("reason", "replied", "completed", ("is_end_turn",)): _last(replies.text("hi")),
    ("reason", "replied", "continue", ("is_max_tokens", "can_continue")): _with(
        _last(replies.text("cut", stop_reason="max_tokens")), max_continuations=1
    ),
    ("reason", "replied", "truncated", ("is_max_tokens", "output_below_limit")): _with(
        _last(replies.text("cut", stop_reason="max_tokens")), _asked_for(4096)
    ),
    ("reason", "replied", "truncated", ("is_max_tokens",)): _last(
        replies.text("cut", stop_reason="max_tokens")
    ),
    ("reason", "replied", "refused", ("is_refusal",)): _last(replies.reply(stop_reason="refusal")),
    ("reason", "replied", "perceive", ("is_pause_turn",)): _last(
        replies.reply(stop_reason="pause_turn")
    ),
    ("reason", "replied", "perceive", ("is_compaction",)): _last(
        replies.reply({"type": "compaction", "content": "summary"}, stop_reason="compaction")
    ),
    ("reason", "replied", "compact", ("is_context_exceeded", "can_compact")): _last(
        replies.text("x", stop_reason="model_context_window_exceeded")
    ),
    ("reason", "replied", "context_overflow", ("is_context_exceeded",)): _with(
        _last(replies.text("x", stop_reason="model_context_window_exceeded")), _retried
    ),
    ("reason", "replied", "failed", ()): _last(replies.text("x", stop_reason="brand_new")),
    ("reason", "model_failed", "cancelled", ("cancel_requested",)): _cancel,
    ("reason", "model_failed", "compact", ("is_context_error", "can_compact")): _error(True),
    ("reason", "model_failed", "context_overflow", ("is_context_error",)): _with(
        _error(True), _retried
    ),
    ("reason", "model_failed", "failed", ()): _error(False),
    ("act", "tools_done", "cancelled", ("cancel_requested",)): _cancel,
    ("act", "tools_done", "failed", ("tool_failed_fatally",)): _fatal,
    ("act", "tools_done", "failed", ("answer_retries_exhausted",)): _answers_rejected,
    ("act", "tools_done", "awaiting_approval", ("taint_approval_pending",)): _taint_awaiting,
    ("act", "tools_done", "awaiting_approval", ("approval_pending",)): _awaiting,
    ("act", "tools_done", "observe", ()): _nothing,
    ("observe", "observed", "cancelled", ("cancel_requested",)): _cancel,
    ("observe", "observed", "verify", ("finish_claims_success", "verifier_configured")): _with(
        _finish, has_verifier=True
    ),
    ("observe", "observed", "commit", ("finish_claims_success", "calls_staged")): _with(
        _finish, _staged
    ),
    ("observe", "observed", "finished", ("finish_called",)): _finish,
    ("observe", "observed", "stalled", ("stall_persists",)): _stalled(2),
    ("observe", "observed", "intervene", ("stall_detected",)): _stalled(0),
    ("observe", "observed", "reflect", ("reflection_due",)): _with(
        _at_iteration(2), reflection_interval=2
    ),
    ("observe", "observed", "perceive", ()): _nothing,
    ("intervene", "intervened", "cancelled", ("cancel_requested",)): _cancel,
    ("intervene", "intervened", "perceive", ()): _nothing,
    ("reflect", "reflected", "cancelled", ("cancel_requested",)): _cancel,
    ("reflect", "reflected", "perceive", ()): _nothing,
    ("verify", "verified", "cancelled", ("cancel_requested",)): _cancel,
    ("verify", "verified", "finished", ("verdict_passed", "finish_called")): _with(
        _verdict(True), _finish
    ),
    ("verify", "verified", "completed", ("verdict_passed",)): _verdict(True),
    ("verify", "verified", "commit", ("verdict_passed", "calls_staged")): _with(
        _verdict(True), _staged
    ),
    ("commit", "committed", "cancelled", ("cancel_requested",)): _cancel,
    ("commit", "committed", "awaiting_approval", ("approval_pending",)): _awaiting,
    ("commit", "committed", "failed", ("commit_failure_ends_run",)): _commit_failed("fail"),
    ("commit", "committed", "perceive", ("commit_failed",)): _commit_failed("retry"),
    ("commit", "committed", "finished", ("finish_called",)): _finish,
    ("commit", "committed", "completed", ()): _last(replies.text("hi")),
    ("awaiting_approval", "resumed", "commit", ("committing",)): _committing,
    ("verify", "verified", "failed", ("rejections_exhausted",)): _verdict(False, rejections=3),
    ("verify", "verified", "perceive", ()): _verdict(False, rejections=1),
    ("continue", "continued", "cancelled", ("cancel_requested",)): _cancel,
    ("continue", "continued", "perceive", ()): _nothing,
    ("compact", "compacted", "cancelled", ("cancel_requested",)): _cancel,
    ("compact", "compacted", "perceive", ()): _nothing,
    ("summarize", "summarized", "cancelled", ("cancel_requested",)): _cancel,
    ("summarize", "summarized", "perceive", ()): _nothing,
    ("summarize", "summary_failed", "cancelled", ("cancel_requested",)): _cancel,
    ("summarize", "summary_failed", "compact", ()): _nothing,
    ("awaiting_approval", "resumed", "act", ()): _nothing,
    ("cancelled", "resumed", "perceive", ("cancelled_before_reply",)): _cancelled_at(
        "reason", "model_failed"
    ),
    ("cancelled", "resumed", "reason", ("cancelled_after_reply",)): _cancelled_at(
        "reason", "replied"
    ),
    **{
        ("cancelled", "resumed", state, (f"cancelled_in_{state}",)): _cancelled_at(state, trigger)
        for state, trigger in (
            ("act", "tools_done"),
            ("observe", "observed"),
            ("intervene", "intervened"),
            ("reflect", "reflected"),
            ("verify", "verified"),
            ("continue", "continued"),
            ("compact", "compacted"),
        )
    },
    ("cancelled", "resumed", "commit", ("cancelled_in_commit",)): _cancelled_at(
        "commit", "committed"
    ),
    ("cancelled", "resumed", "perceive", ("cancelled_in_summarize",)): _cancelled_at(
        "summarize", "summary_failed"
    ),
    ("cancelled", "resumed", "perceive", ()): _nothing,
    **{(state, "crashed", "failed", ()): _nothing for state in WORKING_STATES + HELPER_STATES},
}


def make_context(state: str) -> PhaseEnv:
    record = RunRecord(
        run_id="run_test",
        settings=RunSettings(budget=Budget(max_iterations=3)),
        state=state,
        messages=[{"role": "user", "content": "hi"}],
    )
    deps = AgentDeps(
        model=ScriptedModel([]),
        tools=ToolRegistry(),
        effects=InProcessEffects(),
        prices=DEFAULT_PRICE_TABLE,
    )
    return PhaseEnv(state=record, deps=deps, emitter=Emitter("run_test", sinks=[MemorySink()]))


@pytest.fixture(scope="module")
def engine() -> Engine:
    return Engine()


def test_every_row_has_an_arrangement() -> None:
    """Adding a row to the table without a test for it fails here."""
    missing = [row.key for row in ROWS if row.key not in ARRANGEMENTS]
    stale = [key for key in ARRANGEMENTS if key not in {row.key for row in ROWS}]
    assert missing == []
    assert stale == []


@pytest.mark.parametrize(
    "row", ROWS, ids=lambda r: f"{r.source}-{r.trigger}-{r.dest}-{'+'.join(r.guards) or 'else'}"
)
def test_row_fires(engine: Engine, row: Row) -> None:
    """With the row's guards true and every earlier row's false, exactly this row fires."""
    ctx = make_context(row.source)
    ARRANGEMENTS[row.key](ctx.state)
    record = engine.fire(ctx, row.trigger)
    assert record.key == row.key
    assert ctx.state.state == row.dest
    for guard in row.guards:
        assert record.guards[guard] is True
    earlier = ROWS[: ROWS.index(row)]
    for other in earlier:
        if (other.source, other.trigger) == (row.source, row.trigger):
            assert not all(record.guards.get(g, False) for g in other.guards)


def test_fired_transition_is_an_audit_event(engine: Engine) -> None:
    """Firing emits `transition.fired` with the documented keys."""
    ctx = make_context("perceive")
    engine.fire(ctx, "prepared")
    sink = ctx.emitter.sinks[0]
    assert isinstance(sink, MemorySink)
    (event,) = sink.events
    assert event["event"] == "transition.fired"
    assert {
        "run_id", "seq", "source", "dest", "trigger", "guards", "via",
        "iteration", "turn", "usage_total", "cost_usd", "elapsed_s", "ts",
    } <= set(event)  # fmt: skip
    assert event["guards"] == {
        "cancel_requested": False,
        "budget_exceeded": False,
        "steering_waiting": False,
        "summary_due": False,
    }


def test_guard_order_cancel_beats_budget(engine: Engine) -> None:
    """Cancellation is checked before the budget: both true ends in cancelled."""
    ctx = make_context("perceive")
    _cancel(ctx.state)
    _spent(ctx.state)
    engine.fire(ctx, "prepared")
    assert ctx.state.state == "cancelled"
    assert ctx.state.trail[-1].guards == {"cancel_requested": True}


def test_guard_order_cancel_beats_stop_reason(engine: Engine) -> None:
    """A cancelled run does not go on to run the tools it was asked for."""
    ctx = make_context("reason")
    _last(replies.tool_use("calculate"))(ctx.state)
    _cancel(ctx.state)
    engine.fire(ctx, "replied")
    assert ctx.state.state == "cancelled"


def test_resumed_row_that_carries_on_names_the_trigger(engine: Engine) -> None:
    """A run cancelled after observe resumes in observe and carries on with `observed`."""
    ctx = make_context("cancelled")
    _cancelled_at("observe", "observed")(ctx.state)
    engine.fire(ctx, "resumed")
    assert ctx.state.state == "observe"
    assert ctx.entered_by is not None
    assert ctx.entered_by.carry_on == "observed"
    assert ctx.state.cancelled_at is None


class TestTypedTriggers:
    """The triggers each phase can name are its return annotation, tied to the table."""

    @staticmethod
    def _named(function: object) -> set[str]:
        hints = typing.get_type_hints(function)
        return set(typing.get_args(hints["return"]))

    @pytest.mark.parametrize("state", sorted(PHASES))
    def test_a_phase_names_exactly_the_triggers_of_its_rows(self, state: str) -> None:
        """Every trigger a phase can return has rows from its state, and every row's
        trigger from that state is returned by the phase (or fired by the engine)."""
        phase = PHASES[state]
        named = self._named(type(phase).run)
        if isinstance(phase, Interruptible):
            named |= self._named(type(phase).interrupted)
        in_table = {r.trigger for r in ROWS if r.source == state} - set(ENGINE_TRIGGERS)
        assert named == in_table

    def test_end_states_are_left_only_by_engine_triggers(self) -> None:
        """No phase runs an end state; only `resumed` leaves one, and only a resumable one."""
        leaving = {(r.source, r.trigger) for r in ROWS if r.source in END_STATES}
        assert {t for _, t in leaving} <= set(ENGINE_TRIGGERS)
        assert {s for s, _ in leaving} == set(RESUMABLE_STATES)

    def test_every_working_state_has_a_phase(self) -> None:
        """The engine can run every state that is not an end."""
        assert set(PHASES) == set(WORKING_STATES + HELPER_STATES)
