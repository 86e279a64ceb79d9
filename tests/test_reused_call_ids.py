"""A reused tool_use id never runs a second call under the first call's idempotency key.

A tool that deduplicates on `idempotency_key` (as the docs advise for side effects)
would otherwise drop the second call and report success. The API gives every call a
fresh id; a server or gateway that does not is answered with an error result instead.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from statemachine_agent import Agent, Budget, ScriptedModel, tool
from statemachine_agent.testing import replies


def ledger_agent(script: list[Any], keys: list[str]) -> Agent:
    @tool
    def pay(amount: int, idempotency_key: str) -> str:
        """Pay an amount.

        Args:
            amount: in cents.
        """
        if idempotency_key in keys:
            return "already paid"  # what a deduplicating tool answers
        keys.append(idempotency_key)
        return f"paid {amount}"

    # The strict validator would (rightly) refuse the history a reused id makes; the
    # point here is what the engine does with such a reply.
    model = ScriptedModel(script, validate=False)
    return Agent(model, tools=[pay], stall=None, budget=Budget(max_iterations=20))


def tool_results(result: Any) -> list[dict[str, Any]]:
    return [
        block
        for message in result.messages
        if message["role"] == "user" and isinstance(message["content"], list)
        for block in message["content"]
        if block.get("type") == "tool_result"
    ]


class TestReusedIds:
    def test_a_later_reply_reusing_an_id_is_refused(self) -> None:
        keys: list[str] = []
        script = [
            replies.tool_use("pay", {"amount": 5}, id="toolu_1"),
            replies.tool_use("pay", {"amount": 7}, id="toolu_1"),
            replies.text("done"),
        ]
        result = ledger_agent(script, keys).run("pay twice")
        assert keys == [f"{result.run_id}:toolu_1"]
        first, second = tool_results(result)
        assert first["content"] == "paid 5"
        assert second["is_error"] is True
        assert "reused the id 'toolu_1'" in second["content"]

    def test_two_calls_of_one_reply_with_one_id(self) -> None:
        keys: list[str] = []
        script = [
            replies.tool_uses(("pay", {"amount": 1}), ("pay", {"amount": 2}), ids=("t", "t")),
            replies.text("done"),
        ]
        result = ledger_agent(script, keys).run("pay")
        assert len(keys) == 1
        results = tool_results(result)
        assert sorted(r.get("is_error", False) for r in results) == [False, True]

    @settings(max_examples=40, deadline=None)
    @given(st.lists(st.lists(st.sampled_from("abcd"), min_size=1, max_size=3), max_size=5))
    def test_no_key_is_given_to_two_calls(self, replies_ids: list[list[str]]) -> None:
        """Whatever ids the replies reuse, each key reaches the tool at most once, and
        exactly the first call with each id runs."""
        keys: list[str] = []
        script: list[Any] = [
            replies.tool_uses(*[("pay", {"amount": i}) for i, _ in enumerate(ids)],
                              ids=tuple(f"toolu_{x}" for x in ids))
            for ids in replies_ids
        ]  # fmt: skip
        script.append(replies.text("done"))
        result = ledger_agent(script, keys).run("pay")
        assert len(keys) == len(set(keys))
        distinct = {x for ids in replies_ids for x in ids}
        assert sorted(keys) == sorted(f"{result.run_id}:toolu_{x}" for x in distinct)
        errors = [r for r in tool_results(result) if r.get("is_error")]
        calls = sum(len(ids) for ids in replies_ids)
        assert len(errors) == calls - len(distinct)
