"""The fake Messages API server, driven by the real anthropic SDK over 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import anthropic
import pytest

from statemachine_agent.testing import FakeAnthropicServer, FakeError, replies

JSON = dict[str, Any]

FAST = {"retry-after-ms": "10"}
TOOLS: list[Any] = [{"name": "add", "input_schema": {"type": "object", "properties": {}}}]
HELLO: list[Any] = [{"role": "user", "content": "Hello"}]


@pytest.fixture
def server() -> Iterator[FakeAnthropicServer]:
    with FakeAnthropicServer() as fake:
        yield fake


def client(server: FakeAnthropicServer, max_retries: int = 0) -> anthropic.Anthropic:
    return anthropic.Anthropic(
        api_key="test-key", base_url=server.base_url, max_retries=max_retries
    )


def create(sdk: anthropic.Anthropic, **kwargs: Any) -> anthropic.types.Message:
    messages = kwargs.pop("messages", HELLO)
    message: anthropic.types.Message = sdk.messages.create(
        model="claude-sonnet-5", max_tokens=100, messages=messages, **kwargs
    )
    return message


def post(server: FakeAnthropicServer, path: str, body: object, headers: dict[str, str]) -> Any:
    """A raw POST, for what the SDK would never send; returns (status, parsed body)."""
    request = urllib.request.Request(
        server.base_url + path, data=json.dumps(body).encode(), headers=headers, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


class TestSuccess:
    """Scripted replies reach the SDK as parsed messages."""

    def test_reply_is_parsed_by_the_sdk(self, server: FakeAnthropicServer) -> None:
        """A queued dict is a 200 the SDK parses into a `Message`, with the request recorded."""
        server.add(replies.text("Hi there.", usage={"input_tokens": 42}))
        with client(server) as sdk:
            message = create(sdk, system="Be kind.")
        assert message.content[0].type == "text"
        assert message.content[0].text == "Hi there."
        assert message.usage.input_tokens == 42
        assert message.stop_reason == "end_turn"
        assert server.requests[0]["system"] == "Be kind."
        # SDK 2.x sends the API key as a bearer token; older ones used x-api-key.
        auth = server.headers[0].get("x-api-key") or server.headers[0].get("authorization")
        assert auth in ("test-key", "Bearer test-key")
        assert "anthropic-version" in server.headers[0]
        assert server.remaining == 0

    def test_raw_response_carries_the_request_id(self, server: FakeAnthropicServer) -> None:
        """Every answer has a `request-id` header, like the real API."""
        server.add(replies.text())
        with client(server) as sdk:
            raw = sdk.messages.with_raw_response.create(
                model="claude-sonnet-5", max_tokens=10, messages=HELLO
            )
        assert raw.headers["request-id"].startswith("req_")
        assert raw.headers["content-type"] == "application/json"
        assert raw.parse().type == "message"

    def test_tool_use_round_trip(self, server: FakeAnthropicServer) -> None:
        """A tool call and its answer go through validation and come back in order."""
        call = replies.tool_use("add", {"a": 1}, id="toolu_fake1", text="Adding.")
        server.add(call, replies.text("2"))
        with client(server) as sdk:
            first = create(sdk, tools=TOOLS)
            history: list[Any] = [
                *HELLO,
                {"role": "assistant", "content": [b.model_dump() for b in first.content]},
                {
                    "role": "user",
                    "content": [
                        {"type": "tool_result", "tool_use_id": "toolu_fake1", "content": "2"}
                    ],
                },
            ]
            second = create(sdk, tools=TOOLS, messages=history)
        assert first.stop_reason == "tool_use"
        assert second.content[0].type == "text"
        assert len(server.requests) == 2
        assert server.invalid_requests == []

    def test_callable_sees_the_request(self, server: FakeAnthropicServer) -> None:
        """A callable in the script answers from the request body."""
        server.add(lambda body: replies.text(f"You sent {len(body['messages'])} message(s)."))
        with client(server) as sdk:
            message = create(sdk)
        assert message.content[0].type == "text"
        assert message.content[0].text == "You sent 1 message(s)."

    def test_streaming_reply(self, server: FakeAnthropicServer) -> None:
        """With `stream: true` the reply is sent as events the SDK accumulates back."""
        server.add(replies.tool_use("add", {"a": 1, "b": [2]}, id="toolu_s", text="Adding."))
        with (
            client(server) as sdk,
            sdk.messages.stream(
                model="claude-sonnet-5", max_tokens=10, messages=HELLO, tools=TOOLS
            ) as stream,
        ):
            final = stream.get_final_message()
        assert final.stop_reason == "tool_use"
        assert [b.type for b in final.content] == ["text", "tool_use"]
        tool = final.content[1]
        assert tool.type == "tool_use"
        assert tool.input == {"a": 1, "b": [2]}
        assert final.usage.output_tokens == 5

    def test_async_client(self, server: FakeAnthropicServer) -> None:
        """The async client works against the same server."""
        server.add(replies.text("Async hi."))

        async def call() -> anthropic.types.Message:
            async with anthropic.AsyncAnthropic(
                api_key="test-key", base_url=server.base_url, max_retries=0
            ) as sdk:
                return await sdk.messages.create(
                    model="claude-sonnet-5", max_tokens=10, messages=HELLO
                )

        message = asyncio.run(call())
        assert message.content[0].type == "text"
        assert message.content[0].text == "Async hi."


class TestErrors:
    """Scripted errors look like the real API's, so the SDK maps and retries them."""

    def test_overloaded_then_success_is_retried(self, server: FakeAnthropicServer) -> None:
        """A 529 with `retry-after-ms` is retried by the SDK, which then succeeds."""
        server.add(FakeError(529, "Overloaded", headers=FAST), replies.text("Finally."))
        with client(server, max_retries=2) as sdk:
            message = create(sdk)
        assert message.content[0].type == "text"
        assert message.content[0].text == "Finally."
        assert len(server.requests) == 2
        assert server.headers[1]["x-stainless-retry-count"] == "1"

    def test_rate_limit_is_retried(self, server: FakeAnthropicServer) -> None:
        """A 429 with `retry-after-ms` is retried too."""
        server.add(FakeError(429, headers=FAST), replies.text("OK."))
        with client(server, max_retries=1) as sdk:
            assert create(sdk).stop_reason == "end_turn"
        assert server.remaining == 0

    def test_errors_surface_when_retries_run_out(self, server: FakeAnthropicServer) -> None:
        """Without retries left the SDK raises the matching exception with the body's type."""
        server.add(FakeError(529, "Overloaded", headers=FAST))
        with client(server) as sdk, pytest.raises(anthropic.InternalServerError) as caught:
            create(sdk)
        assert caught.value.status_code == 529
        assert caught.value.type == "overloaded_error"

    def test_bad_request(self, server: FakeAnthropicServer) -> None:
        """A scripted 400 raises `BadRequestError` carrying the request id and message."""
        server.add(FakeError(400, "prompt is too long: 300000 tokens > 200000 maximum"))
        with (
            client(server, max_retries=3) as sdk,
            pytest.raises(anthropic.BadRequestError) as caught,
        ):
            create(sdk)
        assert caught.value.request_id is not None
        assert caught.value.request_id.startswith("req_")
        assert caught.value.type == "invalid_request_error"
        assert caught.value.api_message == "prompt is too long: 300000 tokens > 200000 maximum"
        assert len(server.requests) == 1

    def test_authentication_error(self, server: FakeAnthropicServer) -> None:
        """A scripted 401 raises `AuthenticationError`."""
        server.add(FakeError(401, "invalid x-api-key"))
        with client(server) as sdk, pytest.raises(anthropic.AuthenticationError) as caught:
            create(sdk)
        assert caught.value.type == "authentication_error"

    def test_x_should_retry_false_is_obeyed(self, server: FakeAnthropicServer) -> None:
        """Headers of a `FakeError` reach the SDK: `x-should-retry: false` stops retries."""
        server.add(FakeError(500, headers={"x-should-retry": "false"}), replies.text())
        with client(server, max_retries=3) as sdk, pytest.raises(anthropic.InternalServerError):
            create(sdk)
        assert server.remaining == 1

    @pytest.mark.parametrize(
        ("status", "error_type"),
        [
            (400, "invalid_request_error"),
            (401, "authentication_error"),
            (403, "permission_error"),
            (404, "not_found_error"),
            (413, "request_too_large"),
            (429, "rate_limit_error"),
            (500, "api_error"),
            (529, "overloaded_error"),
        ],
    )
    def test_error_type_follows_status(self, status: int, error_type: str) -> None:
        """Without an explicit type, a `FakeError` gets the real API's type for its status."""
        assert FakeError(status).type == error_type
        assert FakeError(status, error_type="billing_error").type == "billing_error"

    def test_exhausted_script(self, server: FakeAnthropicServer) -> None:
        """An empty script answers 500 saying so, without inviting retries."""
        with (
            client(server, max_retries=3) as sdk,
            pytest.raises(anthropic.InternalServerError) as caught,
        ):
            create(sdk)
        assert "exhausted" in str(caught.value)
        assert len(server.requests) == 1

    def test_failing_callable(self, server: FakeAnthropicServer) -> None:
        """A callable that raises becomes a 500 and is kept in `errors`."""

        def broken(body: JSON) -> JSON:
            raise KeyError("nope")

        server.add(broken)
        with client(server) as sdk, pytest.raises(anthropic.InternalServerError):
            create(sdk)
        assert isinstance(server.errors[0], KeyError)


class TestValidation:
    """Requests the real API would reject get the same 400 here."""

    def test_tool_result_without_tools_is_rejected(self, server: FakeAnthropicServer) -> None:
        """A history with tool blocks but no tools gets a 400 listing the problem."""
        server.add(replies.text())
        history: list[Any] = [
            *HELLO,
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "toolu_1", "name": "add", "input": {}}],
            },
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "1"}],
            },
        ]
        with (
            client(server, max_retries=2) as sdk,
            pytest.raises(anthropic.BadRequestError) as caught,
        ):
            create(sdk, messages=history)
        assert "must define tools" in str(caught.value)
        assert caught.value.type == "invalid_request_error"
        assert len(server.invalid_requests) == 1
        assert server.remaining == 1, "a rejected request must not use up the script"

    def test_validation_can_be_turned_off(self) -> None:
        """With `validate=False` an invalid request still gets the scripted reply."""
        with FakeAnthropicServer([replies.text("Anyway.")], validate=False) as server:
            bad: list[Any] = [{"role": "user", "content": " "}]
            with client(server) as sdk:
                assert create(sdk, messages=bad).content[0].type == "text"
            assert server.invalid_requests == []


class TestProtocol:
    """Headers, paths and endpoints behave like the real API."""

    HEADERS = {  # noqa: RUF012
        "content-type": "application/json",
        "x-api-key": "k",
        "anthropic-version": "2023-06-01",
    }

    def test_missing_api_key_is_401(self, server: FakeAnthropicServer) -> None:
        """Neither `x-api-key` nor a bearer token is an authentication_error."""
        headers = {k: v for k, v in self.HEADERS.items() if k != "x-api-key"}
        status, body = post(server, "/v1/messages", {}, headers)
        assert status == 401
        assert body["error"]["type"] == "authentication_error"
        assert body["request_id"].startswith("req_")

    def test_missing_version_is_400(self, server: FakeAnthropicServer) -> None:
        """No `anthropic-version` is an invalid_request_error."""
        headers = {k: v for k, v in self.HEADERS.items() if k != "anthropic-version"}
        status, body = post(server, "/v1/messages", {}, headers)
        assert status == 400
        assert "anthropic-version" in body["error"]["message"]

    def test_unknown_path_is_404(self, server: FakeAnthropicServer) -> None:
        """Any other path is a not_found_error."""
        status, body = post(server, "/v1/complete", {}, self.HEADERS)
        assert status == 404
        assert body == {
            "type": "error",
            "error": {"type": "not_found_error", "message": "Not found: POST /v1/complete"},
            "request_id": body["request_id"],
        }

    def test_invalid_json_is_400(self, server: FakeAnthropicServer) -> None:
        """A body that is not JSON is an invalid_request_error."""
        request = urllib.request.Request(
            server.base_url + "/v1/messages", data=b"{", headers=self.HEADERS, method="POST"
        )
        with pytest.raises(urllib.error.HTTPError) as caught:
            urllib.request.urlopen(request, timeout=5)
        assert caught.value.code == 400

    def test_count_tokens(self, server: FakeAnthropicServer) -> None:
        """count_tokens answers a rough local estimate through the SDK."""
        with client(server) as sdk:
            counted = sdk.messages.count_tokens(model="claude-sonnet-5", messages=HELLO)
        assert counted.input_tokens > 0
        assert server.requests == []
        assert len(server.count_tokens_requests) == 1

    def test_binds_loopback_only_and_closes(self) -> None:
        """The server listens on 127.0.0.1 and stops listening once closed."""
        server = FakeAnthropicServer()
        assert server.base_url.startswith("http://127.0.0.1:")
        server.close()
        server.close()
        with pytest.raises(urllib.error.URLError):
            urllib.request.urlopen(server.base_url + "/v1/messages", timeout=2)
