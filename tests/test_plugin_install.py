"""The plugin as a user gets it: the package installed (not editable) into a fresh virtualenv.

The venv has no packages of its own; the dependencies come from this suite's venv
through a `.pth` line (its `.pth` files are not run, so its editable install of
this project stays out). The project itself is built and installed from this
checkout, so what runs is the installed copy and its `pytest11` entry point.
The user's test file is `examples/test_refund_agent.py` with its golden trail.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"


@pytest.fixture(scope="module")
def fresh_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A virtualenv with the project installed from a built wheel, and nothing editable."""
    home = tmp_path_factory.mktemp("venv")
    venv.EnvBuilder(with_pip=False).create(home / "env")
    python = home / "env" / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    (Path(site) / "suite_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
         "--wheel-dir", str(home / "dist"), str(ROOT)],
        capture_output=True, text=True, check=False, timeout=300, cwd=home,
    )  # fmt: skip
    assert build.returncode == 0, build.stderr
    (wheel,) = (home / "dist").glob("statemachine_agent-*.whl")
    install = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet",
         "--no-deps", "--no-index", str(wheel)],
        capture_output=True, text=True, check=False, timeout=300, cwd=home,
    )  # fmt: skip
    assert install.returncode == 0, install.stderr
    project = home / "project"
    project.mkdir()
    shutil.copy(EXAMPLES / "test_refund_agent.py", project)
    shutil.copytree(EXAMPLES / "golden", project / "golden")
    (project / "test_installed.py").write_text(
        "import statemachine_agent, pytest_statemachine_agent\n\n"
        "def test_the_installed_copy_runs():\n"
        f"    assert {str(ROOT)!r} not in statemachine_agent.__file__\n"
        f"    assert {str(ROOT)!r} not in pytest_statemachine_agent.__file__\n"
    )
    return home


def pytest_in(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(home / "env" / "bin" / "python"), "-m", "pytest", "-p", "no:cacheprovider", *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
        cwd=home / "project",
    )


class TestInAFreshVirtualenv:
    def test_runs_green_and_prints_the_coverage_table(self, fresh_venv: Path) -> None:
        done = pytest_in(fresh_venv, "--transition-coverage")
        assert done.returncode == 0, done.stdout + done.stderr
        assert "6 passed" in done.stdout
        assert "transition coverage: " in done.stdout
        assert "never fired (" in done.stdout
        assert re.search(r"^source +trigger +guards +dest +fired$", done.stdout, re.M)

    def test_fails_under_a_threshold_it_does_not_meet(self, fresh_venv: Path) -> None:
        done = pytest_in(fresh_venv, "--transition-coverage-fail-under=90")
        assert done.returncode == 1, done.stdout + done.stderr
        assert "6 passed" in done.stdout
        assert "is under the required 90%" in done.stdout

    def test_catches_a_changed_trail_with_a_readable_diff(self, fresh_venv: Path) -> None:
        test_file = fresh_venv / "project" / "test_refund_agent.py"
        original = test_file.read_text()
        changed = original.replace(
            'replies.tool_use("lookup_order", {"order_id": "A-1001"})',
            'replies.tool_use("lookup_order", {"order_id": "A-1002"})',
            1,
        )
        assert changed != original
        test_file.write_text(changed)
        try:
            done = pytest_in(fresh_venv, "--transition-coverage")
        finally:
            test_file.write_text(original)
        assert done.returncode == 1
        assert "does not match the golden trail" in done.stdout
        assert '-tool 1: lookup_order {"order_id": "A-1001"}' in done.stdout
        assert '+tool 1: lookup_order {"order_id": "A-1002"}' in done.stdout
        assert "1 failed, 5 passed" in done.stdout
