"""`OpenAIModel`: the real `openai` SDK, driven by the engine, against a local Chat Completions API.

The fake server checks every request strictly (tool calls answered in place,
no Anthropic-only keys, tools defined), and the `server` fixture fails any test
whose run sent one it rejected, so a green test means the translated history is
what the API accepts.
"""

from __future__ import annotations

import asyncio
import json
import socket
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest

from statemachine_agent import Agent, MissingAPIKeyError, ModelError, ModelRequest, calculate, tool
from statemachine_agent.models.openai import (
    MissingOpenAIKeyError,
    OpenAIModel,
    from_chat_completion,
    to_chat_request,
)
from statemachine_agent.policy.budget import Budget
from statemachine_agent.testing.assertions import assert_end_state, assert_path
from statemachine_agent.testing.openai_server import (
    FakeOpenAIError,
    FakeOpenAIServer,
    chat_completion,
    chat_text,
    chat_tool_calls,
    context_length_error,
    tool_call,
    validate_chat_request,
)

JSON = dict[str, Any]

API_KEY = "sk-proj-TESTSECRET-abcdefghijklmnop"
FAST = {"retry-after-ms": "10"}


@pytest.fixture
def server() -> Iterator[FakeOpenAIServer]:
    """A fake server whose every request must have been valid by the end of the test."""
    with FakeOpenAIServer() as fake:
        yield fake
        assert fake.invalid_requests == [], fake.invalid_requests
        assert fake.errors == []


def model_for(server: FakeOpenAIServer, **kwargs: Any) -> OpenAIModel:
    return OpenAIModel(api_key=API_KEY, base_url=server.base_url, **kwargs)


def request(**kwargs: Any) -> ModelRequest:
    """A request as the engine builds it; messages default to one user prompt."""
    kwargs.setdefault("messages", [{"role": "user", "content": "hi"}])
    return ModelRequest(model="gpt-4o-mini", max_tokens=256, **kwargs)


def tool_messages(body: JSON) -> list[JSON]:
    return [m for m in body["messages"] if m["role"] == "tool"]


# -- seed 003: a real OpenAI-format transcript, replayed ----------------------------------

SEED_ANSWER = (
    "予定は19:00に梅田での食事です。雨が予想されるため、傘が必要です。家を出る時刻は18:20です。"
)
SEED_IDS = (
    "call_nYOUKmOp4shDuL7z1I1wJomj",
    "call_ozMaR40NmvdEmTPWqpJx9gCc",
    "call_8OO8gsIpUtBCV4bct4DCgYoC",
)
SEED_SCHEDULE = {"date": "今日", "events": [{"time": "19:00", "location": "梅田", "title": "食事"}]}
SEED_WEATHER = {"location": "梅田", "time": "19:00", "forecast": "18:00から雨"}
SEED_ROUTE = {"origin": "自宅", "destination": "梅田", "duration": "30分"}


@tool
def getSchedule(date: str) -> dict[str, Any]:  # noqa: N802 - the seed's tool names
    """The user's events on a date."""
    return {**SEED_SCHEDULE, "date": date}


@tool
def getWeather(location: str, time: str) -> dict[str, str]:  # noqa: N802
    """The forecast for a place at a time."""
    return {**SEED_WEATHER, "location": location, "time": time}


@tool
def getRoute(origin: str, destination: str) -> dict[str, str]:  # noqa: N802
    """Travel time between two places."""
    return {**SEED_ROUTE, "origin": origin, "destination": destination}


def seed_script() -> list[JSON]:
    """The four replies of the seed, with its ids and its exact argument strings."""
    final = chat_text(SEED_ANSWER, model="openai/gpt-4o-mini")
    final["choices"][0]["message"]["reasoning"] = None  # OpenRouter adds fields; they are ignored
    return [
        chat_tool_calls(("getSchedule", '{"date":"今日"}'), ids=SEED_IDS[:1]),
        chat_tool_calls(("getWeather", '{"location":"梅田","time":"19:00"}'), ids=SEED_IDS[1:2]),
        chat_tool_calls(("getRoute", '{"origin":"自宅","destination":"梅田"}'), ids=SEED_IDS[2:]),
        final,
    ]


class TestSeedTranscript:
    """Seed 003 (schedule -> weather -> route -> answer) runs through the SDK as it did live."""

    def test_four_calls_same_answer(self, server: FakeOpenAIServer) -> None:
        """Four model calls, three tools, and the seed's answer, word for word."""
        server.add(*seed_script())
        agent = Agent(
            model_for(server, name="openai/gpt-4o-mini"),
            tools=[getSchedule, getWeather, getRoute],
            system="予定、天気、移動の順にツールで調べてから答えてください。",
        )
        result = agent.run("今日どう動けばいい？")
        assert_end_state(result, "completed")
        assert result.text == SEED_ANSWER
        assert result.iterations == 4
        assert len(server.requests) == 4
        last = server.requests[-1]
        assert last["model"] == "openai/gpt-4o-mini"
        assert [m["role"] for m in last["messages"]] == [
            "system", "user", "assistant", "tool", "assistant", "tool", "assistant", "tool",
        ]  # fmt: skip
        assert [m["tool_call_id"] for m in tool_messages(last)] == list(SEED_IDS)
        results = [json.loads(m["content"]) for m in tool_messages(last)]
        assert results == [SEED_SCHEDULE, SEED_WEATHER, SEED_ROUTE]
        calls = [m["tool_calls"][0] for m in last["messages"] if m.get("tool_calls")]
        assert [json.loads(c["function"]["arguments"]) for c in calls] == [
            {"date": "今日"},
            {"location": "梅田", "time": "19:00"},
            {"origin": "自宅", "destination": "梅田"},
        ]

    def test_empty_reply_fails(self, server: FakeOpenAIServer) -> None:
        """The seed's own error case: a reply with neither content nor tool calls fails the run."""
        server.add(chat_completion(content=None, finish_reason="stop"))
        result = Agent(model_for(server)).run("今日どう動けばいい？")
        assert_path(result, ["perceive", "reason", "failed"])
        assert "neither text nor tool calls" in result.reason


class TestToolRoundTrip:
    """The engine's Messages-shaped history survives translation both ways."""

    def test_parallel_calls_and_an_error_result(self, server: FakeOpenAIServer) -> None:
        """Two calls in one reply get two tool messages; the failed one says 'Error:'."""
        server.add(
            chat_tool_calls(
                ("calculate", {"expression": "6*7"}), ("calculate", {"expression": "1/0"})
            ),
            chat_text("42, and 1/0 is undefined."),
        )
        result = Agent(model_for(server), tools=[calculate], system="Use tools.").run("Compute")
        assert_end_state(result, "completed")
        second = server.requests[1]
        assert second["messages"][0] == {"role": "system", "content": "Use tools."}
        answers = tool_messages(second)
        assert answers[0]["content"] == "42"
        assert answers[1]["content"].startswith("Error: ")
        assert second["tools"][0]["function"]["name"] == "calculate"
        assert "cache_control" not in json.dumps(second)
        assert second["max_completion_tokens"] == 4096

    def test_async_model(self, server: FakeOpenAIServer) -> None:
        """The async client serves `arun` the same way."""
        server.add(chat_tool_calls(("calculate", {"expression": "2**10"})), chat_text("1024"))
        result = asyncio.run(Agent(model_for(server), tools=[calculate]).arun("2^10?"))
        assert result.text == "1024"
        assert tool_messages(server.requests[1])[0]["content"] == "1024"

    def test_model_reused_across_runs(self, server: FakeOpenAIServer) -> None:
        """One model serves run after run: sync runs share the thread's kept loop and client."""
        model = model_for(server)
        for k in range(3):
            server.add(chat_text(f"answer {k}"))
            assert Agent(model).run("q").text == f"answer {k}"
        server.add(chat_text("async"))
        assert asyncio.run(Agent(model).arun("q")).text == "async"
        assert server.connections == 2  # the sync runs' kept client, and the async run's
        assert len(model._loop_clients) == 1  # the async run's client closed with its loop

    def test_sync_complete(self, server: FakeOpenAIServer) -> None:
        """The sync client answers a single request directly, with the server's request id."""
        server.add(chat_text("hello", usage={"prompt_tokens": 100, "cached_tokens": 60}))
        reply = model_for(server).complete(request())
        assert reply.text == "hello"
        assert reply.stop_reason == "end_turn"
        assert reply.request_id == "req_1"
        assert (reply.usage.input_tokens, reply.usage.cache_read_tokens) == (40, 60)

    def test_max_tokens_param(self, server: FakeOpenAIServer) -> None:
        """Servers that predate max_completion_tokens get max_tokens instead."""
        server.add(chat_text("ok"))
        model_for(server, max_tokens_param="max_tokens").complete(request())
        assert server.requests[0]["max_tokens"] == 256
        assert "max_completion_tokens" not in server.requests[0]

    def test_malformed_arguments_reach_the_model(self, server: FakeOpenAIServer) -> None:
        """Arguments that are not JSON get an is_error result, and the run goes on."""
        server.add(
            chat_tool_calls(("calculate", '{"expression": "6*7"')),
            chat_tool_calls(("calculate", {"expression": "6*7"})),
            chat_text("42"),
        )
        result = Agent(model_for(server), tools=[calculate]).run("6*7?")
        assert_end_state(result, "completed")
        assert result.text == "42"
        first_answer = tool_messages(server.requests[1])[0]["content"]
        assert first_answer.startswith("Error: Invalid input for tool 'calculate'")
        replayed = server.requests[1]["messages"][-2]["tool_calls"][0]["function"]["arguments"]
        assert json.loads(replayed) == {"_raw_arguments": '{"expression": "6*7"'}

    def test_budget_notice_follows_the_tool_messages(self, server: FakeOpenAIServer) -> None:
        """Engine text after tool results becomes a user message after the tool messages."""
        server.add(
            chat_tool_calls(("calculate", {"expression": "1+1"})),
            chat_text("1+1 is 2; that is all I did."),
        )
        agent = Agent(model_for(server), tools=[calculate], budget=Budget(max_iterations=1))
        result = agent.run("q")
        assert_end_state(result, "budget_exhausted")
        salvage = server.requests[1]
        assert salvage["tool_choice"] == "none"
        assert [m["role"] for m in salvage["messages"]][-3:] == ["assistant", "tool", "user"]


class TestStopReasons:
    """Each finish_reason leads the engine to the end state that names it."""

    def test_length_is_truncated(self, server: FakeOpenAIServer) -> None:
        """finish_reason length ends the run in truncated."""
        server.add(chat_text("The answer begins", finish_reason="length"))
        result = Agent(model_for(server)).run("q")
        assert_end_state(result, "truncated")
        assert result.text == "The answer begins"

    def test_content_filter_is_refused(self, server: FakeOpenAIServer) -> None:
        """finish_reason content_filter ends the run in refused, saying it was the filter."""
        server.add(chat_completion(content=None, finish_reason="content_filter"))
        result = Agent(model_for(server)).run("q")
        assert_end_state(result, "refused")
        assert "content filter" in result.reason
        assert result.details is not None
        assert result.details["stop_details"]["type"] == "content_filter"

    def test_refusal_field_is_refused(self, server: FakeOpenAIServer) -> None:
        """A message.refusal is a refusal whatever the finish_reason, its words kept."""
        server.add(chat_completion(refusal="I can't help with that.", finish_reason="stop"))
        result = Agent(model_for(server)).run("q")
        assert_end_state(result, "refused")
        assert result.text == "I can't help with that."

    def test_unknown_finish_reason_fails_naming_it(self, server: FakeOpenAIServer) -> None:
        """A finish_reason the engine does not know is passed through and named, not guessed."""
        server.add(chat_text("hm", finish_reason="function_call"))
        result = Agent(model_for(server)).run("q")
        assert_end_state(result, "failed")
        assert "unknown stop_reason 'function_call'" in result.reason


class TestErrors:
    """SDK errors become `ModelError`s the engine retries, falls back on or ends with."""

    def test_429_is_retried_by_the_sdk(self, server: FakeOpenAIServer) -> None:
        """A rate limit with retry-after-ms is waited out and retried; the run succeeds."""
        server.add(FakeOpenAIError(429, "Rate limit reached", headers=FAST), chat_text("ok"))
        result = Agent(model_for(server)).run("q")
        assert_end_state(result, "completed")
        assert len(server.requests) == 2

    def test_retries_exhausted_fail(self, server: FakeOpenAIServer) -> None:
        """Past the SDK's retries the run fails, naming the status."""
        server.add(*[FakeOpenAIError(503, headers={"retry-after-ms": "1"}) for _ in range(3)])
        result = Agent(model_for(server, max_retries=2)).run("q")
        assert_end_state(result, "failed")
        assert len(server.requests) == 3
        assert "status 503" in result.reason

    def test_401_fails_at_once(self, server: FakeOpenAIServer) -> None:
        """A bad key is not retried and fails with status, code and request id."""
        server.add(FakeOpenAIError(401, "Incorrect API key provided: sk-proj-****mnop."))
        result = Agent(model_for(server)).run("q")
        assert_path(result, ["perceive", "reason", "failed"])
        assert len(server.requests) == 1
        assert result.details is not None
        assert result.details["status"] == 401
        assert result.details["request_id"] == "req_1"
        assert "invalid_api_key" in result.reason

    def test_context_length_is_context_overflow(self, server: FakeOpenAIServer) -> None:
        """context_length_exceeded is retried once after compaction, then overflows."""
        server.add(context_length_error(), context_length_error())
        result = Agent(model_for(server)).run("q")
        assert len(server.requests) == 2
        assert_end_state(result, "context_overflow")
        assert "maximum context length is 128000 tokens" in result.reason

    def test_classification(self, server: FakeOpenAIServer) -> None:
        """Rate limits are retryable, an exhausted quota and a bad request are not."""
        cases = [
            (FakeOpenAIError(429, headers={"x-should-retry": "false"}), True),
            (FakeOpenAIError(429, "quota", code="insufficient_quota",
                             headers={"x-should-retry": "false"}), False),
            (FakeOpenAIError(400, "bad"), False),
        ]  # fmt: skip
        for error, retryable in cases:
            server.add(error)
            with pytest.raises(ModelError) as caught:
                model_for(server, max_retries=0).complete(request())
            assert caught.value.retryable is retryable
            assert caught.value.status == error.status

    def test_connection_refused_is_retryable(self) -> None:
        """No server at all is a connection error, worth trying a fallback for."""
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        model = OpenAIModel(api_key=API_KEY, base_url=f"http://127.0.0.1:{port}/v1", max_retries=0)
        with pytest.raises(ModelError) as caught:
            model.complete(request())
        assert caught.value.retryable
        assert caught.value.error_type == "APIConnectionError"

    def test_body_that_is_not_an_object(self, server: FakeOpenAIServer) -> None:
        """A 200 whose JSON is not an object fails the call as an invalid response, not a crash."""
        server.add(cast(Any, lambda body: ["not", "a", "completion"]))
        result = Agent(model_for(server)).run("q")
        assert_end_state(result, "failed")
        assert "invalid_response" in result.reason

    def test_error_inside_a_200(self) -> None:
        """A 200 carrying an error object instead of choices is an error, not an empty reply."""
        body = {"error": {"message": "Upstream overloaded", "code": 502}}
        with pytest.raises(ModelError, match="Upstream overloaded") as caught:
            from_chat_completion(body, request_id="req_9")
        assert (caught.value.status, caught.value.retryable) == (502, True)


class TestConfiguration:
    """Keys and URLs come from arguments or the environment, and keys never reach the audit."""

    def test_missing_key_is_a_clear_error(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Without a key the model refuses to be built, naming OPENAI_API_KEY."""
        monkeypatch.delenv("OPENAI_API_KEY", raising=False)
        with pytest.raises(MissingOpenAIKeyError, match="OPENAI_API_KEY"):
            OpenAIModel()
        assert issubclass(MissingOpenAIKeyError, MissingAPIKeyError)

    def test_environment_is_honoured(
        self, server: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """OPENAI_API_KEY and OPENAI_BASE_URL configure the model."""
        monkeypatch.setenv("OPENAI_API_KEY", API_KEY)
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        server.add(chat_text("from env"))
        result = Agent(OpenAIModel("gpt-4.1-mini")).run("q")
        assert result.text == "from env"
        assert server.requests[0]["model"] == "gpt-4.1-mini"
        assert server.headers[0]["authorization"] == f"Bearer {API_KEY}"

    def test_api_key_never_reaches_the_audit_file(
        self, server: FakeOpenAIServer, tmp_path: Path
    ) -> None:
        """Even a reply that repeats the key cannot write it to the audit trail."""
        server.add(chat_text(f"I saw {API_KEY}"))
        result = Agent(model_for(server), audit=tmp_path).run(f"my key is {API_KEY}")
        assert result.audit_path is not None
        raw = result.audit_path.read_text()
        assert API_KEY not in raw
        assert "[REDACTED]" in raw


class TestRequestTranslation:
    """The engine's Messages API request, as the Chat Completions body that means the same."""

    def test_history_shapes(self) -> None:
        """Tool results come first, as tool messages; text after them is a user message."""
        messages = [
            {"role": "user", "content": [{"type": "text", "text": "go", "cache_control": {}}]},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "hidden", "signature": "x"},
                    {"type": "text", "text": "Checking."},
                    {"type": "tool_use", "id": "call_a", "name": "f", "input": {"x": 1}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "call_a",
                        "content": "",
                        "is_error": True,
                    },
                    {"type": "text", "text": "[system notice] stop repeating"},
                ],
            },
        ]
        tools = [{"name": "f", "description": "F.", "input_schema": {"type": "object"},
                  "cache_control": {"type": "ephemeral"}}]  # fmt: skip
        system = [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}]
        body = to_chat_request(request(messages=messages, tools=tools, system=system))
        assert body["messages"] == [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "go"},
            {
                "role": "assistant",
                "content": "Checking.",
                "tool_calls": [
                    {"id": "call_a", "type": "function",
                     "function": {"name": "f", "arguments": '{"x": 1}'}},
                ],
            },
            {"role": "tool", "tool_call_id": "call_a", "content": "Error: (empty result)"},
            {"role": "user", "content": "[system notice] stop repeating"},
        ]  # fmt: skip
        assert body["tools"] == [
            {"type": "function",
             "function": {"name": "f", "parameters": {"type": "object"}, "description": "F."}},
        ]  # fmt: skip
        assert validate_chat_request(body) == []

    @pytest.mark.parametrize(
        ("choice", "expected"),
        [
            ({"type": "none"}, "none"),
            ({"type": "auto"}, "auto"),
            ({"type": "any"}, "required"),
            ({"type": "tool", "name": "f"}, {"type": "function", "function": {"name": "f"}}),
        ],
    )
    def test_tool_choice(self, choice: JSON, expected: Any) -> None:
        """Each Messages API tool_choice has its Chat Completions counterpart."""
        tools = [{"name": "f", "input_schema": {"type": "object"}}]
        body = to_chat_request(request(tools=tools, tool_choice=choice))
        assert body["tool_choice"] == expected

    def test_tool_choice_without_tools_is_left_out(self) -> None:
        """The API refuses tool_choice with no tools, so it is not sent."""
        body = to_chat_request(request(tool_choice={"type": "none"}))
        assert "tool_choice" not in body
        assert validate_chat_request(body) == []

    def test_options(self) -> None:
        """stop_sequences become stop; Anthropic-only options are dropped; others pass."""
        extra = {"temperature": 0.2, "stop_sequences": ["END"], "top_k": 5, "seed": 7,
                 "context_management": {"edits": []}}  # fmt: skip
        body = to_chat_request(request(extra=extra), max_tokens_param="max_tokens")
        assert {k: body[k] for k in ("temperature", "stop", "seed", "max_tokens")} == {
            "temperature": 0.2, "stop": ["END"], "seed": 7, "max_tokens": 256,
        }  # fmt: skip
        assert "top_k" not in body
        assert "context_management" not in body

    def test_images(self) -> None:
        """Images become image_url parts, also when a tool returned them."""
        image = {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                             "data": "iVBOR"}}  # fmt: skip
        messages = [
            {"role": "user", "content": [{"type": "text", "text": "look"}, image]},
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "c", "name": "f", "input": {}}],
            },
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "c", "content": [image]}],
            },
        ]
        tools = [{"name": "f", "input_schema": {"type": "object"}}]
        body = to_chat_request(request(messages=messages, tools=tools))
        url = "data:image/png;base64,iVBOR"
        assert body["messages"][0]["content"][1] == {"type": "image_url", "image_url": {"url": url}}
        assert body["messages"][2]["role"] == "tool"
        assert body["messages"][3]["content"] == [{"type": "image_url", "image_url": {"url": url}}]
        assert validate_chat_request(body) == []

    def test_untranslatable_content_is_an_error(self) -> None:
        """A document block cannot be carried, so the call fails naming it, not dropping it."""
        doc = {"type": "document", "source": {"type": "text", "data": "x"}}
        with pytest.raises(ModelError, match="'document' block"):
            to_chat_request(request(messages=[{"role": "user", "content": [doc]}]))


class TestReplyTranslation:
    """A completion comes back as Messages API blocks with an Anthropic stop_reason."""

    @pytest.mark.parametrize(
        ("finish", "stop"),
        [("stop", "end_turn"), ("tool_calls", "tool_use"), ("length", "max_tokens"),
         ("content_filter", "refusal"), ("something_new", "something_new")],
    )  # fmt: skip
    def test_finish_reasons(self, finish: str, stop: str) -> None:
        """Known finish reasons are mapped; unknown ones pass through unchanged."""
        assert from_chat_completion(chat_text("x", finish_reason=finish)).stop_reason == stop

    def test_tool_calls_with_stop(self) -> None:
        """A server that says 'stop' on a reply calling tools is read as tool use."""
        body = chat_completion(tool_calls=[tool_call("f", {"a": 1}, id="c1")], finish_reason="stop")
        reply = from_chat_completion(body)
        assert reply.stop_reason == "tool_use"
        assert reply.tool_uses == [{"type": "tool_use", "id": "c1", "name": "f", "input": {"a": 1}}]

    def test_empty_and_missing_arguments(self) -> None:
        """Empty arguments are no arguments; a missing id is made up, stably."""
        call = {"type": "function", "function": {"name": "f", "arguments": ""}}
        first = from_chat_completion(chat_completion(tool_calls=[call], finish_reason="tool_calls"))
        again = from_chat_completion(chat_completion(tool_calls=[call], finish_reason="tool_calls"))
        assert first.tool_uses[0]["input"] == {}
        assert first.tool_uses[0]["id"].startswith("call_")
        assert first.tool_uses[0]["id"] == again.tool_uses[0]["id"]

    def test_text_with_tool_calls(self) -> None:
        """Text before the calls is kept as a text block, first, as the Messages API orders it."""
        reply = from_chat_completion(chat_tool_calls(("f", {}), content="Let me look."))
        assert [b["type"] for b in reply.content] == ["text", "tool_use"]
        assert reply.text == "Let me look."


class TestFakeServer:
    """The fake answers and rejects like the API, so a passing run means a valid history."""

    def post(self, server: FakeOpenAIServer, body: object, auth: bool = True) -> tuple[int, Any]:
        headers = {"content-type": "application/json"}
        if auth:
            headers["authorization"] = "Bearer test"
        sent = urllib.request.Request(
            server.base_url + "/chat/completions",
            data=json.dumps(body).encode(),
            headers=headers,
            method="POST",
        )
        try:
            with urllib.request.urlopen(sent, timeout=5) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read())

    def test_missing_key_is_401(self) -> None:
        """Like the API, the fake wants a bearer token."""
        with FakeOpenAIServer([chat_text()]) as server:
            status, body = self.post(server, {"model": "m", "messages": []}, auth=False)
        assert status == 401
        assert body["error"]["code"] == "missing_api_key"

    @pytest.mark.parametrize(
        ("messages", "problem"),
        [
            ([{"role": "assistant", "tool_calls": [tool_call("f", {}, "c1")]},
              {"role": "user", "content": "next"}], "must be followed by tool messages"),
            ([{"role": "user", "content": "hi"},
              {"role": "tool", "tool_call_id": "c9", "content": "x"}], "must be a response"),
            ([{"role": "user", "content": ""}], "must not be empty"),
            ([{"role": "assistant", "content": None}], "needs content or tool_calls"),
            ([{"role": "user", "content": [{"type": "text", "text": "hi",
                                            "cache_control": {"type": "ephemeral"}}]}],
             "cache_control"),
            ([{"role": "assistant", "tool_calls": [tool_call("f", "{oops", "c1")]},
              {"role": "tool", "tool_call_id": "c1", "content": "x"}], "not valid JSON"),
        ],
    )  # fmt: skip
    def test_invalid_histories_are_400(self, messages: list[JSON], problem: str) -> None:
        """Each history the API refuses comes back as a 400 naming the problem."""
        tools = [{"type": "function", "function": {"name": "f"}}]
        with FakeOpenAIServer([chat_text()]) as server:
            status, body = self.post(server, {"model": "m", "messages": messages, "tools": tools})
            assert server.remaining == 1
        assert status == 400
        assert problem in body["error"]["message"]

    def test_tool_calls_need_tools(self) -> None:
        """A history with tool calls but no tool definitions is rejected."""
        messages = [
            {"role": "assistant", "tool_calls": [tool_call("f", {}, "c1")]},
            {"role": "tool", "tool_call_id": "c1", "content": "done"},
        ]
        problems = validate_chat_request({"model": "m", "messages": messages})
        assert problems == ["messages contain tool_calls but the request defines no tools"]

    def test_unknown_parameter(self) -> None:
        """A parameter the SDK does not declare (an Anthropic leftover) is rejected."""
        body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "system": "x"}
        assert validate_chat_request(body) == ["unrecognized request arguments: system"]
