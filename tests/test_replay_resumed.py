"""`replay` of runs that were resumed: after approval, after cancellation, after a crash.

Each file holds one segment per process that worked on the run; the replay must
resume its own run where the recorded one was resumed and take the identical
path. (Crashes in a killed child process are replayed in test_durability.py.)
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from statemachine_agent import (
    Agent,
    CancelToken,
    Deny,
    Edit,
    ModelReply,
    ModelRequest,
    ScriptedModel,
    tool,
)
from statemachine_agent.audit.sink import read_events
from statemachine_agent.cli import main
from statemachine_agent.cli.demos import SCENARIOS
from statemachine_agent.replay import replay, segments
from statemachine_agent.testing import replies


def assert_replays(path: Path, end_state: str, messages: list[dict[str, object]]) -> None:
    report = replay(path)
    assert report.matched, report.difference
    assert report.result.end_state == end_state
    assert report.result.messages == messages
    assert len(segments(read_events(path))) >= 2


def test_an_approved_and_resumed_run(tmp_path: Path) -> None:
    """The approval demo: paused, approved, resumed; the replay pauses and resumes too."""
    scenario = SCENARIOS["approval"]
    agent = Agent(scenario.model(), tools=scenario.tools(), system=scenario.system,
                  audit=tmp_path, **scenario.options())  # fmt: skip
    paused = agent.run(scenario.prompt)
    assert paused.end_state == "awaiting_approval"
    assert scenario.decide is not None
    done = agent.resume(paused.run_id, decisions=scenario.decide(list(paused.details["pending"])))
    assert done.audit_path is not None
    assert_replays(done.audit_path, done.end_state, done.messages)


def test_denied_and_edited_decisions_replay(tmp_path: Path) -> None:
    """A denial's message and an edit's input are read back from the record."""

    @tool(requires_approval=True)
    def send(to: str) -> str:
        """Send a message."""
        return f"sent to {to}"

    model = ScriptedModel(
        [
            replies.tool_uses(("send", {"to": "a"}), ("send", {"to": "b"}), ids=("t_a", "t_b")),
            replies.text("One went out."),
        ]
    )
    agent = Agent(model, tools=[send], audit=tmp_path)
    paused = agent.run("send both")
    assert paused.end_state == "awaiting_approval"
    done = agent.resume(
        paused.run_id, decisions={"t_a": Deny("not to a, ever"), "t_b": Edit({"to": "c"})}
    )
    assert done.end_state == "completed"
    assert done.audit_path is not None
    assert_replays(done.audit_path, "completed", done.messages)


def test_a_run_cancelled_between_steps_and_resumed(tmp_path: Path) -> None:
    token = CancelToken()

    @tool
    def step() -> str:
        """A step after which the host cancels."""
        token.cancel()
        return "done"

    model = ScriptedModel([replies.tool_use("step"), replies.text("Carried on.")])
    agent = Agent(model, tools=[step], audit=tmp_path, checkpointer=tmp_path / "runs.sqlite3")
    cancelled = agent.run("go", cancel=token)
    assert cancelled.end_state == "cancelled"
    done = agent.resume(cancelled.run_id)
    assert done.end_state == "completed"
    assert done.audit_path is not None
    assert_replays(done.audit_path, "completed", done.messages)


class SlowFirst:
    """A model whose first call never answers (the host cancels it); then it replies."""

    name = "claude-sonnet-5"

    def __init__(self) -> None:
        self.calls = 0

    async def acomplete(self, request: ModelRequest) -> ModelReply:
        self.calls += 1
        if self.calls == 1:
            await asyncio.sleep(60)
        return ModelReply.from_api(replies.text("Here it is."))


def test_a_run_cancelled_during_a_model_call_and_resumed(tmp_path: Path) -> None:
    """Cancelled while the model was answering: the replay cancels at the same call."""
    agent = Agent(SlowFirst(), audit=tmp_path, checkpointer=tmp_path / "runs.sqlite3")
    cancelled = agent.run("q", deadline=0.2)
    assert cancelled.end_state == "cancelled"
    done = agent.resume(cancelled.run_id)
    assert done.end_state == "completed"
    assert done.audit_path is not None
    assert_replays(done.audit_path, "completed", done.messages)


def test_the_command_replays_a_resumed_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["demo", "--scenario", "approval", "--audit-dir", str(tmp_path)]) == 0
    (path,) = tmp_path.glob("*.jsonl")
    capsys.readouterr()
    assert main(["replay", str(path)]) == 0
    assert "Replay:     matched" in capsys.readouterr().out


def test_a_cut_off_run_is_not_replayed_as_if_it_ended(tmp_path: Path) -> None:
    """A file that stops mid-run (the process died and nobody resumed) has no end to
    compare with: a clear error, not a made-up one."""
    scenario = SCENARIOS["time-calculate"]
    agent = Agent(scenario.model(), tools=scenario.tools(), audit=tmp_path)
    result = agent.run(scenario.prompt)
    assert result.audit_path is not None
    lines = result.audit_path.read_text(encoding="utf-8").splitlines(keepends=True)
    result.audit_path.write_text("".join(lines[:6]), encoding="utf-8")
    with pytest.raises(ValueError, match="never reached an end state"):
        replay(result.audit_path)


class _Died(BaseException):
    """Stands for the process dying: no phase or engine handler catches it."""


def test_a_crash_after_carried_transitions_replays(tmp_path: Path) -> None:
    """A process dies in its second model call: the audit file holds the transitions
    carried since the last checkpoint (observe -> perceive -> reason, flushed before
    the call), the store does not. The resume re-does them with the same numbers; the
    replay reads the dead segment up to where the resume took over, and matches."""
    from statemachine_agent.persistence.sqlite import SQLiteCheckpointer

    @tool
    def count(n: int) -> str:
        """Count."""
        return f"counted {n}"

    script = [replies.tool_use("count", {"n": 1}, id="t1"), replies.text("One.")]

    class DiesOnSecondCall:
        name = "claude-sonnet-5"

        def __init__(self) -> None:
            self.calls = 0

        async def acomplete(self, request: ModelRequest) -> ModelReply:
            self.calls += 1
            if self.calls == 2:
                raise _Died
            return ModelReply.from_api(script[0])

    store = tmp_path / "runs.sqlite3"
    dying = Agent(DiesOnSecondCall(), tools=[count], checkpointer=SQLiteCheckpointer(store),
                  audit=tmp_path / "audit")  # fmt: skip
    with pytest.raises(_Died):
        dying.run("Count.", run_id="r")
    path = tmp_path / "audit" / "r.jsonl"
    fired = [e["seq"] for e in read_events(path) if e["event"] == "transition.fired"]
    stored = SQLiteCheckpointer(store)
    last_write = max(int(b["seq"]) for b in stored.bodies("r"))
    assert max(fired) > last_write  # carried transitions are in the file, not the store
    survivor = Agent(ScriptedModel([script[1]]), tools=[count], checkpointer=stored,
                     audit=tmp_path / "audit")  # fmt: skip
    done = survivor.resume("r")
    assert done.end_state == "completed"
    assert [t.seq for t in done.trail] == list(range(1, len(done.trail) + 1))
    assert_replays(path, "completed", done.messages)
    # The clock readings played back are the resumed process's, not the dead one's
    # readings of the same transition numbers (time limits trip where they did).
    assert [t.elapsed_s for t in replay(path).result.trail] == [t.elapsed_s for t in done.trail]


def test_a_death_before_run_ended_is_finished_by_resume(tmp_path: Path) -> None:
    """A process dies after its run entered `completed` (checkpointed) and before the
    `run.ended` line is out: the resume reports the end instead of refusing an ended
    run, the audit file ends sealed, and it replays; a second resume is refused."""
    from statemachine_agent import RunAlreadyEndedError
    from statemachine_agent.audit.chain import verify_file
    from statemachine_agent.audit.config import Audit
    from statemachine_agent.persistence.sqlite import SQLiteCheckpointer

    class DiesAtTheEnd:
        def write(self, event: dict[str, object]) -> None:
            if event.get("event") == "run.ended":
                raise _Died

        def close(self) -> None:
            return None

    store = SQLiteCheckpointer(tmp_path / "runs.sqlite3")
    folder = tmp_path / "audit"
    dying = Agent(ScriptedModel([replies.text("Done.")]), checkpointer=store,
                  audit=Audit(dir=folder, sinks=[DiesAtTheEnd()]))  # fmt: skip
    with pytest.raises(_Died):
        dying.run("Go.", run_id="r")
    path = folder / "r.jsonl"
    assert verify_file(path).status == "unsealed"
    survivor = Agent(ScriptedModel([]), checkpointer=SQLiteCheckpointer(tmp_path / "runs.sqlite3"),
                     audit=folder)  # fmt: skip
    done = survivor.resume("r")
    assert (done.end_state, done.text) == ("completed", "Done.")
    assert verify_file(path).ok
    assert_replays(path, "completed", done.messages)
    with pytest.raises(RunAlreadyEndedError):
        survivor.resume("r")
