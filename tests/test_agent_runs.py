"""Whole runs on the scripted model: each end state reached the way a user would meet it."""

from __future__ import annotations

import asyncio
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from statemachine_agent import (
    Agent,
    Audit,
    Budget,
    CancelToken,
    ModelError,
    ModelReply,
    ModelRequest,
    ReflectionPolicy,
    ScriptedModel,
    calculate,
    finish,
    tool,
)
from statemachine_agent.audit.sink import MemorySink
from statemachine_agent.testing import assert_trail_matches, replies
from statemachine_agent.testing.assertions import assert_end_state, assert_fired, assert_path
from statemachine_agent.testing.validator import validate_request
from statemachine_agent.tools.builtin import make_current_time_tool

LOOP = ["perceive", "reason", "act", "observe"]
GOLDEN = Path(__file__).parent / "golden"
"""Golden trails of whole runs (`pytest --update-golden` rewrites them after a deliberate
change to the table or a guard; review their diff like any other)."""


def agent_for(script: list[Any], tools: list[Any] | None = None, **kwargs: Any) -> Agent:
    return Agent(ScriptedModel(script), tools=tools or [calculate], system="Be brief.", **kwargs)


class TestSeedExamples:
    def test_seed_000_time_then_calculate(self) -> None:
        """Three model calls and two tool runs in one turn, as the seed describes."""
        clock = make_current_time_tool(lambda: datetime(2026, 4, 11, 2, 28, tzinfo=UTC))
        model = ScriptedModel(
            [
                replies.tool_use("get_current_time", {"timezone": "UTC"}),
                replies.tool_use("calculate", {"expression": "28*15"}),
                replies.text("It is 02:28; 28 x 15 = 420."),
            ]
        )
        result = Agent(model, tools=[clock, calculate]).run("What time is it? Minutes x 15.")
        assert_end_state(result, "completed")
        assert result.iterations == 3
        assert_path(result, [*LOOP, *LOOP, "perceive", "reason", "completed"])
        assert_trail_matches(result, GOLDEN / "seed_000_time_then_calculate.json")
        results = [
            block
            for message in result.messages
            if message["role"] == "user" and isinstance(message["content"], list)
            for block in message["content"]
        ]
        assert [b["content"] for b in results] == ["2026-04-11T02:28:00+00:00 (UTC)", "420"]
        assert all(validate_request(r.to_api()) == [] for r in model.requests)

    def test_seed_003_schedule_weather_route(self) -> None:
        """Schedule, weather, route, answer: four model calls, three tools, in order."""

        @tool
        def get_schedule(date: str) -> dict[str, Any]:
            """Events on a date."""
            return {"date": date, "events": [{"time": "19:00", "location": "Umeda"}]}

        @tool
        def get_weather(location: str, time: str) -> dict[str, str]:
            """Forecast for a place and time."""
            return {"location": location, "time": time, "forecast": "rain from 18:00"}

        @tool
        def get_route(origin: str, destination: str) -> dict[str, str]:
            """Travel time between two places."""
            return {"origin": origin, "destination": destination, "duration": "30 min"}

        answer = "Dinner at 19:00 in Umeda; rain is expected, take an umbrella; leave at 18:20."
        model = ScriptedModel(
            [
                replies.tool_use("get_schedule", {"date": "today"}),
                replies.tool_use("get_weather", {"location": "Umeda", "time": "19:00"}),
                replies.tool_use("get_route", {"origin": "home", "destination": "Umeda"}),
                replies.text(answer),
            ]
        )
        result = Agent(model, tools=[get_schedule, get_weather, get_route]).run(
            "How should I plan today?"
        )
        assert result.end_state == "completed"
        assert result.text == answer
        assert result.iterations == 4
        called = [
            b["name"]
            for m in result.messages
            if m["role"] == "assistant"
            for b in m["content"]
            if b["type"] == "tool_use"
        ]
        assert called == ["get_schedule", "get_weather", "get_route"]


class TestEndStates:
    def test_finished_through_finish_tool(self) -> None:
        """The finish tool's input becomes the structured result; no further model call."""
        model = ScriptedModel(
            [
                replies.tool_use(
                    "finish", {"status": "completed", "summary": "All done", "result": {"n": 3}}
                )
            ]
        )
        result = Agent(model, tools=[finish]).run("go")
        assert_end_state(result, "finished")
        assert result.data == {"status": "completed", "summary": "All done", "result": {"n": 3}}
        assert result.text == "All done"
        assert model.remaining == 0
        assert len(model.requests) == 1
        assert result.messages[-1]["content"][0]["type"] == "tool_result"

    def test_budget_exhausted_names_the_limit(self) -> None:
        """A model that never stops is stopped by the iteration limit, with figures."""
        script = [replies.tool_use("calculate", {"expression": "1+1"}) for _ in range(10)]
        result = agent_for(script, budget=Budget(max_iterations=3)).run("loop")
        assert_end_state(result, "budget_exhausted")
        assert result.iterations == 3
        assert "iterations 3 >= 3" in result.reason

    def test_truncated_never_runs_cut_tool_call(self) -> None:
        """A tool call inside a max_tokens reply is not executed."""
        ran: list[str] = []

        @tool
        def record(x: str) -> str:
            """Record x."""
            ran.append(x)
            return x

        cut = replies.reply(replies.tool_use_block("record", {"x": "a"}), stop_reason="max_tokens",
                            usage={"output_tokens": 4096})  # fmt: skip
        result = Agent(ScriptedModel([cut]), tools=[record]).run("go")
        assert_end_state(result, "truncated")
        assert ran == []
        assert "max_tokens=4096" in result.reason
        assert "not run" in result.reason

    def test_refused_keeps_stop_details(self) -> None:
        """A refusal ends the run with the API's stop details."""
        body = replies.reply(
            replies.text_block("I can't help with that."),
            stop_reason="refusal",
            stop_details={"type": "refusal", "category": "cyber", "explanation": "policy"},
        )
        result = agent_for([body]).run("bad")
        assert_end_state(result, "refused")
        assert result.details == {
            "stop_details": {"type": "refusal", "category": "cyber", "explanation": "policy"}
        }

    def test_unknown_stop_reason_fails_clearly(self) -> None:
        """A stop_reason the engine does not know ends in failed, naming it."""
        result = agent_for([replies.text("x", stop_reason="galaxy_brain")]).run("q")
        assert_end_state(result, "failed")
        assert "unknown stop_reason 'galaxy_brain'" in result.reason

    def test_empty_reply_fails(self) -> None:
        """A reply with neither text nor tool calls is an error, not an empty answer."""
        result = agent_for([replies.reply(stop_reason="end_turn")]).run("q")
        assert_fired(result, "reason", "replied", "failed", via=["is_empty_reply"])
        assert "neither text nor tool calls" in result.reason

    def test_api_error_fails_with_status_and_request_id(self) -> None:
        """A fatal model error names its class, status and request id."""
        error = ModelError(
            "invalid x-api-key", status=401, request_id="req_1", error_type="authentication_error"
        )
        result = agent_for([error]).run("q")
        assert_end_state(result, "failed")
        assert "status 401" in result.reason
        assert "req_1" in result.reason
        assert result.details == {
            "error": "authentication_error",
            "status": 401,
            "request_id": "req_1",
        }

    def test_prompt_too_long_is_compacted_once_then_overflows(self) -> None:
        """The API's too-long answer triggers one compaction and retry, then context_overflow."""
        error = ModelError(
            "prompt is too long: 210000 tokens > 200000 maximum", status=400, context_exceeded=True
        )
        model = ScriptedModel([error, error])
        result = Agent(model, tools=[calculate]).run("q")
        assert_trail_matches(result, GOLDEN / "prompt_too_long_compacted_then_overflow.json")
        assert "210000 tokens" in result.reason
        assert len(model.requests) == 2

    def test_prompt_too_long_recovers_after_compaction(self) -> None:
        """Old tool results are replaced by a placeholder and the retried call succeeds."""
        error = ModelError("prompt is too long", status=400, context_exceeded=True)
        script = [
            replies.tool_use("calculate", {"expression": "1+1"}),
            replies.tool_use("calculate", {"expression": "2+2"}),
            error,
            replies.text("4"),
        ]
        model = ScriptedModel(script)
        result = Agent(model, tools=[calculate], stall=None).run("q")
        assert_end_state(result, "completed")
        retried = model.requests[-1].messages
        first_result = retried[2]["content"][0]
        assert first_result["content"].startswith("[Earlier tool result removed")
        assert retried[4]["content"][0]["content"] == "4"

    def test_context_window_stop_reason(self) -> None:
        """stop_reason model_context_window_exceeded: compact and retry once, then overflow."""
        full = replies.text("x", stop_reason="model_context_window_exceeded")
        model = ScriptedModel([full, full])
        result = Agent(model, tools=[calculate]).run("q")
        assert_end_state(result, "context_overflow")
        assert len(model.requests) == 2
        assert [m["role"] for m in model.requests[1].messages] == ["user"]

    def test_pause_turn_continues_the_same_message(self) -> None:
        """A paused turn is sent back and continued; the history keeps alternating roles."""
        paused = replies.reply(
            {
                "type": "server_tool_use",
                "id": "srvtoolu_1",
                "name": "web_search",
                "input": {"query": "x"},
            },
            stop_reason="pause_turn",
        )
        model = ScriptedModel([paused, replies.text("found it")])
        result = Agent(model, tools=[calculate]).run("search")
        assert_trail_matches(result, GOLDEN / "pause_turn_continued.json")
        assert [m["role"] for m in result.messages] == ["user", "assistant"]
        assert [b["type"] for b in result.messages[1]["content"]] == ["server_tool_use", "text"]
        assert model.requests[1].messages[-1]["role"] == "assistant"
        assert result.iterations == 2

    def test_script_exhausted_fails(self) -> None:
        """A scripted model with nothing left to say fails the run rather than hanging."""
        result = agent_for([]).run("q")
        assert_end_state(result, "failed")
        assert "no reply left" in result.reason


class TestCancellation:
    def test_cancel_before_start(self) -> None:
        """A token cancelled up front ends the run before any model call."""
        token = CancelToken()
        token.cancel()
        result = agent_for([replies.text("never")]).run("q", cancel=token)
        assert_trail_matches(result, GOLDEN / "cancelled_before_start.json")
        assert result.iterations == 0

    def test_cancel_in_flight_model_call(self) -> None:
        """An async model call in flight is abandoned at once when the host cancels."""

        class SlowModel:
            name = "claude-sonnet-5"

            async def acomplete(self, request: ModelRequest) -> ModelReply:
                await asyncio.sleep(30)
                raise AssertionError("not reached")

        token = CancelToken()
        threading.Timer(0.2, token.cancel).start()
        result = Agent(SlowModel()).run("q", cancel=token)
        assert_fired(result, "reason", "model_failed", "cancelled")
        assert result.elapsed_s < 10

    def test_cancel_while_tools_run_keeps_their_results(self) -> None:
        """Tools in flight finish and their results are kept; then the run stops."""
        token = CancelToken()

        @tool
        def stop_me() -> str:
            """Cancels the run from inside a tool."""
            token.cancel()
            return "ok"

        result = Agent(ScriptedModel([replies.tool_use("stop_me")]), tools=[stop_me]).run(
            "q", cancel=token
        )
        assert_fired(result, "act", "tools_done", "cancelled")
        assert "after 1 iterations" in result.reason


class TestToolFailuresReachTheModel:
    def test_every_failure_is_an_is_error_result(self) -> None:
        """Unknown tool, bad input and a raising tool return is_error results; the run goes on."""

        @tool
        def boom() -> str:
            """Always fails."""
            raise RuntimeError("disk on fire")

        model = ScriptedModel(
            [
                replies.tool_uses(("nope", {}), ("calculate", {"expr": 1}), ("boom", {})),
                replies.text("I could not do it."),
            ]
        )
        result = Agent(model, tools=[calculate, boom]).run("q")
        assert_end_state(result, "completed")
        blocks = result.messages[2]["content"]
        assert [b["is_error"] for b in blocks] == [True, True, True]
        assert "Available tools: calculate, boom" in blocks[0]["content"]
        assert "disk on fire" in blocks[2]["content"]
        assert all(validate_request(r.to_api()) == [] for r in model.requests)


class TestCrashes:
    def test_defect_in_a_phase_ends_in_failed(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """A bug inside a phase is caught at the boundary and named; nothing escapes."""
        from statemachine_agent.phases import observe

        async def broken(self: object, ctx: object) -> str:
            raise KeyError("bug")

        monkeypatch.setattr(observe.Observe, "run", broken)
        result = agent_for([replies.tool_use("calculate", {"expression": "1"})]).run("q")
        assert_fired(result, "observe", "crashed", "failed")
        assert "KeyError" in result.reason


class TestHistory:
    def test_history_counts_turns(self) -> None:
        """A run continuing a conversation counts its turn from the history."""
        history = [
            {"role": "user", "content": "hello"},
            {"role": "assistant", "content": [{"type": "text", "text": "hi"}]},
        ]
        result = agent_for([replies.text("again")]).run("and now?", history=history)
        assert result.turn == 2
        assert result.messages[:2] == history

    def test_run_inside_event_loop(self) -> None:
        """`run` works even when called from code already inside an event loop."""

        async def main() -> str:
            return agent_for([replies.text("fine")]).run("q").text

        assert asyncio.run(main()) == "fine"

    def test_arun(self) -> None:
        """The async entry point gives the same result."""
        result = asyncio.run(agent_for([replies.text("async")]).arun("q"))
        assert result.text == "async"


class CancelOn:
    """An audit sink that cancels the run when a given event (into a given state) is seen."""

    def __init__(self, token: CancelToken, event: str, dest: str | None = None) -> None:
        self.token, self.event, self.dest = token, event, dest

    def write(self, event: Any) -> None:
        if event["event"] == self.event and (self.dest is None or event.get("dest") == self.dest):
            self.token.cancel()

    def close(self) -> None:
        return None


def _feature_agent(script: list[Any], sink: Any, **options: Any) -> Agent:
    from statemachine_agent.policy.verify import Verdict

    defaults: dict[str, Any] = {
        "reflection": ReflectionPolicy(1),
        "verify": lambda claim: Verdict(ok=True),
        "audit": Audit(sinks=[sink]),
    }
    return Agent(ScriptedModel(script), tools=[calculate], **{**defaults, **options})


STALLING = [replies.tool_use("calculate", {"expression": "1+1"}) for _ in range(3)]
CUT = replies.text("The first half", stop_reason="max_tokens")
OVERFLOWED = replies.text("x", stop_reason="model_context_window_exceeded")
EXTRA_CANCEL_CASES = [
    ("continue", "continued", "transition.fired", [CUT, replies.text("x")],
     {"max_continuations": 1}),
    ("compact", "compacted", "transition.fired", [OVERFLOWED, replies.text("x")], {}),
]  # fmt: skip
"""The helper states a stop reason routes through, cancelled like the others."""


class TestCancellationAtEveryState:
    """A host cancelling while the run is in each working state ends it from that state."""

    @pytest.mark.parametrize(
        ("state", "trigger", "event", "script", "options"),
        [
            ("perceive", "prepared", "transition.fired", [replies.text("x")], {}),
            ("reason", "replied", "model.replied", [replies.text("x")], {}),
            (
                "act",
                "tools_done",
                "tool.finished",
                [replies.tool_use("calculate", {"expression": "1"})],
                {},
            ),
            (
                "observe",
                "observed",
                "transition.fired",
                [replies.tool_use("calculate", {"expression": "1"})],
                {},
            ),
            (
                "intervene",
                "intervened",
                "transition.fired",
                STALLING,
                {"reflection": None},
            ),
            (
                "reflect",
                "reflected",
                "transition.fired",
                [replies.tool_use("calculate", {"expression": "1"})],
                {},
            ),
            ("verify", "verified", "transition.fired", [replies.text("x")], {}),
            *EXTRA_CANCEL_CASES,
        ],
    )
    def test_cancel_in_state(
        self, state: str, trigger: str, event: str, script: list[Any], options: dict[str, Any]
    ) -> None:
        """The cancellation guard fires first on the state's own trigger."""
        token = CancelToken()
        dest = state if event == "transition.fired" else None
        sink = CancelOn(token, event, dest)
        if state == "perceive":
            sink = CancelOn(token, "transition.fired", "perceive")
            script = [replies.tool_use("calculate", {"expression": "1"}), replies.text("x")]
            options = {"reflection": None}
        result = _feature_agent(script, sink, **options).run("q", cancel=token)
        assert_end_state(result, "cancelled")
        assert_fired(result, state, trigger, "cancelled", via=["cancel_requested"])


class TestCrashAtEveryState:
    """A defect inside any phase ends the run in failed, naming it."""

    @pytest.mark.parametrize(
        ("state", "phase", "script", "options"),
        [
            ("perceive", "perceive.Perceive", [replies.text("x")], {}),
            ("act", "act.Act", [replies.tool_use("calculate", {"expression": "1"})], {}),
            ("intervene", "intervene.Intervene", STALLING, {"reflection": None}),
            (
                "reflect",
                "reflect.Reflect",
                [replies.tool_use("calculate", {"expression": "1"})],
                {},
            ),
            ("verify", "verify.Verify", [replies.text("x")], {}),
            ("continue", "continuation.Continue", [CUT], {"max_continuations": 1}),
            ("compact", "compact.Compact", [OVERFLOWED], {}),
        ],
    )
    def test_crash_in_phase(
        self,
        monkeypatch: pytest.MonkeyPatch,
        state: str,
        phase: str,
        script: list[Any],
        options: dict[str, Any],
    ) -> None:
        """The phase's exception becomes the crashed trigger and a failed run."""
        import importlib

        module_name, class_name = phase.split(".")
        module = importlib.import_module(f"statemachine_agent.phases.{module_name}")

        async def broken(self: object, ctx: object) -> str:
            raise ZeroDivisionError("bug in " + state)

        monkeypatch.setattr(getattr(module, class_name), "run", broken)
        result = _feature_agent(script, MemorySink(), **options).run("q")
        assert_fired(result, state, "crashed", "failed")
        assert f"bug in {state}" in result.reason

    def test_model_adapter_bug_is_a_reason_crash(self) -> None:
        """A model adapter raising something other than ModelError crashes reason, by name."""

        class Broken:
            name = "claude-sonnet-5"

            async def acomplete(self, request: ModelRequest) -> ModelReply:
                raise KeyError("choices")

        result = Agent(Broken()).run("q")
        assert_fired(result, "reason", "crashed", "failed")
        assert "KeyError" in result.reason
