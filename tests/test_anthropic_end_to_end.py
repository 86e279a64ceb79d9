"""The real `anthropic` SDK, driven by the engine, against a local Messages API on 127.0.0.1.

Every request the engine sends is checked by the server's strict validator; an
invalid one would come back as a 400 and fail the run, so a green test here
means the engine's requests are what the real API accepts.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from statemachine_agent import (
    Agent,
    AnthropicModel,
    Budget,
    MemorySink,
    MissingAPIKeyError,
    calculate,
)
from statemachine_agent.audit.config import Audit
from statemachine_agent.audit.sink import read_events
from statemachine_agent.models.base import ModelRequest
from statemachine_agent.testing import FakeAnthropicServer, FakeError, replies
from statemachine_agent.testing.assertions import assert_end_state, assert_path

API_KEY = "sk-ant-api03-TESTSECRET-abcdefghijklmnop"


@pytest.fixture
def server() -> Iterator[FakeAnthropicServer]:
    with FakeAnthropicServer() as fake:
        yield fake


def model_for(server: FakeAnthropicServer, **kwargs: object) -> AnthropicModel:
    return AnthropicModel(api_key=API_KEY, base_url=server.base_url, **kwargs)  # type: ignore[arg-type]


class TestToolRoundTrip:
    def test_two_tool_calls_then_answer(self, server: FakeAnthropicServer) -> None:
        """The SDK carries a full tool round trip; every request passes validation."""
        server.add(
            replies.tool_uses(
                ("calculate", {"expression": "6*7"}), ("calculate", {"expression": "1/0"})
            ),
            replies.text("42, and 1/0 is undefined."),
        )
        result = Agent(model_for(server), tools=[calculate], system="Use tools.").run("Compute")
        assert_end_state(result, "completed")
        assert server.invalid_requests == []
        assert len(server.requests) == 2
        second = server.requests[1]
        results = second["messages"][2]["content"]
        assert [r["tool_use_id"] for r in results] == [
            b["id"] for b in second["messages"][1]["content"] if b["type"] == "tool_use"
        ]
        assert results[0]["content"] == "42"
        assert results[1]["is_error"] is True
        assert second["tools"][0]["name"] == "calculate"
        assert second["system"][0]["cache_control"] == {"type": "ephemeral"}

    def test_async_model(self, server: FakeAnthropicServer) -> None:
        """The async client serves `arun` the same way."""
        server.add(replies.tool_use("calculate", {"expression": "2**10"}), replies.text("1024"))
        result = asyncio.run(Agent(model_for(server), tools=[calculate]).arun("2^10?"))
        assert result.text == "1024"
        assert server.requests[1]["messages"][2]["content"][0]["content"] == "1024"

    def test_sync_complete(self, server: FakeAnthropicServer) -> None:
        """The sync client answers a single request directly."""
        server.add(replies.text("hello"))
        reply = model_for(server).complete(
            ModelRequest(model="claude-sonnet-5", max_tokens=64,
                         messages=[{"role": "user", "content": "hi"}])
        )  # fmt: skip
        assert reply.text == "hello"
        assert reply.request_id == "req_1" or reply.request_id


class TestRetries:
    def test_529_is_retried_by_the_sdk(self, server: FakeAnthropicServer) -> None:
        """An overloaded answer is retried and the run succeeds."""
        server.add(FakeError(529, headers={"retry-after-ms": "10"}), replies.text("ok"))
        result = Agent(model_for(server)).run("q")
        assert_end_state(result, "completed")
        assert len(server.requests) == 2

    def test_429_with_retry_after_is_retried(self, server: FakeAnthropicServer) -> None:
        """A rate limit with retry-after is waited out and retried."""
        server.add(
            FakeError(429, headers={"retry-after": "0.05"}),
            FakeError(429, headers={"retry-after-ms": "10"}),
            replies.text("ok"),
        )
        result = Agent(model_for(server)).run("q")
        assert_end_state(result, "completed")
        assert len(server.requests) == 3

    def test_retries_exhausted_fail(self, server: FakeAnthropicServer) -> None:
        """Past the SDK's retries the run fails, naming the status."""
        server.add(*[FakeError(529, headers={"retry-after-ms": "1"}) for _ in range(3)])
        result = Agent(model_for(server, max_retries=2)).run("q")
        assert_end_state(result, "failed")
        assert "status 529" in result.reason
        assert "overloaded_error" in result.reason


class TestFatalErrors:
    def test_400_fails_with_request_id(self, server: FakeAnthropicServer) -> None:
        """A 400 is not retried and ends in failed with status and request id."""
        server.add(FakeError(400, "messages.0: bad things"))
        result = Agent(model_for(server)).run("q")
        assert_path(result, ["perceive", "reason", "failed"])
        assert len(server.requests) == 1
        assert "status 400" in result.reason
        assert "request id req_" in result.reason

    def test_401_fails(self, server: FakeAnthropicServer) -> None:
        """A bad key ends in failed at once, naming the authentication error."""
        server.add(FakeError(401, "invalid x-api-key"))
        result = Agent(model_for(server)).run("q")
        assert_end_state(result, "failed")
        assert result.details is not None
        assert result.details["status"] == 401
        assert "authentication_error" in result.reason

    def test_prompt_too_long_is_context_overflow(self, server: FakeAnthropicServer) -> None:
        """The API's 'prompt is too long' 400 is retried once after compaction, then overflows."""
        too_long = FakeError(400, "prompt is too long: 201234 tokens > 200000 maximum")
        server.add(too_long, too_long)
        result = Agent(model_for(server)).run("q")
        assert len(server.requests) == 2
        assert_end_state(result, "context_overflow")
        assert "201234 tokens" in result.reason


class TestIterationsCountAttempts:
    """`result.iterations` counts a loop call that was attempted and failed, as the audit
    does; the budget still counts completed calls only."""

    @pytest.mark.parametrize("before", [0, 1])
    def test_a_failed_call_counts(self, server: FakeAnthropicServer, before: int) -> None:
        """A 400 on the loop's first (or second) call: the result's iterations is the
        failed call's number in its model.requested and model.failed events."""
        sink = MemorySink()
        done = [replies.tool_use("calculate", {"expression": "1+1"})] * before
        server.add(*done, FakeError(400, "messages.0: bad things"))
        agent = Agent(model_for(server), tools=[calculate], audit=Audit(sinks=[sink]))
        result = agent.run("q")
        assert_end_state(result, "failed")
        failed = [e for e in sink.events if e["event"] == "model.failed"]
        requested = [e for e in sink.events if e["event"] == "model.requested"]
        assert result.iterations == failed[-1]["iteration"] == requested[-1]["iteration"]
        assert result.iterations == before + 1
        ended = next(e for e in sink.events if e["event"] == "run.ended")
        assert ended["iterations"] == result.iterations

    def test_the_budget_counts_completed_calls(self, server: FakeAnthropicServer) -> None:
        """A call rejected as too long, then retried after compaction: one completed call,
        within max_iterations=1, and iterations is 1 (the retry carries the same number)."""
        too_long = FakeError(400, "prompt is too long: 201234 tokens > 200000 maximum")
        server.add(too_long, replies.text("Short now."))
        result = Agent(model_for(server), budget=Budget(max_iterations=1)).run("q")
        assert_end_state(result, "completed")
        assert result.iterations == 1


class TestSecrets:
    def test_api_key_never_reaches_the_audit_file(
        self, server: FakeAnthropicServer, tmp_path: Path
    ) -> None:
        """Even a tool that echoes the key cannot write it to the audit trail."""

        def leak(text: str) -> str:
            """Echo text back."""
            return f"key is {API_KEY}"

        server.add(replies.tool_use("leak", {"text": API_KEY}), replies.text(f"I saw {API_KEY}"))
        result = Agent(model_for(server), tools=[leak], audit=tmp_path).run(f"my key is {API_KEY}")
        assert result.audit_path is not None
        raw = result.audit_path.read_text()
        assert API_KEY not in raw
        assert "[REDACTED]" in raw
        assert (
            server.headers[0].get("authorization", "").endswith(API_KEY)
            or server.headers[0].get("x-api-key") == API_KEY
        )
        events = read_events(result.audit_path)
        assert {e["event"] for e in events} >= {
            "run.started", "model.requested", "model.replied", "tool.called",
            "tool.finished", "transition.fired", "run.ended",
        }  # fmt: skip
        assert json.dumps(events).count(API_KEY) == 0

    def test_missing_key_is_a_clear_error(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Without a key the model refuses to be built, naming ANTHROPIC_API_KEY."""
        monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
        with pytest.raises(MissingAPIKeyError, match="ANTHROPIC_API_KEY"):
            AnthropicModel()

    def test_environment_is_honoured(
        self, server: FakeAnthropicServer, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """ANTHROPIC_API_KEY and ANTHROPIC_BASE_URL configure the model."""
        monkeypatch.setenv("ANTHROPIC_API_KEY", API_KEY)
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.base_url)
        server.add(replies.text("from env"))
        result = Agent("claude-haiku-4-5").run(
            "q",
        )
        assert result.text == "from env"
        assert server.requests[0]["model"] == "claude-haiku-4-5"


def test_budget_stops_a_runaway_model(server: FakeAnthropicServer) -> None:
    """Against the live SDK path too, the iteration limit stops a model that never ends."""
    server.add(
        replies.tool_use("calculate", {"expression": "1+1"}),
        replies.tool_use("calculate", {"expression": "2+2"}),
        replies.text("Computed 1+1 and 2+2; nothing else is left."),
    )
    result = Agent(model_for(server), tools=[calculate], budget=Budget(max_iterations=2)).run("q")
    assert_end_state(result, "budget_exhausted")
    assert len(server.requests) == 3
    assert server.requests[2]["tool_choice"] == {"type": "none"}
    assert server.invalid_requests == []
    assert result.text.startswith("Computed")


def test_one_model_serves_many_runs(server: FakeAnthropicServer) -> None:
    """A model reused across runs (each in its own event loop) keeps working over keep-alive."""
    model = model_for(server)
    server.add(replies.text("one"), replies.text("two"), replies.text("three"))
    agent = Agent(model)
    assert [agent.run("q").text for _ in range(3)] == ["one", "two", "three"]


def test_token_threshold_counted_by_the_api(server: FakeAnthropicServer) -> None:
    """With count_tokens on, the API's counter decides when old results are compacted."""
    from statemachine_agent.policy.context import ContextPolicy

    server.add(
        replies.tool_use("calculate", {"expression": "1+1"}),
        replies.tool_use("calculate", {"expression": "2+2"}),
        replies.text("done"),
    )
    policy = ContextPolicy(count_tokens=True, compact_at_tokens=60, keep_tool_results=1)
    result = Agent(model_for(server), tools=[calculate], context=policy, stall=None).run("q")
    assert result.end_state == "completed"
    assert len(server.count_tokens_requests) == 3
    last = server.requests[-1]["messages"]
    assert last[2]["content"][0]["content"].startswith("[Earlier tool result removed")
    assert server.invalid_requests == []


class TestRetryWait:
    """`retry-after` is capped, and never waited past the run's time budget."""

    def test_a_long_retry_after_is_capped(self, server: FakeAnthropicServer) -> None:
        """A 120 s header is waited only `max_retry_wait` seconds, then the call retried."""
        server.add(FakeError(429, headers={"retry-after": "120"}), replies.text("ok"))
        model = model_for(server, max_retry_wait=0.05)
        result = Agent(model).run("q")
        assert_end_state(result, "completed")
        assert len(server.requests) == 2
        assert result.elapsed_s < 60  # not a timing assertion: 120 s would hang the test

    def test_a_wait_past_max_seconds_fails_at_once(self, server: FakeAnthropicServer) -> None:
        """With 10 s left, a (capped) 60 s wait is not made: the run fails, naming it."""
        server.add(FakeError(429, headers={"retry-after": "120"}), replies.text("ok"))
        result = Agent(model_for(server), budget=Budget(max_seconds=10)).run("q")
        assert_end_state(result, "failed")
        assert "asked to wait 60.0 s before retrying" in result.reason
        assert len(server.requests) == 1

    def test_a_deadline_abandons_the_wait(self, server: FakeAnthropicServer) -> None:
        """`deadline=` cancels the call while it waits out a retry-after."""
        server.add(FakeError(429, headers={"retry-after": "30"}), replies.text("ok"))
        result = Agent(model_for(server)).run("q", deadline=0.3)
        assert_end_state(result, "cancelled")
        assert len(server.requests) == 1
