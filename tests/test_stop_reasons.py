"""Every documented stop reason is routed by name, through the real SDK where it matters.

`compaction` (server-side compaction with `pause_after_compaction`) keeps the
reply and goes on; an `end_turn` reply that also asked for tools, rejected by
the verifier, still leads to a request the API accepts.
"""

from __future__ import annotations

from statemachine_agent import Agent, ContextPolicy, ScriptedModel, Verdict, calculate
from statemachine_agent.models.anthropic import AnthropicModel
from statemachine_agent.models.sdk_args import COMPACTION_BETA
from statemachine_agent.testing import replies
from statemachine_agent.testing.assertions import assert_path
from statemachine_agent.testing.server import FakeAnthropicServer
from statemachine_agent.testing.validator import validate_request

COMPACT = {"edits": [{"type": "compact_20260112", "pause_after_compaction": True}]}


class TestCompaction:
    def test_a_compaction_stop_keeps_the_reply_and_goes_on(self) -> None:
        compacted = replies.reply(
            {"type": "compaction", "content": "Summary: the user asked for 2+2."},
            stop_reason="compaction",
        )
        with FakeAnthropicServer([compacted, replies.text("4")]) as server:
            model = AnthropicModel(api_key="k-test", base_url=server.base_url, max_retries=0)
            agent = Agent(model, tools=[calculate], context=ContextPolicy(server_edits=COMPACT))
            result = agent.run("What is 2+2?")
        assert result.end_state == "completed", result.reason
        assert_path(result, ["perceive", "reason", "perceive", "reason", "completed"])
        assert server.invalid_requests == []
        second = server.requests[1]["messages"]
        assert second[-1]["role"] == "assistant"
        assert second[-1]["content"][0]["type"] == "compaction"
        assert COMPACTION_BETA in server.headers[1].get("anthropic-beta", "")
        assert result.text == "4"


class TestEndTurnWithToolUse:
    def test_a_rejected_end_turn_that_asked_for_tools_still_gives_a_valid_request(self) -> None:
        both = replies.reply(
            replies.text_block("Done, I think."),
            replies.tool_use_block("calculate", {"expression": "1+1"}, "toolu_late"),
            stop_reason="end_turn",
        )
        verdicts = iter([Verdict(ok=False, feedback="Check the sum."), Verdict(ok=True)])
        model = ScriptedModel([both, replies.text("It is 2.")])
        result = Agent(model, tools=[calculate], verify=lambda claim: next(verdicts)).run("1+1?")
        assert result.end_state == "completed", result.reason
        assert validate_request(model.requests[1].to_api()) == []
        answers = model.requests[1].messages[-1]["content"]
        assert answers[0]["type"] == "tool_result"
        assert answers[0]["tool_use_id"] == "toolu_late"
        assert "not run" in answers[0]["content"].lower()
