"""Encryption at rest: nothing a run saw is readable in its store or audit file."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from statemachine_agent import (
    Agent,
    AnthropicModel,
    Audit,
    CheckpointCorruptError,
    PostgresCheckpointer,
    SQLiteCheckpointer,
    generate_key,
    tool,
)
from statemachine_agent.cli import main
from statemachine_agent.persistence import load_record
from statemachine_agent.testing import FakeAnthropicServer, replies
from statemachine_agent.testing.postgres import LocalPostgres

API_KEY = "sk-ant-api03-ATREST-SECRET-0123456789"
PROMPT = "Look up the ledger entry for customer Zyxwvut-4471"
TOOL_DATA = "balance-of-Qwertz-9932"
ANSWER = "The balance is Qwertz"
SECRETS = (API_KEY, "Zyxwvut-4471", "Qwertz-9932", ANSWER)


@tool
def ledger(customer: str) -> str:
    """Read a customer's ledger entry."""
    return f"{TOOL_DATA} for {customer}"


@pytest.fixture
def server() -> Iterator[FakeAnthropicServer]:
    with FakeAnthropicServer() as fake:
        yield fake


def encrypted_run(server: FakeAnthropicServer, store: object, audit: Path | None = None) -> None:
    """A run through the real SDK whose prompt, tool data and answer are all secret."""
    server.add(replies.tool_use("ledger", {"customer": "Zyxwvut-4471"}), replies.text(ANSWER))
    model = AnthropicModel(api_key=API_KEY, base_url=server.base_url)
    agent = Agent(model, tools=[ledger], checkpointer=store, audit=Audit(dir=audit))  # type: ignore[arg-type]
    result = agent.run(PROMPT, run_id="secret")
    assert result.text == ANSWER


def files_bytes(folder: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file())


class TestSQLite:
    def test_nothing_secret_is_in_the_files(
        self, server: FakeAnthropicServer, tmp_path: Path
    ) -> None:
        """The API key, prompt, tool data and answer appear zero times in the database
        (with its WAL) and in the audit file; the run still loads with the key."""
        key = generate_key()
        store = SQLiteCheckpointer(tmp_path / "db" / "runs.sqlite3", encryption_key=key)
        encrypted_run(server, store, tmp_path / "audit")
        on_disk = files_bytes(tmp_path)  # database, WAL and audit file, before closing
        for secret in SECRETS:
            assert on_disk.count(secret.encode()) == 0, secret
        record = load_record(store, "secret")
        assert record.messages[0]["content"] == PROMPT
        store.close()
        for secret in SECRETS:
            assert files_bytes(tmp_path).count(secret.encode()) == 0, secret

    def test_a_wrong_key_says_so(self, server: FakeAnthropicServer, tmp_path: Path) -> None:
        """Another key (or none) cannot read the run: CheckpointCorruptError saying why."""
        db = tmp_path / "db"
        encrypted_run(server, SQLiteCheckpointer(db, encryption_key=generate_key()))
        with pytest.raises(CheckpointCorruptError, match="encryption key does not match"):
            load_record(SQLiteCheckpointer(db, encryption_key=generate_key()), "secret")
        with pytest.raises(CheckpointCorruptError, match="no encryption key was given") as caught:
            load_record(SQLiteCheckpointer(db), "secret")
        assert (caught.value.run_id, caught.value.seq) == ("secret", 1)

    def test_keys_rotate(self, tmp_path: Path) -> None:
        """Reads accept a list of keys, writes use the first: old rows stay readable."""
        old, new = generate_key(), generate_key()
        db = tmp_path / "db"
        with SQLiteCheckpointer(db, encryption_key=old) as store:
            store.append("r", {"seq": 0, "state_name": "perceive"})
        with SQLiteCheckpointer(db, encryption_key=[new, old]) as store:
            store.append("r", {"seq": 1, "state_name": "reason"})
            assert [b["state_name"] for b in store.bodies("r")] == ["perceive", "reason"]
        with SQLiteCheckpointer(db, encryption_key=[new]) as store:
            with pytest.raises(CheckpointCorruptError, match="does not match") as caught:
                store.bodies("r")
            assert caught.value.seq == 1  # the row the old key wrote

    def test_a_row_moved_to_another_place_does_not_open(self, tmp_path: Path) -> None:
        """A sealed row is bound to its run and number, even with its digest fixed up."""
        import sqlite3

        from statemachine_agent.persistence.sql import link

        db, key = tmp_path / "db", generate_key()
        with SQLiteCheckpointer(db, encryption_key=key) as store:
            store.append("r", {"seq": 0, "state_name": "perceive"})
            store.append("r", {"seq": 1, "state_name": "reason"})
        con = sqlite3.connect(db, isolation_level=None)
        first, second = (r[0] for r in con.execute("SELECT body FROM sma_checkpoints ORDER BY seq"))
        one, two = link("", second), link(link("", second), first)
        con.execute("UPDATE sma_checkpoints SET body = ?, digest = ? WHERE seq = 1", (second, one))
        con.execute("UPDATE sma_checkpoints SET body = ?, digest = ? WHERE seq = 2", (first, two))
        con.execute("UPDATE sma_runs SET digest = ?", (two,))
        con.close()
        with SQLiteCheckpointer(db, encryption_key=key) as store:
            with pytest.raises(CheckpointCorruptError, match="does not match") as caught:
                store.bodies("r")
            assert caught.value.seq == 1

    def test_bad_keys_are_refused_at_once(self, tmp_path: Path) -> None:
        """A key of the wrong size is a clear ValueError, before anything is stored."""
        with pytest.raises(ValueError, match="16, 24 or 32 bytes"):
            SQLiteCheckpointer(tmp_path / "db", encryption_key="c2hvcnQ=")

    def test_generated_keys_never_look_like_an_option(self) -> None:
        """A key on the command line must not start with "-" (argparse would take it for
        an option); a key of an older version that does goes as `--encryption-key=KEY`."""
        assert not any(generate_key().startswith("-") for _ in range(2000))

    def test_generated_keys_differ(self) -> None:
        """Each key is new: 32 random bytes as URL-safe base64."""
        import base64

        keys = {generate_key() for _ in range(8)}
        assert len(keys) == 8
        assert all(len(base64.urlsafe_b64decode(k)) == 32 for k in keys)


class TestAuditCommands:
    def test_report_and_inspect_take_the_key(
        self,
        server: FakeAnthropicServer,
        tmp_path: Path,
        capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        """An encrypted audit file opens with --encryption-key (or the environment), and
        without it is one error line naming the line, exit 2."""
        key = generate_key()
        encrypted_run(server, SQLiteCheckpointer(tmp_path / "db", encryption_key=key), tmp_path)
        audit = str(tmp_path / "secret.jsonl")
        assert main(["inspect", audit]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"statemachine-agent: error: {audit}:1: the line is encrypted")
        assert err.count("\n") == 1
        assert main(["inspect", audit, "--encryption-key", generate_key()]) == 2
        assert "encryption key does not match" in capsys.readouterr().err
        assert main(["inspect", audit, "--encryption-key", key]) == 0
        assert main(["inspect", audit, f"--encryption-key={key}"]) == 0
        assert "completed" in capsys.readouterr().out
        out = tmp_path / "page.html"
        monkeypatch.setenv("STATEMACHINE_AGENT_ENCRYPTION_KEY", key)
        assert main(["report", audit, "-o", str(out)]) == 0
        assert main(["replay", audit]) == 0
        assert ANSWER in out.read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def postgres() -> Iterator[LocalPostgres]:
    with LocalPostgres() as pg:
        yield pg


class TestPostgres:
    def test_nothing_secret_is_in_the_tables(
        self, server: FakeAnthropicServer, postgres: LocalPostgres
    ) -> None:
        """Every stored value of every table, dumped: no secret in any of them."""
        import psycopg

        key = generate_key()
        store = PostgresCheckpointer(postgres.dsn, encryption_key=key)
        encrypted_run(server, store)
        with psycopg.connect(postgres.dsn) as con:
            dump = json.dumps(
                [
                    [list(map(str, row)) for row in con.execute(f"SELECT * FROM {table}")]
                    for table in ("sma_checkpoints", "sma_runs", "sma_meta")
                ]
            )
        for secret in SECRETS:
            assert dump.count(secret) == 0, secret
        assert load_record(store, "secret").messages[0]["content"] == PROMPT
        with pytest.raises(CheckpointCorruptError, match="does not match"):
            load_record(PostgresCheckpointer(postgres.dsn, encryption_key=generate_key()), "secret")
        store.close()


def encrypted_resumed_file(tmp_path: Path, key: str) -> Path:
    """The approval demo on an encrypted store: a pause, then a resume appending to the
    same encrypted audit file (so its chain is continued from the envelopes on disk)."""
    from statemachine_agent.cli.demos import SCENARIOS

    scenario = SCENARIOS["approval"]
    store = SQLiteCheckpointer(tmp_path / "runs.sqlite3", encryption_key=key)
    agent = Agent(
        scenario.model(),
        tools=scenario.tools(),
        system=scenario.system,
        audit=tmp_path / "audit",
        checkpointer=store,
    )
    paused = agent.run(scenario.prompt)
    assert paused.end_state == "awaiting_approval"
    assert scenario.decide is not None
    pending = list((paused.details or {}).get("pending", []))
    result = agent.resume(paused.run_id, decisions=scenario.decide(pending))
    store.close()
    assert result.end_state == "completed"
    assert result.audit_path is not None
    return result.audit_path


class TestEncryptedAuditChain:
    """The hash chain of an encrypted audit file is over its lines as written."""

    def test_an_encrypted_resumed_file_verifies_with_and_without_the_key(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """Every line is an envelope; the resume continued the chain; verify holds either way."""
        from statemachine_agent.audit.chain import file_lines

        key = generate_key()
        path = encrypted_resumed_file(tmp_path, key)
        lines = file_lines(path.read_bytes())
        envelopes = [json.loads(line) for line in lines]
        assert all(set(e) <= {"prev", "enc", "digest"} and "enc" in e for e in envelopes)
        assert sum("digest" in e for e in envelopes) == 2  # the pause and the end
        assert b"refund" not in path.read_bytes().lower()
        assert main(["verify", str(path)]) == 0
        assert "intact" in capsys.readouterr().out
        assert main(["verify", str(path), "--encryption-key", key]) == 0
        capsys.readouterr()
        assert main(["inspect", str(path), "--encryption-key", key]) == 0
        assert "Audit:      intact" in capsys.readouterr().out

    @pytest.mark.parametrize("keyed", [False, True])
    def test_tampering_with_encrypted_lines_is_caught(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str], keyed: bool
    ) -> None:
        """An altered, deleted or swapped envelope breaks the chain at its line (with the
        key, an altered line is also named for failing to authenticate)."""
        from statemachine_agent.audit.chain import file_lines

        key = generate_key()
        path = encrypted_resumed_file(tmp_path, key)
        lines = file_lines(path.read_bytes())
        flags = ["--encryption-key", key] if keyed else []

        def verdict(tampered: list[bytes]) -> str:
            path.write_bytes(b"\n".join(tampered) + b"\n")
            assert main(["verify", str(path), *flags]) == 1
            return capsys.readouterr().out

        envelope = json.loads(lines[2])
        token = envelope["enc"]
        flipped = token[:-6] + ("A" if token[-6] != "A" else "B") + token[-5:]
        altered = json.dumps({**envelope, "enc": flipped}, ensure_ascii=False).encode()
        out = verdict([*lines[:2], altered, *lines[3:]])
        if keyed:
            assert "line 3 was edited: its encrypted content does not authenticate" in out
        else:
            assert "line 3 was edited, or a line after it deleted" in out
        assert "line 4 was edited, or a line after it deleted" in verdict([*lines[:4], *lines[5:]])
        assert "out of order" in verdict([*lines[:3], lines[4], lines[3], *lines[5:]])
        forged = lines[-1].replace(b'"digest": "', b'"digest": "0')
        assert "run.ended" in verdict([*lines[:-1], forged])

    def test_a_wrong_key_is_one_line_exit_2(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """verify, report, inspect and replay with another key: one error line, exit 2."""
        path = str(encrypted_resumed_file(tmp_path, generate_key()))
        other = ["--encryption-key", generate_key()]
        for command in (["verify"], ["inspect"], ["report"], ["replay"]):
            assert main([*command, path, *other]) == 2, command
            err = capsys.readouterr().err
            assert err.startswith("statemachine-agent: error: "), command
            assert "encryption key does not match" in err, command
            assert err.count("\n") == 1, command
