"""A newcomer's first hour: installing, the help, the demos, the first real run.

Each test is something a new user ran into: the README's install lines, the
system programs `make test` needs, flags without help, a ragged `demo --list`,
usage counts that disagreed between `demo`, `inspect` and the audit file, an
error that told a CLI user to pass `api_key=`, and a `--help` that took a second
because it loaded the Anthropic SDK.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from statemachine_agent.audit.sink import read_events
from statemachine_agent.cli import main, parser
from statemachine_agent.cli.demos import SCENARIOS

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
Capsys = pytest.CaptureFixture[str]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
EXTRAS = set(PROJECT["optional-dependencies"]) - {"dev"}


def install_block() -> str:
    section = README.split("## Install", 1)[1].split("\n## ", 1)[0]
    (block,) = re.findall(r"```sh\n(.*?)```", section, re.S)
    return str(block)


class TestReadme:
    def test_install_lines_come_before_the_make_commands(self) -> None:
        """The package is not published: the first line installs the clone itself."""
        assert README.index("pip install .") < README.index("make demo")
        assert install_block().splitlines()[0].startswith("pip install . ")

    def test_every_extra_has_one_line_saying_what_it_adds(self) -> None:
        """Derived from pyproject.toml, so a new extra without a README line fails."""
        lines = install_block().splitlines()
        for extra in EXTRAS:
            (line,) = [x for x in lines if f"'.[{extra}]'" in x]
            assert "# " in line, f"the [{extra}] line says what it adds"

    def test_every_install_line_works_as_written_from_a_clone(self) -> None:
        """Each line is `pip install` of the clone (`.`) or of one extra that pyproject.toml
        declares: no index name (not published), no misspelt or removed extra."""
        for line in install_block().splitlines():
            command = line.split("#", 1)[0].split()
            assert command[:2] == ["pip", "install"], line
            (target,) = command[2:]
            found = re.fullmatch(r"\.|'\.\[([a-z0-9-]+)\]'", target)
            assert found is not None, f"not an install from the clone: {line}"
            assert found.group(1) is None or found.group(1) in EXTRAS, line

    def test_names_every_system_program_make_test_installs(self) -> None:
        script = (ROOT / "scripts" / "system-deps.sh").read_text(encoding="utf-8")
        packages = re.findall(r"need\+=\(([\w-]+)\)", script)
        assert packages
        quick_start = README.split("## Quick start", 1)[1].split("\n## ", 1)[0]
        assert "apt-get" in quick_start
        assert "root" in quick_start
        for package in packages:
            assert f"`{package}`" in quick_start, package


def all_actions() -> list[tuple[str, argparse.Action]]:
    (sub,) = [a for a in parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return [
        (command, action)
        for command, subparser in sub.choices.items()
        for action in subparser._actions
        if not isinstance(action, argparse._HelpAction)
    ]


class TestCommandLine:
    def test_every_flag_and_argument_has_help(self) -> None:
        actions = all_actions()
        assert len(actions) > 20
        missing = [
            f"{command} {action.option_strings or action.dest}"
            for command, action in actions
            if not (action.help or "").strip()
        ]
        assert missing == []

    def test_demo_list_lines_up(self, capsys: Capsys) -> None:
        assert main(["demo", "--list"]) == 0
        lines = capsys.readouterr().out.splitlines()
        assert len(lines) == len(SCENARIOS)
        columns = {
            line.index(scenario.title)
            for line, scenario in zip(lines, SCENARIOS.values(), strict=True)
        }
        assert len(columns) == 1

    @pytest.mark.parametrize("name", sorted(SCENARIOS))
    def test_demo_and_inspect_count_the_calls_the_audit_file_has(
        self, name: str, tmp_path: Path, capsys: Capsys
    ) -> None:
        """The salvage call is a model call too: all three say the same number."""
        assert main(["demo", "--scenario", name, "--audit-dir", str(tmp_path)]) in (0, 3)
        demo = capsys.readouterr().out
        # The last run's audit file (the conversation scenario writes one a turn).
        path = Path(re.findall(r"Audit file: (\S+)", demo)[-1])
        assert path.parent == tmp_path
        recorded = sum(
            1 for e in read_events(path) if e["event"] in ("model.replied", "model.failed")
        )
        shown = [int(n) for n in re.findall(r"Usage:\s+(\d+) model calls?", demo)]
        assert shown[-1] == recorded
        assert main(["inspect", str(path)]) == 0
        assert re.search(rf"│ {recorded} model calls?\b", capsys.readouterr().out)

    def test_the_salvage_call_is_named(self, tmp_path: Path, capsys: Capsys) -> None:
        assert main(["demo", "--scenario", "budget-salvage", "--audit-dir", str(tmp_path)]) == 3
        assert "model calls (1 salvage)" in capsys.readouterr().out

    @pytest.mark.parametrize("command", [["run", "hello"], ["chat"]])
    def test_a_missing_key_says_what_a_cli_user_sets(
        self, command: list[str], monkeypatch: pytest.MonkeyPatch, capsys: Capsys
    ) -> None:
        monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
        assert main(command) == 2
        error = capsys.readouterr().err.strip()
        assert error.startswith("statemachine-agent: error: ANTHROPIC_API_KEY is not set")
        assert "export ANTHROPIC_API_KEY" in error
        assert "api_key=" not in error
        assert len(error.splitlines()) == 1


def test_help_loads_no_sdk_and_no_terminal_library() -> None:
    """`--help` builds the parser without importing what only some commands use: the
    Anthropic and OpenAI SDKs, rich, the report (checked in a fresh interpreter)."""
    probe = (
        "import sys\n"
        "from statemachine_agent import cli\n"
        "cli.parser().format_help()\n"
        "heavy = ('anthropic', 'openai', 'rich', 'statemachine_agent.models.anthropic',\n"
        "         'statemachine_agent.report', 'statemachine_agent.cli.demos')\n"
        "print(','.join(m for m in heavy if m in sys.modules))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert done.stdout.strip() == ""
