"""The pytest plugin: its fixtures at the real SDK boundary, transition coverage, golden trails.

The fixtures are used directly (this suite runs with the plugin, loaded by its
entry point like any user's); what only a whole session shows (a teardown
failure, the coverage table, a failing threshold, xdist workers merged, files
rewritten by --update-golden) runs in an inner session through `pytester`.
"""

from __future__ import annotations

import asyncio
import json
import sys
import threading
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from statemachine_agent import Agent, ScriptedModel, calculate
from statemachine_agent.machine import observers
from statemachine_agent.machine.run import TransitionRecord
from statemachine_agent.machine.table import ROWS, Row
from statemachine_agent.testing import (
    FakeAnthropicServer,
    TransitionCoverage,
    assert_end_state,
    capture_events,
    replies,
)
from statemachine_agent.testing.openai_server import FakeOpenAIServer, chat_text
from statemachine_agent.testing.reachability import reachable_rows

MakeModel = Callable[..., ScriptedModel]


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    """An inner session in this process (the library is already imported, so pytest
    cannot rewrite its asserts: that warning is noise here).

    Only for sessions that make no HTTP calls: pytester drops the modules an inner
    session imported, and an SDK transport imported there and again later raises
    exception classes the SDK no longer recognises. Those run in a subprocess.
    """
    return pytester.runpytest(
        "-p", "no:cacheprovider", "-W", "ignore::pytest.PytestAssertRewriteWarning", *args
    )


def post(base_url: str, path: str, body: object) -> int:
    """A raw POST with valid headers, for a body the SDK would never send."""
    request = urllib.request.Request(
        base_url + path,
        data=json.dumps(body).encode(),
        headers={
            "x-api-key": "k",
            "anthropic-version": "2023-06-01",
            "content-type": "application/json",
        },
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        return int(error.code)


class TestRegistration:
    def test_loaded_by_its_entry_point_and_inert(self, pytester: pytest.Pytester) -> None:
        """A suite that uses nothing of the plugin never imports the library (nor its SDKs)."""
        pytester.makepyfile(
            """
            import sys

            def test_nothing_imported(pytestconfig):
                assert pytestconfig.pluginmanager.hasplugin("statemachine_agent")
                assert "pytest_statemachine_agent" in sys.modules
                assert not [m for m in sys.modules if m.startswith("statemachine_agent")]
                assert "anthropic" not in sys.modules
            """
        )
        result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
        result.assert_outcomes(passed=1)
        assert "transition coverage" not in result.stdout.str()

    def test_can_be_disabled(self, pytester: pytest.Pytester) -> None:
        pytester.makepyfile("def test_x(pytestconfig):\n    assert True\n")
        result = pytester.runpytest("-p", "no:statemachine_agent", "--transition-coverage")
        assert result.ret == pytest.ExitCode.USAGE_ERROR


class TestAnthropicServer:
    def test_serves_the_reply_helpers_to_the_real_sdk(
        self, anthropic_server: FakeAnthropicServer
    ) -> None:
        anthropic_server.add(
            replies.tool_use("calculate", {"expression": "6 * 7"}), replies.text("42")
        )
        result = Agent(anthropic_server.model(), tools=[calculate]).run("6 x 7?")
        assert_end_state(result, "completed")
        assert result.text == "42"
        assert anthropic_server.base_url.startswith("http://127.0.0.1:")
        assert len(anthropic_server.requests) == 2
        assert anthropic_server.requests[1]["messages"][2]["content"][0]["content"] == "42"
        assert anthropic_server.invalid == []

    @pytest.mark.parametrize(
        ("fault", "status"),
        [("rate_limited", 429), ("server_error", 500), ("overloaded", 529)],
    )
    def test_faults_are_retried_by_the_sdk(
        self, anthropic_server: FakeAnthropicServer, fault: str, status: int
    ) -> None:
        getattr(anthropic_server, fault)()
        anthropic_server.add(replies.text("after the fault"))
        result = Agent(anthropic_server.model()).run("Hi")
        assert result.text == "after the fault"
        assert len(anthropic_server.requests) == 2
        assert anthropic_server.requests[0] == anthropic_server.requests[1]

    @pytest.mark.parametrize(
        ("fault", "status"),
        [("rate_limited", 429), ("server_error", 500), ("overloaded", 529)],
    )
    def test_a_fault_without_retries_fails_the_run_with_its_status(
        self, anthropic_server: FakeAnthropicServer, fault: str, status: int
    ) -> None:
        getattr(anthropic_server, fault)()
        result = Agent(anthropic_server.model(max_retries=0)).run("Hi")
        assert_end_state(result, "failed")
        assert result.details is not None
        assert result.details["status"] == status

    def test_rate_limit_sends_retry_after(self, anthropic_server: FakeAnthropicServer) -> None:
        anthropic_server.rate_limited(retry_after=2.5)
        request = urllib.request.Request(
            anthropic_server.base_url + "/v1/messages",
            data=json.dumps(
                {
                    "model": "claude-sonnet-5",
                    "max_tokens": 10,
                    "messages": [{"role": "user", "content": "x"}],
                }
            ).encode(),
            headers={"x-api-key": "k", "anthropic-version": "2023-06-01"},
            method="POST",
        )
        with pytest.raises(urllib.error.HTTPError) as caught:
            urllib.request.urlopen(request, timeout=5)
        assert caught.value.code == 429
        assert caught.value.headers["retry-after"] == "2.5"
        assert caught.value.headers["retry-after-ms"] == "2500"

    def test_a_hung_response_ends_in_the_clients_timeout(
        self, anthropic_server: FakeAnthropicServer
    ) -> None:
        anthropic_server.hang()
        anthropic_server.add(replies.text("never reached"))
        result = Agent(anthropic_server.model(max_retries=0, timeout=0.3)).run("Hi")
        assert_end_state(result, "failed")
        assert "timed out" in result.reason.lower() or "timeout" in result.reason.lower()
        assert len(anthropic_server.requests) <= 1  # no retry; the reply queued after it unused
        assert anthropic_server.remaining >= 1

    def test_streaming_requests_are_served(self, anthropic_server: FakeAnthropicServer) -> None:
        anthropic_server.add(replies.text("streamed"))
        sdk = anthropic_server.model()
        with sdk.client.messages.stream(
            model="claude-sonnet-5", max_tokens=10, messages=[{"role": "user", "content": "x"}]
        ) as stream:
            assert stream.get_final_text() == "streamed"

    def test_expected_invalid_requests_are_allowed(
        self, anthropic_server: FakeAnthropicServer
    ) -> None:
        anthropic_server.expect_invalid()
        assert post(anthropic_server.base_url, "/v1/messages", {"model": "m"}) == 400
        assert len(anthropic_server.invalid) == 1
        assert anthropic_server.unexpected() == []

    def test_an_unexpected_invalid_request_fails_the_test_at_teardown(
        self, pytester: pytest.Pytester
    ) -> None:
        pytester.makepyfile(
            test_garbage=_source_of_post()
            + """
def test_sends_garbage(anthropic_server):
    assert post(anthropic_server.base_url, "/v1/messages", {"model": "m"}) == 400
"""
        )
        result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
        result.assert_outcomes(passed=1, errors=1)
        result.stdout.fnmatch_lines(
            ["*FakeAnthropicServer: invalid request #1 (the API would reject it)*max_tokens*"]
        )
        result.stdout.fnmatch_lines(["*expect_invalid()*"])

    def test_a_failing_scripted_callable_fails_the_test(self, pytester: pytest.Pytester) -> None:
        pytester.makepyfile(
            """
            from statemachine_agent import Agent

            def boom(body):
                raise RuntimeError("bug in the script")

            def test_callable(anthropic_server):
                anthropic_server.add(boom)
                assert Agent(anthropic_server.model()).run("x").end_state == "failed"
            """
        )
        result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
        result.assert_outcomes(passed=1, errors=1)
        result.stdout.fnmatch_lines(["*a scripted callable raised RuntimeError*"])


def _source_of_post() -> str:
    import inspect

    return "import json, urllib.error, urllib.request\n\n" + inspect.getsource(post) + "\n"


class TestOpenAIServer:
    def test_the_same_reply_helpers_drive_the_openai_adapter(
        self, openai_server: FakeOpenAIServer
    ) -> None:
        openai_server.add(
            replies.tool_use("calculate", {"expression": "2 ** 5"}, id="call_pow"),
            replies.text("32"),
        )
        result = Agent(openai_server.model(), tools=[calculate]).run("2^5?")
        assert_end_state(result, "completed")
        assert result.text == "32"
        tool_message = openai_server.requests[1]["messages"][-1]
        assert tool_message == {"role": "tool", "tool_call_id": "call_pow", "content": "32"}
        assert openai_server.invalid == []

    def test_chat_bodies_and_faults(self, openai_server: FakeOpenAIServer) -> None:
        openai_server.rate_limited()
        openai_server.server_error()
        openai_server.add(chat_text("direct"))
        result = Agent(openai_server.model()).run("Hi")
        assert result.text == "direct"
        assert len(openai_server.requests) == 3

    def test_hang_then_timeout(self, openai_server: FakeOpenAIServer) -> None:
        openai_server.hang()
        result = Agent(openai_server.model(max_retries=0, timeout=0.3)).run("Hi")
        assert_end_state(result, "failed")


class TestScriptedModelAndAuditEvents:
    def test_factory(self, scripted_model: MakeModel) -> None:
        model = scripted_model(replies.text("one"))
        assert Agent(model).run("x").text == "one"
        listed = scripted_model([replies.text("a"), replies.text("b")], name="claude-x")
        assert (listed.remaining, listed.name) == (2, "claude-x")

    def test_captures_every_event_of_the_tests_runs(
        self, scripted_model: MakeModel, audit_events: list[dict[str, Any]]
    ) -> None:
        result = Agent(scripted_model(replies.text("hi"))).run("x")
        names = [e["event"] for e in audit_events]
        assert names[0] == "run.started"
        assert names[-1] == "run.ended"
        assert names.count("transition.fired") == len(result.trail)
        assert {e["run_id"] for e in audit_events} == {result.run_id}

    def test_captures_runs_on_the_worker_thread_under_a_running_loop(
        self, scripted_model: MakeModel, audit_events: list[dict[str, Any]]
    ) -> None:
        async def inside_a_loop() -> str:
            return Agent(scripted_model(replies.text("threaded"))).run("x").text

        assert asyncio.run(inside_a_loop()) == "threaded"
        assert audit_events[-1]["event"] == "run.ended"

    def test_captured_events_are_redacted(
        self, anthropic_server: FakeAnthropicServer, audit_events: list[dict[str, Any]]
    ) -> None:
        anthropic_server.add(replies.text("ok"))
        Agent(anthropic_server.model(api_key="sk-ant-secret-value-123")).run("x")
        assert "sk-ant-secret-value-123" not in json.dumps(audit_events, default=str)

    def test_runs_outside_the_context_are_not_captured(self, scripted_model: MakeModel) -> None:
        """A run in a thread started without the test's context (another test's, say)
        does not leak into the capture, and nothing is captured after the block."""
        with capture_events() as events:
            other = threading.Thread(
                target=lambda: Agent(ScriptedModel([replies.text("other")])).run("x")
            )
            other.start()
            other.join()
            assert events == []
            Agent(scripted_model(replies.text("mine"))).run("x")
        count = len(events)
        Agent(scripted_model(replies.text("after"))).run("x")
        assert len(events) == count > 0

    def test_no_leak_between_tests(self, pytester: pytest.Pytester) -> None:
        pytester.makepyfile(
            """
            from statemachine_agent import Agent
            from statemachine_agent.testing import replies

            def test_first(scripted_model, audit_events):
                Agent(scripted_model(replies.text("1"))).run("x")
                assert audit_events

            def test_second(audit_events):
                assert audit_events == []
            """
        )
        run(pytester).assert_outcomes(passed=2)


class TestObserverSeam:
    def test_a_raising_observer_does_not_change_the_run(self) -> None:
        def hostile(run_id: str, row: Row, record: TransitionRecord) -> None:
            raise RuntimeError("observer bug")

        with observers.watch_transitions(hostile):
            result = Agent(ScriptedModel([replies.text("fine")])).run("x")
        assert_end_state(result, "completed")
        assert result.text == "fine"

    def test_observers_are_removed_after_the_block(self) -> None:
        seen: list[str] = []

        def note(run_id: str, row: Row, record: TransitionRecord) -> None:
            seen.append(run_id)

        before = observers.watching()
        with observers.watch_transitions(note):
            assert observers.watching()
            Agent(ScriptedModel([replies.text("a")])).run("x", run_id="run_watched")
        Agent(ScriptedModel([replies.text("b")])).run("x", run_id="run_unwatched")
        assert set(seen) == {"run_watched"}
        assert observers.watching() == before

    def test_coverage_counts_sync_async_threaded_and_resumed_runs(self) -> None:
        from statemachine_agent import Approve, tool

        @tool(requires_approval=True)
        def refund(order: str) -> str:
            """Refund an order."""
            return f"refunded {order}"

        coverage = TransitionCoverage()
        with coverage.watch():
            Agent(ScriptedModel([replies.text("sync")])).run("x")
            asyncio.run(Agent(ScriptedModel([replies.text("async")])).arun("x"))
            thread = threading.Thread(
                target=lambda: Agent(ScriptedModel([replies.text("t")])).run("x")
            )
            thread.start()
            thread.join()
            agent = Agent(
                ScriptedModel(
                    [replies.tool_use("refund", {"order": "A1"}, id="toolu_r"), replies.text("ok")]
                ),
                tools=[refund],
            )
            paused = agent.run("refund A1")
            assert paused.end_state == "awaiting_approval"
            assert agent.resume(paused.run_id, decisions={"toolu_r": Approve()}).text == "ok"
        counts = {r.row.key: r.fired for r in coverage.rows()}
        completed = ("reason", "replied", "completed", ("is_end_turn",))
        assert counts[completed] == 4
        assert counts[("act", "tools_done", "awaiting_approval", ("approval_pending",))] == 1
        assert counts[("act", "tools_done", "observe", ())] == 1
        assert len(coverage.rows()) == len(ROWS)


AGENT_TESTS = """
from statemachine_agent import Agent, Budget, calculate
from statemachine_agent.testing import replies

def test_calculates(scripted_model):
    model = scripted_model(replies.tool_use("calculate", {"expression": "1+1"}), replies.text("2"))
    assert Agent(model, tools=[calculate]).run("1+1?").text == "2"

def test_budget(scripted_model):
    model = scripted_model(replies.tool_use("calculate", {"expression": "1+1"}), replies.text("s"))
    agent = Agent(model, tools=[calculate], budget=Budget(max_iterations=1))
    assert agent.run("loop").end_state == "budget_exhausted"
"""


class TestTransitionCoverage:
    def test_prints_every_row_with_counts_and_the_rows_never_fired(
        self, pytester: pytest.Pytester
    ) -> None:
        pytester.makepyfile(AGENT_TESTS)
        result = run(pytester, "--transition-coverage", "--transition-coverage-of=table")
        result.assert_outcomes(passed=2)
        assert result.ret == 0
        out = result.stdout.str()
        result.stdout.fnmatch_lines(
            [
                f"*transition coverage: 6/{len(ROWS)} rows fired*",
                "source*trigger*guards*dest*fired",
                "perceive*prepared*budget_exceeded*budget_exhausted*1",
                "reason*replied*is_tool_use*act*2",
                f"never fired ({len(ROWS) - 6}):",
                "  reason --replied [is_refusal]--> refused",
            ]
        )
        table = out.split("source ", 1)[1].split("never fired", 1)[0]
        assert len([line for line in table.splitlines() if line.strip()]) == len(ROWS) + 1

    def test_fails_under_the_threshold(self, pytester: pytest.Pytester) -> None:
        pytester.makepyfile(AGENT_TESTS)
        result = run(
            pytester, "--transition-coverage-fail-under=50", "--transition-coverage-of=table"
        )
        result.assert_outcomes(passed=2)
        assert result.ret == pytest.ExitCode.TESTS_FAILED
        result.stdout.fnmatch_lines(["FAIL: transition coverage *% is under the required 50%*"])

    def test_passes_at_the_threshold_it_meets(self, pytester: pytest.Pytester) -> None:
        pytester.makepyfile(AGENT_TESTS)
        share = 100 * 6 / len(ROWS)
        result = pytester.runpytest(
            "-p",
            "no:cacheprovider",
            f"--transition-coverage-fail-under={share - 0.01}",
            "--transition-coverage-of=table",
        )
        assert result.ret == 0

    @pytest.mark.parametrize("value", ["101", "-1"])
    def test_a_threshold_out_of_range_is_a_usage_error(
        self, pytester: pytest.Pytester, value: str
    ) -> None:
        pytester.makepyfile("def test_x():\n    pass\n")
        result = pytester.runpytest(f"--transition-coverage-fail-under={value}")
        assert result.ret == pytest.ExitCode.USAGE_ERROR
        result.stderr.fnmatch_lines(["*between 0 and 100*"])

    def test_writes_json_and_an_html_page_with_the_diagram(self, pytester: pytest.Pytester) -> None:
        pytester.makepyfile(AGENT_TESTS)
        result = pytester.runpytest(
            "-p",
            "no:cacheprovider",
            "--transition-coverage-report=out/coverage.json",
            "--transition-coverage-of=table",
        )
        assert result.ret == 0
        report = json.loads((pytester.path / "out" / "coverage.json").read_text())
        assert report["rows_total"] == len(ROWS)
        assert report["rows_fired"] == 6
        keys = [(r["source"], r["trigger"], r["dest"], tuple(r["guards"])) for r in report["rows"]]
        assert keys == [row.key for row in ROWS]
        assert len(report["never_fired"]) == len(ROWS) - 6
        page = (pytester.path / "out" / "coverage.html").read_text()
        assert '<svg class="machine"' in page
        assert page.count('class="edge fired"') == 6
        assert page.count('class="edge unfired"') == len(ROWS) - 6
        assert "(never fired)" in page
        assert "<script" not in page

    def test_merges_results_across_xdist_workers(self, pytester: pytest.Pytester) -> None:
        pytester.makepyfile(
            test_a=AGENT_TESTS,
            test_b="""
            from statemachine_agent import Agent
            from statemachine_agent.testing import replies

            def test_truncated(scripted_model):
                cut = replies.text("cut", stop_reason="max_tokens", usage={"output_tokens": 4096})
                model = scripted_model(cut)
                assert Agent(model).run("x").end_state == "truncated"

            def test_completed(scripted_model):
                assert Agent(scripted_model(replies.text("ok"))).run("x").end_state == "completed"
            """,
        )
        result = pytester.runpytest(
            "-p", "no:cacheprovider", "-n", "2", "--dist", "loadfile",
            "--transition-coverage-report=cov.json",
        )  # fmt: skip
        result.assert_outcomes(passed=4)
        reach = reachable_rows(Agent(ScriptedModel([]))).union(
            reachable_rows(Agent(ScriptedModel([]), tools=[calculate]))
        )
        n = len(reach.reachable)
        result.stdout.fnmatch_lines(["*2 workers*", f"*transition coverage: 7/{n} reachable rows*"])
        report = json.loads((pytester.path / "cov.json").read_text())
        assert report["of"] == "reachable"
        assert [r["dest"] for r in report["reachable"]] == [r.dest for r in reach.reachable]
        assert len(report["unreachable"]) == len(reach.unreachable)
        assert len(report["defect_rows"]) == len(reach.defect_rows)
        fired = {(r["source"], r["dest"], tuple(r["guards"])): r["fired"] for r in report["rows"]}
        assert fired[("reason", "truncated", ("is_max_tokens",))] == 1
        assert fired[("reason", "completed", ("is_end_turn",))] == 2  # one from each worker
        assert fired[("perceive", "reason", ())] == 5


class TestCoverageOfReachableRows:
    """The default: the denominator is what the agents the suite ran can reach."""

    def test_counts_only_the_rows_the_agents_that_ran_can_reach(
        self, pytester: pytest.Pytester
    ) -> None:
        pytester.makepyfile(AGENT_TESTS)
        result = run(pytester, "--transition-coverage-report=cov.json")
        assert result.ret == 0
        reach = reachable_rows(Agent(ScriptedModel([]), tools=[calculate]))
        n = len(reach.reachable)
        result.stdout.fnmatch_lines(
            [
                f"*transition coverage: 6/{n} reachable rows fired*; "
                f"{len(reach.unreachable)} unreachable, {len(reach.defect_rows)} defect rows*",
                f"never fired ({n - 6}):",
                f"unreachable by the agents that ran ({len(reach.unreachable)}):",
                "  perceive --prepared [summary_due]--> summarize: summary_due: "
                "`ContextPolicy.summarize_at_tokens` is not set",
                f"defect rows, fired only by a bug ({len(reach.defect_rows)}):",
            ]
        )
        report = json.loads((pytester.path / "cov.json").read_text())
        assert report["rows_total"] == n
        assert {(r["source"], r["dest"]) for r in report["unreachable"]} == {
            (r.source, r.dest) for r in reach.unreachable
        }
        assert all(r["reason"] for r in report["unreachable"])
        page = (pytester.path / "cov.html").read_text()
        assert page.count('class="edge fired"') == 6
        assert page.count('class="edge unfired"') == n - 6  # the unreachable are not drawn
        assert "(never fired)" in page

    def test_fail_under_applies_to_the_reachable_rows(self, pytester: pytest.Pytester) -> None:
        """Six rows fired: under the reachable count's share it passes, above it fails."""
        pytester.makepyfile(AGENT_TESTS)
        n = len(reachable_rows(Agent(ScriptedModel([]), tools=[calculate])).reachable)
        share = 100 * 6 / n
        assert run(pytester, f"--transition-coverage-fail-under={share - 0.01}").ret == 0
        failed = run(pytester, f"--transition-coverage-fail-under={share + 0.01}")
        assert failed.ret == pytest.ExitCode.TESTS_FAILED

    def test_without_any_run_nothing_is_reachable(self, pytester: pytest.Pytester) -> None:
        pytester.makepyfile("def test_x():\n    pass\n")
        result = run(pytester, "--transition-coverage")
        result.stdout.fnmatch_lines(["*transition coverage: 0/0 reachable rows fired (100.0%)*"])


class TestGoldenUpdateOption:
    GOLDEN_TEST = """
    from statemachine_agent import Agent, calculate
    from statemachine_agent.testing import assert_trail_matches, replies

    def test_golden(scripted_model):
        model = scripted_model(
            replies.tool_use("calculate", {"expression": "EXPR"}), replies.text("done")
        )
        assert_trail_matches(Agent(model, tools=[calculate]).run("x"), "golden/calc.json")
    """

    def test_missing_file_fails_then_update_writes_it_then_a_change_shows_a_diff(
        self, pytester: pytest.Pytester
    ) -> None:
        pytester.makepyfile(test_golden=self.GOLDEN_TEST.replace("EXPR", "1+1"))
        missing = run(pytester)
        missing.assert_outcomes(failed=1)
        missing.stdout.fnmatch_lines(["*no golden trail at golden/calc.json*--update-golden*"])

        written = run(pytester, "--update-golden")
        written.assert_outcomes(passed=1)
        written.stdout.fnmatch_lines(["*golden trails rewritten: 1*", "*golden/calc.json"])
        assert (pytester.path / "golden" / "calc.json").exists()
        run(pytester).assert_outcomes(passed=1)

        pytester.makepyfile(test_golden=self.GOLDEN_TEST.replace("EXPR", "2+2"))
        changed = run(pytester)
        changed.assert_outcomes(failed=1)
        changed.stdout.fnmatch_lines(
            [
                "*does not match the golden trail golden/calc.json*",
                '*-tool 1: calculate {"expression": "1+1"}',
                '*+tool 1: calculate {"expression": "2+2"}',
            ]
        )
        run(pytester, "--update-golden").assert_outcomes(passed=1)
        assert "2+2" in (pytester.path / "golden" / "calc.json").read_text()


def test_plugin_module_names_only_what_it_registers() -> None:
    """The plugin's options are the documented ones (docs/testing.md lists each)."""
    docs = (Path(__file__).resolve().parents[1] / "docs" / "testing.md").read_text()
    for option in (
        "--transition-coverage",
        "--transition-coverage-fail-under",
        "--transition-coverage-report",
        "--transition-coverage-of",
        "--update-golden",
    ):
        assert f"`{option}" in docs
    for fixture in ("anthropic_server", "openai_server", "scripted_model", "audit_events"):
        assert f"`{fixture}`" in docs
    assert sys.modules["pytest_statemachine_agent"].__doc__


class TestGoldenTrails:
    @staticmethod
    def calc_run(expression: str = "6 * 7") -> Any:
        model = ScriptedModel(
            [replies.tool_use("calculate", {"expression": expression}), replies.text("42")]
        )
        return Agent(model, tools=[calculate]).run("6 x 7?")

    def test_ids_and_timings_are_not_part_of_the_trail(self, tmp_path: Path) -> None:
        from statemachine_agent.testing import assert_trail_matches, updating_golden

        golden = tmp_path / "calc.json"
        with updating_golden() as mode:
            assert_trail_matches(self.calc_run(), golden)
        assert mode.written == [golden]
        again = self.calc_run()
        assert_trail_matches(again, golden)  # other run id, tool ids, timings: same trail
        stored = golden.read_text()
        assert again.run_id not in stored
        assert "elapsed" not in stored
        assert "toolu_" not in stored

    def test_a_changed_guard_verdict_is_a_readable_diff(self, tmp_path: Path) -> None:
        from statemachine_agent.testing import assert_trail_matches, trail_snapshot

        golden = tmp_path / "calc.json"
        snapshot = trail_snapshot(self.calc_run())
        snapshot["steps"][1]["guards"]["is_tool_use"] = False
        golden.write_text(json.dumps(snapshot))
        with pytest.raises(AssertionError) as caught:
            assert_trail_matches(self.calc_run(), golden)
        message = str(caught.value)
        assert "-step 2: reason --replied--> act  row [is_tool_use]  guards cancel_requested" in (
            message
        )
        assert "is_tool_use=False" in message
        assert "+step 2: reason --replied--> act" in message
        assert "--update-golden" in message

    @pytest.mark.parametrize("content", ["{not json", '{"format": 99}', "[1, 2]"])
    def test_a_corrupt_file_is_a_named_error_and_update_replaces_it(
        self, tmp_path: Path, content: str
    ) -> None:
        from statemachine_agent.testing import (
            GoldenFileError,
            assert_trail_matches,
            updating_golden,
        )

        golden = tmp_path / "calc.json"
        golden.write_text(content)
        with pytest.raises(GoldenFileError, match="is not a golden trail"):
            assert_trail_matches(self.calc_run(), golden)
        with updating_golden():
            assert_trail_matches(self.calc_run(), golden)
        assert_trail_matches(self.calc_run(), golden)

    def test_the_update_mode_ends_with_its_block(self, tmp_path: Path) -> None:
        from statemachine_agent.testing import assert_trail_matches, updating_golden

        with updating_golden():
            pass
        with pytest.raises(AssertionError, match="no golden trail at"):
            assert_trail_matches(self.calc_run(), tmp_path / "missing.json")
        assert not (tmp_path / "missing.json").exists()
