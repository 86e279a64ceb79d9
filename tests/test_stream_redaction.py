"""A stream shows no more than the audit file: every event goes through the same redactor.

Tested through the real `anthropic` SDK against the local strict server, since the
deltas the stream hands out are the adapter's, not the audit's.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest

from statemachine_agent import Agent, Audit, tool
from statemachine_agent.models.anthropic import AnthropicModel
from statemachine_agent.stream.events import RunEnded, StreamEvent, to_json
from statemachine_agent.testing import FakeAnthropicServer, replies

REGISTERED = "opensesame-4711"
"""A value registered with `Audit(secrets=)`."""
PASSWORD = "hunter22-password"
"""A value the audit masks because of its key (`password`)."""


@tool
def login(user: str, password: str) -> str:
    """Logs in."""
    return f"welcome {user}"


@pytest.fixture
def server() -> Iterator[FakeAnthropicServer]:
    with FakeAnthropicServer() as fake:
        yield fake


def collect(agent: Agent, prompt: str) -> list[StreamEvent]:
    async def main() -> list[StreamEvent]:
        return [event async for event in agent.astream(prompt)]

    return asyncio.run(main())


class TestStreamRedaction:
    def test_no_event_carries_what_the_audit_masks(self, server: FakeAnthropicServer) -> None:
        """text_delta, thinking_delta, tool_input_complete and run_ended are masked like the
        audit: registered values and secret-named inputs never reach the stream."""
        server.add(
            replies.reply(
                replies.thinking_block(f"The code is {REGISTERED} here."),
                replies.text_block(f"Using {REGISTERED} now."),
                replies.tool_use_block("login", {"user": "bob", "password": PASSWORD}),
                stop_reason="tool_use",
            ),
            replies.text(f"Logged in with {REGISTERED} done."),
        )
        model = AnthropicModel(api_key="sk-ant-api03-TEST-abcdefghijkl", base_url=server.base_url)
        agent = Agent(model, tools=[login], audit=Audit(secrets=[REGISTERED]))
        events = collect(agent, "Log in.")
        forms: list[dict[str, Any]] = [to_json(e) for e in events]
        written = json.dumps(forms)
        assert REGISTERED not in written
        assert PASSWORD not in written
        kinds = {f["type"] for f in forms}
        assert {"text_delta", "thinking_delta", "tool_input_complete", "run_ended"} <= kinds
        complete = next(f for f in forms if f["type"] == "tool_input_complete")
        assert complete["input"] == {"user": "bob", "password": "[REDACTED]"}
        assert isinstance(events[-1], RunEnded)
        assert "[REDACTED]" in events[-1].result.text
        assert server.invalid_requests == []
