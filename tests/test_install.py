"""A new user's first steps, in a fresh virtualenv: `pip install .`, then the CLI.

Nothing else is installed and no system Graphviz is on PATH (PATH holds only the
virtualenv's own bin directory), so the diagrams and the report must come from
what the package itself brings: graphviz-pure's renderer and the SVG shipped
as package data.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A virtualenv with the package installed from a copy of its source (`pip install .`)."""
    base = tmp_path_factory.mktemp("install")
    source = base / "src"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    shutil.copytree(
        ROOT / "statemachine_agent",
        source / "statemachine_agent",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    env = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(env)], check=True)
    subprocess.run(
        [str(env / "bin" / "python"), "-m", "pip", "install", "--quiet", "."],
        cwd=source,
        check=True,
        capture_output=True,
    )
    return env


def cli(venv: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    path = str(venv / "bin")
    assert shutil.which("dot", path=path) is None
    return subprocess.run(
        [str(venv / "bin" / "statemachine-agent"), *args],
        cwd=cwd,
        env={"PATH": path, "HOME": str(cwd)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.timeout(900)
def test_diagrams_and_report_work_without_system_graphviz(venv: Path, tmp_path: Path) -> None:
    demo = cli(venv, "demo", "--audit-dir", "audit", cwd=tmp_path)
    assert demo.returncode == 0, demo.stderr
    (audit,) = (tmp_path / "audit").glob("*.jsonl")

    svg = cli(venv, "diagram", "--format", "svg", "-o", "machine.svg", cwd=tmp_path)
    assert svg.returncode == 0, svg.stderr
    assert svg.stderr.startswith("Rendered by graphviz-pure ")
    assert "<svg" in (tmp_path / "machine.svg").read_text(encoding="utf-8")

    png = cli(venv, "diagram", "--format", "png", "--full", "-o", "machine.png", cwd=tmp_path)
    assert png.returncode == 0, png.stderr
    assert (tmp_path / "machine.png").read_bytes().startswith(b"\x89PNG\r\n\x1a\n")

    report = cli(venv, "report", str(audit), "-o", "report.html", cwd=tmp_path)
    assert report.returncode == 0, report.stderr
    page = (tmp_path / "report.html").read_text(encoding="utf-8")
    assert "Rendered by graphviz-pure " in page
    assert 'class="edge fired"' in page
    assert "Audit chain: intact" in page

    verify = cli(venv, "verify", str(audit), cwd=tmp_path)
    assert verify.returncode == 0, verify.stdout


@pytest.mark.timeout(300)
def test_the_installed_package_ships_the_review_svg(venv: Path) -> None:
    """The wheel carries the committed review SVG as package data."""
    shipped = subprocess.run(
        [
            str(venv / "bin" / "python"),
            "-c",
            "from statemachine_agent import diagrams; print(diagrams.packaged_svg(), end='')",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert shipped == (ROOT / "diagrams" / "machine.svg").read_text(encoding="utf-8")
