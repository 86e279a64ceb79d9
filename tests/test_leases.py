"""One driver per run: real processes race for a paused run on SQLite and PostgreSQL."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from statemachine_agent import (
    Agent,
    MemoryCheckpointer,
    RunLockedError,
    ScriptedModel,
    SQLiteCheckpointer,
)
from statemachine_agent.audit.sink import read_events
from statemachine_agent.persistence import PostgresCheckpointer, load_record
from statemachine_agent.persistence.lease import LeaseLostError
from statemachine_agent.testing import replies
from statemachine_agent.testing.postgres import LocalPostgres
from statemachine_agent.testing.validator import validate_request
from tests.support.barrier import start_together

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def postgres() -> Iterator[LocalPostgres]:
    with LocalPostgres() as server:
        yield server


@pytest.fixture(params=["sqlite", "postgres"])
def spec(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Where the workers' store is: an SQLite file, or the test PostgreSQL server."""
    if request.param == "sqlite":
        return f"sqlite:{tmp_path / 'runs.sqlite3'}"
    server: LocalPostgres = request.getfixturevalue("postgres")
    return server.dsn


def open_store(spec: str) -> Any:
    if spec.startswith("sqlite:"):
        return SQLiteCheckpointer(spec.removeprefix("sqlite:"))
    return PostgresCheckpointer(spec)


def worker(mode: str, spec: str, run_id: str, folder: Path, name: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.support.lease_worker", mode, spec, run_id, str(folder), name],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def outcome(process: subprocess.Popen[str]) -> dict[str, Any]:
    out, err = process.communicate(timeout=120)
    if process.returncode != 0:
        return {"outcome": "died", "returncode": process.returncode, "stderr": err}
    return dict(json.loads(out.strip().splitlines()[-1]))


def paused_run(spec: str, folder: Path) -> str:
    """A run waiting for approval of its two payments, as the racing workers find it."""
    run_id = f"race_{uuid.uuid4().hex[:8]}"
    first = outcome(worker("pause", spec, run_id, folder, "pause"))
    assert first == {"outcome": "paused", "end_state": "awaiting_approval"}, first
    return run_id


def assert_valid_transcript(spec: str, run_id: str) -> None:
    """The stored record folds into a completed run whose history the API would accept."""
    store = open_store(spec)
    record = load_record(store, run_id)
    store.close()
    assert record.state == "completed"
    tools = [{"name": n, "input_schema": {"type": "object"}} for n in ("lookup", "pay")]
    body = {"model": "claude-sonnet-5", "max_tokens": 1024, "messages": record.messages}
    body["tools"] = tools
    assert validate_request(body) == []
    results = [
        b["tool_use_id"]
        for m in record.messages
        if m["role"] == "user" and isinstance(m["content"], list)
        for b in m["content"]
        if b.get("type") == "tool_result"
    ]
    assert results == ["toolu_step1a", "toolu_pay5", "toolu_pay7", "toolu_step3"]


class TestRace:
    @pytest.mark.timeout(600)  # 2-9 interpreters starting at once on a loaded machine
    @pytest.mark.parametrize(
        ("spec", "workers"),
        [("sqlite", 2), ("sqlite", 8), ("postgres", 4)],
        indirect=["spec"],
    )
    def test_exactly_one_worker_drives_a_paused_run(
        self, spec: str, tmp_path: Path, workers: int
    ) -> None:
        """N processes resume the same paused run at once: one drives it, each call runs once."""
        run_id = paused_run(spec, tmp_path)
        racing = [worker("resume", spec, run_id, tmp_path, f"w{i}") for i in range(workers)]
        start_together(racing, tmp_path)
        outcomes = [outcome(p) for p in racing]
        kinds = Counter(o["outcome"] for o in outcomes)
        assert kinds["drove"] == 1, outcomes
        assert kinds["drove"] + kinds["locked"] + kinds["ended"] == workers, outcomes
        assert [o["end_state"] for o in outcomes if o["outcome"] == "drove"] == ["completed"]
        driver = next(o["owner"] for o in outcomes if o["outcome"] == "drove")
        assert all(o["owner"] == driver for o in outcomes if o["outcome"] == "locked")
        calls = Counter(line.split()[0] for line in (tmp_path / "calls").read_text().splitlines())
        assert calls == {"lookup:a": 1, "pay:5": 1, "pay:7": 1, "lookup:b": 1}
        assert len((tmp_path / "ledger").read_text().splitlines()) == 2
        assert_valid_transcript(spec, run_id)


class TestTakeover:
    @pytest.mark.timeout(600)
    def test_a_killed_holder_is_taken_over_after_its_lease_expires(
        self, spec: str, tmp_path: Path
    ) -> None:
        """SIGKILLed mid-run, the holder's lease expires; another worker finishes the run
        without repeating the recorded payment, and its audit trail names the takeover."""
        run_id = paused_run(spec, tmp_path)
        doomed = worker("kill", spec, run_id, tmp_path, "doomed")
        start_together([doomed], tmp_path)
        died = outcome(doomed)
        assert died["returncode"] == -9, died
        (tmp_path / "go").unlink()
        (tmp_path / "ready.doomed").unlink()
        taker = worker("takeover", spec, run_id, tmp_path, "taker")
        start_together([taker], tmp_path)
        took = outcome(taker)
        assert took["outcome"] == "drove", took
        assert took["end_state"] == "completed"
        calls = Counter(line.split()[0] for line in (tmp_path / "calls").read_text().splitlines())
        assert calls["pay:5"] == calls["pay:7"] == 1, "a recorded payment was made again"
        assert calls["lookup:b"] == 2  # the call in flight when the holder died runs again
        assert len((tmp_path / "ledger").read_text().splitlines()) == 2
        (audit,) = (tmp_path / "audit.taker").glob("*.jsonl")
        (event,) = [e for e in read_events(audit) if e["event"] == "lease.taken_over"]
        assert event["previous_owner"] != event["owner"] == took["owner"]
        assert event["expired_at"] < time.time()
        assert_valid_transcript(spec, run_id)


class TestLeaseRules:
    def test_a_second_driver_is_refused_naming_the_holder(self, tmp_path: Path) -> None:
        """While one store object holds a run, another gets RunLockedError naming the holder."""
        first = SQLiteCheckpointer(tmp_path / "db")
        second = SQLiteCheckpointer(tmp_path / "db")
        lease = first.acquire("r")
        with pytest.raises(RunLockedError) as caught:
            second.acquire("r")
        assert caught.value.owner == lease.owner
        assert caught.value.expires_at == pytest.approx(lease.expires_at)
        assert lease.owner in str(caught.value)
        assert "'r'" in str(caught.value)
        first.release(lease)
        assert second.acquire("r").taken_over_from is None  # released, not taken over
        first.close()
        second.close()

    def test_a_streamed_run_with_an_id_is_leased_too(self, tmp_path: Path) -> None:
        """`stream(run_id=...)` takes the run's lease like `run`: refused while another
        store object holds it, driven (and released) once it is free."""
        from statemachine_agent import ScriptedModel
        from statemachine_agent.testing import replies

        holder = SQLiteCheckpointer(tmp_path / "db")
        store = SQLiteCheckpointer(tmp_path / "db")
        lease = holder.acquire("s")
        agent = Agent(ScriptedModel([replies.text("hi")]), checkpointer=store)
        with pytest.raises(RunLockedError):
            list(agent.stream("hello", run_id="s"))
        holder.release(lease)
        events = list(agent.stream("hello", run_id="s"))
        assert type(events[-1]).__name__ == "RunEnded"
        assert holder.acquire("s").taken_over_from is None  # released at the end
        holder.close()
        store.close()

    def test_the_same_run_twice_in_one_process_is_refused(self) -> None:
        """Two drives of one run id through one store object: the second is refused."""
        store = MemoryCheckpointer()
        store.acquire("r")
        with pytest.raises(RunLockedError):
            store.acquire("r")

    def test_heartbeat_keeps_a_long_drive_leased(self, tmp_path: Path) -> None:
        """A lease renewed by its heartbeat stays live past its first expiry."""
        holder = SQLiteCheckpointer(tmp_path / "db", lease_seconds=1.5)
        other = SQLiteCheckpointer(tmp_path / "db", lease_seconds=1.5)
        lease = holder.acquire("r")
        time.sleep(3.5)
        with pytest.raises(RunLockedError):
            other.acquire("r")
        holder.release(lease)
        holder.close()
        other.close()

    def test_a_holder_that_lost_its_lease_cannot_write(self, tmp_path: Path) -> None:
        """Fencing: after a takeover the old holder's checkpoints are refused."""
        old = SQLiteCheckpointer(tmp_path / "db", lease_seconds=0.2)
        new = SQLiteCheckpointer(tmp_path / "db", lease_seconds=0.2)
        old.acquire("r")
        old.append("r", {"seq": 0, "state_name": "perceive"})
        old.leases.stop()  # as if the process froze: no more heartbeats
        time.sleep(0.3)
        taken = new.acquire("r")
        assert taken.taken_over_from == old.leases.owner
        with pytest.raises(LeaseLostError):
            old.append("r", {"seq": 1, "state_name": "reason"})
        new.append("r", {"seq": 1, "state_name": "reason"})
        assert [b["state_name"] for b in new.bodies("r")] == ["perceive", "reason"]
        new.release(taken)
        old.close()
        new.close()

    def test_wait_takes_the_lease_once_it_is_free(self, tmp_path: Path) -> None:
        """`wait=` lets a second driver wait for the first to finish instead of failing."""
        store = SQLiteCheckpointer(tmp_path / "db")
        Agent(ScriptedModel([replies.text("a")]), checkpointer=store).run("q", run_id="w")
        other = SQLiteCheckpointer(tmp_path / "db", lease_seconds=5)
        held = other.acquire("w")

        def free_soon() -> None:
            time.sleep(0.3)
            other.release(held)

        threading.Thread(target=free_soon).start()
        agent = Agent(ScriptedModel([replies.text("b")]), checkpointer=store)
        with pytest.raises(RunLockedError):
            agent.resume("w")
        with pytest.raises(ValueError, match="already ended"):
            agent.resume("w", wait=5)
        store.close()
        other.close()
