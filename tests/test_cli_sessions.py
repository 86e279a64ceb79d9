"""The `replay` and `chat` commands."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from statemachine_agent.cli import main
from statemachine_agent.testing import FakeAnthropicServer, replies

ROOT = Path(__file__).resolve().parent.parent


def demo_audit(tmp_path: Path, scenario: str = "budget-salvage") -> Path:
    assert main(["demo", "--scenario", scenario, "--audit-dir", str(tmp_path)]) in (0, 3)
    (audit,) = tmp_path.glob("*.jsonl")
    return audit


class TestReplayCommand:
    def test_matching_replay_exits_zero(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """A demo's audit file replays to the same path: the trail is printed, exit 0."""
        audit = demo_audit(tmp_path)
        capsys.readouterr()
        assert main(["replay", str(audit)]) == 0
        out = capsys.readouterr().out
        assert "perceive --prepared--> budget_exhausted" in out
        assert "Replay:     matched" in out

    def test_divergence_exits_one(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """A record whose guard verdicts were altered is reported as diverged."""
        audit = demo_audit(tmp_path)
        events = [json.loads(line) for line in audit.read_text().splitlines()]
        for event in events:
            if event["event"] == "transition.fired" and event["seq"] == 3:
                event["dest"] = "failed"
        audit.write_text("".join(json.dumps(e) + "\n" for e in events))
        capsys.readouterr()
        assert main(["replay", str(audit)]) == 1
        assert "DIVERGED at transition 3" in capsys.readouterr().out

    def test_malformed_file_names_the_line(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """A broken audit file is a one-line usage error naming the line."""
        bad = tmp_path / "bad.jsonl"
        bad.write_text('{"event": "run.started"}\nnot json\n')
        assert main(["replay", str(bad)]) == 2
        assert ":2: not a JSON object" in capsys.readouterr().err


class TestChatCommand:
    def test_chat_session_over_the_real_sdk(self, tmp_path: Path) -> None:
        """Lines on stdin are turns against the API; /exit ends the session."""
        with FakeAnthropicServer([replies.text("Hello there!"), replies.text("Bye.")]) as server:
            env = {**os.environ, "ANTHROPIC_API_KEY": "sk-ant-test-0000000000",
                   "ANTHROPIC_BASE_URL": server.base_url}  # fmt: skip
            done = subprocess.run(
                [sys.executable, "-m", "statemachine_agent.cli", "chat", "--audit-dir",
                 str(tmp_path)],
                input="hello\nthanks\n/exit\n", capture_output=True, text=True, env=env,
                cwd=ROOT, timeout=60,
            )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert "assistant> Hello there!" in done.stdout
        assert "assistant> Bye." in done.stdout
        assert "[turn 2," in done.stdout
        second = server.requests[1]["messages"]
        assert [m["role"] for m in second] == ["user", "assistant", "user"]
        assert len(list(tmp_path.glob("*.jsonl"))) == 2

    def test_chat_without_key_is_a_usage_error(
        self, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """Without ANTHROPIC_API_KEY the command says so in one line."""
        monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
        assert main(["chat"]) == 2
        assert "ANTHROPIC_API_KEY" in capsys.readouterr().err


class TestDemoAndDiagramAdditions:
    def test_approval_demo_pauses_then_resumes(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """The approval scenario stops in awaiting_approval, a reviewer approves, it completes."""
        assert main(["demo", "--scenario", "approval", "--audit-dir", str(tmp_path)]) == 0
        out = capsys.readouterr().out
        assert "act --tools_done [approval_pending]--> awaiting_approval" in out
        assert "Reviewer:   Approve send_email" in out
        assert "End state:  completed" in out

    def test_png_needs_an_output_file(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """PNG is written to -o FILE (never to the terminal)."""
        assert main(["diagram", "--format", "png"]) == 2
        assert "-o FILE.png" in capsys.readouterr().err
        target = tmp_path / "machine.png"
        assert main(["diagram", "--format", "png", "-o", str(target)]) == 0
        assert target.read_bytes().startswith(b"\x89PNG")


def imported_modules(path: Path) -> set[str]:
    """Every module a file imports, at module level or inside a function."""
    import ast

    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return names


class TestCommandModules:
    def test_no_import_cycle_between_the_command_modules(self) -> None:
        """`cli.app` imports `cli.sessions`; neither it nor their shared helpers import the
        app (or the package, which loads it) back."""
        package = ROOT / "statemachine_agent" / "cli"
        assert "statemachine_agent.cli.sessions" in imported_modules(package / "app.py")
        app = {"statemachine_agent.cli", "statemachine_agent.cli.app"}
        for name in ("sessions.py", "common.py"):
            assert not app & imported_modules(package / name), name
        assert not {m for m in imported_modules(package / "common.py") if "cli" in m}

    def test_sessions_module_imports_without_the_cli(self) -> None:
        """Importing the `replay`/`chat` commands alone does not load the main CLI module."""
        code = (
            "import sys, statemachine_agent.cli.sessions\n"
            "sys.exit('statemachine_agent.cli.app' in sys.modules)"
        )
        done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=False)
        assert done.returncode == 0
