"""A context window reported as `max_tokens` (issue 33).

A real server that ran out of context (649 prompt + 3,447 output = 4,096 tokens, its
whole window) stopped with `max_tokens`. The reply's own usage tells the two limits
apart: fewer output tokens than the call's `max_tokens` means the output limit did not
stop it, and prompt + output reaching a known window (`ContextPolicy.window_tokens`)
means the window did, so the run goes through the context rows.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from statemachine_agent import Agent, AnthropicModel, ContextPolicy, ScriptedModel
from statemachine_agent.testing import FakeAnthropicServer, replies
from statemachine_agent.testing.assertions import assert_end_state

API_KEY = "sk-ant-api03-TESTSECRET-abcdefghijklmnop"


def stopped(input_tokens: int, output_tokens: int) -> dict[str, Any]:
    """A reply a server stopped with `max_tokens`, with the usage it reported."""
    usage = {"input_tokens": input_tokens, "output_tokens": output_tokens}
    return replies.text("The first part of a long ans", stop_reason="max_tokens", usage=usage)


@pytest.fixture
def server() -> Iterator[FakeAnthropicServer]:
    with FakeAnthropicServer() as fake:
        yield fake


class TestAKnownWindowFilled:
    def test_compacts_once_then_overflows(self, server: FakeAnthropicServer) -> None:
        """Through the real SDK: a reply whose prompt and output fill the known window
        goes to `compact` (the cut reply dropped, the call retried), then, filled again,
        to `context_overflow`, whose reason names the window."""
        server.add(stopped(649, 3447), stopped(600, 3496))
        model = AnthropicModel(api_key=API_KEY, base_url=server.base_url)
        agent = Agent(model, max_tokens=4096, context=ContextPolicy(window_tokens=4096))
        result = agent.run("Write it all out.")
        assert_end_state(result, "context_overflow")
        assert [(t.source, t.dest) for t in result.trail if t.source == "reason"] == [
            ("reason", "compact"), ("reason", "context_overflow"),
        ]  # fmt: skip
        assert "context window of 4096 tokens was exceeded" in result.reason
        assert "max_tokens" not in result.reason
        assert server.invalid_requests == []
        assert len(server.requests) == 2

    def test_below_the_window_is_the_output_limit(self) -> None:
        """A reply cut at its own max_tokens, well inside the known window, is `truncated`
        as ever: raising max_tokens is the advice."""
        agent = Agent(ScriptedModel([stopped(100, 512)]), max_tokens=512,
                      context=ContextPolicy(window_tokens=4096))  # fmt: skip
        result = agent.run("q")
        assert_end_state(result, "truncated")
        assert "cut off at max_tokens=512" in result.reason
        assert "raise max_tokens" in result.reason


class TestAnUnknownWindow:
    def test_output_below_its_limit_names_the_context_window(self) -> None:
        """Without a known window, a `max_tokens` stop with fewer output tokens than the
        call asked for is `truncated` with a reason naming the context window and its
        figures, never advising a larger max_tokens."""
        result = Agent(ScriptedModel([stopped(649, 3447)]), max_tokens=4096).run("q")
        assert_end_state(result, "truncated")
        assert "cut off by the model's context window" in result.reason
        assert "649 prompt + 3447 output tokens, below max_tokens=4096" in result.reason
        assert "shrink the history with ContextPolicy" in result.reason
        assert "raise max_tokens" not in result.reason


class TestWindowSetting:
    @pytest.mark.parametrize("bad", [0, -1])
    def test_a_window_must_be_positive(self, bad: int) -> None:
        with pytest.raises(ValueError, match="window_tokens must be positive or None"):
            ContextPolicy(window_tokens=bad)


class TestProperty:
    @settings(max_examples=40, deadline=None)
    @given(
        prompt=st.integers(1, 5000),
        output=st.integers(0, 5000),
        max_tokens=st.integers(1, 5000),
        window=st.none() | st.integers(1, 9000),
    )
    def test_the_reply_usage_decides_the_cause(
        self, prompt: int, output: int, max_tokens: int, window: int | None
    ) -> None:
        """For any usage of a `max_tokens` stop: a filled known window ends in
        `context_overflow`; otherwise output below the call's limit blames the window and
        output at the limit blames max_tokens, and only the latter advises raising it."""
        script = [stopped(prompt, output), stopped(prompt, output)]
        agent = Agent(ScriptedModel(script), max_tokens=max_tokens,
                      context=ContextPolicy(window_tokens=window))  # fmt: skip
        result = agent.run("q")
        if window is not None and prompt + output >= window:
            assert result.end_state == "context_overflow"
            assert f"context window of {window} tokens" in result.reason
        elif output < max_tokens:
            assert result.end_state == "truncated"
            assert "cut off by the model's context window" in result.reason
            assert "raise max_tokens" not in result.reason
        else:
            assert result.end_state == "truncated"
            assert f"cut off at max_tokens={max_tokens}" in result.reason
