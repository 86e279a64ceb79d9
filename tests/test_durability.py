"""Durable runs: lossless checkpoints, real crashes, approval pauses, cancellation, Postgres."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from statemachine_agent import (
    Agent,
    Approve,
    Audit,
    CancelToken,
    Conversation,
    Deny,
    Edit,
    ReflectionPolicy,
    RunLockedError,
    ScriptedModel,
    SQLiteCheckpointer,
    calculate,
    finish,
    tool,
)
from statemachine_agent.audit.chain import verify_file
from statemachine_agent.persistence import (
    MemoryCheckpointer,
    PostgresCheckpointer,
    SerializationError,
    load_record,
)
from statemachine_agent.persistence.codec import record_to_plain, to_plain
from statemachine_agent.persistence.delta import fold
from statemachine_agent.replay import replay
from statemachine_agent.testing import replies
from statemachine_agent.testing.assertions import assert_end_state, assert_fired
from statemachine_agent.testing.postgres import LocalPostgres
from tests.support.crash_agent import RUN_ID

ROOT = Path(__file__).resolve().parent.parent


class SnapshotCheckpointer(MemoryCheckpointer):
    """Keeps, next to each checkpoint, the full record it should fold back to."""

    def __init__(self) -> None:
        super().__init__()
        self.snapshots: list[Any] = []
        self.record: Any = None

    def append(self, run_id: str, body: Mapping[str, Any]) -> None:
        super().append(run_id, body)
        self.snapshots.append(json.loads(json.dumps(record_to_plain(self.record))))


class TestRoundTrip:
    @settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(
        script=st.lists(
            st.one_of(
                st.builds(
                    lambda e: replies.tool_use("calculate", {"expression": e}),
                    st.sampled_from(["1+1", "2*3", "x", "1/0"]),
                ),
                st.builds(lambda t: replies.text(t), st.text(min_size=1, max_size=8)),
                st.just(replies.text("cut", stop_reason="max_tokens")),
            ),
            max_size=6,
        ),
        reflect=st.sampled_from([None, 1, 2]),
    )
    def test_every_checkpoint_folds_back_to_the_record(
        self, script: list[Any], reflect: int | None
    ) -> None:
        """Any run, checkpointed at any transition, folds back to an equal record."""
        from statemachine_agent.machine import phase_env as context_module

        store = SnapshotCheckpointer()
        original = context_module.PhaseEnv.checkpoint

        def spy(ctx: Any) -> None:
            store.record = ctx.state
            original(ctx)

        context_module.PhaseEnv.checkpoint = spy  # type: ignore[method-assign]
        try:
            Agent(
                ScriptedModel(script),
                tools=[calculate],
                checkpointer=store,
                reflection=ReflectionPolicy(reflect) if reflect else None,
                max_continuations=1,
            ).run("q", run_id="r")
        finally:
            context_module.PhaseEnv.checkpoint = original  # type: ignore[method-assign]
        bodies = store.bodies("r")
        assert len(bodies) == len(store.snapshots)
        for i, snapshot in enumerate(store.snapshots):
            assert fold(bodies[: i + 1]) == snapshot
        final = load_record(store, "r")
        assert record_to_plain(final) == store.snapshots[-1]

    def test_unserializable_value_names_its_path(self) -> None:
        """A value JSON cannot hold is refused with its path, not dropped."""
        with pytest.raises(SerializationError, match=r"record\.finish\.result\.tags: a set"):
            to_plain({"finish": {"result": {"tags": {1, 2}}}})

    def test_unserializable_finish_result_fails_the_run_by_name(self, tmp_path: Path) -> None:
        """A finish tool returning a set cannot be checkpointed: the run fails, naming where."""

        @tool(ends_run=True)
        def done() -> dict[str, Any]:
            """Finish with a set inside."""
            return {"status": "completed", "summary": "s", "tags": {1, 2}}

        agent = Agent(
            ScriptedModel([replies.tool_use("done")]),
            tools=[done],
            checkpointer=SQLiteCheckpointer(tmp_path / "db"),
        )
        result = agent.run("q")
        assert_end_state(result, "failed")
        assert "finish.tags" in result.reason


_NOTE = st.one_of(
    st.integers(0, 2), st.booleans(), st.sampled_from([0.0, 1.0]), st.text(max_size=2)
)
"""Note values, 1 and True and 1.0 among them: equal in Python, not in JSON."""

_CHANGES = st.one_of(
    st.tuples(st.just("set"), st.sampled_from(["iteration", "blocked_calls"]), st.integers(0, 2)),
    st.tuples(st.just("set"), st.sampled_from(["cancel_requested", "chat_ended"]), st.booleans()),
    st.tuples(st.just("set"), st.just("cost_usd"), st.sampled_from([0.0, 0.5, 1.0])),
    st.tuples(st.just("set"), st.just("fatal_tool"), st.none() | st.text(max_size=2)),
    st.tuples(st.just("count"), st.sampled_from(["a", "b"]), st.none()),
    st.tuples(st.just("note"), st.sampled_from(["x", "y"]), _NOTE),
    st.tuples(st.just("unnote"), st.sampled_from(["x", "y"]), st.none()),
    st.tuples(st.just("observe"), st.integers(0, 2), st.none()),
    st.tuples(st.just("finding"), st.none() | st.dictionaries(st.just("k"), _NOTE), st.none()),
    st.tuples(st.just("edit_finding"), _NOTE, st.none()),
    st.tuples(st.just("await"), st.text(max_size=2), st.none()),
    st.tuples(st.just("usage"), st.integers(0, 2), st.none()),
    st.tuples(st.just("metadata"), st.dictionaries(st.sampled_from("pq"), _NOTE), st.none()),
    st.tuples(st.just("outcome"), st.text(max_size=2), st.none()),
    st.tuples(st.just("no_outcomes"), st.none(), st.none()),
    st.tuples(st.just("summary"), st.integers(0, 2), st.none()),
    st.tuples(st.just("nothing"), st.none(), st.none()),
)
"""Changes a run's record goes through between checkpoints: scalars set, groups'
fields set, diffed dicts and lists changed in place, `replaced` fields given new
values (the stall state as the detector hands it out: a new dict whose list holds
the same observation dicts as the last one, plus new ones, minus old ones)."""


def _change(record: Any, observed: list[dict[str, Any]], change: tuple[str, Any, Any]) -> None:
    from statemachine_agent.models.base import Usage
    from statemachine_agent.tools.base import ToolOutcome

    kind, arg, _ = change
    if kind == "set":
        setattr(record, arg, change[2])
    elif kind == "count":
        record.calls_per_tool[arg] = record.calls_per_tool.get(arg, 0) + 1
    elif kind == "note":
        record.notes[arg] = change[2]
    elif kind == "unnote":
        record.notes.pop(arg, None)
    elif kind == "observe":
        observed.append({"key": f"k{len(observed)}", "seq": len(observed)})
        del observed[: min(arg, len(observed) - 1)]
        record.stall.observations = {"version": 1, "observations": list(observed)}
    elif kind == "finding":
        record.stall.finding = arg
    elif kind == "edit_finding" and record.stall.finding is not None:
        record.stall.finding["k"] = arg
    elif kind == "await":
        record.approval.awaiting.append(arg)
    elif kind == "usage":
        record.usage = Usage(input_tokens=arg)
    elif kind == "metadata":
        record.metadata = arg
    elif kind == "outcome":
        record.outcomes.append(ToolOutcome("toolu_1", "t", arg))
    elif kind == "no_outcomes":
        record.outcomes = []
    elif kind == "summary":
        record.summary.prompt_tokens = arg


class TestIncrementalDelta:
    @settings(max_examples=60, deadline=None)
    @given(changes=st.lists(_CHANGES, max_size=25))
    def test_each_body_is_the_full_walks_and_folds_back_to_the_record(
        self, changes: list[tuple[str, Any, Any]]
    ) -> None:
        """The writer's state diff, built from what changed (values reused by identity,
        `replaced` values converted from their new parts only), is byte for byte the diff
        of the whole record walked afresh against the last, and the bodies fold back to
        the record after every change."""
        from statemachine_agent.machine.run import RunRecord
        from statemachine_agent.persistence.delta import CheckpointWriter, diff, state_plain

        record, observed = RunRecord(run_id="r"), list[dict[str, Any]]()
        writer, bodies = CheckpointWriter(), list[Any]()
        last: dict[str, Any] = {}
        for change in [("nothing", None, None), *changes]:
            _change(record, observed, change)
            body = writer.delta(record)
            fresh = state_plain(record)
            expected = None
            if fresh != last:
                expected = diff(last, fresh)
                if "metadata" in expected["$dict"]:
                    expected["$dict"]["metadata"] = {"$set": fresh["metadata"]}
                last = fresh
            assert json.dumps(body.get("state")) == json.dumps(expected)  # 1, 1.0, True apart
            bodies.append(json.loads(json.dumps(body)))
            assert fold(bodies) == json.loads(json.dumps(record_to_plain(record)))


class TestSQLiteStore:
    def test_wal_mode(self, tmp_path: Path) -> None:
        """The store runs in WAL mode with synchronous=NORMAL by default."""
        store = SQLiteCheckpointer(tmp_path / "db")
        assert store._db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert store._db.execute("PRAGMA synchronous").fetchone()[0] == 1

    def test_storage_grows_linearly(self, tmp_path: Path) -> None:
        """200 steps store under 2x the final record: deltas, not the history again."""
        steps = 200
        script = [replies.tool_use("calculate", {"expression": f"{i}+{i}"}) for i in range(steps)]
        store = SQLiteCheckpointer(tmp_path / "db")
        agent = Agent(
            ScriptedModel([*script, replies.text("done")]),
            tools=[calculate],
            checkpointer=store,
            budget=_budget(steps + 1),
        )
        result = agent.run("count", run_id="long")
        assert result.iterations == steps + 1
        (summary,) = store.runs()
        final = len(json.dumps(record_to_plain(load_record(store, "long"))))
        assert summary.bytes < 2 * final, (summary.bytes, final)
        # Two writes a tool iteration (the reply, the outcome); the cheap transitions
        # between them are carried in the next write. Four more a run: its start, the
        # answer, the end handler's, and the one saying run.ended is out.
        assert summary.checkpoints == 2 * steps + 4


def _budget(n: int) -> Any:
    from statemachine_agent import Budget

    return Budget(max_iterations=n)


def run_child(*args: str) -> dict[str, Any]:
    """Run the crash agent in a child process; its result, or how it died."""
    done = subprocess.run(
        [sys.executable, "-m", "tests.support.crash_agent", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    if done.returncode != 0:
        return {"returncode": done.returncode, "stderr": done.stderr}
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The same run, never interrupted."""
    folder = tmp_path_factory.mktemp("reference")
    return run_child("run", str(folder / "db"), str(folder / "ledger"))


class TestCrashResume:
    """A child process is SIGKILLed at a boundary; a new process resumes the run."""

    @pytest.mark.parametrize(
        "boundary",
        [
            "model.requested",
            "model.replied",
            "in_second_payment",
            "transition.fired",
            "tool.finished",
        ],
    )
    def test_resumed_run_matches_an_uninterrupted_one(
        self, tmp_path: Path, reference: dict[str, Any], boundary: str
    ) -> None:
        """Killed at the boundary, resumed elsewhere: same transcript, payments made once."""
        db, ledger = tmp_path / "db", tmp_path / "ledger"
        crashed = run_child("run", str(db), str(ledger), boundary)
        assert crashed.get("returncode") == -9, crashed
        resumed = run_child("resume", str(db), str(ledger))
        assert resumed["end_state"] == "completed"
        assert resumed["messages"] == reference["messages"]
        paid = ledger.read_text().splitlines()
        keys = [line.split()[0] for line in paid]
        assert sorted(set(keys)) == [f"{RUN_ID}:toolu_pay5", f"{RUN_ID}:toolu_pay7"]
        assert len(keys) == len(set(keys)), "a payment was made twice"
        audit = tmp_path / "audit" / f"{RUN_ID}.jsonl"
        assert verify_file(audit).ok, "the resume continues the file's hash chain"
        replayed = replay(audit)
        assert replayed.matched, replayed.difference
        assert replayed.result.end_state == "completed"
        assert replayed.result.messages == reference["messages"]

    def test_recorded_tool_is_not_run_again(self, tmp_path: Path) -> None:
        """Killed after the first payment's result was recorded, the resume skips it."""
        db, ledger = tmp_path / "db", tmp_path / "ledger"
        run_child("run", str(db), str(ledger), "in_second_payment")
        record = load_record(SQLiteCheckpointer(db), RUN_ID)
        assert record.state == "act"
        assert [o.tool_use_id for o in record.outcomes] == ["toolu_pay5"]


class TestApproval:
    def send_email_agent(
        self, store: Any, approval: Any = None, *, resuming: bool = False
    ) -> tuple[Agent, list[str]]:
        """The agent; `resuming` scripts only what the model says after the approval."""
        sent: list[str] = []

        @tool(requires_approval=True, side_effect=True)
        def send_email(to: str, body: str) -> str:
            """Send an e-mail."""
            sent.append(to)
            return f"sent to {to}"

        ask = replies.tool_use(
            "send_email", {"to": "boss@example.com", "body": "hi"}, id="toolu_mail"
        )
        script = [replies.text("Done.")] if resuming else [ask, replies.text("Done.")]
        return Agent(
            ScriptedModel(script), tools=[send_email], checkpointer=store, approval=approval
        ), sent

    def test_deferred_call_pauses_then_approval_resumes(self, tmp_path: Path) -> None:
        """Without a decision the run waits; a later process approves and it completes."""
        agent, sent = self.send_email_agent(SQLiteCheckpointer(tmp_path / "db"))
        paused = agent.run("mail the boss", run_id="mail")
        assert_end_state(paused, "awaiting_approval")
        assert paused.details == {
            "pending": [
                {
                    "tool_use_id": "toolu_mail",
                    "name": "send_email",
                    "input": {"to": "boss@example.com", "body": "hi"},
                }
            ]
        }
        assert sent == []
        later, sent_later = self.send_email_agent(
            SQLiteCheckpointer(tmp_path / "db"), resuming=True
        )
        done = later.resume("mail", decisions={"toolu_mail": Approve()})
        assert_end_state(done, "completed")
        assert sent_later == ["boss@example.com"]
        assert done.messages[2]["content"][0]["content"] == "sent to boss@example.com"

    def test_deny_sends_the_message_back(self, tmp_path: Path) -> None:
        """A denial is an is_error result carrying the reviewer's message."""
        agent, sent = self.send_email_agent(SQLiteCheckpointer(tmp_path / "db"))
        agent.run("mail", run_id="m")
        done = agent.resume("m", decisions={"toolu_mail": Deny("not to the boss")})
        assert sent == []
        result = done.messages[2]["content"][0]
        assert result["is_error"] is True
        assert result["content"] == "not to the boss"

    def test_edit_runs_with_the_new_input(self, tmp_path: Path) -> None:
        """An edited call runs with the reviewer's input."""
        agent, sent = self.send_email_agent(SQLiteCheckpointer(tmp_path / "db"))
        agent.run("mail", run_id="m")
        agent.resume("m", decisions={"toolu_mail": Edit({"to": "team@example.com", "body": "hi"})})
        assert sent == ["team@example.com"]

    def test_policy_can_approve_at_once(self) -> None:
        """An approval policy that allows lets the call run without pausing."""
        agent, sent = self.send_email_agent(MemoryCheckpointer(), approval=lambda call: Approve())
        assert_end_state(agent.run("mail"), "completed")
        assert sent == ["boss@example.com"]

    async def _async_deny(self, call: Any) -> Deny:
        return Deny("policy says no")

    def test_async_policy(self) -> None:
        """An async policy is awaited."""
        agent, sent = self.send_email_agent(MemoryCheckpointer(), approval=self._async_deny)
        result = agent.run("mail")
        assert sent == []
        assert result.messages[2]["content"][0]["content"] == "policy says no"

    def test_approval_across_processes(self, tmp_path: Path) -> None:
        """The approving process is really another process."""
        agent, _ = self.send_email_agent(SQLiteCheckpointer(tmp_path / "db"))
        agent.run("mail", run_id="xproc")
        db = str(tmp_path / "db")
        code = (
            "import sys; sys.path.insert(0, '.');"
            "from tests.test_durability import TestApproval;"
            "from statemachine_agent import Approve, SQLiteCheckpointer;"
            f"a, sent = TestApproval().send_email_agent(SQLiteCheckpointer({db!r}), resuming=True);"
            "r = a.resume('xproc', decisions={'toolu_mail': Approve()});"
            "print(r.end_state, sent)"
        )
        out = subprocess.run(
            [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60
        )
        assert out.stdout.strip() == "completed ['boss@example.com']", out.stderr


class TestCancellation:
    def test_cancelled_run_is_checkpointed_and_resumable(self, tmp_path: Path) -> None:
        """Cancelled after a tool ran, the run keeps its work and can be resumed to the end."""
        token = CancelToken()

        @tool
        def slow_step(n: int) -> str:
            """A step after which the host cancels."""
            token.cancel()
            return f"step {n}"

        script = [replies.tool_use("slow_step", {"n": 1}), replies.text("all done")]
        store = SQLiteCheckpointer(tmp_path / "db")
        agent = Agent(ScriptedModel(script), tools=[slow_step], checkpointer=store)
        result = agent.run("go", run_id="c", cancel=token)
        assert_fired(result, "act", "tools_done", "cancelled")
        assert load_record(store, "c").state == "cancelled"
        resumed = agent.resume("c")
        assert_end_state(resumed, "completed")
        assert resumed.text == "all done"
        assert resumed.messages[2]["content"][0]["content"] == "step 1"

    def test_deadline_cancels(self) -> None:
        """A deadline cancels a run whose model does not answer in time."""
        import asyncio

        from statemachine_agent import ModelReply, ModelRequest

        class Slow:
            name = "claude-sonnet-5"

            async def acomplete(self, request: ModelRequest) -> ModelReply:
                await asyncio.sleep(30)
                raise AssertionError

        result = Agent(Slow()).run("q", deadline=0.2)
        assert_end_state(result, "cancelled")

    def test_handle_cancel(self) -> None:
        """`Agent.start` returns a handle whose cancel() stops the run."""
        import asyncio

        async def main() -> str:
            agent = Agent(ScriptedModel([replies.text("x")]))
            handle = agent.start("q")
            handle.cancel()
            return (await handle).end_state

        assert asyncio.run(main()) == "cancelled"

    def test_finished_runs_cannot_resume(self, tmp_path: Path) -> None:
        """Resuming a completed run is a clear error."""
        from statemachine_agent.machine.resume import RunAlreadyEndedError

        store = SQLiteCheckpointer(tmp_path / "db")
        agent = Agent(ScriptedModel([replies.text("x")]), checkpointer=store)
        agent.run("q", run_id="done")
        with pytest.raises(RunAlreadyEndedError, match="already ended in 'completed'"):
            agent.resume("done")


@pytest.fixture(scope="module")
def postgres() -> Iterator[LocalPostgres]:
    with LocalPostgres() as server:
        yield server


class TestPostgres:
    def test_checkpoints_and_resume_in_postgres(self, postgres: LocalPostgres) -> None:
        """A run paused for approval in PostgreSQL resumes through a new connection."""
        approval = TestApproval()
        agent, _ = approval.send_email_agent(PostgresCheckpointer(postgres.dsn))
        agent.run("mail", run_id="pg-run")
        store = PostgresCheckpointer(postgres.dsn)
        assert [r.run_id for r in store.runs()] == ["pg-run"]
        again, sent = approval.send_email_agent(store, resuming=True)
        result = again.resume("pg-run", decisions={"toolu_mail": Approve()})
        assert_end_state(result, "completed")
        assert sent == ["boss@example.com"]

    def test_a_conversation_carries_on_through_a_new_connection(
        self, postgres: LocalPostgres
    ) -> None:
        """A stored conversation in PostgreSQL, opened again through another connection."""
        first = Agent(ScriptedModel([replies.text("Hello Ada.")]),
                      checkpointer=PostgresCheckpointer(postgres.dsn))  # fmt: skip
        Conversation(first, conversation_id="pg-chat").send("I am Ada.")
        model = ScriptedModel([replies.text("Ada.")])
        second = Agent(model, checkpointer=PostgresCheckpointer(postgres.dsn))
        chat = Conversation.open(second, "pg-chat")
        assert chat.send("Who am I?").turn == 2
        assert [m["role"] for m in model.requests[0].messages] == ["user", "assistant", "user"]
        assert chat.turns == 2

    def test_a_conversation_turn_is_leased_across_connections(
        self, postgres: LocalPostgres
    ) -> None:
        """While one store connection takes a turn, a turn through another is refused."""
        other = Conversation.open(Agent(ScriptedModel([replies.text("x")]),
                                        checkpointer=PostgresCheckpointer(postgres.dsn)),
                                  "pg-leased")  # fmt: skip

        @tool
        def meddle() -> str:
            """Takes a turn of the same conversation through another connection."""
            try:
                other.send("meanwhile")
            except RunLockedError as exc:
                return f"refused: {exc}"
            return "sent"

        model = ScriptedModel([replies.tool_use("meddle", {}), replies.text("ok")])
        agent = Agent(model, tools=[meddle], checkpointer=PostgresCheckpointer(postgres.dsn))
        result = Conversation.open(agent, "pg-leased").send("go")
        assert result.end_state == "completed"
        answer = result.messages[2]["content"][0]["content"]
        assert answer.startswith("refused: run 'conversation:pg-leased' is being driven by")
        store = PostgresCheckpointer(postgres.dsn)
        assert (
            Conversation.open(Agent(ScriptedModel([]), checkpointer=store), "pg-leased").turns == 1
        )

    def test_records_round_trip(self, postgres: LocalPostgres) -> None:
        """A finished run loads back from PostgreSQL equal to the SQLite copy."""
        script = [replies.tool_use("finish", {"status": "completed", "summary": "ok"})]
        pg = PostgresCheckpointer(postgres.dsn)
        mem = MemoryCheckpointer()
        for store in (pg, mem):
            Agent(ScriptedModel(script), tools=[finish], checkpointer=store).run("q", run_id="same")
        a, b = load_record(pg, "same"), load_record(mem, "same")
        assert a.messages == b.messages
        assert [t.key for t in a.trail] == [t.key for t in b.trail]


class TestResumeBookkeeping:
    def test_resume_setup_is_checkpointed(self, tmp_path: Path) -> None:
        """Right after a resume, the store already shows the run going on, not paused."""
        store = SQLiteCheckpointer(tmp_path / "db")
        agent, _ = TestApproval().send_email_agent(store)
        agent.run("mail", run_id="m")
        seen: list[str] = []

        class Peek:
            def write(self, event: Mapping[str, Any]) -> None:
                if event["event"] == "tool.called":
                    seen.append(load_record(store, "m").state)

            def close(self) -> None:
                return None

        agent = agent.replace(audit=Audit(sinks=[*agent.audit.sinks, Peek()]))
        agent.resume("m", decisions={"toolu_mail": Approve()})
        assert seen == ["act"]

    def test_decisions_must_name_waiting_calls(self, tmp_path: Path) -> None:
        """A decision for a call that is not waiting is refused, naming the ids."""
        agent, _ = TestApproval().send_email_agent(SQLiteCheckpointer(tmp_path / "db"))
        agent.run("mail", run_id="m")
        with pytest.raises(ValueError, match="no call waiting with id"):
            agent.resume("m", decisions={"toolu_other": Approve()})

    def test_a_stored_run_id_cannot_start_again(self, tmp_path: Path) -> None:
        """Starting a run under an id the store holds is refused rather than merged."""
        agent = Agent(
            ScriptedModel([replies.text("a"), replies.text("b")]),
            checkpointer=SQLiteCheckpointer(tmp_path / "db"),
        )
        agent.run("q", run_id="same")
        with pytest.raises(ValueError, match="already stored"):
            agent.run("q", run_id="same")

    def test_per_tool_limit_counts_recorded_calls_once_across_a_resume(
        self, tmp_path: Path
    ) -> None:
        """A call recorded before a crash counts once; the rest of the reply still runs."""
        from statemachine_agent import Budget

        store = SQLiteCheckpointer(tmp_path / "db")

        @tool(sequential=True)
        def step(n: int) -> str:
            """A step that 'crashes' the process after the first call is recorded."""
            return f"step {n}"

        script = [replies.tool_uses(("step", {"n": 1}), ("step", {"n": 2})), replies.text("ok")]

        class CrashAfterFirst:
            def write(self, event: Mapping[str, Any]) -> None:
                if event["event"] == "tool.finished" and event["input"] == {"n": 2}:
                    raise KeyboardInterrupt  # stands in for the process dying here

            def close(self) -> None:
                return None

        agent = Agent(
            ScriptedModel(script),
            tools=[step],
            checkpointer=store,
            budget=Budget(max_calls_per_tool=2),
            audit=Audit(sinks=[CrashAfterFirst()]),
        )
        with pytest.raises(KeyboardInterrupt):
            agent.run("go", run_id="limit")
        resumed = Agent(
            ScriptedModel(script[1:]),
            tools=[step],
            checkpointer=store,
            budget=Budget(max_calls_per_tool=2),
        ).resume("limit")
        results = resumed.messages[2]["content"]
        assert [r["content"] for r in results] == ["step 1", "step 2"]
