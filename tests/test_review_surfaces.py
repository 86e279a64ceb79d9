"""The review commands treat an audit file as untrusted input (issue 24).

`diagram --run` prints no Mermaid statement a file smuggles in; `inspect`, `replay`,
`verify`, the live status line and the run's console lines show file and model text
as text (never rich markup, never control sequences); `report` and `diagram -o`
never overwrite their input nor follow a planted link; every reader survives a lone
surrogate; `inspect` names a transition without its destination.
"""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console

from statemachine_agent import diagrams
from statemachine_agent.cli import main
from statemachine_agent.cli.app import console_renderer
from statemachine_agent.report import RunProgress, live_status
from statemachine_agent.report.fmt import printable
from tests.test_report import last_audit_file
from tests.test_report_hostile import HOSTILE, KEEP, hostile_copy

TERMINAL_HOSTILE = (
    "[/x]",
    "[bold red]forged[/bold red] [link=https://example.invalid]x[/link]",
    "\x1b[2J\x1b]0;title\x07\x1b[31mred\x1b[0m",
    "\x9b31m C1 \x85 next line \x8d",
    "\ud800 lone surrogate \udfff",
    "\x00\x08\x7f",
)
"""Text that rich would read as markup, or a terminal would obey."""

CORPUS = (*HOSTILE, *TERMINAL_HOSTILE)

NOT_TEXT = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff]")


def demo_file(folder: Path, scenario: str = "budget-salvage") -> list[dict[str, Any]]:
    assert main(["demo", "--scenario", scenario, "--audit-dir", str(folder)]) in (0, 3, 4)
    lines = last_audit_file(folder).read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines]


def write(path: Path, events: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(e) + "\n" for e in events), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def clean_events(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    return demo_file(tmp_path_factory.mktemp("demo"))


LABEL = r"(?:[^:;%#\n]|#\d+;)*"
"""A label's text: `:`, `;`, `#` and `%` only as the numeric codes `mermaid_text` writes."""

MERMAID_LINE = re.compile(
    r"stateDiagram-v2"
    r"|    %% Generated from statemachine_agent/machine/table\.py by `make diagrams`; do not edit\."
    rf"|    (\[\*\]|\w+) --> (\[\*\]|\w+)(: {LABEL})?"
    rf"|    \w+(: {LABEL})?"
    rf"|    note right of \w+ : {LABEL}"
    r"|    classDef \w+ [\w:#,.\- ]+"
    r"|    class [\w,]+ \w+"
)
"""Every line shape the Mermaid generator writes; a smuggled statement matches none."""


class TestDiagramOfAHostileFile:
    @pytest.mark.parametrize("text", range(len(CORPUS)))
    def test_mermaid_prints_only_its_own_statements(
        self,
        clean_events: list[dict[str, Any]],
        tmp_path: Path,
        text: int,
        capsys: pytest.CaptureFixture[str],
    ) -> None:
        """With a hostile string in every field, each printed line is one the generator writes."""
        hostile = CORPUS[text] + '\nclick reason call alert()\n%%{init: {"theme": "dark"}}%%'
        events = [hostile_copy(e, hostile, KEEP) for e in clean_events]
        audit = write(tmp_path / "hostile.jsonl", events)
        run_id = events[0]["run_id"]
        for fmt in ("mermaid", "dot"):
            capsys.readouterr()
            assert main(["diagram", "--run", str(audit), "--run-id", run_id, "--format", fmt]) == 0
            out = capsys.readouterr().out
            assert NOT_TEXT.search(out.replace("\n", "")) is None
            assert "javascript" not in out
            assert "%%{" not in out
            assert out == diagrams.render(fmt, None), "no hostile row or state is drawn"
            if fmt == "mermaid":
                bad = [line for line in out.splitlines() if not MERMAID_LINE.fullmatch(line)]
                assert bad == []

    @settings(max_examples=200, deadline=None)
    @given(
        trigger=st.text(max_size=30),
        dest=st.text(max_size=30),
        via=st.lists(st.text(max_size=12), max_size=3),
    )
    def test_a_row_of_odd_names_adds_nothing(self, trigger: str, dest: str, via: list[str]) -> None:
        """A fired row whose names are not all names is left out of Mermaid and DOT alike."""
        known = {"source": "perceive", "trigger": "prepared", "dest": "reason", "via": []}
        odd = {"source": "reason", "trigger": trigger, "dest": dest, "via": via}
        if all(diagrams.NAME.fullmatch(p) for p in (trigger, dest, *via)):
            return
        assert diagrams.mermaid([known, odd]) == diagrams.mermaid([known])
        assert diagrams.dot([known, odd]) == diagrams.dot([known])


class TestTerminalText:
    @pytest.mark.parametrize("text", range(len(CORPUS)))
    def test_inspect_shows_file_text_as_text(
        self,
        clean_events: list[dict[str, Any]],
        tmp_path: Path,
        text: int,
        capsys: pytest.CaptureFixture[str],
    ) -> None:
        """`inspect` of a file with markup and escape sequences in every field prints them
        as text: no traceback, no control character of the file's on the terminal."""
        events = [hostile_copy(e, CORPUS[text], KEEP) for e in clean_events]
        audit = write(tmp_path / "hostile.jsonl", events)
        assert main(["inspect", str(audit)]) == 0
        out = capsys.readouterr().out
        assert NOT_TEXT.search(out.replace("\n", "")) is None
        if CORPUS[text] == "[/x]":
            assert "[/x]" in out

    def test_replay_and_verify_print_no_control_characters(
        self, clean_events: list[dict[str, Any]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """`verify` and `replay` of a hostile file print only printable text."""
        for text in TERMINAL_HOSTILE:
            events = [hostile_copy(e, text, KEEP) for e in clean_events]
            audit = write(tmp_path / "hostile.jsonl", events)
            assert main(["verify", str(audit)]) == 1
            assert main(["replay", str(audit)]) in (0, 1, 2)
            captured = capsys.readouterr()
            assert NOT_TEXT.search((captured.out + captured.err).replace("\n", "")) is None

    @pytest.mark.parametrize("text", TERMINAL_HOSTILE)
    def test_live_status_line_shows_a_tool_name_as_text(self, text: str) -> None:
        """A tool named like markup or carrying escapes is shown, not obeyed, and does not
        end the run: the status line draws it on a terminal without raising."""
        stream = io.StringIO()
        progress = RunProgress()
        console = Console(file=stream, force_terminal=True, width=200)
        with live_status(progress, console):
            progress.write({"event": "tool.called", "tool": text})
        shown = stream.getvalue()
        assert printable(f"running {text}") in shown
        for raw in ("\x1b[2J", "\x1b]0;", "\x9b", "\x85", "\x07", "\ud800", "\x00"):
            assert raw not in shown

    @pytest.mark.parametrize("text", TERMINAL_HOSTILE)
    def test_console_lines_of_a_run_carry_no_control_characters(self, text: str) -> None:
        """The transition and tool lines `run` prints as it goes are printable text."""
        for event in (
            {"event": "tool.finished", "tool": text, "input": {"q": text}, "content": text},
            {"event": "tool.failed", "tool": text, "error_kind": text, "content": text},
            {"event": "transition.fired", "seq": 1, "source": text, "trigger": text, "dest": text},
        ):
            line = console_renderer(None, "info", event)
            assert NOT_TEXT.search(line) is None


class TestOutputFiles:
    def test_report_refuses_to_overwrite_its_input(
        self, clean_events: list[dict[str, Any]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """`report A -o A`, `report run.html` and `-o` through a link to A: exit 2, A intact."""
        audit = write(tmp_path / "run.jsonl", clean_events)
        html_named = write(tmp_path / "run.html", clean_events)
        link = tmp_path / "link.html"
        link.symlink_to(audit)
        before = audit.read_bytes()
        for argv in (
            ["report", str(audit), "-o", str(audit)],
            ["report", str(html_named)],
            ["report", str(audit), "-o", str(link)],
            ["report", str(audit), "-o", str(tmp_path / "." / "run.jsonl")],
            ["diagram", "--run", str(audit), "-o", str(audit)],
        ):
            assert main(argv) == 2, argv
            err = capsys.readouterr().err
            assert err.count("\n") == 1
            assert "is the input file" in err
        assert audit.read_bytes() == before
        assert html_named.read_bytes() == audit.read_bytes()

    def test_default_output_does_not_follow_a_planted_link(
        self, clean_events: list[dict[str, Any]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """A link planted where the default output goes is refused; its target is untouched."""
        audit = write(tmp_path / "run.jsonl", clean_events)
        victim = tmp_path / "evidence.txt"
        victim.write_text("keep me", encoding="utf-8")
        (tmp_path / "run.html").symlink_to(victim)
        assert main(["report", str(audit)]) == 2
        assert "symbolic link" in capsys.readouterr().err
        assert victim.read_text(encoding="utf-8") == "keep me"

    def test_written_atomically_with_nothing_left_over(
        self, clean_events: list[dict[str, Any]], tmp_path: Path
    ) -> None:
        """A report replaces an older one whole, and no temporary file stays behind."""
        audit = write(tmp_path / "run.jsonl", clean_events)
        target = tmp_path / "out.html"
        target.write_text("old", encoding="utf-8")
        assert main(["report", str(audit), "-o", str(target)]) == 0
        assert target.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
        assert sorted(p.name for p in tmp_path.iterdir()) == ["out.html", "run.jsonl"]


class TestReadersOfOddFiles:
    def test_every_reader_survives_a_lone_surrogate(
        self, clean_events: list[dict[str, Any]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """report, inspect, verify, diagram and replay of a file holding lone surrogates in
        every field end with their own status, never a traceback."""
        events = [hostile_copy(e, "\udfff\ud800 x \udbff", KEEP) for e in clean_events]
        audit = write(tmp_path / "run.jsonl", events)
        assert main(["report", str(audit)]) == 0
        assert "\ufffd" in (tmp_path / "run.html").read_text(encoding="utf-8")
        assert main(["inspect", str(audit)]) == 0
        assert main(["verify", str(audit)]) == 1
        assert main(["diagram", "--run", str(audit), "--run-id", events[0]["run_id"]]) == 0
        assert main(["replay", str(audit)]) in (0, 1, 2)
        captured = capsys.readouterr()
        (captured.out + captured.err).encode("utf-8")  # all of it writable

    @pytest.mark.parametrize("missing", ["dest", "source", "trigger"])
    def test_inspect_names_a_transition_without_its_destination(
        self,
        clean_events: list[dict[str, Any]],
        tmp_path: Path,
        missing: str,
        capsys: pytest.CaptureFixture[str],
    ) -> None:
        """A transition.fired line lacking a field is a one-line error naming its line."""
        events = [dict(e) for e in clean_events]
        index = next(i for i, e in enumerate(events) if e["event"] == "transition.fired")
        del events[index][missing]
        audit = write(tmp_path / "run.jsonl", events)
        for command in ("inspect", "report"):
            assert main([command, str(audit)]) == 2
            err = capsys.readouterr().err
            assert err.count("\n") == 1
            assert f"{audit}:{index + 1}:" in err
            assert f"without its {missing}" in err
