"""Reply builders produce exactly the response JSON the SDK parses."""

from __future__ import annotations

import re

import anthropic
import pytest

from statemachine_agent.models.base import ModelReply, Usage
from statemachine_agent.testing import (
    DEFAULT_USAGE,
    new_id,
    reply,
    text,
    text_block,
    thinking_block,
    tool_use,
    tool_use_block,
    tool_uses,
)

TOOL_USE_ID = re.compile(r"^toolu_[A-Za-z0-9]{24}$")
MESSAGE_ID = re.compile(r"^msg_[A-Za-z0-9]{24}$")


class TestText:
    """`text` builds a complete end_turn response."""

    def test_shape(self) -> None:
        """The body has every top-level field of a real response."""
        body = text("Hello.")
        assert body == {
            "id": body["id"],
            "type": "message",
            "role": "assistant",
            "model": "claude-sonnet-5",
            "content": [{"type": "text", "text": "Hello."}],
            "stop_reason": "end_turn",
            "stop_sequence": None,
            "usage": dict(DEFAULT_USAGE),
        }
        assert MESSAGE_ID.match(body["id"])

    def test_parsed_by_the_sdk(self) -> None:
        """`anthropic.types.Message.model_validate` accepts it."""
        message = anthropic.types.Message.model_validate(text("Hi", stop_reason="max_tokens"))
        assert message.stop_reason == "max_tokens"
        assert message.content[0].type == "text"
        assert message.usage.output_tokens == 5

    def test_usage_is_merged_over_the_default(self) -> None:
        """A partial usage dict only replaces the counts it names."""
        usage = text(usage={"output_tokens": 99, "cache_read_input_tokens": 7})["usage"]
        assert usage == {
            "input_tokens": 10,
            "output_tokens": 99,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 7,
        }
        assert Usage.from_api(usage).cache_read_tokens == 7

    def test_explicit_id_and_model(self) -> None:
        """Given ids and models are used verbatim."""
        body = text(id="msg_fixed", model="claude-opus-4-1")
        assert body["id"] == "msg_fixed"
        assert body["model"] == "claude-opus-4-1"


class TestToolUse:
    """`tool_use` and `tool_uses` build tool-calling responses."""

    def test_single_call(self) -> None:
        """One tool_use block, stop_reason tool_use, a realistic generated id."""
        body = tool_use("add", {"a": 1})
        assert body["stop_reason"] == "tool_use"
        [block] = body["content"]
        assert block["type"] == "tool_use"
        assert block["name"] == "add"
        assert block["input"] == {"a": 1}
        assert TOOL_USE_ID.match(block["id"])

    def test_text_before_the_call_and_explicit_ids(self) -> None:
        """Optional text comes first; `id` names the tool_use, `message_id` the reply."""
        body = tool_use("add", id="toolu_given", text="Adding.", message_id="msg_given")
        assert [b["type"] for b in body["content"]] == ["text", "tool_use"]
        assert body["content"][1]["id"] == "toolu_given"
        assert body["content"][1]["input"] == {}
        assert body["id"] == "msg_given"

    def test_parallel_calls(self) -> None:
        """Several calls become several blocks with distinct ids, parsed by the SDK."""
        body = tool_uses(("add", {"a": 1}), ("lookup", {"q": "x"}), text="Both.")
        message = anthropic.types.Message.model_validate(body)
        names = [b.name for b in message.content if b.type == "tool_use"]
        assert names == ["add", "lookup"]
        ids = [b["id"] for b in body["content"] if b["type"] == "tool_use"]
        assert len(set(ids)) == 2

    def test_parallel_calls_with_ids(self) -> None:
        """`ids` names the tool_use ids in order and must match the calls."""
        body = tool_uses(("a", {}), ("b", {}), ids=("toolu_1", "toolu_2"))
        assert [b["id"] for b in body["content"]] == ["toolu_1", "toolu_2"]
        with pytest.raises(ValueError, match="2 tool calls"):
            tool_uses(("a", {}), ("b", {}), ids=("toolu_1",))

    def test_input_is_copied(self) -> None:
        """Changing the input afterwards does not change the scripted reply."""
        arguments = {"a": 1}
        body = tool_use("add", arguments)
        arguments["a"] = 2
        assert body["content"][0]["input"] == {"a": 1}

    def test_model_reply_reads_it(self) -> None:
        """The engine's `ModelReply.from_api` sees the tool calls and usage."""
        model_reply = ModelReply.from_api(tool_use("add", {"a": 1}, text="Adding."))
        assert [b["name"] for b in model_reply.tool_uses] == ["add"]
        assert model_reply.text == "Adding."
        assert model_reply.usage.input_tokens == 10


class TestReply:
    """`reply` builds any response, including unusual ones."""

    def test_any_blocks_and_stop_reason(self) -> None:
        """Thinking blocks and refusals with stop details parse in the SDK."""
        body = reply(
            thinking_block("Let me think."),
            text_block("I can't help with that."),
            stop_reason="refusal",
            stop_details={"type": "refusal", "category": "cyber", "explanation": None},
        )
        message = anthropic.types.Message.model_validate(body)
        assert [b.type for b in message.content] == ["thinking", "text"]
        assert message.stop_reason == "refusal"
        assert body["stop_details"]["type"] == "refusal"

    def test_unknown_stop_reason_and_no_content(self) -> None:
        """Unknown stop reasons and empty content are kept for tests of odd replies."""
        body = reply(stop_reason="brand_new_reason")
        assert body["stop_reason"] == "brand_new_reason"
        assert body["content"] == []
        assert "stop_details" not in body
        stop_reason: object = anthropic.types.Message.construct(**body).stop_reason
        assert stop_reason == "brand_new_reason"

    def test_null_stop_reason(self) -> None:
        """A null stop reason (as in a stream's message_start) is allowed."""
        assert reply(text_block("x"), stop_reason=None)["stop_reason"] is None

    def test_block_builders(self) -> None:
        """Block builders give plain API JSON, with a generated id when none is given."""
        assert text_block("x") == {"type": "text", "text": "x"}
        block = tool_use_block("add", {"a": 1})
        assert TOOL_USE_ID.match(block["id"])
        assert tool_use_block("add", id="toolu_z")["id"] == "toolu_z"
        anthropic.types.ToolUseBlock.model_validate(block)
        anthropic.types.ThinkingBlock.model_validate(thinking_block("hm"))


def test_ids_are_unique_and_shaped_like_the_apis() -> None:
    """Generated ids never repeat within a process and match the API's format."""
    ids = [new_id("toolu") for _ in range(200)]
    assert len(set(ids)) == 200
    assert all(TOOL_USE_ID.match(i) for i in ids)
    assert MESSAGE_ID.match(new_id("msg"))
