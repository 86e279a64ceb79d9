"""Typed output: `Agent(output_type=T)` answers through `final_result` and gives `result.output`.

Scripted runs check the contract (types, validation feedback, the retry bound, the
verifier, per-run override, checkpoint and resume, replay); one test drives the
real `anthropic` SDK against the local strict server.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pydantic
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typing_extensions import TypedDict

from statemachine_agent import (
    Agent,
    AnthropicModel,
    Approve,
    Audit,
    MemoryCheckpointer,
    ScriptedModel,
    tool,
)
from statemachine_agent.policy.verify import Claim, Verdict
from statemachine_agent.replay import replay
from statemachine_agent.testing import FakeAnthropicServer, replies
from statemachine_agent.testing.assertions import assert_end_state, assert_fired
from statemachine_agent.testing.validator import validate_request
from statemachine_agent.tools.output import OUTPUT_TOOL, OutputTypeError, output_spec


class Invoice(pydantic.BaseModel):
    number: str
    total: float
    paid: bool = False


@dataclass
class Point:
    x: int
    y: int


class Person(TypedDict):
    name: str
    age: int


INVOICE: dict[str, Any] = {"number": "INV-7", "total": 12.5, "paid": True}


def answer(payload: dict[str, Any]) -> dict[str, Any]:
    return replies.tool_use(OUTPUT_TOOL, payload)


def valid_requests(model: ScriptedModel) -> bool:
    return all(validate_request(r.to_api()) == [] for r in model.requests)


class TestOutputTypes:
    """Each kind of output type gives an instance of itself."""

    def test_pydantic_model(self) -> None:
        """A valid final_result call ends `finished` with the model instance as output."""
        model = ScriptedModel([answer(INVOICE)])
        result = Agent(model, output_type=Invoice).run("Read the invoice")
        assert_end_state(result, "finished")
        assert result.output == Invoice(number="INV-7", total=12.5, paid=True)
        assert result.ok
        request = model.requests[0].to_api()
        assert request["tool_choice"] == {"type": "any"}
        (definition,) = request["tools"]
        assert definition["name"] == OUTPUT_TOOL
        assert definition["input_schema"]["required"] == ["number", "total"]
        assert valid_requests(model)

    def test_dataclass(self) -> None:
        result = Agent(ScriptedModel([answer({"x": 1, "y": 2})]), output_type=Point).run("q")
        assert result.output == Point(1, 2)

    def test_typed_dict(self) -> None:
        script = [answer({"name": "Aya", "age": 30})]
        result = Agent(ScriptedModel(script), output_type=Person).run("q")
        assert result.output == {"name": "Aya", "age": 30}

    def test_json_schema(self) -> None:
        """A JSON schema dict validates with jsonschema and the output is the dict."""
        schema = {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        }
        result = Agent(ScriptedModel([answer({"city": "Kyoto"})]), output_type=schema).run("q")
        assert result.output == {"city": "Kyoto"}

    def test_a_type_that_is_not_an_object_is_wrapped(self) -> None:
        """Tool inputs are objects: `list[int]` is asked for under `response`."""
        model = ScriptedModel([answer({"response": [3, 1, 2]})])
        result = Agent(model, output_type=list[int]).run("q")
        assert result.output == [3, 1, 2]
        schema = model.requests[0].to_api()["tools"][0]["input_schema"]
        assert schema["required"] == ["response"]

    def test_a_type_without_a_schema_is_refused_at_construction(self) -> None:
        with pytest.raises(OutputTypeError):
            output_spec(object())
        with pytest.raises(OutputTypeError, match="not a valid JSON schema"):
            output_spec({"type": 12})


class TestValidation:
    """An answer that does not validate goes back to the model, a bounded number of times."""

    def test_invalid_answer_is_sent_back_with_the_errors(self) -> None:
        model = ScriptedModel([answer({"number": "INV-7", "total": "lots"}), answer(INVOICE)])
        result = Agent(model, output_type=Invoice).run("q")
        assert_end_state(result, "finished")
        assert result.output == Invoice(**INVOICE)
        feedback = model.requests[1].to_api()["messages"][2]["content"][0]
        assert feedback["is_error"] is True
        assert "total" in feedback["content"]
        assert valid_requests(model)

    def test_a_validator_error_beyond_the_schema_is_sent_back(self) -> None:
        """pydantic validators run too: their message reaches the model."""

        class Positive(pydantic.BaseModel):
            value: int

            @pydantic.field_validator("value")
            @classmethod
            def positive(cls, v: int) -> int:
                if v <= 0:
                    raise ValueError("must be positive")
                return v

        model = ScriptedModel([answer({"value": -1}), answer({"value": 4})])
        result = Agent(model, output_type=Positive).run("q")
        assert result.output == Positive(value=4)
        feedback = model.requests[1].to_api()["messages"][2]["content"][0]["content"]
        assert "must be positive" in feedback

    def test_too_many_invalid_answers_fail_the_run_naming_the_errors(self) -> None:
        model = ScriptedModel([answer({"number": 7}) for _ in range(3)])
        result = Agent(model, output_type=Invoice, output_retries=2).run("q")
        assert_end_state(result, "failed")
        assert_fired(result, "act", "tools_done", "failed", via=["answer_retries_exhausted"])
        assert "rejected 3 times" in result.reason
        assert "total" in result.reason
        assert result.output is None


class TestAroundTheAnswer:
    def test_the_verifier_sees_the_typed_output(self) -> None:
        seen: list[Any] = []

        def verifier(claim: Claim) -> Verdict:
            seen.append(claim.output)
            return Verdict(ok=claim.output.paid, feedback="it must be paid")

        unpaid = {**INVOICE, "paid": False}
        model = ScriptedModel([answer(unpaid), answer(INVOICE)])
        result = Agent(model, output_type=Invoice, verify=verifier).run("q")
        assert_end_state(result, "finished")
        assert seen == [Invoice(**unpaid), Invoice(**INVOICE)]

    def test_per_run_override(self) -> None:
        """`run(output_type=...)` answers with another type for that run only."""
        agent = Agent(ScriptedModel([answer({"x": 3, "y": 4}), replies.text("free text")]))
        typed = agent.run("q", output_type=Point)
        assert typed.output == Point(3, 4)
        plain = agent.run("q")
        assert_end_state(plain, "completed")
        assert plain.output is None
        assert agent.output_type is None

    def test_replace_changes_the_output_type(self) -> None:
        agent = Agent(ScriptedModel([answer({"x": 1, "y": 1})]), output_type=Invoice)
        other = agent.replace(output_type=Point)
        assert other.output_type is Point
        assert agent.output_type is Invoice
        assert other.tools.get(OUTPUT_TOOL) is not None

    def test_typed_value_survives_an_approval_pause_and_resume(self) -> None:
        """The checkpointed JSON answer is typed again after a resume (another agent)."""

        @tool(requires_approval=True)
        def pay(number: str) -> str:
            """Pay an invoice (needs approval)."""
            return f"paid {number}"

        script = [replies.tool_use("pay", {"number": "INV-7"}), answer(INVOICE)]
        store = MemoryCheckpointer()
        paused = Agent(ScriptedModel(script[:1]), tools=[pay], checkpointer=store).run(
            "q", output_type=Invoice
        )
        assert_end_state(paused, "awaiting_approval")
        (pending,) = (paused.details or {})["pending"]
        later = Agent(ScriptedModel(script[1:]), tools=[pay], checkpointer=store)
        resumed = later.resume(
            paused.run_id, decisions={pending["tool_use_id"]: Approve()}, output_type=Invoice
        )
        assert_end_state(resumed, "finished")
        assert resumed.output == Invoice(**INVOICE)

    def test_replay_rebuilds_the_typed_answer(self, tmp_path: Path) -> None:
        model = ScriptedModel([answer({"number": "x"}), answer(INVOICE)])
        result = Agent(model, output_type=Invoice, audit=Audit(dir=tmp_path)).run("q")
        assert result.audit_path is not None
        typed = replay(result.audit_path, output_type=Invoice)
        assert typed.matched, typed.difference
        assert typed.result.output == Invoice(**INVOICE)
        plain = replay(result.audit_path)
        assert plain.matched, plain.difference
        assert plain.result.output == INVOICE


@pytest.fixture
def server() -> Iterator[FakeAnthropicServer]:
    with FakeAnthropicServer() as fake:
        yield fake


def test_typed_output_through_the_real_sdk(server: FakeAnthropicServer) -> None:
    """The final_result tool and tool_choice pass the strict server through the real SDK."""
    server.add(answer({"number": "INV-7", "total": "?"}), answer(INVOICE))
    model = AnthropicModel(api_key="sk-ant-test", base_url=server.base_url)
    result = Agent(model, output_type=Invoice).run("Read the invoice")
    assert_end_state(result, "finished")
    assert result.output == Invoice(**INVOICE)
    assert server.invalid_requests == []
    assert server.requests[0]["tool_choice"] == {"type": "any"}
    assert server.requests[0]["tools"][0]["name"] == OUTPUT_TOOL


class TestOnlyAValidatedAnswerEndsOk:
    """With an output type, a plain text answer never ends a run `ok` (issue 26)."""

    def test_a_text_answer_is_answered_and_the_typed_one_ends_the_run(
        self, server: FakeAnthropicServer
    ) -> None:
        """Through the real SDK: the text counts as an invalid answer, the model is told
        to call final_result, and its call ends the run with the typed value."""
        server.add(replies.text("Approved, 12.50 paid."), answer(INVOICE))
        model = AnthropicModel(api_key="sk-ant-test", base_url=server.base_url)
        result = Agent(model, output_type=Invoice).run("Read the invoice")
        assert_end_state(result, "finished")
        assert result.output == Invoice(**INVOICE)
        assert_fired(result, "reason", "replied", "perceive",
                     via=["is_end_turn", "output_expected", "output_retry_left"])  # fmt: skip
        assert server.invalid_requests == []
        notice = server.requests[1]["messages"][-1]
        assert notice["role"] == "user"
        assert f"calling {OUTPUT_TOOL}" in str(notice["content"])
        assert result.reason == "the model called final_result with status 'completed'"

    def test_text_answers_past_the_retries_fail_naming_the_errors(self) -> None:
        model = ScriptedModel([answer({"number": 7}), replies.text("no"), replies.text("no")])
        result = Agent(model, output_type=Invoice, output_retries=2).run("q")
        assert_end_state(result, "failed")
        assert not result.ok
        assert result.output is None
        assert_fired(result, "reason", "replied", "failed", via=["is_end_turn", "output_expected"])
        assert "no valid final answer after 3 tries" in result.reason
        assert f"calling {OUTPUT_TOOL}" in result.reason
        assert valid_requests(model)

    def test_a_per_run_output_type_expects_a_typed_answer_too(self) -> None:
        agent = Agent(ScriptedModel([replies.text("x")]), output_retries=0)
        result = agent.run("q", output_type=Point)
        assert_end_state(result, "failed")

    @settings(max_examples=25, deadline=None)
    @given(
        script=st.lists(st.sampled_from(["text", "invalid", "valid", "empty"]), max_size=6),
        retries=st.integers(0, 3),
    )
    def test_ok_always_means_a_validated_output(self, script: list[str], retries: int) -> None:
        """Whatever mix of text, invalid and valid answers the model gives, a run ends
        `ok` only with a validated output, and a text reply never ends it `ok`."""
        made = {
            "text": lambda: replies.text("looks fine"),
            "invalid": lambda: answer({"number": 7}),
            "valid": lambda: answer(INVOICE),
            "empty": lambda: replies.reply(stop_reason="end_turn"),
        }
        model = ScriptedModel([made[kind]() for kind in script])
        result = Agent(model, output_type=Invoice, output_retries=retries).run("q")
        if result.ok:
            assert result.output == Invoice(**INVOICE)
        else:
            assert result.output is None
        assert result.end_state != "completed"


class TestTheFinalAnswerToolName:
    def test_a_user_tool_named_final_result_is_refused_with_an_output_type(self) -> None:
        @tool(name=OUTPUT_TOOL)
        def mine(x: int) -> int:
            """Mine.

            Args:
                x: a number.
            """
            return x

        with pytest.raises(ValueError, match="tools: a tool is named 'final_result'"):
            Agent(ScriptedModel([]), tools=[mine], output_type=Invoice)
        agent = Agent(ScriptedModel([]), tools=[mine])  # without an output type it is a tool
        with pytest.raises(ValueError, match="tools: a tool is named 'final_result'"):
            agent.run("q", output_type=Invoice)
