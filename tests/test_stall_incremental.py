"""The incremental stall detector finds exactly what the window-scanning one found.

The reference (tests/support/stall_reference.py) is the detector before its patterns
were kept as counters. Hypothesis drives both with the same calls and
acknowledgements, under any policy and a small window (so forgetting old calls is
exercised constantly), and compares the findings after every step, and after a
checkpoint round trip; each state handed out equals the reference's and stays as it
was handed out (the detector shares its observations' dicts between states).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from statemachine_agent.policy.stall import StallDetector, StallPolicy
from tests.support import stall_reference

WINDOW = 9
"""A window this small makes most sequences forget calls, where counters could drift."""

calls = st.tuples(
    st.sampled_from(["search", "fetch", "edit"]),
    st.sampled_from([{"q": "a b"}, {"q": "B, a"}, {"q": "b a!"}, {"q": "c"}, {"n": 1}, {}]),
    st.sampled_from(["r1", "r2", "ok"]),
    st.booleans(),
)
ops = st.lists(st.one_of(st.none(), calls, calls, calls, calls), max_size=60)
policies = st.builds(
    StallPolicy,
    threshold=st.integers(2, 4),
    max_cycle_period=st.integers(2, 5),
    similarity=st.sampled_from([None, None, 0.75, 1.0]),
)


@pytest.fixture(autouse=True)
def small_window() -> Iterator[None]:
    saved = StallDetector.HISTORY, stall_reference.StallDetector.HISTORY
    StallDetector.HISTORY = stall_reference.StallDetector.HISTORY = WINDOW
    yield
    StallDetector.HISTORY, stall_reference.StallDetector.HISTORY = saved


def reference_policy(policy: StallPolicy) -> stall_reference.StallPolicy:
    return stall_reference.StallPolicy(**dataclasses.asdict(policy))


def finding(detector: Any) -> dict[str, Any] | None:
    return _as_dict(detector.is_stalled())


@settings(max_examples=400, deadline=None)
@given(policy=policies, steps=ops)
def test_same_findings_as_the_window_scan(
    policy: StallPolicy, steps: list[tuple[str, dict[str, Any], str, bool] | None]
) -> None:
    new, old = StallDetector(policy), stall_reference.StallDetector(reference_policy(policy))
    handed: list[tuple[dict[str, Any], str]] = []
    for step in steps:
        for detector in (new, old):
            if step is None:
                detector.acknowledge()
            else:
                name, arguments, result, is_error = step
                detector.record(name, arguments, result, is_error=is_error)
        assert finding(new) == finding(old)
        state = new.to_state()
        assert state == old.to_state()
        handed.append((state, json.dumps(state)))
        restored = StallDetector.from_state(policy, state)
        assert finding(restored) == finding(old)
    # A state handed out earlier is a value: later calls, forgetting, restores leave it be.
    assert all(json.dumps(state) == text for state, text in handed)


def test_long_cycle_across_the_window_edge() -> None:
    """A cycle longer than the window is counted only as far as the window reaches."""
    policy = StallPolicy(threshold=3)
    new, old = StallDetector(policy), stall_reference.StallDetector(reference_policy(policy))
    for k in range(40):
        for detector in (new, old):
            detector.record("ab"[k % 2], {"k": k % 2}, "same")
        assert _as_dict(new._cycle()) == _as_dict(old._cycle())
        assert finding(new) == finding(old)
    cycle = new._cycle()
    assert cycle is not None
    assert cycle.count == WINDOW // 2


def _as_dict(found: Any) -> dict[str, Any] | None:
    return None if found is None else dict(found.to_dict())
