"""The request validator: valid histories pass, each API rule is enforced with its location."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from statemachine_agent.models.base import ModelReply
from statemachine_agent.testing import (
    MAX_CACHE_BREAKPOINTS,
    InvalidRequestError,
    assert_valid_request,
    known_request_params,
    replies,
    validate_request,
)

JSON = dict[str, Any]

TOOLS: list[JSON] = [
    {
        "name": "add",
        "description": "Add two numbers.",
        "input_schema": {
            "type": "object",
            "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
            "required": ["a", "b"],
        },
    },
    {"name": "lookup", "input_schema": {"type": "object", "properties": {}}},
]


def round_trip() -> JSON:
    """A valid request: a question, parallel tool calls and their results, an answer, thanks."""
    return {
        "model": "claude-sonnet-5",
        "max_tokens": 1024,
        "system": [{"type": "text", "text": "Be brief."}],
        "tools": copy.deepcopy(TOOLS),
        "messages": [
            {"role": "user", "content": "What is 1 + 2?"},
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Let me add."},
                    {
                        "type": "tool_use",
                        "id": "toolu_01",
                        "name": "add",
                        "input": {"a": 1, "b": 2},
                    },
                    {"type": "tool_use", "id": "toolu_02", "name": "lookup", "input": {}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_01", "content": "3"},
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_02",
                        "content": [{"type": "text", "text": "(empty result)"}],
                        "is_error": False,
                    },
                    {"type": "text", "text": "Go on."},
                ],
            },
            {"role": "assistant", "content": [{"type": "text", "text": "It is 3."}]},
            {"role": "user", "content": "Thanks."},
        ],
    }


def problems_after(change: Callable[[JSON], object]) -> list[str]:
    body = round_trip()
    change(body)
    return validate_request(body)


def assert_problem(problems: list[str], location: str, phrase: str) -> None:
    matching = [p for p in problems if p.startswith(f"{location}:") and phrase in p]
    assert matching, f"no problem at {location!r} mentioning {phrase!r} in {problems}"


def messages(body: JSON) -> list[JSON]:
    result: list[JSON] = body["messages"]
    return result


def block(body: JSON, i: int, j: int) -> JSON:
    result: JSON = body["messages"][i]["content"][j]
    return result


class TestValidRequests:
    """Requests the real API accepts produce no problems."""

    def test_tool_round_trip_is_valid(self) -> None:
        """A multi-turn history with parallel tool calls and their results is valid."""
        assert validate_request(round_trip()) == []
        assert_valid_request(round_trip())

    def test_minimal_request_is_valid(self) -> None:
        """A single user string with no tools is valid."""
        body = {"model": "m", "max_tokens": 1, "messages": [{"role": "user", "content": "Hi"}]}
        assert validate_request(body) == []

    def test_unknown_assistant_blocks_are_kept(self) -> None:
        """Thinking, server tool and brand-new block types in assistant content pass as-is."""

        def change(body: JSON) -> None:
            block(body, 1, 0).update(replies.thinking_block("Hmm."))
            messages(body)[3]["content"] = [
                {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {}},
                {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": []},
                {"type": "redacted_thinking", "data": "abc"},
                {"type": "hologram_2031", "payload": {"x": 1}},
                {"type": "text", "text": "It is 3."},
            ]
            body["tools"].append({"type": "web_search_20250305", "name": "web_search"})

        assert problems_after(change) == []

    def test_reply_from_the_api_can_be_sent_back(self) -> None:
        """An assistant message built by `ModelReply.to_message` from a built reply is valid."""
        answer = replies.tool_use("add", {"a": 1, "b": 2}, id="toolu_x", text="Adding.")
        body = {
            "model": "claude-sonnet-5",
            "max_tokens": 100,
            "tools": TOOLS,
            "messages": [
                {"role": "user", "content": "Add."},
                ModelReply.from_api(answer).to_message(),
                {
                    "role": "user",
                    "content": [{"type": "tool_result", "tool_use_id": "toolu_x", "content": "3"}],
                },
            ],
        }
        assert validate_request(body) == []

    def test_sdk_params_and_sampling_params_are_known(self) -> None:
        """Parameters the SDK declares, and the old sampling ones, are accepted."""
        params = known_request_params()
        assert {"model", "messages", "max_tokens", "tools", "thinking", "stream"} <= params
        body = round_trip()
        body.update(temperature=0.5, top_p=0.9, top_k=5, service_tier="auto", stream=False)
        body["metadata"] = {"user_id": "u1"}
        assert validate_request(body) == []

    def test_zero_max_tokens_is_allowed(self) -> None:
        """`max_tokens: 0` is valid: the SDK documents it for pre-warming the prompt cache."""
        assert problems_after(lambda b: b.update(max_tokens=0)) == []

    def test_server_tool_without_schema_is_allowed(self) -> None:
        """A built-in tool is identified by its `type` and needs no input_schema."""
        tool = {"type": "web_search_20250305", "name": "web_search", "max_uses": 3}
        assert problems_after(lambda b: b["tools"].append(tool)) == []

    def test_tool_choice_naming_a_defined_tool_is_valid(self) -> None:
        """`tool_choice` of type tool may name any defined tool."""
        choice = {"type": "tool", "name": "add", "disable_parallel_tool_use": True}
        assert problems_after(lambda b: b.update(tool_choice=choice)) == []


TOP_LEVEL_CASES: list[tuple[str, Callable[[JSON], object], str, str]] = [
    ("model missing", lambda b: b.pop("model"), "model", "field required"),
    ("model empty", lambda b: b.update(model=""), "model", "non-empty string"),
    ("max_tokens missing", lambda b: b.pop("max_tokens"), "max_tokens", "field required"),
    ("max_tokens negative", lambda b: b.update(max_tokens=-1), "max_tokens", "greater than"),
    ("max_tokens string", lambda b: b.update(max_tokens="10"), "max_tokens", "integer"),
    ("max_tokens bool", lambda b: b.update(max_tokens=True), "max_tokens", "integer"),
    ("messages missing", lambda b: b.pop("messages"), "messages", "field required"),
    ("messages empty", lambda b: b.update(messages=[]), "messages", "at least one"),
    ("messages not list", lambda b: b.update(messages="hi"), "messages", "list of messages"),
    ("unknown param", lambda b: b.update(temprature=1), "temprature", "unknown"),
    ("stream not bool", lambda b: b.update(stream="yes"), "stream", "boolean"),
    ("temperature range", lambda b: b.update(temperature=1.5), "temperature", "between 0 and 1"),
    ("stop_sequences", lambda b: b.update(stop_sequences="END"), "stop_sequences", "list"),
    ("metadata", lambda b: b.update(metadata="x"), "metadata", "object"),
]


MESSAGE_CASES: list[tuple[str, Callable[[JSON], object], str, str]] = [
    (
        "first message from assistant",
        lambda b: messages(b).insert(0, {"role": "assistant", "content": "Hello."}),
        "messages[0].role",
        "first message must be a user message",
    ),
    (
        "unknown role",
        lambda b: messages(b)[4].update(role="system"),
        "messages[4].role",
        "'user' or 'assistant'",
    ),
    (
        "roles not alternating",
        lambda b: messages(b).append({"role": "user", "content": "Again."}),
        "messages[5].role",
        "alternate",
    ),
    (
        "message not an object",
        lambda b: b["messages"].append("hi"),
        "messages[5]",
        "message object",
    ),
    (
        "extra key on a message",
        lambda b: messages(b)[0].update(name="bob"),
        "messages[0].name",
        "extra inputs",
    ),
    (
        "content missing",
        lambda b: messages(b)[4].pop("content"),
        "messages[4].content",
        "field required",
    ),
    (
        "content empty string",
        lambda b: messages(b)[4].update(content=""),
        "messages[4].content",
        "non-whitespace",
    ),
    (
        "content whitespace",
        lambda b: messages(b)[4].update(content="  \n"),
        "messages[4].content",
        "non-whitespace",
    ),
    (
        "content empty list",
        lambda b: messages(b)[3].update(content=[]),
        "messages[3].content",
        "must not be empty",
    ),
    (
        "content wrong type",
        lambda b: messages(b)[4].update(content=42),
        "messages[4].content",
        "string or a list",
    ),
    (
        "block not an object",
        lambda b: messages(b)[3].update(content=["It is 3."]),
        "messages[3].content[0]",
        "content block object",
    ),
    (
        "block without type",
        lambda b: messages(b)[3].update(content=[{"text": "It is 3."}]),
        "messages[3].content[0].type",
        "needs a 'type'",
    ),
    (
        "empty text block",
        lambda b: block(b, 3, 0).update(text=""),
        "messages[3].content[0].text",
        "non-whitespace",
    ),
    (
        "whitespace text block",
        lambda b: block(b, 3, 0).update(text=" \t"),
        "messages[3].content[0].text",
        "non-whitespace",
    ),
    (
        "extra key on a text block",
        lambda b: block(b, 3, 0).update(tokens=3),
        "messages[3].content[0].tokens",
        "extra inputs",
    ),
    (
        "image without source",
        lambda b: messages(b)[4].update(content=[{"type": "image"}]),
        "messages[4].content[0].source",
        "source",
    ),
]


TOOL_USE_CASES: list[tuple[str, Callable[[JSON], object], str, str]] = [
    (
        "tool_use in a user message",
        lambda b: messages(b)[4].update(
            content=[{"type": "tool_use", "id": "toolu_9", "name": "add", "input": {}}]
        ),
        "messages[4].content[0]",
        "only appear in assistant messages",
    ),
    (
        "tool_use id with bad characters",
        lambda b: block(b, 1, 1).update(id="toolu 01!"),
        "messages[1].content[1].id",
        "must be a string matching",
    ),
    (
        "tool_use name not a string",
        lambda b: block(b, 1, 1).update(name=7),
        "messages[1].content[1].name",
        "non-empty string",
    ),
    (
        "tool_use input not an object",
        lambda b: block(b, 1, 1).update(input="a=1"),
        "messages[1].content[1].input",
        "must be an object",
    ),
    (
        "duplicate tool_use ids",
        lambda b: block(b, 1, 2).update(id="toolu_01"),
        "messages[1].content[2].id",
        "unique",
    ),
    (
        "tool_use not answered in the next message",
        lambda b: messages(b)[2]["content"].pop(1),
        "messages[1].content[2]",
        "messages[2] has no tool_result for it",
    ),
    (
        "tool_use followed by an assistant message",
        lambda b: messages(b).insert(2, {"role": "assistant", "content": "Wait."}),
        "messages[1].content[1]",
        "messages[2] is not a user message",
    ),
    (
        "request ending with an unanswered tool_use",
        lambda b: messages(b).__delitem__(slice(2, None)),
        "messages[1].content[1]",
        "ends with it",
    ),
    (
        "tool_result in an assistant message",
        lambda b: messages(b)[3]["content"].insert(
            0, {"type": "tool_result", "tool_use_id": "toolu_01", "content": "3"}
        ),
        "messages[3].content[0]",
        "only appear in user messages",
    ),
    (
        "tool_result answering nothing",
        lambda b: block(b, 2, 1).update(tool_use_id="toolu_x"),
        "messages[2].content[1]",
        "tool_result for 'toolu_x' does not answer a tool_use of the previous assistant message",
    ),
    (
        "tool_result answering an older tool_use",
        lambda b: messages(b).extend(
            [
                {"role": "assistant", "content": "More?"},
                {
                    "role": "user",
                    "content": [{"type": "tool_result", "tool_use_id": "toolu_01", "content": "3"}],
                },
            ]
        ),
        "messages[6].content[0]",
        "does not answer a tool_use of the previous assistant message",
    ),
    (
        "tool_result in the first message",
        lambda b: messages(b)[0].update(
            content=[{"type": "tool_result", "tool_use_id": "toolu_01", "content": "3"}]
        ),
        "messages[0].content[0]",
        "does not answer",
    ),
    (
        "duplicate tool_result",
        lambda b: block(b, 2, 1).update(tool_use_id="toolu_01"),
        "messages[2].content[1]",
        "duplicate tool_result for 'toolu_01'",
    ),
    (
        "tool_result after text",
        lambda b: messages(b)[2]["content"].insert(0, {"type": "text", "text": "Results:"}),
        "messages[2].content[1]",
        "must come first",
    ),
    (
        "tool_result is_error not a bool",
        lambda b: block(b, 2, 1).update(is_error="no"),
        "messages[2].content[1].is_error",
        "boolean",
    ),
    (
        "tool_result empty string",
        lambda b: block(b, 2, 0).update(content=""),
        "messages[2].content[0].content",
        "(empty result)",
    ),
    (
        "tool_result empty list",
        lambda b: block(b, 2, 1).update(content=[]),
        "messages[2].content[1].content",
        "(empty result)",
    ),
    (
        "tool_result without content",
        lambda b: block(b, 2, 0).pop("content"),
        "messages[2].content[0].content",
        "(empty result)",
    ),
    (
        "tool_result content with a tool_use block",
        lambda b: block(b, 2, 1).update(content=[{"type": "tool_use"}]),
        "messages[2].content[1].content[0].type",
        "must be one of",
    ),
    (
        "tool_result content with a blank text block",
        lambda b: block(b, 2, 1).update(content=[{"type": "text", "text": ""}]),
        "messages[2].content[1].content[0].text",
        "non-whitespace",
    ),
    (
        "tool_result with an extra key",
        lambda b: block(b, 2, 0).update(name="add"),
        "messages[2].content[0].name",
        "extra inputs",
    ),
    (
        "tool blocks without tools",
        lambda b: b.pop("tools"),
        "tools",
        "must define tools",
    ),
    (
        "tool blocks with an empty tools list",
        lambda b: b.update(tools=[]),
        "tools",
        "must define tools",
    ),
]


TOOLS_CASES: list[tuple[str, Callable[[JSON], object], str, str]] = [
    ("tools not a list", lambda b: b.update(tools={"add": {}}), "tools", "must be a list"),
    ("tool not an object", lambda b: b["tools"].append("add"), "tools[2]", "object"),
    (
        "tool name with spaces",
        lambda b: b["tools"][1].update(name="look up"),
        "tools[1].name",
        "must be a string matching",
    ),
    (
        "tool name too long",
        lambda b: b["tools"][1].update(name="x" * 129),
        "tools[1].name",
        "must be a string matching",
    ),
    (
        "duplicate tool names",
        lambda b: b["tools"][1].update(name="add"),
        "tools[1].name",
        "unique",
    ),
    (
        "input_schema missing",
        lambda b: b["tools"][1].pop("input_schema"),
        "tools[1].input_schema",
        "field required",
    ),
    (
        "input_schema not an object schema",
        lambda b: b["tools"][1].update(input_schema={"type": "array"}),
        "tools[1].input_schema.type",
        "must be 'object'",
    ),
    (
        "description not a string",
        lambda b: b["tools"][1].update(description=["Look", "up"]),
        "tools[1].description",
        "string",
    ),
    (
        "tool_choice unknown type",
        lambda b: b.update(tool_choice={"type": "required"}),
        "tool_choice.type",
        "must be one of",
    ),
    (
        "tool_choice not an object",
        lambda b: b.update(tool_choice="auto"),
        "tool_choice",
        "object",
    ),
    (
        "tool_choice naming an undefined tool",
        lambda b: b.update(tool_choice={"type": "tool", "name": "subtract"}),
        "tool_choice.name",
        "not defined in tools",
    ),
    (
        "tool_choice tool without a name",
        lambda b: b.update(tool_choice={"type": "tool"}),
        "tool_choice.name",
        "field required",
    ),
    (
        "tool_choice without tools",
        lambda b: b.update(
            tools=[], tool_choice={"type": "auto"}, messages=[{"role": "user", "content": "Hi"}]
        ),
        "tool_choice",
        "only be given when tools are defined",
    ),
    (
        "thinking with a forced tool",
        lambda b: b.update(
            thinking={"type": "enabled", "budget_tokens": 2048}, tool_choice={"type": "any"}
        ),
        "tool_choice",
        "thinking may not be enabled",
    ),
    (
        "thinking budget too small",
        lambda b: b.update(thinking={"type": "enabled", "budget_tokens": 100}),
        "thinking.budget_tokens",
        "at least 1024",
    ),
    (
        "system wrong type",
        lambda b: b.update(system=5),
        "system",
        "string or a list of text blocks",
    ),
    (
        "system non-text block",
        lambda b: b.update(system=[{"type": "image", "source": {}}]),
        "system[0]",
        "text blocks",
    ),
    (
        "system empty text",
        lambda b: b.update(system=[{"type": "text", "text": " "}]),
        "system[0].text",
        "non-whitespace",
    ),
]


ALL_CASES = TOP_LEVEL_CASES + MESSAGE_CASES + TOOL_USE_CASES + TOOLS_CASES


@pytest.mark.parametrize(
    ("change", "location", "phrase"),
    [
        pytest.param(change, location, phrase, id=name)
        for name, change, location, phrase in ALL_CASES
    ],
)
def test_rule_is_enforced_at_its_location(
    change: Callable[[JSON], object], location: str, phrase: str
) -> None:
    """Breaking one rule yields a problem naming where it is and what is wrong."""
    assert_problem(problems_after(change), location, phrase)


class TestCacheControl:
    """At most four cache_control breakpoints, counted across system, tools and messages."""

    @staticmethod
    def mark(body: JSON, count: int) -> None:
        places = [
            body["system"][0],
            body["tools"][0],
            body["tools"][1],
            block(body, 1, 0),
            block(body, 2, 0),
        ]
        for place in places[:count]:
            place["cache_control"] = {"type": "ephemeral"}

    def test_four_breakpoints_are_allowed(self) -> None:
        """Exactly the limit is fine."""
        assert problems_after(lambda b: self.mark(b, MAX_CACHE_BREAKPOINTS)) == []

    def test_five_breakpoints_are_rejected(self) -> None:
        """One more than the limit is a problem listing every breakpoint."""
        problems = problems_after(lambda b: self.mark(b, 5))
        assert_problem(problems, "cache_control", "at most 4")
        assert "messages[2].content[0]" in problems[0]
        assert "system[0]" in problems[0]

    def test_top_level_and_nested_breakpoints_count(self) -> None:
        """The top-level marker and markers inside tool_result content count too."""

        def change(body: JSON) -> None:
            self.mark(body, 3)
            body["cache_control"] = {"type": "ephemeral"}
            block(body, 2, 1)["content"][0]["cache_control"] = {"type": "ephemeral"}

        assert_problem(problems_after(change), "cache_control", "found 5")


class TestInvalidRequestError:
    """`assert_valid_request` raises with every problem, shaped like the API's 400."""

    def test_raises_with_all_problems(self) -> None:
        """Every problem is kept on the exception and listed in its message."""
        body = round_trip()
        body.pop("model")
        messages(body)[4]["content"] = ""
        with pytest.raises(InvalidRequestError) as caught:
            assert_valid_request(body)
        assert len(caught.value.problems) == 2
        assert "2 problems" in str(caught.value)
        assert "messages[4].content" in str(caught.value)
        assert isinstance(caught.value, ValueError)

    def test_error_body_matches_the_api(self) -> None:
        """The error body is the API's error envelope with invalid_request_error."""
        error = InvalidRequestError(["model: field required"])
        body = error.error_body("req_1")
        assert body["type"] == "error"
        assert body["error"]["type"] == "invalid_request_error"
        assert "model: field required" in body["error"]["message"]
        assert body["request_id"] == "req_1"

    def test_non_object_body(self) -> None:
        """A body that is not an object is one problem, not a crash."""
        assert validate_request([1, 2]) == [  # type: ignore[arg-type]
            "request: the body must be a JSON object, got a list"
        ]
