"""Stores and audit files are private, and a store someone else can write is refused.

A store holds every run's messages unredacted and an audit file the whole trail,
so both are created 0600 (folders 0700) whatever the umask: these tests set a
wide-open umask (`os.umask(0)`) so that a private mode proves the code chose it.
An existing store file (or its WAL/SHM file) owned by another account or writable
by group or others could be rewritten under the process that resumes from it, so
it is refused by name (`UnsafeStoreError`), or used with a warning when the host
says so (`allow_unsafe_permissions=True`). The tests run as root, as the project's
machines do, so they can give a file to another account (`os.chown`).
"""

from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from statemachine_agent import (
    Agent,
    Audit,
    Error,
    JsonlSink,
    ScriptedModel,
    SQLiteCheckpointer,
    UnsafeStoreError,
    calculate,
    generate_key,
)
from statemachine_agent.cli import main
from statemachine_agent.testing import FakeAnthropicServer, replies

Capsys = pytest.CaptureFixture[str]

NOBODY = 65534
"""Another account's uid (and gid): `nobody` on most systems."""


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def made_by_the_package(root: Path) -> tuple[list[Path], list[Path]]:
    """The folders and files under `root` (not `root` itself)."""
    found = sorted(root.rglob("*"))
    return [p for p in found if p.is_dir()], [p for p in found if p.is_file()]


def one_line_error(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, f"expected one error line, got {lines}"
    assert lines[0].startswith("statemachine-agent: error: ")
    return lines[0]


@pytest.fixture
def open_umask() -> Iterator[None]:
    """A umask that keeps nothing private, restored after the test."""
    old = os.umask(0)
    try:
        yield
    finally:
        os.umask(old)


@pytest.fixture
def server() -> Iterator[FakeAnthropicServer]:
    with FakeAnthropicServer() as fake:
        yield fake


def stored_run(store: SQLiteCheckpointer) -> None:
    """Append one checkpoint, so SQLite has made its WAL and SHM files."""
    store.append("r", {"state_name": "perceive"})


@pytest.mark.usefixtures("open_umask")
class TestCreatedPrivate:
    def test_a_run_through_the_sdk_leaves_only_private_files(
        self, server: FakeAnthropicServer, tmp_path: Path
    ) -> None:
        """A real run (the SDK against the local server) with a store and an audit folder,
        both in folders that did not exist, creates every file 0600 and folder 0700."""
        server.add(replies.tool_use("calculate", {"expression": "6*7"}), replies.text("42"))
        store = SQLiteCheckpointer(tmp_path / "state" / "deep" / "runs.sqlite3")
        try:
            result = Agent(
                server.model(),
                tools=[calculate],
                checkpointer=store,
                audit=Audit(dir=tmp_path / "audit" / "deep"),
            ).run("Compute", run_id="r1")
            assert result.end_state == "completed"
            assert server.invalid_requests == []
            folders, files = made_by_the_package(tmp_path)
            names = {p.name for p in files}
            assert {"runs.sqlite3", "runs.sqlite3-wal", "runs.sqlite3-shm", "r1.jsonl"} <= names
            assert {p: mode(p) for p in files} == dict.fromkeys(files, 0o600)
            assert {p: mode(p) for p in folders} == dict.fromkeys(folders, 0o700)
        finally:
            store.close()

    @pytest.mark.parametrize("encrypted", [False, True])
    def test_a_new_store_its_wal_and_shm(self, tmp_path: Path, encrypted: bool) -> None:
        """A new store, plain or encrypted, and the WAL and SHM files of its first write
        are 0600; its missing folders 0700."""
        path = tmp_path / "a" / "b" / "runs.sqlite3"
        key = generate_key() if encrypted else None
        store = SQLiteCheckpointer(path, encryption_key=key)
        try:
            stored_run(store)
            for file in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):
                assert mode(file) == 0o600, file
            assert mode(tmp_path / "a") == mode(tmp_path / "a" / "b") == 0o700
        finally:
            store.close()

    @settings(max_examples=40, deadline=None)
    @given(
        existing=st.integers(min_value=0, max_value=3),
        missing=st.integers(min_value=1, max_value=4),
        existing_mode=st.sampled_from([0o755, 0o750, 0o777, 0o700]),
    )
    def test_every_missing_level_and_no_existing_one(
        self, existing: int, missing: int, existing_mode: int
    ) -> None:
        """However deep, every folder made for a store is 0700 (not only the last, as
        `os.makedirs` would do), and the folders that were there keep their mode."""
        with tempfile.TemporaryDirectory() as root:
            there = Path(root).joinpath(*(f"e{i}" for i in range(existing)))
            there.mkdir(parents=True, exist_ok=True)
            os.chmod(there, existing_mode)
            made = [there.joinpath(*(f"m{j}" for j in range(i + 1))) for i in range(missing)]
            SQLiteCheckpointer(made[-1] / "runs.sqlite3").close()
            assert [mode(m) for m in made] == [0o700] * missing
            assert mode(there) == existing_mode
            assert mode(made[-1] / "runs.sqlite3") == 0o600

    def test_a_new_audit_file_and_its_folders(self, tmp_path: Path) -> None:
        """`JsonlSink` creates its file 0600 and the missing folders 0700."""
        path = tmp_path / "x" / "y" / "r.jsonl"
        sink = JsonlSink(path, batch=1)
        sink.write({"event": "run.started", "run_id": "r"})
        sink.close()
        assert mode(path) == 0o600
        assert mode(tmp_path / "x") == mode(tmp_path / "x" / "y") == 0o700

    def test_existing_folders_and_files_keep_their_modes(self, tmp_path: Path) -> None:
        """What the user made stays as they made it: a 0755 folder is not narrowed, and a
        0640 audit file is appended to, not re-moded."""
        shared = tmp_path / "shared"
        shared.mkdir(mode=0o755)
        audit = shared / "r.jsonl"
        audit.touch(mode=0o640)
        store = SQLiteCheckpointer(shared / "runs.sqlite3")
        store.close()
        sink = JsonlSink(audit, batch=1)
        sink.write({"event": "run.started", "run_id": "r"})
        sink.close()
        assert mode(shared) == 0o755
        assert mode(audit) == 0o640
        assert mode(shared / "runs.sqlite3") == 0o600
        assert audit.read_text(encoding="utf-8").count("\n") == 1

    def test_the_cli_audit_folder(self, tmp_path: Path, capsys: Capsys) -> None:
        """`demo --audit-dir` makes its missing folders 0700 and the audit file 0600."""
        assert main(["demo", "--audit-dir", str(tmp_path / "new" / "audit")]) == 0
        capsys.readouterr()
        folders, _ = made_by_the_package(tmp_path)
        (audit,) = (tmp_path / "new" / "audit").glob("*.jsonl")
        assert mode(audit) == 0o600
        assert {p: mode(p) for p in folders} == dict.fromkeys(folders, 0o700)


def store_file(folder: Path, file_mode: int) -> Path:
    """A store file in `folder` with `file_mode`, as a user might have left it."""
    path = folder / "runs.sqlite3"
    SQLiteCheckpointer(path).close()
    os.chmod(path, file_mode)
    return path


class TestRefused:
    @settings(max_examples=60, deadline=None)
    @given(st.integers(min_value=0, max_value=0o777))
    def test_a_store_is_used_exactly_when_no_one_else_may_write_it(self, bits: int) -> None:
        """Over every mode the owner can use: group- or other-writable is refused naming
        the file, its mode and `chmod 600`; anything else (readable by others included)
        opens, and a refusal leaves the file as it was."""
        file_mode = bits | 0o600
        with tempfile.TemporaryDirectory() as folder:
            path = store_file(Path(folder), file_mode)
            before = path.read_bytes()
            if file_mode & 0o022:
                with pytest.raises(UnsafeStoreError) as refused:
                    SQLiteCheckpointer(path)
                message = str(refused.value)
                assert str(path) in message
                assert f"mode {file_mode:04o}" in message
                assert f"chmod 600 {path}" in message
                assert "allow_unsafe_permissions=True" in message
                assert mode(path) == file_mode
                assert path.read_bytes() == before
                assert not Path(f"{path}-wal").exists()
            else:
                SQLiteCheckpointer(path).close()

    def test_a_store_owned_by_another_user(self, tmp_path: Path) -> None:
        """A private file of another account is refused, naming that account and the fix;
        the error is an `Error` and a `PermissionError`."""
        path = store_file(tmp_path, 0o600)
        os.chown(path, NOBODY, NOBODY)
        with pytest.raises(UnsafeStoreError) as refused:
            SQLiteCheckpointer(path)
        message = str(refused.value)
        assert f"owned by uid {NOBODY}" in message
        assert f"uid {os.geteuid()}" in message
        assert f"chown {os.geteuid()} {path} && chmod 600 {path}" in message
        assert isinstance(refused.value, Error)
        assert isinstance(refused.value, PermissionError)

    def test_a_link_to_another_users_store(self, tmp_path: Path) -> None:
        """A symbolic link is judged by the file it leads to."""
        target = store_file(tmp_path, 0o600)
        os.chown(target, NOBODY, NOBODY)
        link = tmp_path / "mine.sqlite3"
        link.symlink_to(target)
        with pytest.raises(UnsafeStoreError, match=f"owned by uid {NOBODY}"):
            SQLiteCheckpointer(link)

    @pytest.mark.parametrize("suffix", ["-wal", "-shm"])
    @pytest.mark.parametrize("kind", ["others may write it", "another user owns it"])
    def test_an_unsafe_wal_or_shm_file(self, tmp_path: Path, suffix: str, kind: str) -> None:
        """A private store whose WAL or SHM file someone else can write is refused, naming
        that file (SQLite would read the runs from it)."""
        path = store_file(tmp_path, 0o600)
        side = Path(f"{path}{suffix}")
        side.touch()
        if kind == "others may write it":
            os.chmod(side, 0o666)
        else:
            os.chown(side, NOBODY, NOBODY)
        with pytest.raises(UnsafeStoreError) as refused:
            SQLiteCheckpointer(path)
        assert f"store file {side}:" in str(refused.value)

    def test_an_encrypted_store_follows_the_same_rules(self, tmp_path: Path) -> None:
        """Encryption does not make a file others can replace safe to resume from."""
        key = generate_key()
        path = tmp_path / "runs.sqlite3"
        SQLiteCheckpointer(path, encryption_key=key).close()
        os.chmod(path, 0o660)
        with pytest.raises(UnsafeStoreError, match="writable by group"):
            SQLiteCheckpointer(path, encryption_key=key)

    def test_an_agent_given_the_path(self, tmp_path: Path) -> None:
        """`Agent(checkpointer=PATH)` refuses the file as the store does."""
        path = store_file(tmp_path, 0o606)
        with pytest.raises(UnsafeStoreError, match="writable by others"):
            Agent(ScriptedModel([replies.text("never sent")]), checkpointer=path)


class TestAllowed:
    def test_the_option_uses_it_with_a_warning(self, tmp_path: Path) -> None:
        """`allow_unsafe_permissions=True` opens the file, warns naming it, and leaves its
        owner and mode alone."""
        path = store_file(tmp_path, 0o666)
        os.chown(path, NOBODY, NOBODY)
        with pytest.warns(UserWarning, match="used anyway") as warned:
            store = SQLiteCheckpointer(path, allow_unsafe_permissions=True)
        try:
            stored_run(store)
            assert [s.run_id for s in store.runs()] == ["r"]
        finally:
            store.close()
        assert str(path) in str(warned[0].message)
        assert warned[0].filename == __file__  # it points at the caller's line
        assert (mode(path), path.stat().st_uid) == (0o666, NOBODY)

    def test_a_safe_store_does_not_warn(self, tmp_path: Path) -> None:
        """The option changes nothing for a private file."""
        import warnings

        path = store_file(tmp_path, 0o600)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            SQLiteCheckpointer(path, allow_unsafe_permissions=True).close()


class TestCommandLine:
    @pytest.mark.parametrize("command", [["runs"], ["prune", "--older-than", "1d"]])
    def test_a_store_others_may_write(
        self, tmp_path: Path, capsys: Capsys, command: list[str]
    ) -> None:
        """`runs` and `prune` refuse the file in one line naming it and the fix, exit 2."""
        path = store_file(tmp_path, 0o666)
        assert main([*command, "--store", str(path)]) == 2
        line = one_line_error(capsys.readouterr().err)
        assert str(path) in line
        assert f"chmod 600 {path}" in line
        assert mode(path) == 0o666

    def test_a_chat_store_others_may_write(
        self,
        server: FakeAnthropicServer,
        tmp_path: Path,
        capsys: Capsys,
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        """`chat --conversation --store` refuses the file in one line, exit 2, before any
        request reaches the model."""
        monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-key")
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.base_url)
        path = store_file(tmp_path, 0o660)
        argv = ["chat", "--conversation", "c1", "--store", str(path)]
        assert main([*argv, "--audit-dir", str(tmp_path / "audit")]) == 2
        line = one_line_error(capsys.readouterr().err)
        assert f"chmod 600 {path}" in line
        assert server.requests == []

    def test_a_store_of_another_user(self, tmp_path: Path, capsys: Capsys) -> None:
        """Another account's store is refused in one line naming the account, exit 2."""
        path = store_file(tmp_path, 0o600)
        os.chown(path, NOBODY, NOBODY)
        assert main(["runs", "--store", str(path)]) == 2
        assert f"owned by uid {NOBODY}" in one_line_error(capsys.readouterr().err)
