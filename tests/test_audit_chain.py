"""The audit trail's hash chain: an edit made after the run shows, and `verify` names it.

The adversary edits, deletes, inserts and swaps every single line of real audit
files (one written in one go, one continued by a resumed run, one keyed), and
flips random bytes; every change must fail verification at the line it touched.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from statemachine_agent import Agent, Audit, MemorySink, ScriptedModel, calculate
from statemachine_agent.audit.chain import (
    Chain,
    Verification,
    file_lines,
    verify_file,
    verify_lines,
)
from statemachine_agent.audit.sink import JsonlSink, read_events
from statemachine_agent.cli import main
from statemachine_agent.cli.demos import SCENARIOS
from statemachine_agent.testing import replies

Capsys = pytest.CaptureFixture[str]
KEY = "correct horse battery staple"


def run_file(
    tmp_path: Path, *, audit_key: str | None = None, sink: MemorySink | None = None
) -> Path:
    agent = Agent(
        ScriptedModel(
            [
                replies.tool_use("calculate", {"expression": "6 * 7"}),
                replies.text("It is 42."),
            ]
        ),
        tools=[calculate],
        audit=Audit(dir=tmp_path, audit_key=audit_key, sinks=[sink] if sink is not None else []),
    )
    result = agent.run("What is 6 * 7?")
    assert result.audit_path is not None
    return result.audit_path


def resumed_file(tmp_path: Path) -> Path:
    """The approval demo: a run that pauses, then a resume appending to the same file."""
    scenario = SCENARIOS["approval"]
    agent = Agent(
        scenario.model(),
        tools=scenario.tools(),
        system=scenario.system,
        audit=tmp_path,
        **scenario.options(),
    )
    paused = agent.run(scenario.prompt)
    assert paused.end_state == "awaiting_approval"
    assert scenario.decide is not None
    pending = list((paused.details or {}).get("pending", []))
    result = agent.resume(paused.run_id, decisions=scenario.decide(pending))
    assert result.end_state == "completed"
    assert result.audit_path is not None
    return result.audit_path


@pytest.fixture(params=["plain", "resumed", "keyed"])
def written(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[list[bytes], str | None]:
    """A real audit file's lines, and the key it was written with."""
    if request.param == "plain":
        return file_lines(run_file(tmp_path).read_bytes()), None
    if request.param == "resumed":
        return file_lines(resumed_file(tmp_path).read_bytes()), None
    return file_lines(run_file(tmp_path, audit_key=KEY).read_bytes()), KEY


def edit(line: bytes) -> bytes:
    """A plausible edit: one value of the event changed, the chain members left alone."""
    event = json.loads(line)
    event["ts"] = float(event["ts"]) + 1.0
    return json.dumps(event, ensure_ascii=False).encode("utf-8")


class TestIntact:
    def test_a_run_file_verifies(self, written: tuple[list[bytes], str | None]) -> None:
        """Every line carries `prev`; the last run.ended seals the file; verify passes."""
        lines, key = written
        result = verify_lines(lines, key)
        assert result.ok, result.message
        assert result.lines == len(lines)
        events = [json.loads(line) for line in lines]
        assert events[0]["prev"] is None
        assert all(isinstance(e["prev"], str) for e in events[1:])
        ended = [e for e in events if e["event"] == "run.ended"]
        assert ended
        assert all(len(e["digest"]) == 64 for e in ended)

    def test_a_resumed_file_has_one_chain_across_both_segments(self, tmp_path: Path) -> None:
        """The resume continues the file's chain: run.resumed follows the first run.ended."""
        path = resumed_file(tmp_path)
        events = read_events(path)
        names = [e["event"] for e in events]
        assert names.count("run.ended") == 2
        resumed = names.index("run.resumed")
        assert names[resumed - 1] == "run.ended"
        assert verify_file(path).ok

    def test_other_sinks_receive_the_same_digests(self, tmp_path: Path) -> None:
        """A sink shipping events elsewhere gets the file's `prev` and `digest`: a copy kept
        apart from the file proves what the file said."""
        sink = MemorySink()
        path = run_file(tmp_path, sink=sink)
        on_file = read_events(path)
        assert [e["prev"] for e in sink.events] == [e["prev"] for e in on_file]
        assert sink.events[-1]["digest"] == on_file[-1]["digest"]

    def test_the_key_is_never_written(self, tmp_path: Path) -> None:
        """The HMAC key is a secret: it appears in no line."""
        path = run_file(tmp_path, audit_key=KEY)
        assert KEY not in path.read_text(encoding="utf-8")

    def test_an_existing_file_is_continued_not_restarted(self, tmp_path: Path) -> None:
        """A sink opened on a file with lines chains on from its last line."""
        path = tmp_path / "a.jsonl"
        first = JsonlSink(path)
        first.write({"event": "run.started", "run_id": "r"})
        first.close()
        again = JsonlSink(path)
        again.write({"event": "run.ended", "run_id": "r"})
        again.close()
        assert verify_file(path).ok

    def test_a_line_cut_by_a_crash_stays_its_own_line(self, tmp_path: Path) -> None:
        """Appending after a half-written line does not glue the next event onto it; the cut
        line is then reported, not silently absorbed."""
        path = tmp_path / "a.jsonl"
        sink = JsonlSink(path)
        sink.write({"event": "run.started", "run_id": "r"})
        sink.close()
        with path.open("a", encoding="utf-8") as handle:
            handle.write('{"event": "transition.fi')
        again = JsonlSink(path)
        again.write({"event": "run.ended", "run_id": "r"})
        again.close()
        lines = file_lines(path.read_bytes())
        assert len(lines) == 3
        result = verify_file(path)
        assert (result.status, result.line, result.problem) == ("broken", 2, "edited")


class TestEveryChangeIsCaught:
    """Each single-line change of each real file fails, at the line it touched."""

    @staticmethod
    def check(lines: list[bytes], key: str | None, want: int | set[int], *problems: str) -> None:
        result = verify_lines(lines, key)
        assert not result.ok
        assert result.exit_code in (1, 3)
        assert result.line in (want if isinstance(want, set) else {want}), result.message
        assert result.problem in problems, result.message

    def test_every_edit(self, written: tuple[list[bytes], str | None]) -> None:
        lines, key = written
        for index in range(len(lines)):
            changed = [*lines[:index], edit(lines[index]), *lines[index + 1 :]]
            self.check(changed, key, index + 1, "edited", "edited_or_deleted")

    def test_every_deletion(self, written: tuple[list[bytes], str | None]) -> None:
        lines, key = written
        for index in range(len(lines)):
            changed = lines[:index] + lines[index + 1 :]
            if index == 0:
                self.check(changed, key, 1, "deleted")
            elif index == len(lines) - 1:
                self.check(changed, key, index, "unsealed")
            else:
                self.check(changed, key, index, "edited_or_deleted")

    def test_every_insertion_of_a_copy(self, written: tuple[list[bytes], str | None]) -> None:
        """A line repeated right after itself (a replayed event written twice)."""
        lines, key = written
        for index in range(len(lines)):
            changed = [*lines[: index + 1], lines[index], *lines[index + 1 :]]
            # Two identical lines: either may be called the inserted one.
            self.check(changed, key, {index + 1, index + 2}, "inserted")

    def test_every_insertion_of_a_forged_line(
        self, written: tuple[list[bytes], str | None]
    ) -> None:
        """A made-up event that even chains correctly to the line before it."""
        lines, key = written
        chain = Chain(key)
        for index in range(len(lines) + 1):
            forged = {"event": "tool.finished", "content": "approved by the CFO"}
            forged["prev"] = chain.digest(lines[index - 1]) if index else None  # type: ignore[assignment]
            line = json.dumps(forged).encode("utf-8")
            changed = [*lines[:index], line, *lines[index:]]
            self.check(changed, key, index + 1, "inserted", "unsealed")

    def test_every_swap(self, written: tuple[list[bytes], str | None]) -> None:
        lines, key = written
        for index in range(len(lines) - 1):
            changed = list(lines)
            changed[index], changed[index + 1] = changed[index + 1], changed[index]
            self.check(changed, key, index + 1, "reordered")

    @settings(
        max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
    )
    @given(data=st.data())
    def test_any_byte_changed(self, tmp_path: Path, data: st.DataObject) -> None:
        """A random byte anywhere: the file no longer verifies, and the line named is the
        changed one or the one before it (a change inside `prev` looks like the line it
        points at was edited)."""
        path = tmp_path / "byte" / "run.jsonl"
        if not path.exists():
            path = run_file(path.parent)
            path.rename(tmp_path / "byte" / "run.jsonl")
            path = tmp_path / "byte" / "run.jsonl"
        raw = bytearray(path.read_bytes())
        position = data.draw(st.integers(0, len(raw) - 1))
        value = data.draw(st.integers(0, 255).filter(lambda b: b != raw[position]))
        line_number = raw[:position].count(b"\n") + 1
        raw[position] = value
        result = verify_lines(file_lines(bytes(raw)))
        assert not result.ok
        assert result.line is not None
        assert line_number - 1 <= result.line <= line_number + 1


class TestKeyed:
    def test_without_or_with_a_wrong_key_it_does_not_verify(self, tmp_path: Path) -> None:
        path = run_file(tmp_path, audit_key=KEY)
        assert verify_file(path, KEY).ok
        plain = verify_file(path)
        assert not plain.ok
        assert "--key" in plain.message
        assert not verify_file(path, "another key").ok

    def test_a_forger_without_the_key_cannot_rechain(self, tmp_path: Path) -> None:
        """Re-chaining an edited file with plain SHA-256 (all an outsider can do) fails the
        keyed check; re-chaining an unkeyed file succeeds: the limit docs/audit.md states."""
        for key in (KEY, None):
            path = run_file(tmp_path / str(bool(key)), audit_key=key)
            events = [json.loads(line) for line in file_lines(path.read_bytes())]
            events[-1]["text"] = "It is 43."
            forger = Chain()
            lines = [forger.seal(e).line.encode("utf-8") for e in events]
            assert verify_lines(lines, key).ok is (key is None)

    def test_an_empty_key_is_refused_and_a_key_is_not_shown(self) -> None:
        with pytest.raises(ValueError, match="audit_key"):
            Audit(audit_key="")
        assert KEY not in repr(Agent(ScriptedModel([]), audit=Audit(audit_key=KEY)).audit)


class TestCommand:
    def run(self, argv: list[str], capsys: Capsys) -> tuple[int, str]:
        code = main(argv)
        return code, capsys.readouterr().out

    def test_exit_codes(self, tmp_path: Path, capsys: Capsys) -> None:
        """0 intact, 1 broken (the line named), 3 cut short, 2 for a missing file."""
        path = run_file(tmp_path)
        code, out = self.run(["verify", str(path)], capsys)
        assert code == 0
        assert "intact" in out
        lines = path.read_bytes().split(b"\n")
        lines[2] = edit(lines[2])
        path.write_bytes(b"\n".join(lines))
        code, out = self.run(["verify", str(path)], capsys)
        assert code == 1
        assert "line 3 was edited" in out
        path.write_bytes(b"\n".join(lines[:2]) + b"\n")
        code, out = self.run(["verify", str(path)], capsys)
        assert code == 3
        assert "does not end with a sealed run.ended" in out
        code = main(["verify", str(tmp_path / "missing.jsonl")])
        assert code == 2
        assert "cannot read audit file" in capsys.readouterr().err

    def test_key_flag(self, tmp_path: Path, capsys: Capsys) -> None:
        path = run_file(tmp_path, audit_key=KEY)
        assert self.run(["verify", str(path), "--key", KEY], capsys)[0] == 0
        assert self.run(["verify", str(path)], capsys)[0] == 1

    @pytest.mark.parametrize(
        ("tamper", "shown"),
        [
            (lambda lines: lines, "Audit chain: intact"),
            (lambda lines: [lines[0], *lines[2:]], "Audit chain: NOT verified"),
        ],
    )
    def test_report_and_inspect_say_whether_the_file_verifies(
        self,
        tmp_path: Path,
        capsys: Capsys,
        tamper: Callable[[list[bytes]], list[bytes]],
        shown: str,
    ) -> None:
        path = run_file(tmp_path)
        path.write_bytes(b"\n".join(tamper(file_lines(path.read_bytes()))) + b"\n")
        page = tmp_path / "report.html"
        assert main(["report", str(path), "-o", str(page)]) == 0
        assert shown in page.read_text(encoding="utf-8")
        capsys.readouterr()
        assert main(["inspect", str(path)]) == 0
        out = capsys.readouterr().out
        assert ("Audit:      intact" in out) is shown.endswith("intact")


def test_verification_summary_names_the_chain() -> None:
    assert "HMAC" in Verification("intact", 3, keyed=True).summary
    assert "SHA-256" in Verification("intact", 3, keyed=False).summary
