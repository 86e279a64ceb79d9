"""The engine picks rows as the table says, whatever the guards answer (issue 27).

The engine judges a row's guards itself (`engine._Row`) rather than through the
`transitions` library's condition objects. These properties pin what that must keep:
for any verdicts, the row that fires is the first of its source and trigger whose
guards all pass, the trail's verdicts are exactly those a left-to-right, stop-at-the-
first-no reading of the rows asks for (in that order, since the audit file writes
them so), and a guard that raises is named, with the verdicts before it kept.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from statemachine_agent.machine.engine import Engine
from statemachine_agent.machine.failures import GuardError
from statemachine_agent.machine.guards import GUARDS
from statemachine_agent.machine.run import RunRecord
from statemachine_agent.machine.table import ROWS, Row
from tests.test_transitions import make_context

PAIRS = sorted({(row.source, row.trigger) for row in ROWS})
RAISE = "raise"
"""A drawn answer that makes the guard raise instead of answering."""


class _Answers:
    """The guards' answers for one example, read by every guard of the engine below."""

    def __init__(self) -> None:
        self.now: dict[str, Any] = {}

    def guard(self, name: str) -> Any:
        def judge(run: RunRecord) -> bool:
            answer = self.now.get(name, False)
            if answer == RAISE:
                raise ValueError(f"{name} broke")
            return bool(answer)

        return judge


ANSWERS = _Answers()
ENGINE = Engine(guards={name: ANSWERS.guard(name) for name in GUARDS})


def _expected(
    source: str, trigger: str, answers: dict[str, Any]
) -> tuple[Row | str, dict[str, bool]]:
    """The reference reading: rows in table order, each guard asked until one says no."""
    verdicts: dict[str, bool] = {}
    for row in ROWS:
        if (row.source, row.trigger) != (source, trigger):
            continue
        for name in row.guards:
            answer = answers.get(name, False)
            if answer == RAISE:
                return name, verdicts
            verdicts[name] = bool(answer)
            if not answer:
                break
        else:
            return row, verdicts
    raise AssertionError(f"no fallback row for {source} on {trigger}")


class TestRowChoice:
    @settings(max_examples=150, deadline=None)
    @given(
        pair=st.sampled_from(PAIRS),
        answers=st.dictionaries(
            st.sampled_from(sorted(GUARDS)), st.sampled_from([True, False, RAISE]), max_size=12
        ),
    )
    def test_the_first_row_whose_guards_pass_fires_with_the_verdicts_asked(
        self, pair: tuple[str, str], answers: dict[str, Any]
    ) -> None:
        """Any verdicts: the row, the recorded verdicts and their order match the reference."""
        source, trigger = pair
        ANSWERS.now = answers
        expected, verdicts = _expected(source, trigger, answers)
        ctx = make_context(source)
        if isinstance(expected, str):
            with pytest.raises(GuardError, match=expected):
                ENGINE.fire(ctx, trigger)
            assert ctx.state.state == source
            assert ctx.state.trail == []
            return
        record = ENGINE.fire(ctx, trigger)
        assert record.key == expected.key
        assert ctx.state.state == expected.dest
        assert ctx.entered_by is expected
        assert list(record.guards.items()) == list(verdicts.items())
