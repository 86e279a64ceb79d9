"""The scripts in `examples/` run, end where they say, and show what they claim to show.

Examples are what users copy first, so a broken one costs more than a broken
test: each is imported and its `main()` run on its scripted model, and one is
run as the user would, as a script in a fresh interpreter.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from statemachine_agent import Approve, Deny, RunResult
from statemachine_agent.testing.assertions import assert_end_state

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def load(name: str) -> ModuleType:
    """Import `examples/<name>.py` by path (the folder is not a package)."""
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while being built
    spec.loader.exec_module(module)
    return module


def tool_results(result: RunResult) -> list[tuple[str, str]]:
    """(tool name, result content) of every tool call in the run, in order."""
    names: dict[str, str] = {}
    out: list[tuple[str, str]] = []
    for message in result.messages:
        content: Any = message.get("content")
        if not isinstance(content, list):
            continue
        for block in content:
            if block.get("type") == "tool_use":
                names[block["id"]] = block["name"]
            elif block.get("type") == "tool_result":
                out.append((names[block["tool_use_id"]], str(block["content"])))
    return out


class TestTimeCalculate:
    """Seed 000: the clock tool, then the calculator, then the answer."""

    def test_answer_uses_the_pinned_clock(self) -> None:
        """Three model calls; the tools saw 02:28 and computed 28 x 15 = 420."""
        result = load("time_calculate").main()
        assert_end_state(result, "completed")
        assert result.iterations == 3
        assert tool_results(result) == [
            ("get_current_time", "2026-04-11T02:28:00+00:00 (UTC)"),
            ("calculate", "420"),
        ]
        assert "420" in result.text


class TestScheduleWeatherRoute:
    """Seed 003: three chained tools, then one answer."""

    def test_four_model_calls(self) -> None:
        """Schedule, weather, route in that order, then the departure time."""
        result = load("schedule_weather_route").main()
        assert_end_state(result, "completed")
        assert result.iterations == 4
        assert [name for name, _ in tool_results(result)] == [
            "get_schedule",
            "get_weather",
            "get_route",
        ]
        assert "leave home at 18:20" in result.text


class TestDataAnalysis:
    """The broad query is cut with a notice; the narrowed one and the totals come back whole."""

    def test_truncation_then_narrowing(self) -> None:
        """The engine cuts the 400-row result; the model's narrower query fits."""
        result = load("data_analysis").main()
        assert_end_state(result, "completed")
        results = tool_results(result)
        assert [name for name, _ in results] == [
            "list_columns",
            "query_rows",
            "query_rows",
            "summarize",
            "summarize",
        ]
        broad, narrow = results[1][1], results[2][1]
        assert broad.endswith("characters omitted; narrow the query]")
        assert len(broad) < 2_200
        assert "omitted" not in narrow
        assert len(narrow.splitlines()) == 1 + 17  # the header and Kansai's March orders

    def test_answer_matches_the_tools(self) -> None:
        """Every figure in the scripted answer is one the summarize calls returned."""
        result = load("data_analysis").main()
        by_region, kansai_march = (
            json.loads(c) for n, c in tool_results(result) if n == "summarize"
        )
        for region, totals in by_region.items():
            assert f"{region} ({totals['total']})" in result.text or (
                f"{region} sold the most umbrellas: {totals['total']} units" in result.text
            )
        assert max(by_region, key=lambda r: by_region[r]["total"]) == "Kanto"
        assert f"{kansai_march['all']['count']} umbrella orders" in result.text
        assert f"¥{kansai_march['all']['total']:,}" in result.text


class TestPersonalAssistant:
    """Drafting runs at once; sending waits for a person, then resumes where it stopped."""

    def test_send_waits_for_approval_then_resumes(self) -> None:
        """At review time the draft exists and nothing is sent; once approved, it is sent."""
        example = load("personal_assistant")
        mailbox = example.Mailbox()
        seen: list[tuple[dict[str, Any], list[str], int]] = []

        def review(call: dict[str, Any]) -> Approve:
            seen.append((dict(call), list(mailbox.drafts), len(mailbox.sent)))
            return Approve()

        result = example.main(mailbox, review=review)
        assert len(seen) == 1
        call, drafts_then, sent_then = seen[0]
        assert (call["name"], call["tool_use_id"]) == ("send_email", example.SEND_CALL_ID)
        assert (drafts_then, sent_then) == (["draft-1"], 0)
        assert_end_state(result, "completed")
        assert "awaiting_approval" in result.path
        assert [name for name, _ in tool_results(result)] == ["draft_email", "send_email"]
        assert [m["to"] for m in mailbox.sent] == ["ken@example.com"]
        assert mailbox.drafts == {}

    def test_denied_send_is_not_sent(self) -> None:
        """A denial reaches the model as an error result, and the mail stays a draft."""
        example = load("personal_assistant")
        mailbox = example.Mailbox()
        example.main(mailbox, review=lambda call: Deny("Aya wants to reread it first."))
        assert mailbox.sent == []
        assert list(mailbox.drafts) == ["draft-1"]

    def test_send_is_declared_as_needing_approval(self) -> None:
        """The tool says what it is: a side effect that needs approval; drafting does not."""
        example = load("personal_assistant")
        draft, send = example.assistant_tools(example.Mailbox())
        assert (send.requires_approval, send.side_effect) == (True, True)
        assert (draft.requires_approval, draft.side_effect) == (False, False)


class TestMCPTools:
    """An MCP server's tools next to `calculate`, one session shared by two runs."""

    def test_server_tools_and_an_ordinary_tool(self) -> None:
        example = load("mcp_tools")
        first, second = asyncio.run(example.amain())
        assert_end_state(first, "completed")
        assert_end_state(second, "completed")
        calls = tool_results(first)
        assert [name for name, _ in calls] == ["notes_add", "calculate"]
        assert '"total": 42' in calls[0][1]
        assert calls[1][1] == "84"
        assert tool_results(second)[-1] == ("notes_document", "[resource memo://one]\nmemo body")


class TestPersistentChat:
    """A stored conversation picked up by a second agent on the same SQLite file."""

    def test_the_second_process_knows_the_first_turn(self) -> None:
        result = load("persistent_chat").main()
        assert_end_state(result, "completed")
        assert result.turn == 2
        assert result.text == "Your name is Ada."
        assert result.messages[0] == {"role": "user", "content": "Hi, my name is Ada."}


class TestTypedOutput:
    """An `Agent[Decision]`: a validated answer, then prose with no retry left."""

    def test_the_decision_then_no_output_by_name(self) -> None:
        """The first run's output is the `Decision` the model gave; the second ends
        `failed` without one, and `output_or_raise()` raised naming that end."""
        example = load("typed_output")
        answered, prose, error = example.main()
        assert_end_state(answered, "finished")
        assert answered.output == example.Decision(
            verdict="approve", reason="Airport taxis are covered."
        )
        assert_end_state(prose, "failed")
        assert prose.output is None
        assert error.startswith(f"{prose.run_id} ended in failed without a typed output")


class TestResearchTeam:
    """A lead with two sub-agents: one answers, one waits for approval, then both finish."""

    def test_the_mailer_pauses_the_lead_and_resumes_with_it(self, tmp_path: Path) -> None:
        """The lead pauses on the mailer's send (keyed lead call/mailer call); once
        approved, the mail is sent and the lead answers with the researcher's figure."""
        example = load("research_team")
        example.SENT.clear()
        seen: list[dict[str, Any]] = []

        def review(call: dict[str, Any]) -> Approve:
            seen.append(dict(call))
            assert example.SENT == []  # nothing is sent before the review
            return Approve()

        result = example.main(tmp_path, review=review)
        assert_end_state(result, "completed")
        assert [c["tool_use_id"] for c in seen] == [example.PENDING_KEY]
        assert seen[0]["agent"] == "mailer"
        assert example.SENT == [{"to": "ken@example.com", "body": "A leap year has 8784 hours."}]
        assert tool_results(result) == [
            ("researcher", "A leap year has 366 × 24 = 8784 hours."),
            ("mailer", "Sent to ken@example.com."),
        ]
        assert "awaiting_approval" in result.path

    def test_the_lead_is_charged_for_the_team(self, tmp_path: Path) -> None:
        """The lead's cost is its own calls plus both sub-agents' (all in one audit file)."""
        from statemachine_agent import read_events

        example = load("research_team")
        result = example.main(tmp_path)
        assert result.audit_path is not None
        events = read_events(result.audit_path)
        replied = [e for e in events if e["event"] == "model.replied"]
        assert len({e["run_id"] for e in replied}) == 3
        assert len(replied) == 7
        assert result.cost_usd == pytest.approx(sum(e["cost_usd"] for e in replied))

    def test_a_denied_send_is_not_sent(self, tmp_path: Path) -> None:
        """A denial reaches the mailer, which tells the lead; nothing is sent."""
        example = load("research_team")
        example.SENT.clear()
        example.main(tmp_path, review=lambda call: Deny("Not now."))
        assert example.SENT == []


class TestQuarantinedReader:
    """A reader sub-agent reads untrusted mail: a typed answer does not taint the lead,
    a free-text one does."""

    def test_an_enum_answer_does_not_taint_a_free_text_answer_does(self) -> None:
        """With `Triage` (an enum and a bool) the lead sends its reply with no pause, to
        the address of the mailbox's header; with a summary in words, the lead's reply
        waits for a person, naming the reader's call as the untrusted source."""
        example = load("quarantined_reader")
        typed, loose = example.main()
        assert_end_state(typed, "completed")
        assert "awaiting_approval" not in typed.path
        assert tool_results(typed) == [
            ("reader", '{"category": "meeting_request", "urgent": false}'),
            ("send_reply", "replied to ana@example.com"),
        ]
        assert_end_state(loose, "awaiting_approval")
        (pending,) = (loose.details or {})["pending"]
        assert pending["name"] == "send_reply"
        assert [(s["tool"], s["tool_use_id"]) for s in pending["tainted_by"]] == [
            ("reader", example.READER_CALL_ID)
        ]
        assert "Ana asks to meet" in pending["tainted_by"][0]["excerpt"]
        assert example.SENT == [
            {"to": "ana@example.com", "body": "Thank you, that time works for me."}
        ]


class TestExpenseCommit:
    """Seed 001, exercise 3: reads run at once; the decisions are staged, checked by the
    verifier, and run in `commit` only once it accepts."""

    def test_only_the_corrected_plan_runs_once_after_the_verifier_accepts(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The first plan approves the over-limit hotel claim: the verifier rejects it
        while nothing has run; the model unstages it and stages a return; commit then
        runs the taxi approval and the return, each once, with its idempotency key."""
        example = load("expense_commit")
        ledger = example.Ledger()
        seen: list[tuple[bool, int, int]] = []
        check = example.check_plan

        def watching(claim: Any) -> Any:
            verdict = check(claim)
            seen.append((verdict.ok, len(ledger.approved), len(ledger.returned)))
            return verdict

        monkeypatch.setattr(example, "check_plan", watching)
        result = example.main(ledger)
        assert_end_state(result, "completed")
        assert seen == [(False, 0, 0), (True, 0, 0)]  # nothing ran while being checked
        assert [a["claim_id"] for a in ledger.approved] == ["E-1024"]
        assert [(r["claim_id"], r["reason"]) for r in ledger.returned] == [
            ("E-1025", example.HOTEL_RETURN["reason"])
        ]
        keys = [entry["key"] for entry in (*ledger.approved, *ledger.returned)]
        assert all(k.startswith(f"{result.run_id}:") for k in keys)
        assert len(set(keys)) == 2
        committed = (result.details or {})["committed"]
        assert sorted((c["ref"], c["tool"]) for c in committed) == [
            ("S1", "approve_claim"),
            ("S3", "return_claim"),
        ]
        assert "staged" not in (result.details or {})
        assert [r.dest for r in result.trail][-3:] == ["verify", "commit", "completed"]
        assert [name for name, _ in tool_results(result)].count("unstage") == 1

    def test_the_verifier_reads_the_staged_plan(self) -> None:
        """Through the example's own checks: an approval over the limit, a claim left
        undecided and a covered claim returned are each rejected, naming the reference."""
        from statemachine_agent.policy.verify import Claim

        example = load("expense_commit")

        def verdict(*calls: tuple[str, dict[str, Any]]) -> Any:
            messages: list[dict[str, Any]] = []
            for n, (name, payload) in enumerate(calls, 1):
                block = {"type": "tool_use", "id": f"t{n}", "name": name, "input": payload}
                messages.append({"role": "assistant", "content": [block]})
                answer = f"staged: {name} runs when the task is complete; reference S{n}"
                result = {"type": "tool_result", "tool_use_id": f"t{n}", "content": answer}
                messages.append({"role": "user", "content": [result]})
            return example.check_plan(Claim("end_turn", "done", None, messages, 1, "r"))

        taxi = ("approve_claim", {"claim_id": "E-1024", "amount": 3200})
        hotel_back = ("return_claim", example.HOTEL_RETURN)
        assert verdict(taxi, hotel_back).ok
        over = verdict(taxi, ("approve_claim", {"claim_id": "E-1025", "amount": 48000}))
        assert not over.ok
        assert over.feedback.startswith("S2 approves E-1025")
        assert "No decision staged for E-1025" in verdict(taxi).feedback
        wrong = verdict(("return_claim", {"claim_id": "E-1024", "reason": "x"}), hotel_back)
        assert not wrong.ok
        assert "S1 returns E-1024" in wrong.feedback
        unstaged = verdict(taxi, hotel_back, ("unstage", {"reference": "S1"}))
        assert "No decision staged for E-1024" in unstaged.feedback


class TestAsUsersRunThem:
    """Every example is a script a user can copy and run."""

    @pytest.mark.parametrize(
        "path",
        sorted(p for p in EXAMPLES.glob("*.py") if not p.name.startswith("test_")),
        ids=lambda p: p.stem,
    )
    def test_shape(self, path: Path) -> None:
        """Each script has a main() and shows how to swap in a real model (a `test_*.py`
        example is a test file, run by pytest in `TestRefundAgentTests`)."""
        source = path.read_text()
        assert "\ndef main(" in source
        assert "AnthropicModel" in source
        assert 'if __name__ == "__main__":' in source

    def test_runs_as_a_script(self) -> None:
        """`python examples/time_calculate.py` works offline from a fresh interpreter."""
        done = subprocess.run(
            [sys.executable, str(EXAMPLES / "time_calculate.py")],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            cwd=EXAMPLES.parent,
        )
        assert done.returncode == 0, done.stderr
        assert "28 × 15 = 420" in done.stdout
        assert "[completed]" in done.stdout


class TestRefundAgentTests:
    """The plugin example: a user's test file, run as a user runs it (with its golden trail)."""

    def test_passes_with_transition_coverage(self, pytester: pytest.Pytester) -> None:
        """Its five tests pass on the plugin's fixtures, and the coverage table is printed."""
        shutil.copy(EXAMPLES / "test_refund_agent.py", pytester.path)
        shutil.copytree(EXAMPLES / "golden", pytester.path / "golden")
        # In a subprocess: it calls the SDK, whose transport an in-process session would
        # import and pytester then drop (see tests/test_pytest_plugin.py `run`).
        result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--transition-coverage")
        result.assert_outcomes(passed=5)
        result.stdout.fnmatch_lines(
            [
                "*transition coverage: * rows fired*",
                "act*tools_done*approval_pending*awaiting_approval*1",
                "never fired (*",
            ]
        )
