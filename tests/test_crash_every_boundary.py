"""A SIGKILL at every transition boundary of the general loop repeats no recorded
effect (issue 27), on SQLite and PostgreSQL.

Issue 27 cuts durable writes: transitions out of cheap phases are carried in the
next write instead of written alone, so a crash re-does them (and a model call
whose reply was not yet recorded). This test is the adversary of that change. A
child process runs four model turns (one effectful call, two in parallel, one
more, the answer) and is SIGKILLed at one kill point; a new process finishes the
run. The kill points are every one there is, no sample:

- `run_started`: before anything of the run is written;
- `before_write:K` for every transition K: at its `transition.fired` event, which
  reaches the audit sinks before the engine writes anything for K, so a write
  carried by K (or by a later transition) is lost;
- `after_write:K`: at the first event after it, so whatever the engine writes for
  K is written, and the next step's work is not begun.

For each, the finished run ends as the uninterrupted one did (end state, text,
messages, the trail's steps); every effect is in the ledger once and the tool ran
once per call (a kill at a boundary is never between an effect and its record, so
a recorded call never runs again: "effects repeated stays 0"); the model was
asked again only for the replies the store had not recorded when the process
died, at most one; the audit file's chain holds and it replays to its trail. The
kills run two at a time, since each is two interpreter starts.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from statemachine_agent import AnthropicModel, RunNotFoundError, RunResult
from statemachine_agent.audit.chain import verify_file
from statemachine_agent.persistence import load_record
from statemachine_agent.replay import replay
from statemachine_agent.testing.postgres import LocalPostgres
from statemachine_agent.testing.server import FakeAnthropicServer
from tests.support.crashing import run_child, store
from tests.support.loop_crash_agent import ANSWER, CALL_IDS, PROMPT, build, script

TURNS = len(script())


def child(*args: str) -> dict[str, Any]:
    return run_child("tests.support.loop_crash_agent", *args)


def turns_asked(path: Path) -> list[int]:
    return [int(turn) for turn in path.read_text().split()] if path.exists() else []


def stored_at_crash(where: str, run_id: str) -> tuple[str | None, int]:
    """The run's state in the store as the dead process left it, and how many model
    replies the store holds (None, 0: nothing was written)."""
    checkpointer = store(where)
    try:
        record = load_record(checkpointer, run_id)
    except RunNotFoundError:
        return None, 0
    finally:
        checkpointer.close()
    return record.state, sum(1 for m in record.messages if m["role"] == "assistant")


def crash_and_finish(where: str, folder: Path, kill: str) -> dict[str, Any]:
    """Kill a run at `kill`, finish it in a new process; what each saw and did."""
    folder.mkdir()
    run_id = "loop_" + kill.replace(":", "_")
    crashed = child("run", where, str(folder), run_id, kill)
    state, recorded = stored_at_crash(where, run_id)
    finished = child("resume", where, str(folder), run_id)
    audit = folder / "audit" / f"{run_id}.jsonl"
    replayed = replay(audit)
    return {
        "crashed": crashed.get("returncode"),
        "stored_state": state,
        "recorded_replies": recorded,
        "finished": finished,
        "effects": Counter(line.split()[0].split(":")[-1]
                           for line in (folder / "ledger").read_text().splitlines()),
        "calls": Counter(line.split(":")[-1]
                         for line in (folder / "ledger.calls").read_text().split()),
        "asked_before": turns_asked(folder / "model.calls.run"),
        "asked_after": turns_asked(folder / "model.calls.resume"),
        "chain": verify_file(audit).status,
        "replayed": (replayed.matched, replayed.difference),
    }  # fmt: skip


@pytest.fixture(scope="module")
def postgres() -> Iterator[LocalPostgres]:
    with LocalPostgres() as server:
        yield server


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def crashes(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """The uninterrupted run, and what a kill at each kill point led to, on one store."""
    folder = tmp_path_factory.mktemp(request.param)
    if request.param == "postgres":
        where = request.getfixturevalue("postgres").dsn
    else:
        where = str(folder / "runs.sqlite3")
    (folder / "reference").mkdir()
    reference = child("run", where, str(folder / "reference"), "loop_reference")
    fired = [
        json.loads(line)
        for line in (folder / "reference" / "audit" / "loop_reference.jsonl").open()
        if '"transition.fired"' in line
    ]
    assert [event["seq"] for event in fired] == list(range(1, len(fired) + 1))
    kills = ["run_started"] + [
        f"{moment}:{event['seq']}" for event in fired for moment in ("before_write", "after_write")
    ]
    with ThreadPoolExecutor(max_workers=2) as pool:
        done = pool.map(lambda kill: crash_and_finish(where, folder / kill, kill), kills)
        return reference, dict(zip(kills, done, strict=True))


def expected(reference: dict[str, Any], seen: dict[str, Any]) -> dict[str, Any]:
    """What a kill must lead to, given what the store held when the process died."""
    state, recorded = seen["stored_state"], seen["recorded_replies"]
    how = {"restarted": True} if state is None else {}
    return {
        "crashed": -9,
        "stored_state": state,
        "recorded_replies": recorded,
        "finished": {**{key: reference[key] for key in ("end_state", "text", "messages", "trail")},
                     **how},
        "effects": Counter(CALL_IDS),
        "calls": Counter(CALL_IDS),
        "asked_before": seen["asked_before"],
        "asked_after": list(range(recorded, TURNS)),
        # A run the store holds as ended but whose run.ended its dead process never wrote
        # is finished by the resume, which writes it (RunRecord.reporting_end).
        "chain": "intact",
        "replayed": (True, None),
    }  # fmt: skip


def steps(result: RunResult[Any]) -> list[tuple[str, str, str]]:
    return [(step.source, step.trigger, step.dest) for step in result.trail]


class TestTheDriver:
    def test_the_script_is_the_same_run_every_time_and_through_the_sdk(
        self, tmp_path: Path
    ) -> None:
        """Two runs of the progress model, and one of its replies served by the strict
        server through the real SDK, make the same transcript and trail, each effect
        once (the parallel two in either order): what the kills compare against is a
        run a real API exchange gives."""
        runs = []
        for name in ("first", "second"):
            (tmp_path / name).mkdir()
            agent = build(str(tmp_path / "runs.sqlite3"), tmp_path / name, "run", None)
            runs.append(agent.run(PROMPT, run_id=f"loop_{name}"))
        with FakeAnthropicServer(script()) as server:
            model = AnthropicModel("claude-sonnet-4-5", base_url=server.base_url,
                                   api_key="sk-ant-test-key", max_retries=0)  # fmt: skip
            (tmp_path / "sdk").mkdir()
            agent = build(str(tmp_path / "runs.sqlite3"), tmp_path / "sdk", "run", None, model)
            runs.append(agent.run(PROMPT, run_id="loop_sdk"))
        assert [run.messages for run in runs] == [runs[0].messages] * 3
        assert [steps(run) for run in runs] == [steps(runs[0])] * 3
        assert {run.text for run in runs} == {ANSWER}
        for name in ("first", "second", "sdk"):
            made = (tmp_path / name / "ledger").read_text().split("\n")[:-1]
            assert Counter(line.split()[0].split(":")[-1] for line in made) == Counter(CALL_IDS)


class TestSigkillAtEveryTransitionBoundary:
    def test_the_uninterrupted_run(
        self, crashes: tuple[dict[str, Any], dict[str, dict[str, Any]]]
    ) -> None:
        """The scenario the kills cut: four turns, fourteen-odd transitions, completed."""
        reference, seen = crashes
        assert reference["end_state"] == "completed"
        assert reference["text"] == ANSWER
        assert len(seen) == 1 + 2 * len(reference["trail"])

    def test_finishes_as_uninterrupted_with_no_effect_repeated(
        self, crashes: tuple[dict[str, Any], dict[str, dict[str, Any]]]
    ) -> None:
        """Killed at every boundary and finished by another process: the uninterrupted
        run's outcome, each effect made once and each call run once, only unrecorded
        replies asked again, and an audit file whose chain holds and replays."""
        reference, seen = crashes
        assert seen == {kill: expected(reference, saw) for kill, saw in seen.items()}

    def test_the_model_is_asked_again_at_most_once(
        self, crashes: tuple[dict[str, Any], dict[str, dict[str, Any]]]
    ) -> None:
        """The dead process asked for each reply once, in order; both together asked for
        at most one reply more than the uninterrupted run, none more than twice."""
        _, seen = crashes
        for kill, saw in seen.items():
            before, after = saw["asked_before"], saw["asked_after"]
            assert before == list(range(len(before))), kill
            assert len(before) + len(after) <= TURNS + 1, kill
            assert max(Counter(before + after).values()) <= 2, kill

    def test_every_audit_file_ends_sealed(
        self, crashes: tuple[dict[str, Any], dict[str, dict[str, Any]]]
    ) -> None:
        """Whatever the kill, the finished run's audit file ends sealed by run.ended."""
        _, seen = crashes
        assert {kill: saw["chain"] for kill, saw in seen.items()} == dict.fromkeys(seen, "intact")
