"""The real `anthropic` SDK is driven correctly, against the local strict server.

Options the installed `messages.create` does not take go through `extra_body`;
beta features go through `client.beta.messages.create` with the beta headers
the API wants, and the server rejects them the way the API does when they are
sent any other way.
"""

from __future__ import annotations

from typing import Any

import anthropic
import pytest

from statemachine_agent import Agent, ContextPolicy, calculate
from statemachine_agent.models.anthropic import AnthropicModel
from statemachine_agent.models.base import DEFAULT_MODEL
from statemachine_agent.models.sdk_args import (
    CONTEXT_MANAGEMENT_BETA,
    MCP_CLIENT_BETA,
    PLAIN_PARAMS,
    sdk_arguments,
)
from statemachine_agent.testing import replies
from statemachine_agent.testing.server import FakeAnthropicServer

EDITS = {"edits": [{"type": "clear_tool_uses_20250919"}]}
MCP = [{"type": "url", "url": "https://mcp.example.com/sse", "name": "docs"}]


def run_against(server: FakeAnthropicServer, **agent: Any) -> Any:
    model = AnthropicModel(api_key="k-test", base_url=server.base_url, max_retries=0)
    return Agent(model, tools=[calculate], **agent).run("What is 2+2?")


def betas_sent(server: FakeAnthropicServer, index: int = 0) -> list[str]:
    header = server.headers[index].get("anthropic-beta", "")
    return [part.strip() for part in header.split(",") if part.strip()]


class TestRequestOptions:
    def test_an_option_the_sdk_does_not_take_goes_in_extra_body(self) -> None:
        assert "temperature" not in PLAIN_PARAMS  # the installed SDK dropped it
        with FakeAnthropicServer([replies.text("4")]) as server:
            result = run_against(server, request_options={"temperature": 0, "top_k": 5})
        assert result.end_state == "completed", result.reason
        assert server.invalid_requests == []
        assert server.requests[0]["temperature"] == 0
        assert server.requests[0]["top_k"] == 5

    def test_options_the_sdk_takes_stay_keywords(self) -> None:
        beta, kwargs = sdk_arguments({"model": "m", "max_tokens": 5, "messages": [],
                                      "stop_sequences": ["END"], "temperature": 1})  # fmt: skip
        assert beta is False
        assert kwargs["stop_sequences"] == ["END"]
        assert kwargs["extra_body"] == {"temperature": 1}


class TestBetaSurface:
    def test_server_edits_go_through_the_beta_surface(self) -> None:
        with FakeAnthropicServer(
            [replies.tool_use("calculate", {"expression": "2+2"}), replies.text("4")]
        ) as server:
            result = run_against(server, context=ContextPolicy(server_edits=EDITS))
        assert result.end_state == "completed", result.reason
        assert server.invalid_requests == []
        assert all(body["context_management"] == EDITS for body in server.requests)
        assert CONTEXT_MANAGEMENT_BETA in betas_sent(server)
        assert all("betas" not in body for body in server.requests)

    def test_mcp_servers_and_own_betas(self) -> None:
        options = {"mcp_servers": MCP, "betas": ["fine-grained-tool-streaming-2025-05-14"]}
        with FakeAnthropicServer([replies.text("4")]) as server:
            result = run_against(server, request_options=options)
        assert result.end_state == "completed", result.reason
        assert server.invalid_requests == []
        assert server.requests[0]["mcp_servers"] == MCP
        sent = betas_sent(server)
        assert MCP_CLIENT_BETA in sent
        assert "fine-grained-tool-streaming-2025-05-14" in sent

    def test_a_newer_beta_given_by_the_caller_is_not_doubled(self) -> None:
        _, kwargs = sdk_arguments({"model": "m", "max_tokens": 5, "messages": [],
                                   "context_management": EDITS,
                                   "betas": ["context-management-2026-01-01"]})  # fmt: skip
        assert kwargs["betas"] == ["context-management-2026-01-01"]


class TestStrictServerChecksBetas:
    """The server answers as the API does when a beta feature comes without its header."""

    def body(self, **extra: Any) -> dict[str, Any]:
        return {"model": DEFAULT_MODEL, "max_tokens": 16,
                "messages": [{"role": "user", "content": "hi"}], **extra}  # fmt: skip

    def test_context_management_without_its_beta_header_is_rejected(self) -> None:
        with FakeAnthropicServer([replies.text("x")]) as server:
            client = anthropic.Anthropic(api_key="k", base_url=server.base_url, max_retries=0)
            with pytest.raises(anthropic.BadRequestError, match="context-management"):
                client.messages.create(**self.body(), extra_body={"context_management": EDITS})
        assert len(server.invalid_requests) == 1

    def test_betas_in_the_body_is_rejected(self) -> None:
        with FakeAnthropicServer([replies.text("x")]) as server:
            client = anthropic.Anthropic(api_key="k", base_url=server.base_url, max_retries=0)
            with pytest.raises(anthropic.BadRequestError, match="betas"):
                client.messages.create(**self.body(), extra_body={"betas": ["x"]})

    def test_mcp_servers_with_its_header_passes(self) -> None:
        with FakeAnthropicServer([replies.text("x")]) as server:
            client = anthropic.Anthropic(api_key="k", base_url=server.base_url, max_retries=0)
            client.beta.messages.create(**self.body(), mcp_servers=MCP,
                                        betas=[MCP_CLIENT_BETA])  # type: ignore[arg-type]  # fmt: skip
        assert server.invalid_requests == []
