"""A throwaway PostgreSQL server on 127.0.0.1, for tests of the Postgres stores.

Starts a real server from the system's PostgreSQL binaries (Debian's
`postgresql` package) in a temporary directory, on a free port, and removes it
afterwards. As root it runs the server as the `postgres` user, since PostgreSQL
refuses to run as root.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path
from types import TracebackType

from statemachine_agent.errors import Error


class PostgresNotFoundError(Error, RuntimeError):
    """No PostgreSQL server binaries on this machine."""


def find_bin_dir() -> Path:
    """The folder holding initdb and pg_ctl (newest installed version first)."""
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True)
    found = shutil.which("pg_ctl")
    if found:
        candidates.append(str(Path(found).resolve().parent))
    for folder in candidates:
        if (Path(folder) / "initdb").exists() and (Path(folder) / "pg_ctl").exists():
            return Path(folder)
    raise PostgresNotFoundError("PostgreSQL is not installed: apt-get install -y postgresql")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class LocalPostgres:
    """`with LocalPostgres() as pg: connect(pg.dsn)`: a fresh server, gone afterwards."""

    def __init__(self) -> None:
        self.bin_dir = find_bin_dir()
        self.port = _free_port()
        self.root = Path(tempfile.mkdtemp(prefix="sma-pg-"))
        self.data = self.root / "data"
        self.user = "postgres"
        self._as_root = os.geteuid() == 0

    @property
    def dsn(self) -> str:
        return f"postgresql://{self.user}@127.0.0.1:{self.port}/postgres"

    def _run(self, *args: str) -> None:
        command = [str(self.bin_dir / args[0]), *args[1:]]
        if self._as_root:
            command = ["runuser", "-u", "postgres", "--", *command]
        subprocess.run(command, check=True, capture_output=True, timeout=120)

    def start(self) -> LocalPostgres:
        if self._as_root:
            shutil.chown(self.root, user="postgres")
        else:
            self.user = os.environ.get("USER", "postgres")
        self._run("initdb", "-D", str(self.data), "-A", "trust", "-U", self.user, "-E", "UTF8")
        options = f"-p {self.port} -h 127.0.0.1 -k {self.root} -c fsync=off"
        self._run("pg_ctl", "-D", str(self.data), "-o", options, "-w", "-l",
                  str(self.root / "log"), "start")  # fmt: skip
        return self

    def stop(self) -> None:
        try:
            self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> LocalPostgres:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
