"""`statemachine-agent inspect AUDIT.jsonl`: one run as a table in the terminal.

Someone handed an audit file wants the shape of the run at a glance: which
transitions fired in each iteration and why, the tools called, the tokens and
the money, then the totals and how it ended, without opening a browser.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from statemachine_agent.audit.sink import read_events
from statemachine_agent.cli import main
from statemachine_agent.report import build

Capsys = pytest.CaptureFixture[str]


def one_line_error(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, f"expected one error line, got {lines}"
    assert lines[0].startswith("statemachine-agent: error: ")
    return lines[0]


def demo_audit(tmp_path: Path, capsys: Capsys, scenario: str = "stall") -> Path:
    main(["demo", "--scenario", scenario, "--audit-dir", str(tmp_path / "audit")])
    capsys.readouterr()
    (path,) = (tmp_path / "audit").glob("*.jsonl")
    return path


def table_rows(out: str) -> list[list[str]]:
    """The table's lines split into cells (box-drawing separators removed)."""
    rows = []
    for line in out.splitlines():
        if line.startswith("│"):
            rows.append([cell.strip() for cell in line.strip("│").split("│")])
    return rows


class TestInspect:
    def test_one_row_per_iteration_then_totals(self, tmp_path: Path, capsys: Capsys) -> None:
        """Each iteration's number starts a row, and a totals row ends the table."""
        path = demo_audit(tmp_path, capsys)
        assert main(["inspect", str(path)]) == 0
        rows = table_rows(capsys.readouterr().out)
        numbers = [row[0] for row in rows if row[0]]
        assert numbers == ["1", "2", "3", "4", "total"]

    def test_every_transition_is_listed_with_its_guards(
        self, tmp_path: Path, capsys: Capsys
    ) -> None:
        """Each transition appears as `#seq source → dest`, with the guards of its row."""
        path = demo_audit(tmp_path, capsys)
        assert main(["inspect", str(path)]) == 0
        out = capsys.readouterr().out
        for event in read_events(path):
            if event["event"] == "transition.fired":
                guards = f" [{' & '.join(event['via'])}]" if event["via"] else ""
                line = f"#{event['seq']} {event['source']} → {event['dest']}{guards}"
                assert line in out, line

    def test_tokens_cost_and_tools_per_iteration(self, tmp_path: Path, capsys: Capsys) -> None:
        """Iteration rows carry the tool called, the tokens and the cost; totals match the run."""
        path = demo_audit(tmp_path, capsys, "time-calculate")
        report = build(read_events(path))
        assert main(["inspect", str(path)]) == 0
        out = capsys.readouterr().out
        rows = {row[0]: row for row in table_rows(out) if row[0]}
        assert rows["1"][3] == "get_current_time ✓"
        assert rows["2"][3] == "calculate ✓"
        assert rows["1"][4] == "15 (10 / 5)"
        assert rows["1"][5] == "$0.000105"
        assert rows["total"][4] == f"{report.tokens.total} (30 / 15)"
        assert rows["total"][5] == "$0.000315"
        assert rows["total"][3] == "2 calls"
        assert re.search(r"^End state:\s+completed \(", out, re.M)

    def test_failed_tool_and_unfinished_run(self, tmp_path: Path, capsys: Capsys) -> None:
        """A failed tool shows its error kind; a file with no run.ended says the run never ended."""
        events = [
            {"event": "transition.fired", "run_id": "r", "seq": 1, "source": "perceive",
             "trigger": "prepared", "dest": "reason", "via": []},
            {"event": "model.replied", "run_id": "r", "iteration": 1, "stop_reason": "tool_use",
             "content": []},
            {"event": "tool.called", "run_id": "r", "tool": "calc", "tool_use_id": "t"},
            {"event": "tool.failed", "run_id": "r", "tool": "calc", "tool_use_id": "t",
             "content": "boom", "error_kind": "timeout"},
        ]  # fmt: skip
        path = tmp_path / "cut.jsonl"
        path.write_text("".join(json.dumps(e) + "\n" for e in events), encoding="utf-8")
        assert main(["inspect", str(path)]) == 0
        out = capsys.readouterr().out
        assert "calc ✗ timeout" in out
        assert "1 calls, 1 failed" in out
        assert "End state:  none (no run.ended event" in out


class TestInspectTaint:
    def test_the_taint_and_the_gated_call_are_noted(self, tmp_path: Path, capsys: Capsys) -> None:
        """`inspect` notes where untrusted text entered and which call was gated."""
        from tests.test_report import tainted_run

        events = tainted_run(tmp_path)
        path = tmp_path / "tainted.jsonl"
        path.write_text("".join(json.dumps(e) + "\n" for e in events), encoding="utf-8")
        assert main(["inspect", str(path)]) == 0
        out = capsys.readouterr().out
        assert "taint.entered: untrusted text from" in out
        assert "fetch_page" in out
        assert "taint.gated: send_email" in out
        assert "(toolu_send)" in out


class TestInspectErrors:
    def test_missing_file(self, tmp_path: Path, capsys: Capsys) -> None:
        """A missing audit file exits 2 with one line naming it."""
        missing = tmp_path / "nope.jsonl"
        assert main(["inspect", str(missing)]) == 2
        captured = capsys.readouterr()
        assert str(missing) in one_line_error(captured.err)
        assert captured.out == ""

    def test_malformed_line_is_named(self, tmp_path: Path, capsys: Capsys) -> None:
        """A broken line exits 2 naming the file and the line number."""
        path = demo_audit(tmp_path, capsys)
        lines = path.read_text(encoding="utf-8").splitlines()
        lines[4] = '{"no_event_key": 1}'
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        assert main(["inspect", str(path)]) == 2
        assert f"{path}:5:" in one_line_error(capsys.readouterr().err)

    def test_empty_file(self, tmp_path: Path, capsys: Capsys) -> None:
        """A file with no events exits 2 saying so."""
        path = tmp_path / "empty.jsonl"
        path.write_text("\n", encoding="utf-8")
        assert main(["inspect", str(path)]) == 2
        assert "holds no events" in one_line_error(capsys.readouterr().err)

    def test_binary_file(self, tmp_path: Path, capsys: Capsys) -> None:
        """A file that is not UTF-8 text exits 2 with one line, not a traceback."""
        path = tmp_path / "run.jsonl"
        path.write_bytes(b"\xff\xfe\x00garbage")
        assert main(["inspect", str(path)]) == 2
        assert "not a UTF-8 text file" in one_line_error(capsys.readouterr().err)

    def test_a_directory(self, tmp_path: Path, capsys: Capsys) -> None:
        """A directory given as the audit file exits 2 naming it."""
        assert main(["inspect", str(tmp_path)]) == 2
        assert str(tmp_path) in one_line_error(capsys.readouterr().err)

    def test_file_argument_is_required(self, capsys: Capsys) -> None:
        """Without a file argparse exits 2 with its usage line."""
        with pytest.raises(SystemExit) as exit_info:
            main(["inspect"])
        assert exit_info.value.code == 2
        assert "AUDIT.jsonl" in capsys.readouterr().err
