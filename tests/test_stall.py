"""Stall detection: each pattern fires on its canonical sequence and stays quiet on progress."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from statemachine_agent.policy.stall import (
    StallDetector,
    StallFinding,
    StallPolicy,
    canonical_arguments,
    normalize_text,
)

Call = tuple[str, Any, str]


def detector_with(calls: list[Call], policy: StallPolicy | None = None) -> StallDetector:
    detector = StallDetector(policy or StallPolicy())
    for name, arguments, result in calls:
        detector.record(name, arguments, result)
    return detector


def finding_for(calls: list[Call], policy: StallPolicy | None = None) -> StallFinding | None:
    return detector_with(calls, policy).is_stalled()


A: Call = ("search", {"q": "a"}, "ra")
B: Call = ("fetch", {"url": "b"}, "rb")
C: Call = ("read_file", {"path": "c"}, "rc")


class TestRepeat:
    def test_fires_on_identical_calls(self) -> None:
        """Three identical calls with the same result are a repeat, described in one sentence."""
        finding = finding_for([("search", {"q": "x"}, "nothing")] * 3)
        assert finding == StallFinding(
            pattern="repeat",
            tool="search",
            count=3,
            detail=(
                'search was called 3 times with the same arguments {"q":"x"} '
                "and got the same result each time"
            ),
        )

    def test_repeated_error_is_a_stall(self) -> None:
        """An error repeated is as much a stall as a result repeated, and the detail says error."""
        detector = StallDetector()
        for _ in range(3):
            detector.record("deploy", {"env": "prod"}, "permission denied", is_error=True)
        finding = detector.is_stalled()
        assert finding is not None
        assert finding.pattern == "repeat"
        assert "same error" in finding.detail

    def test_fewer_than_threshold_is_fine(self) -> None:
        """Two identical calls are below the default threshold of three."""
        assert finding_for([A, A]) is None

    def test_threshold_is_configurable(self) -> None:
        """With threshold 2, two identical calls are already a stall."""
        finding = finding_for([A, A], StallPolicy(threshold=2))
        assert finding is not None
        assert finding.count == 2

    def test_polling_with_changing_results_is_progress(self) -> None:
        """Polling the same job is fine while the status keeps changing."""
        calls = [("get_status", {"job": 1}, s) for s in ("pending", "running", "done")]
        assert finding_for(calls) is None

    def test_counts_only_calls_with_the_repeated_result(self) -> None:
        """Count is the number of calls that got the repeated result, not all calls."""
        poll = "get_status"
        calls = [(poll, {"job": 1}, r) for r in ("pending", "running", "pending")]
        assert finding_for(calls) is None
        finding = finding_for([*calls, (poll, {"job": 1}, "pending")])
        assert finding is not None
        assert (finding.pattern, finding.count) == ("repeat", 3)

    def test_same_tool_different_arguments(self) -> None:
        """Different arguments with the same empty result are distinct attempts, not a stall."""
        calls = [("search", {"q": q}, "no results") for q in ("apples", "pears", "plums")]
        assert finding_for(calls) is None

    def test_different_tools_same_arguments(self) -> None:
        """Different tools are different calls even when their arguments match."""
        calls = [(name, {"id": 7}, "same") for name in ("get_user", "get_order", "get_invoice")]
        assert finding_for(calls) is None

    def test_argument_key_order_does_not_matter(self) -> None:
        """Arguments are compared as canonical JSON, so key order cannot hide a repeat."""
        calls: list[Call] = [
            ("search", {"q": "x", "n": 1}, "r"),
            ("search", {"n": 1, "q": "x"}, "r"),
            ("search", {"q": "x", "n": 1}, "r"),
        ]
        finding = finding_for(calls)
        assert finding is not None
        assert finding.pattern == "repeat"

    def test_canonical_arguments(self) -> None:
        """Canonical JSON sorts keys, drops spaces and keeps non-ASCII text readable."""
        assert canonical_arguments({"b": 1, "a": "東京"}) == '{"a":"東京","b":1}'

    def test_unserializable_arguments_do_not_break_recording(self) -> None:
        """Odd arguments fall back to their repr instead of raising mid-run."""
        detector = StallDetector()
        for _ in range(3):
            detector.record("odd", {1, 2}, "r")
        finding = detector.is_stalled()
        assert finding is not None
        assert finding.pattern == "repeat"


class TestCycle:
    def test_two_step_cycle(self) -> None:
        """A, B, A, B with unchanged results is a cycle of two calls repeated twice."""
        finding = finding_for([A, B, A, B])
        assert finding is not None
        assert (finding.pattern, finding.tool, finding.count) == ("cycle", "search -> fetch", 2)
        assert "search -> fetch" in finding.detail
        assert "2 times" in finding.detail

    def test_three_step_cycle(self) -> None:
        """A, B, C, A, B, C is a cycle of period three."""
        finding = finding_for([A, B, C, A, B, C])
        assert finding is not None
        assert (finding.pattern, finding.tool, finding.count) == (
            "cycle",
            "search -> fetch -> read_file",
            2,
        )

    def test_count_grows_with_repetitions(self) -> None:
        """Three full rounds of A, B report three repetitions."""
        finding = finding_for([C, A, B, A, B, A, B], StallPolicy(threshold=4))
        assert finding is not None
        assert (finding.pattern, finding.count) == ("cycle", 3)

    def test_higher_threshold_needs_more_rounds(self) -> None:
        """With threshold 4 a cycle needs three rounds, so two are not enough."""
        assert finding_for([A, B, A, B], StallPolicy(threshold=4)) is None

    def test_cycle_with_changing_results_is_progress(self) -> None:
        """Alternating tools whose results change are working through something."""
        calls: list[Call] = [
            ("next_page", {}, "page 1"),
            ("summarize", {}, "summary 1"),
            ("next_page", {}, "page 2"),
            ("summarize", {}, "summary 2"),
        ]
        assert finding_for(calls) is None

    def test_broken_pattern_is_not_a_cycle(self) -> None:
        """A, B, A, C does not repeat a block."""
        assert finding_for([A, B, A, C]) is None

    def test_cycle_must_end_at_latest_call(self) -> None:
        """Once the model leaves the cycle the finding lapses, since the run moved on."""
        assert finding_for([A, B, A, B, C]) is None

    def test_period_longer_than_policy_is_ignored(self) -> None:
        """A period-three cycle is not looked for when max_cycle_period is 2."""
        assert finding_for([A, B, C, A, B, C], StallPolicy(max_cycle_period=2)) is None

    def test_single_repeated_call_is_a_repeat_not_a_cycle(self) -> None:
        """A, A, A, A is reported as a repeat, never as a cycle of (A, A)."""
        finding = finding_for([A] * 4)
        assert finding is not None
        assert finding.pattern == "repeat"


class TestOscillation:
    def test_edit_revert(self) -> None:
        """New arguments each time but results flipping X, Y, X, Y is an edit/revert loop."""
        calls: list[Call] = [
            ("edit_file", {"patch": f"v{i}"}, result) for i, result in enumerate("XYXY")
        ]
        finding = finding_for(calls)
        assert finding is not None
        assert (finding.pattern, finding.tool, finding.count) == ("oscillation", "edit_file", 2)
        assert "4 different arguments" in finding.detail
        assert "2 times" in finding.detail

    def test_single_return_is_below_threshold(self) -> None:
        """X, Y, X is one return; the default needs two."""
        calls: list[Call] = [("edit_file", {"patch": f"v{i}"}, r) for i, r in enumerate("XYX")]
        assert finding_for(calls) is None

    def test_constant_result_is_not_oscillation(self) -> None:
        """A tool that always answers "ok" to different arguments never returns to anything."""
        calls: list[Call] = [("write_file", {"path": f"f{i}.txt"}, "ok") for i in range(6)]
        assert finding_for(calls) is None

    def test_all_new_results_is_progress(self) -> None:
        """Same tool, different arguments, every result new: plain exploration."""
        calls: list[Call] = [("search", {"q": f"topic {i}"}, f"result {i}") for i in range(8)]
        assert finding_for(calls) is None

    def test_other_tools_in_between_do_not_hide_it(self) -> None:
        """Oscillation is judged per tool, so interleaved reads do not mask it."""
        calls: list[Call] = []
        for i, result in enumerate("XYXY"):
            calls.append(("edit_file", {"patch": f"v{i}"}, result))
            calls.append(("read_file", {"path": f"log{i}"}, f"log {i}"))
        finding = finding_for(calls)
        assert finding is not None
        assert (finding.pattern, finding.tool) == ("oscillation", "edit_file")


class TestNearDuplicate:
    def test_reworded_queries(self) -> None:
        """Queries differing only in case, spacing, punctuation and word order are the same ask."""
        calls: list[Call] = [
            ("search", {"q": "weather Tokyo"}, "r1"),
            ("search", {"q": "tokyo  weather!"}, "r2"),
            ("search", {"q": "Weather, Tokyo"}, "r3"),
        ]
        finding = finding_for(calls)
        assert finding is not None
        assert (finding.pattern, finding.tool, finding.count) == ("near_duplicate", "search", 3)
        assert "3 variants" in finding.detail

    def test_normalize_text(self) -> None:
        """Normalization casefolds, drops punctuation, collapses spaces and sorts words."""
        assert normalize_text("  Weather,\tTOKYO! ") == "tokyo weather"

    def test_different_files_never_match(self) -> None:
        """read_file on a.txt, b.txt, c.txt reads three different files."""
        calls: list[Call] = [("read_file", {"path": f"{p}.txt"}, "") for p in "abc"]
        assert finding_for(calls) is None

    def test_non_string_values_must_be_equal(self) -> None:
        """Reworded queries asking for different pages are different requests."""
        calls: list[Call] = [
            ("search", {"q": q, "page": page}, f"r{page}")
            for page, q in enumerate(["weather Tokyo", "tokyo weather", "Tokyo, weather"])
        ]
        assert finding_for(calls) is None

    def test_below_threshold(self) -> None:
        """Two rewordings are not yet a stall."""
        calls: list[Call] = [("search", {"q": "weather Tokyo"}, "1"), ("search", {"q": "x"}, "2")]
        calls.append(("search", {"q": "Tokyo weather"}, "3"))
        assert finding_for(calls) is None

    def test_identical_polling_is_not_near_duplicate(self) -> None:
        """Identical arguments with changing results are polling, not rewording."""
        calls: list[Call] = [("get_status", {"job": "A"}, s) for s in ("queued", "running", "ok")]
        assert finding_for(calls) is None

    def test_similarity_is_opt_in(self) -> None:
        """Typo-level differences only match when a similarity ratio is configured."""
        calls: list[Call] = [
            ("search", {"q": "weather forecast tokyo"}, "r1"),
            ("search", {"q": "weather forecast tokio"}, "r2"),
            ("search", {"q": "wheather forecast tokyo"}, "r3"),
        ]
        assert finding_for(calls) is None
        finding = finding_for(calls, StallPolicy(similarity=0.85))
        assert finding is not None
        assert (finding.pattern, finding.count) == ("near_duplicate", 3)

    def test_repeat_outranks_near_duplicate(self) -> None:
        """When a call is both a repeat and a rewording, the sharper repeat is reported."""
        calls: list[Call] = [
            ("search", {"q": "weather Tokyo"}, "same"),
            ("search", {"q": "weather Tokyo"}, "same"),
            ("search", {"q": "Tokyo weather"}, "same"),
        ]
        finding = finding_for(calls)
        assert finding is not None
        assert finding.pattern == "near_duplicate"
        finding = finding_for([*calls, ("search", {"q": "weather Tokyo"}, "same")])
        assert finding is not None
        assert (finding.pattern, finding.count) == ("repeat", 3)


class TestPurity:
    def test_is_stalled_twice_does_not_double_count(self) -> None:
        """Checking after recording, twice, gives the same finding with the same count."""
        detector = StallDetector()
        for _ in range(3):
            detector.record("search", {"q": "x"}, "r")
        before = detector.to_state()
        first, second = detector.is_stalled(), detector.is_stalled()
        assert first is not None
        assert first == second
        assert first.count == 3
        assert detector.to_state() == before

    def test_record_then_check_each_call(self) -> None:
        """The book's record-then-check loop fires on the third call, not the second."""
        detector = StallDetector()
        fired_at: list[int] = []
        for call in range(1, 5):
            detector.record("search", {"q": "x"}, "r")
            if detector.is_stalled() is not None:
                fired_at.append(call)
        assert fired_at[0] == 3

    def test_empty_detector(self) -> None:
        """Nothing recorded means nothing to report."""
        assert StallDetector().is_stalled() is None


class TestAcknowledge:
    def test_silences_until_new_offending_call(self) -> None:
        """After an intervention the repeat is quiet until it happens again, then counts on."""
        detector = detector_with([A, A, A])
        assert detector.is_stalled() is not None
        detector.acknowledge()
        assert detector.is_stalled() is None
        detector.record(*C)
        assert detector.is_stalled() is None
        detector.record(*A)
        finding = detector.is_stalled()
        assert finding is not None
        assert (finding.pattern, finding.count) == ("repeat", 4)

    def test_new_result_is_not_new_evidence(self) -> None:
        """A call after acknowledge that got a different result does not revive the old repeat."""
        detector = detector_with([A, A, A])
        detector.acknowledge()
        detector.record(A[0], A[1], "something new")
        assert detector.is_stalled() is None

    def test_cycle_needs_new_evidence(self) -> None:
        """An acknowledged cycle stays quiet once the model breaks out of it."""
        detector = detector_with([A, B, A, B])
        detector.acknowledge()
        assert detector.is_stalled() is None
        detector.record(*C)
        assert detector.is_stalled() is None

    def test_cycle_resumed_fires_again(self) -> None:
        """Going on round an acknowledged cycle fires again, as the sharper repeat of its call."""
        detector = detector_with([A, B, A, B])
        detector.acknowledge()
        detector.record(*A)
        finding = detector.is_stalled()
        assert finding is not None
        assert (finding.pattern, finding.tool, finding.count) == ("repeat", "search", 3)

    def test_new_cycle_after_acknowledge_fires(self) -> None:
        """A different cycle started after an intervention is new evidence and fires."""
        detector = detector_with([A, B, A, B])
        detector.acknowledge()
        d: Call = ("list_dir", {"path": "."}, "a b")
        for call in (C, d, C, d):
            detector.record(*call)
        finding = detector.is_stalled()
        assert finding is not None
        assert (finding.pattern, finding.tool, finding.count) == (
            "cycle",
            "read_file -> list_dir",
            2,
        )


class TestState:
    def test_round_trip_keeps_findings(self) -> None:
        """A restored detector reports the same finding and keeps the acknowledgement."""
        detector = detector_with([A, A, A])
        detector.acknowledge()
        detector.record(*B)
        state = json.loads(json.dumps(detector.to_state()))
        restored = StallDetector.from_state(StallPolicy(), state)
        assert restored.to_state() == detector.to_state()
        assert restored.is_stalled() is None
        restored.record(*A)
        detector.record(*A)
        assert restored.is_stalled() == detector.is_stalled() is not None

    def test_empty_state_is_a_fresh_detector(self) -> None:
        """A run's initial empty checkpoint restores to a detector with nothing recorded."""
        restored = StallDetector.from_state(StallPolicy(), {})
        assert restored.to_state() == StallDetector().to_state()
        assert restored.is_stalled() is None

    @pytest.mark.parametrize(
        "state",
        [
            {"observations": []},
            {"version": 99, "next_seq": 0, "acknowledged_at": 0, "observations": []},
            {"version": 1, "next_seq": 1, "acknowledged_at": 2, "observations": []},
            {"version": 1, "next_seq": 1, "acknowledged_at": 0, "observations": [{"seq": 0}]},
            {
                "version": 1,
                "next_seq": 1,
                "acknowledged_at": 0,
                "observations": [
                    {"seq": 5, "tool": "t", "arguments": "{}", "result": "h", "is_error": False}
                ],
            },
            {
                "version": 1,
                "next_seq": 1,
                "acknowledged_at": 0,
                "observations": [
                    {"seq": 0, "tool": "t", "arguments": "{", "result": "h", "is_error": False}
                ],
            },
        ],
    )
    def test_rejects_malformed_state(self, state: dict[str, Any]) -> None:
        """A corrupt checkpoint is refused loudly rather than restored half-right."""
        with pytest.raises(ValueError, match="stall"):
            StallDetector.from_state(StallPolicy(), state)

    @settings(max_examples=200, deadline=None)
    @given(
        st.lists(
            st.one_of(
                st.just(None),
                st.tuples(
                    st.sampled_from(["search", "fetch", "edit"]),
                    st.sampled_from(
                        [{}, {"q": "a b"}, {"q": "B, a"}, {"q": "c"}, {"n": 1}, {"n": [1, "x"]}]
                    ),
                    st.sampled_from(["r1", "r2", "ok", "東京"]),
                    st.booleans(),
                ),
            ),
            max_size=40,
        )
    )
    def test_any_sequence_round_trips(
        self, ops: list[tuple[str, dict[str, Any], str, bool] | None]
    ) -> None:
        """Any mix of records and acknowledgements survives a JSON checkpoint unchanged."""
        detector = StallDetector()
        for op in ops:
            if op is None:
                detector.acknowledge()
            else:
                name, arguments, result, is_error = op
                detector.record(name, arguments, result, is_error=is_error)
        state = detector.to_state()
        restored = StallDetector.from_state(detector.policy, json.loads(json.dumps(state)))
        assert restored.to_state() == state
        assert restored.is_stalled() == detector.is_stalled() == detector.is_stalled()
        assert detector.to_state() == state

    def test_finding_round_trip(self) -> None:
        """A finding survives to_dict/from_dict, and an unknown pattern is refused."""
        finding = StallFinding(pattern="cycle", tool="a -> b", count=2, detail="d")
        assert StallFinding.from_dict(json.loads(json.dumps(finding.to_dict()))) == finding
        with pytest.raises(ValueError, match="pattern"):
            StallFinding.from_dict({**finding.to_dict(), "pattern": "loop"})
        with pytest.raises(ValueError, match="malformed"):
            StallFinding.from_dict({**finding.to_dict(), "count": "2"})


class TestBoundedMemory:
    def test_history_is_capped(self) -> None:
        """Only the most recent observations are kept, however long the run."""
        detector = StallDetector()
        for i in range(StallDetector.HISTORY * 5):
            detector.record(f"tool{i}", {"i": i}, str(i))
        observations = detector.to_state()["observations"]
        assert len(observations) == StallDetector.HISTORY
        assert observations[-1]["seq"] == StallDetector.HISTORY * 5 - 1

    def test_results_are_stored_as_hashes(self) -> None:
        """A huge tool result costs a short hash, not its text."""
        detector = StallDetector()
        detector.record("read_file", {"path": "big"}, "x" * 1_000_000)
        assert len(json.dumps(detector.to_state())) < 500

    def test_old_calls_are_forgotten(self) -> None:
        """A repeat whose earlier calls fell out of the window no longer counts."""
        detector = detector_with([A, A])
        for i in range(StallDetector.HISTORY):
            detector.record(f"tool{i}", {"i": i}, str(i))
        detector.record(*A)
        assert detector.is_stalled() is None


class TestPolicy:
    def test_defaults(self) -> None:
        """Defaults match the book: three strikes, two interventions, salvage on."""
        policy = StallPolicy()
        assert (policy.threshold, policy.max_interventions, policy.max_cycle_period) == (3, 2, 4)
        assert policy.similarity is None
        assert policy.salvage is True

    @pytest.mark.parametrize(
        ("kwargs", "message"),
        [
            ({"threshold": 1}, "threshold"),
            ({"threshold": True}, "threshold"),
            ({"max_interventions": -1}, "max_interventions"),
            ({"max_cycle_period": 1}, "max_cycle_period"),
            ({"similarity": 0.0}, "similarity"),
            ({"similarity": 1.5}, "similarity"),
            ({"salvage": "yes"}, "salvage"),
        ],
    )
    def test_rejects_bad_values(self, kwargs: dict[str, Any], message: str) -> None:
        """Nonsense settings fail at construction with the field named."""
        with pytest.raises(ValueError, match=message):
            StallPolicy(**kwargs)
