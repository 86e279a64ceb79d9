"""A large audit file is read as a stream: report, inspect and replay stay within bounded memory."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from statemachine_agent import Agent, Audit, Budget, ContextPolicy, ScriptedModel, tool
from statemachine_agent.testing import replies

MB = 1024 * 1024
CALLS = 40
RESULT_BYTES = 5 * MB
PEAK_LIMIT = 500 * MB

MEASURED = """
import sys
from pathlib import Path
from statemachine_agent.cli import main
code = main(sys.argv[1:])
sys.stdout.flush()
peak = next(l for l in Path("/proc/self/status").read_text().splitlines() if l.startswith("VmHWM:"))
print(f"PEAK_KIB {peak.split()[1]}", file=sys.stderr)
sys.exit(code)
"""
"""Runs one CLI command and reports its own peak resident memory, VmHWM in KiB (the
process's high-water mark; `ru_maxrss` would include the parent's, which survives exec)."""


@tool
def dump(part: int) -> str:
    """Return one part of a large export."""
    return f"part {part}: " + "x" * RESULT_BYTES


@pytest.fixture(scope="module")
def big_audit(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real run whose audit file is about 200 MB: 40 tool results of 5 MB each."""
    folder = tmp_path_factory.mktemp("big")
    script = [replies.tool_use("dump", {"part": n}) for n in range(CALLS)]
    agent = Agent(
        ScriptedModel([*script, replies.text("exported")]),
        tools=[dump],
        budget=Budget(max_iterations=CALLS + 5),
        stall=None,
        context=ContextPolicy(max_tool_result_chars=2 * RESULT_BYTES, compact_at_tokens=None),
        audit=Audit(dir=folder),
    )
    result = agent.run("export everything")
    assert result.end_state == "completed", result.reason
    assert result.audit_path is not None
    assert result.audit_path.stat().st_size >= 200 * MB
    return result.audit_path


def measured(*argv: str) -> tuple[int, int, str]:
    """Exit status, peak RSS in bytes, and stdout of one CLI command in a fresh process."""
    done = subprocess.run(
        [sys.executable, "-c", MEASURED, *argv], capture_output=True, text=True, check=False
    )
    found = re.search(r"PEAK_KIB (\d+)", done.stderr)
    assert found is not None, done.stderr[-2000:]
    return done.returncode, int(found.group(1)) * 1024, done.stdout


class TestBoundedMemory:
    def test_report_of_a_200_mb_file_stays_under_500_mb(self, big_audit: Path) -> None:
        """The page is written with a peak under 500 MB, and each huge result is capped
        with a note of how much was left out."""
        page = big_audit.with_suffix(".html")
        code, peak, _ = measured("report", str(big_audit), "-o", str(page))
        assert code == 0
        assert peak < PEAK_LIMIT, f"peak {peak / MB:.0f} MB"
        text = page.read_text(encoding="utf-8")
        assert text.count("more characters left out of this report") == CALLS
        assert f"{RESULT_BYTES + len('part 0: ') - 20_000:,} more characters" in text
        assert page.stat().st_size < 10 * MB
        assert "Audit chain: intact" in text

    def test_inspect_of_a_200_mb_file_stays_under_500_mb(self, big_audit: Path) -> None:
        """The terminal table comes out with a peak under 500 MB, every iteration in it."""
        code, peak, out = measured("inspect", str(big_audit))
        assert code == 0
        assert peak < PEAK_LIMIT, f"peak {peak / MB:.0f} MB"
        assert "completed" in out
        assert "Audit:      intact" in out

    def test_replay_of_a_200_mb_file_stays_under_500_mb(self, big_audit: Path) -> None:
        """The replay keeps only what it answers from, and matches the recorded path."""
        code, peak, out = measured("replay", str(big_audit))
        assert code == 0, out
        assert peak < PEAK_LIMIT, f"peak {peak / MB:.0f} MB"
        assert "Replay:     matched" in out

    def test_verify_of_a_200_mb_file_stays_under_500_mb(self, big_audit: Path) -> None:
        """The chain is checked line by line."""
        code, peak, out = measured("verify", str(big_audit))
        assert code == 0
        assert peak < PEAK_LIMIT, f"peak {peak / MB:.0f} MB"
        assert "intact" in out
