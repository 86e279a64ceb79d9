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
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel built from a copy of the source as a clone has it (`pip wheel .`)."""
    base = tmp_path_factory.mktemp("install")
    source = base / "src"
    source.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, source / name)
    for package in ("statemachine_agent", "pytest_statemachine_agent", "scripts"):
        shutil.copytree(
            ROOT / package, source / package, ignore=shutil.ignore_patterns("__pycache__")
        )
    out = base / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", ".", "--no-deps", "--quiet", "-w", str(out)],
        cwd=source,
        check=True,
        capture_output=True,
    )
    (built,) = out.glob("statemachine_agent-*.whl")
    return built


@pytest.fixture(scope="module")
def venv(wheel: Path) -> Path:
    """A fresh virtualenv with that wheel (and its dependencies) installed."""
    env = wheel.parent.parent / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(env)], check=True)
    subprocess.run(
        [str(env / "bin" / "python"), "-m", "pip", "install", "--quiet", str(wheel)],
        check=True,
        capture_output=True,
    )
    return env


class TestTheWheel:
    """What ships is the library: no repository scripts, and the licence it names."""

    def test_no_repository_script_ships(self, wheel: Path) -> None:
        """docgen reads and writes the checkout (README.md, docs/): it stays out of the
        wheel, as does everything under scripts/."""
        names = zipfile.ZipFile(wheel).namelist()
        assert not [n for n in names if "docgen" in n or n.startswith("scripts/")]
        assert "statemachine_agent/__init__.py" in names

    def test_the_licence_ships(self, wheel: Path) -> None:
        """The MIT licence the metadata names travels with the wheel."""
        names = zipfile.ZipFile(wheel).namelist()
        (licence,) = [n for n in names if n.endswith("LICENSE")]
        assert "MIT License" in zipfile.ZipFile(wheel).read(licence).decode()


@pytest.mark.timeout(300)
def test_version_from_the_installed_wheel(venv: Path, tmp_path: Path) -> None:
    """`statemachine-agent --version` and `__version__` name the installed version."""
    from importlib import metadata

    expected = metadata.version("statemachine-agent")
    shown = cli(venv, "--version", cwd=tmp_path)
    assert (shown.returncode, shown.stdout) == (0, f"statemachine-agent {expected}\n")
    code = "import statemachine_agent; print(statemachine_agent.__version__)"
    python = subprocess.run(
        [str(venv / "bin" / "python"), "-c", code], capture_output=True, text=True, check=True
    )
    assert python.stdout == f"{expected}\n"


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
