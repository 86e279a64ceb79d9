"""`statemachine-agent testgen`: a pytest file with one test per reachable row, which
passes as written (run here by a pytest of its own), and the committed example kept fresh."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from statemachine_agent.cli import main
from statemachine_agent.cli.testgen import generate
from statemachine_agent.testing.reachability import reachable_rows
from statemachine_agent.testing.witnesses import unwitnessed, witnesses

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = "examples.eval_policies:base"
COMMITTED = ROOT / "tests" / "generated" / "test_eval_policies_rows.py"
COMMAND = f"statemachine-agent testgen {EXAMPLE} -o tests/generated/test_eval_policies_rows.py"


def test_the_committed_example_is_fresh() -> None:
    """The generated file in tests/generated is what testgen writes today."""
    assert COMMITTED.read_text(encoding="utf-8") == generate(EXAMPLE, command=COMMAND), (
        f"tests/generated is stale: run `{COMMAND}` from the repository's root"
    )


def test_one_test_per_reachable_row_named_after_it() -> None:
    from examples.eval_policies import base

    text = COMMITTED.read_text(encoding="utf-8")
    names = [
        line[len("def test_") :].split("(")[0]
        for line in text.splitlines()
        if line.startswith("def test_")
    ]
    assert unwitnessed(base) == []
    assert names == [w.name for w in witnesses(base)]
    assert len(names) == len(reachable_rows(base).reachable)


def test_the_file_through_the_sdk_passes_as_written(tmp_path: Path) -> None:
    """--through-sdk: each test takes the plugin's `anthropic_server`; a pytest of its own
    runs the file as written, every test passing."""
    out = tmp_path / "test_rows.py"
    assert main(["testgen", EXAMPLE, "-o", str(out), "--through-sdk"]) == 0
    text = out.read_text(encoding="utf-8")
    assert "anthropic_server: FakeAnthropicServer" in text
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert f"{text.count('def test_')} passed" in done.stdout


@pytest.mark.parametrize(
    ("target", "said"),
    [
        ("examples.eval_policies", "is not MODULE:ATTR"),
        ("examples.no_such_module:agent", "cannot import 'examples.no_such_module'"),
        ("examples.eval_policies:nothing", "has no attribute 'nothing'"),
        ("examples.eval_policies:variants", "is a list, not an Agent"),
    ],
)
def test_a_bad_target_is_one_line_and_exit_2(
    target: str, said: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["testgen", target, "-o", str(tmp_path / "t.py")]) == 2
    err = capsys.readouterr().err
    assert said in err
    assert err.count("\n") == 1
    assert not (tmp_path / "t.py").exists()
