"""The `statemachine-agent` command, in-process and once as the installed script.

The CLI is the first thing a user runs (`make demo`), so its output is a
contract: each transition as it fires, the answer, the end state, the audit file,
and a one-line error with exit status 2 for anything the user got wrong.
"""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from statemachine_agent import diagrams
from statemachine_agent.audit.sink import read_events
from statemachine_agent.cli import app as cli
from statemachine_agent.cli import main
from statemachine_agent.machine import table
from statemachine_agent.machine.ends import EXIT_CODES
from statemachine_agent.testing import FakeAnthropicServer, FakeError, replies

Capsys = pytest.CaptureFixture[str]

API_KEY = "sk-ant-api03-CLITESTSECRET-abcdefghijklmnop"


def audit_files(directory: Path) -> list[Path]:
    return sorted(directory.glob("*.jsonl"))


def one_line_error(err: str) -> str:
    """The single error line a usage error prints."""
    lines = err.strip().splitlines()
    assert len(lines) == 1, f"expected one error line, got {lines}"
    assert lines[0].startswith("statemachine-agent: error: ")
    return lines[0]


@pytest.fixture
def audit_file(tmp_path: Path, capsys: Capsys) -> Path:
    """The audit file of one demo run."""
    assert main(["demo", "--audit-dir", str(tmp_path / "audit")]) == 0
    capsys.readouterr()
    (path,) = audit_files(tmp_path / "audit")
    return path


class TestDemo:
    def test_prints_transitions_answer_end_state_and_audit_file(
        self, tmp_path: Path, capsys: Capsys
    ) -> None:
        """The demo shows every transition, the answer 420, `completed` and the audit path."""
        code = main(["demo", "--audit-dir", str(tmp_path)])
        out = capsys.readouterr().out
        assert code == 0
        (path,) = audit_files(tmp_path)
        fired = [e for e in read_events(path) if e["event"] == "transition.fired"]
        assert fired, "the audit file holds the transitions"
        for event in fired:
            source, trigger, dest = event["source"], event["trigger"], event["dest"]
            pattern = rf"#{event['seq']}\s+{source} --{trigger}.*--> {dest}"
            assert re.search(pattern, out), f"transition {event['seq']} not shown"
        assert "420" in out.split("Answer:", 1)[1].splitlines()[0]
        assert re.search(r"End state:\s+completed", out)
        assert f"Audit file: {path}" in out

    def test_writes_the_run_diagram_next_to_the_audit_file(
        self, tmp_path: Path, capsys: Capsys
    ) -> None:
        """The demo leaves a Mermaid diagram of its own path beside the audit file."""
        main(["demo", "--audit-dir", str(tmp_path)])
        (path,) = audit_files(tmp_path)
        diagram = path.with_suffix(".mmd").read_text(encoding="utf-8")
        assert diagram.startswith("stateDiagram-v2")
        assert "visited ×" in diagram
        assert str(path.with_suffix(".mmd")) in capsys.readouterr().out

    def test_list_names_the_scenarios(self, capsys: Capsys) -> None:
        """`demo --list` prints each scenario's name and exits 0."""
        from statemachine_agent.cli.demos import SCENARIOS

        assert main(["demo", "--list"]) == 0
        out = capsys.readouterr().out
        for name in SCENARIOS:
            assert re.search(rf"^{re.escape(name)}\s", out, re.M)

    def test_the_expense_demo_runs_only_the_corrected_decision(
        self, tmp_path: Path, capsys: Capsys
    ) -> None:
        """The rejected approval was staged and taken back, never run: the only write the
        audit file shows running is the return, in `commit`, after the second check."""
        assert main(["demo", "--scenario", "expense-commit", "--audit-dir", str(tmp_path)]) == 0
        (path,) = audit_files(tmp_path)
        events = read_events(path)
        kinds = [
            (e["event"], e.get("tool"))
            for e in events
            if e["event"].startswith(("call.", "commit.", "verify."))
        ]
        assert kinds == [
            ("call.staged", "approve_claim"),
            ("verify.checked", None),
            ("call.unstaged", "approve_claim"),
            ("call.staged", "return_claim"),
            ("verify.checked", None),
            ("commit.started", None),
            ("commit.finished", None),
        ]
        ran = [e["tool"] for e in events if e["event"] in ("tool.finished", "tool.failed")]
        assert ran == ["read_claim", "read_policy", "return_claim"]
        assert "completed" in capsys.readouterr().out

    def test_unknown_scenario_is_a_usage_error(self, tmp_path: Path, capsys: Capsys) -> None:
        """An unknown scenario exits 2 with one line naming it, and runs nothing."""
        assert main(["demo", "--scenario", "nope", "--audit-dir", str(tmp_path)]) == 2
        captured = capsys.readouterr()
        assert "'nope'" in one_line_error(captured.err)
        assert captured.out == ""
        assert audit_files(tmp_path) == []

    def test_json_log_format_prints_json_lines(self, tmp_path: Path, capsys: Capsys) -> None:
        """With `--log-format json` stdout is JSON lines only, one per event."""
        assert main(["demo", "--log-format", "json", "--audit-dir", str(tmp_path)]) == 0
        captured = capsys.readouterr()
        events = [json.loads(line) for line in captured.out.splitlines() if line.strip()]
        names = [event["event"] for event in events]
        assert names[0] == "run.started"
        assert names[-1] == "run.ended"
        assert "transition.fired" in names
        assert all(event["run_id"] == events[0]["run_id"] for event in events)
        assert "End state:" in captured.err, "the human summary goes to stderr"


class TestInstalledScript:
    def test_demo_as_a_user_runs_it(self, tmp_path: Path) -> None:
        """The installed `statemachine-agent demo` completes and writes its audit file."""
        script = Path(sys.executable).parent / "statemachine-agent"
        done = subprocess.run(
            [str(script), "demo", "--audit-dir", "tmp"],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        assert re.search(r"End state:\s+completed", done.stdout)
        (path,) = audit_files(tmp_path / "tmp")
        assert f"Audit file: {path.relative_to(tmp_path)}" in done.stdout
        names = [event["event"] for event in read_events(path)]
        assert names.count("transition.fired") >= 3
        assert names[-1] == "run.ended"


class TestDiagram:
    @pytest.mark.parametrize("fmt", diagrams.TEXT_FORMATS)
    def test_prints_to_stdout(self, fmt: str, capsys: Capsys) -> None:
        """`diagram --format F` prints exactly the generated diagram."""
        assert main(["diagram", "--format", fmt]) == 0
        assert capsys.readouterr().out == diagrams.render(fmt)

    @pytest.mark.parametrize("fmt", diagrams.TEXT_FORMATS)
    def test_writes_a_file(self, fmt: str, tmp_path: Path, capsys: Capsys) -> None:
        """`-o FILE` writes the diagram there and prints nothing."""
        target = tmp_path / f"machine.{fmt}"
        assert main(["diagram", "--format", fmt, "-o", str(target)]) == 0
        assert target.read_text(encoding="utf-8") == diagrams.render(fmt)
        assert capsys.readouterr().out == ""

    def test_default_format_is_mermaid(self, capsys: Capsys) -> None:
        """Without `--format`, the diagram is Mermaid."""
        assert main(["diagram"]) == 0
        assert capsys.readouterr().out.startswith("stateDiagram-v2")

    def test_run_highlights_its_path(self, audit_file: Path, capsys: Capsys) -> None:
        """`--run AUDIT.jsonl` highlights the states that run visited."""
        assert main(["diagram", "--run", str(audit_file)]) == 0
        out = capsys.readouterr().out
        events = [e for e in read_events(audit_file) if e["event"] == "transition.fired"]
        assert out == diagrams.mermaid(events)
        assert "    completed: visited ×1" in out.splitlines()
        assert "(×" in out

    def test_run_highlights_in_dot_too(self, audit_file: Path, capsys: Capsys) -> None:
        """The highlight works for DOT as well."""
        assert main(["diagram", "--format", "dot", "--run", str(audit_file)]) == 0
        assert 'penwidth="2.5"' in capsys.readouterr().out

    def test_malformed_audit_file_names_the_line(self, audit_file: Path, capsys: Capsys) -> None:
        """A broken line makes exit 2 with an error naming the file and line number."""
        lines = audit_file.read_text(encoding="utf-8").splitlines()
        lines.insert(2, "{not json")
        audit_file.write_text("\n".join(lines) + "\n", encoding="utf-8")
        assert main(["diagram", "--run", str(audit_file)]) == 2
        captured = capsys.readouterr()
        assert f"{audit_file}:3:" in one_line_error(captured.err)
        assert captured.out == ""

    def test_missing_audit_file(self, tmp_path: Path, capsys: Capsys) -> None:
        """A missing audit file exits 2 with one line naming it."""
        missing = tmp_path / "nope.jsonl"
        assert main(["diagram", "--run", str(missing)]) == 2
        assert str(missing) in one_line_error(capsys.readouterr().err)

    def test_audit_file_without_transitions(self, tmp_path: Path, capsys: Capsys) -> None:
        """A file of events but no transitions cannot be highlighted, and says so."""
        path = tmp_path / "other.jsonl"
        path.write_text(json.dumps({"event": "run.started", "run_id": "r"}) + "\n")
        assert main(["diagram", "--run", str(path)]) == 2
        assert "no transition.fired events" in one_line_error(capsys.readouterr().err)

    def test_svg_without_graphviz_is_a_clear_error(
        self, monkeypatch: pytest.MonkeyPatch, capsys: Capsys
    ) -> None:
        """Asking for SVG with no renderer at all exits 2 naming how to install one, and
        only the diagram's own flags."""
        monkeypatch.setattr(diagrams, "find_renderer", lambda: None)
        assert main(["diagram", "--format", "svg"]) == 2
        error = one_line_error(capsys.readouterr().err)
        assert "pip install graphviz-pure" in error
        assert "apt-get install graphviz" in error
        assert "--format mermaid" in error

    def test_svg_with_graphviz(self, tmp_path: Path, capsys: Capsys) -> None:
        """With a renderer, `--format svg -o FILE` writes an SVG of every state, and says
        which renderer drew it."""
        target = tmp_path / "machine.svg"
        assert main(["diagram", "--format", "svg", "-o", str(target)]) == 0
        assert capsys.readouterr().err.startswith("Rendered by graphviz-pure ")
        svg = target.read_text(encoding="utf-8")
        assert "<svg" in svg
        assert all(f"<title>{state}</title>" in svg for state in table.STATES)

    def test_unwritable_output_is_a_usage_error(self, tmp_path: Path, capsys: Capsys) -> None:
        """An output path in a missing directory exits 2 instead of a traceback."""
        target = tmp_path / "missing" / "machine.mmd"
        assert main(["diagram", "-o", str(target)]) == 2
        assert str(target) in one_line_error(capsys.readouterr().err)


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeAnthropicServer]:
    """A local fake Messages API, with the environment `run` reads pointing at it."""
    with FakeAnthropicServer() as fake:
        monkeypatch.setenv("ANTHROPIC_API_KEY", API_KEY)
        monkeypatch.setenv("ANTHROPIC_BASE_URL", fake.base_url)
        yield fake


class TestRun:
    def test_tool_round_trip_completes(
        self, server: FakeAnthropicServer, tmp_path: Path, capsys: Capsys
    ) -> None:
        """A run that calls `calculate` then answers exits 0, prints the summary and audits."""
        server.add(
            replies.tool_use("calculate", {"expression": "2**32"}),
            replies.text("2**32 is 4294967296."),
        )
        code = main(["run", "What is 2**32?", "--audit-dir", str(tmp_path)])
        out = capsys.readouterr().out
        assert code == 0
        assert server.invalid_requests == []
        assert "4294967296" in out.split("Answer:", 1)[1].splitlines()[0]
        assert re.search(r"End state:\s+completed", out)
        assert re.search(r"#2\s+reason --replied \[is_tool_use\]--> act", out)
        (path,) = audit_files(tmp_path)
        assert f"Audit file: {path}" in out
        assert API_KEY not in path.read_text(encoding="utf-8")
        assert {t["name"] for t in server.requests[0]["tools"]} == {
            "get_current_time",
            "calculate",
            "finish",
        }

    def test_tools_none_offers_no_tools(
        self, server: FakeAnthropicServer, tmp_path: Path, capsys: Capsys
    ) -> None:
        """`--tools none` sends requests without any tool."""
        server.add(replies.text("Hello."))
        assert main(["run", "Hi", "--tools", "none", "--audit-dir", str(tmp_path)]) == 0
        assert "tools" not in server.requests[0] or server.requests[0]["tools"] == []

    def test_model_and_limits_reach_the_run(
        self, server: FakeAnthropicServer, tmp_path: Path, capsys: Capsys
    ) -> None:
        """`--model` is the model asked; `--max-iterations` stops a looping run."""
        server.add(
            replies.tool_use("calculate", {"expression": "1+1"}),
            replies.tool_use("calculate", {"expression": "2+2"}),
            replies.text("Summary: 2 and 4."),
        )
        argv = ["run", "Add", "--model", "claude-haiku-4-5", "--max-iterations", "2"]
        code = main([*argv, "--audit-dir", str(tmp_path)])
        out = capsys.readouterr().out
        assert code == EXIT_CODES["budget_exhausted"] == 3
        assert re.search(r"End state:\s+budget_exhausted", out)
        assert {r["model"] for r in server.requests} == {"claude-haiku-4-5"}

    @pytest.mark.parametrize(
        ("reply", "end_state"),
        [
            (replies.text("", stop_reason="refusal"), "refused"),
            (replies.text("cut", stop_reason="max_tokens"), "truncated"),
            (FakeError(400, "bad request"), "failed"),
        ],
    )
    def test_every_unsuccessful_end_state_exits_non_zero(
        self,
        server: FakeAnthropicServer,
        tmp_path: Path,
        capsys: Capsys,
        reply: dict[str, object] | FakeError,
        end_state: str,
    ) -> None:
        """A run ending anywhere but completed/finished exits with that end state's code."""
        server.add(reply)
        code = main(["run", "Go", "--audit-dir", str(tmp_path)])
        out = capsys.readouterr().out
        assert code == EXIT_CODES[end_state] != 0
        assert re.search(rf"End state:\s+{end_state}", out)

    def test_json_log_format(
        self, server: FakeAnthropicServer, tmp_path: Path, capsys: Capsys
    ) -> None:
        """With `--log-format json` stdout is only JSON events; the summary goes to stderr."""
        server.add(replies.text("Hello."))
        argv = ["run", "Hi", "--log-format", "json", "--audit-dir", str(tmp_path)]
        assert main(argv) == 0
        captured = capsys.readouterr()
        names = [json.loads(line)["event"] for line in captured.out.splitlines()]
        assert names[0] == "run.started"
        assert names[-1] == "run.ended"
        assert "End state:" in captured.err

    def test_status_line_follows_the_run(
        self,
        server: FakeAnthropicServer,
        tmp_path: Path,
        capsys: Capsys,
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        """On a terminal, the status line shows state, iteration, tokens and cost as they change."""
        from rich.console import Console

        screen = io.StringIO()
        monkeypatch.setattr(
            cli, "status_console", lambda: Console(file=screen, force_terminal=True, width=120)
        )
        server.add(replies.tool_use("calculate", {"expression": "6*7"}), replies.text("42"))
        assert main(["run", "6*7?", "--audit-dir", str(tmp_path)]) == 0
        drawn = screen.getvalue()
        assert "running calculate" in drawn
        assert re.search(r"act · iteration 1 · 15 tokens · \$", drawn)
        assert re.search(r"completed · iteration 2 · 30 tokens · \$", drawn)
        assert "Answer:" not in drawn, "the summary goes to stdout, not the status console"

    def test_missing_api_key_is_a_usage_error(
        self, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: Capsys
    ) -> None:
        """`run` without ANTHROPIC_API_KEY exits 2 with one line naming the variable."""
        monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
        assert main(["run", "What is 2 + 2?", "--audit-dir", str(tmp_path)]) == 2
        assert "ANTHROPIC_API_KEY" in one_line_error(capsys.readouterr().err)
        assert audit_files(tmp_path) == []

    def test_unusable_audit_dir_is_a_usage_error(
        self, server: FakeAnthropicServer, tmp_path: Path, capsys: Capsys
    ) -> None:
        """An --audit-dir that is a file exits 2 before any model call."""
        blocker = tmp_path / "file"
        blocker.write_text("", encoding="utf-8")
        assert main(["run", "Hi", "--audit-dir", str(blocker / "audit")]) == 2
        assert "--audit-dir" in one_line_error(capsys.readouterr().err)
        assert server.requests == []

    def test_cost_limit_needs_a_known_price(
        self, server: FakeAnthropicServer, tmp_path: Path, capsys: Capsys
    ) -> None:
        """`--max-cost` with a model that has no price exits 2 naming the model."""
        argv = ["run", "Hi", "--model", "no-such-model", "--max-cost", "0.5"]
        assert main([*argv, "--audit-dir", str(tmp_path)]) == 2
        assert "no-such-model" in one_line_error(capsys.readouterr().err)
        assert server.requests == []

    @pytest.mark.parametrize(
        "flags",
        [
            ["--max-iterations", "0"],
            ["--max-iterations", "many"],
            ["--max-cost", "-1"],
            ["--tools", "all"],
            ["--log-format", "xml"],
        ],
    )
    def test_bad_flags_are_usage_errors(self, flags: list[str], capsys: Capsys) -> None:
        """A bad flag value exits 2 with argparse's message naming the flag."""
        with pytest.raises(SystemExit) as exit_info:
            main(["run", "Hi", *flags])
        assert exit_info.value.code == 2
        err = capsys.readouterr().err
        assert f"argument {flags[0]}" in err.splitlines()[-1]


class TestReport:
    def test_writes_a_self_contained_page(
        self, audit_file: Path, tmp_path: Path, capsys: Capsys
    ) -> None:
        """`report AUDIT -o FILE` writes one HTML page and prints its path."""
        target = tmp_path / "report.html"
        assert main(["report", str(audit_file), "-o", str(target)]) == 0
        page = target.read_text(encoding="utf-8")
        assert page.startswith("<!DOCTYPE html>")
        assert "<svg" in page
        assert 'class="edge fired"' in page
        assert str(target) in capsys.readouterr().out

    def test_default_output_is_beside_the_audit_file(
        self, audit_file: Path, capsys: Capsys
    ) -> None:
        """Without `-o` the page is written next to the audit file, as AUDIT.html."""
        assert main(["report", str(audit_file)]) == 0
        assert audit_file.with_suffix(".html").is_file()

    def test_missing_audit_file(self, tmp_path: Path, capsys: Capsys) -> None:
        """A missing audit file exits 2 naming it, and writes nothing."""
        missing = tmp_path / "nope.jsonl"
        assert main(["report", str(missing), "-o", str(tmp_path / "r.html")]) == 2
        assert str(missing) in one_line_error(capsys.readouterr().err)
        assert not (tmp_path / "r.html").exists()

    def test_malformed_audit_file_names_the_line(self, audit_file: Path, capsys: Capsys) -> None:
        """A broken line exits 2 naming the file and the line number."""
        with audit_file.open("a", encoding="utf-8") as handle:
            handle.write("[1, 2]\n")
        count = len(audit_file.read_text(encoding="utf-8").splitlines())
        assert main(["report", str(audit_file)]) == 2
        assert f"{audit_file}:{count}:" in one_line_error(capsys.readouterr().err)

    def test_unwritable_output(self, audit_file: Path, tmp_path: Path, capsys: Capsys) -> None:
        """An output path in a missing directory exits 2 naming it."""
        target = tmp_path / "missing" / "report.html"
        assert main(["report", str(audit_file), "-o", str(target)]) == 2
        assert str(target) in one_line_error(capsys.readouterr().err)

    def test_without_graphviz(
        self, audit_file: Path, monkeypatch: pytest.MonkeyPatch, capsys: Capsys
    ) -> None:
        """Without a renderer the report still works: the package's SVG, path marked."""
        monkeypatch.setattr(diagrams, "find_renderer", lambda: None)
        assert main(["report", str(audit_file)]) == 0
        page = audit_file.with_suffix(".html").read_text(encoding="utf-8")
        assert "as no Graphviz renderer is installed; the whole machine is the diagram " in page
        assert 'class="edge fired"' in page
        assert 'class="node visited"' in page

    def test_without_graphviz_or_the_packaged_svg(
        self, audit_file: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """With neither, the report shows the path as text, and says why."""
        monkeypatch.setattr(diagrams, "find_renderer", lambda: None)
        monkeypatch.setattr(diagrams, "packaged_svg", lambda: None)
        assert main(["report", str(audit_file)]) == 0
        page = audit_file.with_suffix(".html").read_text(encoding="utf-8")
        assert "Text form of the run&#39;s path, as no Graphviz renderer" in page
        assert "stateDiagram-v2" in page
        assert "(×1)" in page

    def test_says_which_renderer_drew_the_diagram(self, audit_file: Path) -> None:
        assert main(["report", str(audit_file)]) == 0
        page = audit_file.with_suffix(".html").read_text(encoding="utf-8")
        assert "Rendered by graphviz-pure " in page


class TestDemoErrors:
    def test_unusable_audit_dir_is_a_usage_error(self, tmp_path: Path, capsys: Capsys) -> None:
        """A demo whose --audit-dir cannot be created exits 2 with one line, and runs nothing."""
        blocker = tmp_path / "file"
        blocker.write_text("", encoding="utf-8")
        assert main(["demo", "--audit-dir", str(blocker / "audit")]) == 2
        captured = capsys.readouterr()
        assert str(blocker / "audit") in one_line_error(captured.err)
        assert captured.out == ""


class TestArguments:
    def test_a_command_is_required(self, capsys: Capsys) -> None:
        """No subcommand is a usage error: exit 2 and one line pointing at --help."""
        with pytest.raises(SystemExit) as exit_info:
            main([])
        assert exit_info.value.code == 2
        assert "--help" in one_line_error(capsys.readouterr().err)

    def test_bad_flag_values_are_one_line(self, capsys: Capsys) -> None:
        """A bad flag value is one line naming the flag, not a usage dump."""
        with pytest.raises(SystemExit) as exit_info:
            main(["run", "--max-iterations", "0", "x"])
        assert exit_info.value.code == 2
        line = capsys.readouterr().err.strip()
        assert line.startswith("statemachine-agent run: error: argument --max-iterations")
        assert "\n" not in line

    def test_exit_codes_cover_every_end_state(self) -> None:
        """Every end state has its own exit code; only success is 0, and 2 stays for usage."""
        assert set(EXIT_CODES) == set(table.END_STATES)
        from statemachine_agent.machine.ends import SUCCESS_STATES

        for state, code in EXIT_CODES.items():
            assert (code == 0) == (state in SUCCESS_STATES)
            assert code != 2
        failures = [code for state, code in EXIT_CODES.items() if state not in SUCCESS_STATES]
        assert len(failures) == len(set(failures))
