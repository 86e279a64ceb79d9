"""Reply builders produce exactly the response JSON the SDK parses."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import anthropic
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from statemachine_agent.models.base import ModelReply, Usage
from statemachine_agent.testing import (
    DEFAULT_USAGE,
    deterministic_ids,
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


_TWO_PROCESSES = """
import sys
from statemachine_agent import Agent, Approve, ScriptedModel, tool
from statemachine_agent.testing import replies

@tool(requires_approval=True)
def pay(amount: int) -> str:
    '''Pay an amount (needs approval).'''
    return f"paid {amount}"

@tool
def balance() -> str:
    '''The account's balance.'''
    return "95"

step, store = sys.argv[1], sys.argv[2]
if step == "start":
    script = [replies.tool_use("pay", {"amount": 5})]
    agent = Agent(ScriptedModel(script), [pay, balance], checkpointer=store)
    result = agent.run("pay 5", run_id="run_crossprocess")
    print(result.end_state, result.details["pending"][0]["tool_use_id"])
else:
    script = [replies.tool_use("balance"), replies.text("done")]
    agent = Agent(ScriptedModel(script), [pay, balance], checkpointer=store)
    result = agent.resume("run_crossprocess", decisions={sys.argv[3]: Approve()})
    print(result.end_state, result.reason)
"""


class TestIdsAcrossProcesses:
    """Generated ids are unique across processes unless determinism is asked for."""

    def test_a_scripted_run_resumed_in_another_process_passes_the_strict_validator(
        self, tmp_path: Path
    ) -> None:
        """Each process builds its script's ids afresh; the resumed history (the first
        process's calls, then the second's) still holds no tool_use id twice."""
        store = str(tmp_path / "runs.sqlite3")
        state, pending = _python(_TWO_PROCESSES, "start", store).split()
        assert state == "awaiting_approval"
        resumed = _python(_TWO_PROCESSES, "resume", store, pending)
        assert resumed.startswith("completed"), resumed

    def test_ids_differ_between_processes_and_match_within_a_seed(self) -> None:
        code = (
            "from statemachine_agent.testing import replies\n"
            "print(*(replies.new_id('toolu') for _ in range(50)))\n"
            "with replies.deterministic_ids('s'):\n"
            "    print(*(replies.new_id('toolu') for _ in range(3)))\n"
        )
        random_ids, seeded = _python(code).splitlines()
        here = {new_id("toolu") for _ in range(50)}
        assert not here & set(random_ids.split())
        with deterministic_ids("s"):
            assert [new_id("toolu") for _ in range(3)] == seeded.split()

    @settings(max_examples=20, deadline=None)
    @given(seed=st.text(max_size=20), n=st.integers(1, 30))
    def test_a_seeded_block_repeats_itself_and_leaves_the_rest_random(
        self, seed: str, n: int
    ) -> None:
        with deterministic_ids(seed):
            first = [tool_use("t")["content"][0]["id"] for _ in range(n)]
        with deterministic_ids(seed):
            again = [tool_use("t")["content"][0]["id"] for _ in range(n)]
        assert first == again
        assert len(set(first)) == n
        assert all(TOOL_USE_ID.match(i) for i in first)
        assert new_id("toolu") not in first


def _python(code: str, *args: str) -> str:
    """Run `code` in a fresh interpreter (the package from this checkout); its stdout."""
    done = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, check=False,
        cwd=Path(__file__).resolve().parents[1],
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()
