"""End reasons come from the row that fired, never from a guess over the record.

Every row into an end state gives its own reason (checked here row by row, and
when the machine is built); the figures in it come from the record; and a row the
handlers have never seen, added to a copy of the table, ends runs with its cause.
"""

from __future__ import annotations

import ast
import asyncio
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from string import Formatter

import pytest
from hypothesis import given
from hypothesis import strategies as st

import statemachine_agent
from statemachine_agent import AnthropicModel, calculate
from statemachine_agent.audit.events import Emitter
from statemachine_agent.audit.sink import MemorySink
from statemachine_agent.effects.base import InProcessEffects
from statemachine_agent.machine.endings import ENDINGS, FIGURES, Ending, explain, reason_fields
from statemachine_agent.machine.ends import END_STATES, SUCCESS_STATES
from statemachine_agent.machine.engine import Engine, MachineDefinitionError
from statemachine_agent.machine.guards import GUARDS
from statemachine_agent.machine.phase_env import AgentDeps, PhaseEnv
from statemachine_agent.machine.run import RunError, RunRecord
from statemachine_agent.machine.settings import RunSettings
from statemachine_agent.machine.table import HELPER_STATES, ROWS, WORKING_STATES, Row
from statemachine_agent.policy.budget import Budget
from statemachine_agent.policy.pricing import DEFAULT_PRICE_TABLE
from statemachine_agent.testing import FakeAnthropicServer, replies
from statemachine_agent.tools.registry import ToolRegistry
from tests.test_transitions import ARRANGEMENTS, _answers_rejected, _fatal, _verdict

INTO_ENDS = tuple(row for row in ROWS if row.dest in END_STATES)
INTO_FAILED = tuple(row for row in INTO_ENDS if row.dest == "failed")

_CANCELLED_WHERE = {
    ("perceive", "prepared"): "before the next model call",
    ("reason", "replied"): "while the model was answering",
    ("reason", "model_failed"): "during a model call",
    ("act", "tools_done"): "while tools ran",
    ("observe", "observed"): "after the tool results were recorded",
    ("intervene", "intervened"): "during an intervention",
    ("reflect", "reflected"): "during reflection",
    ("verify", "verified"): "during verification",
    ("continue", "continued"): "before the continuation",
    ("compact", "compacted"): "during compaction",
    ("summarize", "summarized"): "after summarizing",
    ("summarize", "summary_failed"): "while a summary was asked for",
    ("commit", "committed"): "while its staged calls were committed",
}

EXPECTED: dict[tuple[str, str, str, tuple[str, ...]], tuple[str, ...]] = {
    ("perceive", "prepared", "budget_exhausted", ("budget_exceeded",)): (
        "budget exhausted: iterations 3 >= 3",
    ),
    ("reason", "replied", "failed", ("is_empty_reply",)): (
        "failed: the reply had neither text nor tool calls",
        "'end_turn'",
    ),
    ("reason", "replied", "failed", ("is_end_turn", "output_expected")): (
        "failed: no valid final answer after 4 tries",
        "last: That answer was plain text",
    ),
    ("reason", "replied", "completed", ("is_end_turn",)): ("the model ended its turn (end_turn)",),
    ("reason", "replied", "truncated", ("is_max_tokens", "output_below_limit")): (
        "cut off by the model's context window in iteration 0: 10 prompt + 5 output tokens",
        "below max_tokens=4096",
        "raising max_tokens cannot help",
    ),
    ("reason", "replied", "truncated", ("is_max_tokens",)): ("cut off at max_tokens=4096",),
    ("reason", "replied", "refused", ("is_refusal",)): ("the model refused to continue",),
    ("reason", "replied", "context_overflow", ("is_context_exceeded",)): (
        "context window was exceeded",
    ),
    ("reason", "replied", "failed", ()): ("failed: unknown stop_reason 'brand_new'",),
    ("reason", "model_failed", "context_overflow", ("is_context_error",)): (
        "the prompt is too long for the model: prompt is too long",
    ),
    ("reason", "model_failed", "failed", ()): ("failed: invalid x-api-key", "status 401"),
    ("act", "tools_done", "failed", ("tool_failed_fatally",)): (
        "failed: tool 'deploy' failed and is configured to end the run",
    ),
    ("act", "tools_done", "failed", ("answer_retries_exhausted",)): (
        "failed: the final answer was rejected 4 times",
    ),
    ("act", "tools_done", "awaiting_approval", ("taint_approval_pending",)): (
        "waiting for approval of",
        "after untrusted text from fetch_page (call toolu_0) entered the run",
    ),
    ("act", "tools_done", "awaiting_approval", ("approval_pending",)): ("waiting for approval",),
    ("observe", "observed", "finished", ("finish_called",)): (
        "the model called finish with status 'completed'",
    ),
    ("observe", "observed", "stalled", ("stall_persists",)): (
        "stalled: d (pattern repeat, after 2 interventions)",
    ),
    ("verify", "verified", "finished", ("verdict_passed", "finish_called")): (
        "finish with status 'completed' and the verifier accepted the result",
    ),
    ("verify", "verified", "completed", ("verdict_passed",)): ("the verifier accepted the answer",),
    ("commit", "committed", "awaiting_approval", ("approval_pending",)): (
        "waiting for approval of 0 staged call(s) before they run",
    ),
    ("commit", "committed", "failed", ("commit_failure_ends_run",)): (
        "failed: staged call S1 (refund) failed when committed: card declined",
    ),
    ("commit", "committed", "finished", ("finish_called",)): (
        "finish with status 'completed' and its staged calls ran",
    ),
    ("commit", "committed", "completed", ()): (
        "the model ended its turn (end_turn) and its staged calls ran",
    ),
    ("verify", "verified", "failed", ("rejections_exhausted",)): (
        "failed: the verifier rejected the result 3 times; last: tests fail",
    ),
    **{
        (source, trigger, "cancelled", ("cancel_requested",)): (
            "cancelled by the host after 0 iterations",
            where,
        )
        for (source, trigger), where in _CANCELLED_WHERE.items()
    },
    **{
        (state, "crashed", "failed", ()): ("failed: KeyError: 'bug'", f"(while in {state})")
        for state in WORKING_STATES + HELPER_STATES
    },
}
"""What each row into an end state says: its own cause, with figures from the record."""


def _crashed(run: RunRecord) -> None:
    run.error = RunError(kind="KeyError", message="KeyError: 'bug'")


def context_for(state: str) -> PhaseEnv:
    """A run standing in `state`, with salvage off (no model call at the end)."""
    record = RunRecord(
        run_id="run_reasons",
        settings=RunSettings(budget=Budget(max_iterations=3, salvage=False)),
        state=state,
        messages=[{"role": "user", "content": "hi"}],
    )
    deps = AgentDeps(
        model=AnthropicModel(api_key="sk-ant-unused", base_url="http://127.0.0.1:9"),
        tools=ToolRegistry(),
        effects=InProcessEffects(),
        prices=DEFAULT_PRICE_TABLE,
    )
    return PhaseEnv(state=record, deps=deps, emitter=Emitter(record.run_id, sinks=[MemorySink()]))


def reason_of(ctx: PhaseEnv) -> str:
    """Run the handler of the end state the run stands in; its reason."""

    async def handle() -> Ending:
        return await ENDINGS[ctx.state.state](ctx)

    return asyncio.run(handle()).reason


def end_by(engine: Engine, row: Row) -> str:
    """Arrange the record so that `row` fires, fire it, and run the end state's handler."""
    ctx = context_for(row.source)
    ARRANGEMENTS[row.key](ctx.state)
    if row.trigger == "crashed":
        _crashed(ctx.state)
    record = engine.fire(ctx, row.trigger)
    assert record.key == row.key
    return reason_of(ctx)


@pytest.fixture(scope="module")
def engine() -> Engine:
    return Engine()


class TestEveryRowGivesItsOwnReason:
    def test_every_row_into_an_end_state_is_expected(self) -> None:
        """A row added into an end state without an expected reason fails here."""
        assert sorted(EXPECTED) == sorted(row.key for row in INTO_ENDS)

    @pytest.mark.parametrize(
        "row", INTO_ENDS, ids=lambda r: f"{r.source}-{r.trigger}-{r.dest}-{'+'.join(r.guards)}"
    )
    def test_the_row_that_fired_names_the_cause(self, engine: Engine, row: Row) -> None:
        """The reason says what the row says, with the record's figures filled in."""
        reason = end_by(engine, row)
        for phrase in EXPECTED[row.key]:
            assert phrase in reason
        literal = [text for text, *_ in Formatter().parse(row.end_reason)]
        for text in literal:
            assert text in reason

    @pytest.mark.parametrize("dest", sorted({row.dest for row in INTO_ENDS}))
    def test_no_two_rows_into_one_end_state_share_a_reason(self, engine: Engine, dest: str) -> None:
        """Rows into one end state give different reasons, declared and as rendered."""
        rows = [row for row in INTO_ENDS if row.dest == dest]
        assert len({row.end_reason for row in rows}) == len(rows)
        assert len({end_by(engine, row) for row in rows}) == len(rows)

    def test_every_figure_a_row_names_exists(self) -> None:
        """The table names only figures the handlers can fill in."""
        for row in INTO_ENDS:
            assert set(reason_fields(row.end_reason)) <= set(FIGURES), row.key


# Facts an earlier step of the run may have left in the record: none of them may
# change the cause a row reports (the old handler picked the first fact it found).
_NOISE = {
    "error": lambda run: setattr(run, "error", RunError(kind="api_error", message="old 500")),
    "fatal_tool": _fatal,
    "answers": _answers_rejected,
    "verdict": _verdict(False, rejections=3),
    "empty_reply": ARRANGEMENTS[("reason", "replied", "failed", ("is_empty_reply",))],
}

_CAUSE: dict[tuple[str, str, str, tuple[str, ...]], str] = {
    ("reason", "replied", "failed", ("is_empty_reply",)): "neither text nor tool calls",
    ("reason", "replied", "failed", ()): "the engine stops rather than guess",
    ("reason", "model_failed", "failed", ()): "failed: ",
    ("act", "tools_done", "failed", ("tool_failed_fatally",)): "is configured to end the run",
    ("act", "tools_done", "failed", ("answer_retries_exhausted",)): "the final answer was rejected",
    ("reason", "replied", "failed", ("is_end_turn", "output_expected")): "no valid final answer",
    ("verify", "verified", "failed", ("rejections_exhausted",)): "the verifier rejected",
    ("commit", "committed", "failed", ("commit_failure_ends_run",)): "failed when committed",
    **{(state, "crashed", "failed", ()): "(while in " for state in WORKING_STATES + HELPER_STATES},
}
_OTHER_CAUSES = (
    "neither text nor tool calls",
    "is configured to end the run",
    "the final answer was rejected",
    "no valid final answer",
    "the verifier rejected",
    "(while in ",
    "the engine stops rather than guess",
    "failed when committed",
)


class TestTheRowDecidesTheCause:
    @given(
        row=st.sampled_from(INTO_FAILED),
        noise=st.lists(st.sampled_from(sorted(_NOISE)), unique=True),
    )
    def test_leftover_facts_never_change_the_cause(self, row: Row, noise: list[str]) -> None:
        """Whatever else the record holds, `failed` reports the cause of the row that
        entered it, and no other row's cause."""
        ctx = context_for("failed")
        for name in noise:
            _NOISE[name](ctx.state)
        ctx.entered_by = row
        reason = reason_of(ctx)
        assert _CAUSE[row.key] in reason
        for other in _OTHER_CAUSES:
            if other != _CAUSE[row.key]:
                assert other not in reason

    def test_a_run_already_over_reports_its_recorded_row(self, engine: Engine) -> None:
        """A run loaded in its end state (no row fired in this process) reports the row
        its last transition record names."""
        row = ("act", "tools_done", "failed", ("tool_failed_fatally",))
        ctx = context_for("act")
        _fatal(ctx.state)
        engine.fire(ctx, "tools_done")
        ctx.entered_by = None
        _crashed(ctx.state)  # a fact the old handler would have reported first
        result = asyncio.run(engine.drive(ctx))
        assert result.trail[-1].key == row
        assert "tool 'deploy' failed" in result.reason

    def test_no_recorded_row_is_said_plainly(self) -> None:
        """Without a row to read, the handler says so instead of guessing a cause."""
        ctx = context_for("failed")
        _fatal(ctx.state)
        assert explain(ctx) == ("failed: no recorded row says how the run ended here", {})


class TestTheBuildChecksTheReasons:
    def test_a_copied_reason_is_refused(self) -> None:
        """Two rows into one end state with one reason would hide which one fired."""
        fatal = next(r for r in INTO_FAILED if r.guards == ("tool_failed_fatally",))
        twin = replace(fatal, guards=("approval_pending",))
        with pytest.raises(MachineDefinitionError, match="give the same reason"):
            Engine(rows=(twin, *ROWS))

    def test_an_unknown_figure_is_refused(self) -> None:
        """A reason naming a figure no handler fills in fails at build, not at the end."""
        row = Row("act", "tools_done", "failed", ("approval_pending",), "x.", reason="{nope}")
        with pytest.raises(MachineDefinitionError, match="unknown figure"):
            Engine(rows=(row, *ROWS))


# -- A new row on a scratch copy of the table, driven through the real SDK -----------


def _charge_called(run: RunRecord) -> bool:
    """The model called the `charge` tool, which this scratch deployment forbids."""
    return any(call.name == "charge" for call in run.pending_calls)


def _scratch_rows(new: Row) -> tuple[Row, ...]:
    """The table with `new` just above act's fallback row (after every earlier guard)."""
    fallback = ROWS.index(next(r for r in ROWS if (r.source, r.dest) == ("act", "observe")))
    return (*ROWS[:fallback], new, *ROWS[fallback:])


@pytest.fixture
def server() -> Iterator[FakeAnthropicServer]:
    with FakeAnthropicServer() as fake:
        yield fake


def _drive(server: FakeAnthropicServer, new: Row) -> tuple[str, str]:
    server.add(replies.tool_use("charge", {"expression": "1+1"}))
    engine = Engine(rows=_scratch_rows(new), guards={**GUARDS, "charge_called": _charge_called})
    ctx = context_for("perceive")
    charge = replace(calculate, name="charge")
    ctx.deps = replace(
        ctx.deps,
        model=AnthropicModel(api_key="sk-ant-test", base_url=server.base_url),
        tools=ToolRegistry([charge]),
    )
    result = asyncio.run(engine.drive(ctx))
    return result.end_state, result.reason


class TestANewRowCarriesItsOwnReason:
    def test_a_new_row_with_a_reason(self, server: FakeAnthropicServer) -> None:
        """A row added into `failed` ends the run with the reason it declares."""
        new = Row("act", "tools_done", "failed", ("charge_called",),
                  "The model called a tool this deployment forbids.",
                  reason="failed: the model called a forbidden tool in iteration "
                         "{iteration}")  # fmt: skip
        end_state, reason = _drive(server, new)
        assert end_state == "failed"
        assert reason == "failed: the model called a forbidden tool in iteration 1"

    def test_a_new_row_without_a_reason_gives_its_description(
        self, server: FakeAnthropicServer
    ) -> None:
        """Without `reason=`, the row's description is the cause, never another row's."""
        new = Row("act", "tools_done", "failed", ("charge_called",),
                  "The model called a tool this deployment forbids.")  # fmt: skip
        end_state, reason = _drive(server, new)
        assert end_state == "failed"
        assert reason == "failed: the model called a tool this deployment forbids"
        assert "neither text nor tool calls" not in reason


class TestSuccessIsDeclaredOnce:
    def test_no_module_lists_the_success_states_itself(self) -> None:
        """Which end states are a success is `End.success` in ends.py; a literal
        ("completed", "finished") elsewhere would miss an end state added later."""
        package = Path(statemachine_agent.__file__).parent
        found = []
        for path in sorted(package.rglob("*.py")):
            if path.name == "ends.py":
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Tuple | ast.List | ast.Set):
                    names = {e.value for e in node.elts if isinstance(e, ast.Constant)}
                    if names >= SUCCESS_STATES:
                        found.append(f"{path.relative_to(package)}:{node.lineno}")
        assert found == []
