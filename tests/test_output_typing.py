"""Typed output the type checker knows: `Agent[T]`, `RunResult[T]` (issue 26, part C).

The static half is checked by mypy itself, in process and once (it costs seconds):
a small program states the types every entry point gives (`assert_type`), and its
lines marked `# error` treat `result.output` as what it is not; mypy must pass the
first and report exactly the second. The run-time half checks `output_or_raise()`
and `NoOutputError` through the real `anthropic` SDK against the strict local
server, and over any result (a property), and that the constructor's overloads
take exactly the settings its signature has.
"""

from __future__ import annotations

import inspect
import re
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any, get_type_hints

import pydantic
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mypy import api as mypy_api

from statemachine_agent import (
    Agent,
    AnthropicModel,
    Error,
    NoOutputError,
    RunResult,
    ScriptedModel,
)
from statemachine_agent.agent import core
from statemachine_agent.machine.ends import ENDS
from statemachine_agent.models.base import Usage
from statemachine_agent.stream.events import RunEnded
from statemachine_agent.testing import FakeAnthropicServer, replies
from statemachine_agent.testing.assertions import assert_end_state

ROOT = Path(__file__).resolve().parents[1]

PROGRAM = """
from typing import Any, assert_type

from pydantic import BaseModel

from statemachine_agent import Agent, Conversation, RunResult, ScriptedModel
from statemachine_agent.stream.events import RunEnded


class Decision(BaseModel):
    verdict: str


class Other(BaseModel):
    n: int


model = ScriptedModel([])
typed = Agent(model, output_type=Decision)
plain = Agent(model)
schema = Agent(model, output_type={"type": "object"})
assert_type(typed, Agent[Decision])
assert_type(plain, Agent[None])
assert_type(schema, Agent[dict[str, Any]])
result = typed.run("claim")
assert_type(result, RunResult[Decision])
assert_type(result.output, Decision | None)
assert_type(result.output_or_raise(), Decision)
assert_type(typed.resume("run_1"), RunResult[Decision])
assert_type(plain.run("q").output, None)
assert_type(schema.run("q").output, dict[str, Any] | None)
assert_type(plain.run("q", output_type=Other), RunResult[Other])
assert_type(typed.run("q", output_type={"type": "object"}), RunResult[Any])
for event in typed.stream("q"):
    if isinstance(event, RunEnded):
        assert_type(event.result, RunResult[Decision])
assert_type(typed.astream("q").result, RunResult[Decision] | None)
assert_type(Conversation(typed).send("hi"), RunResult[Decision])
assert_type(Conversation.open(typed, "c").resume({}), RunResult[Decision])


async def later() -> None:
    assert_type(await typed.arun("q"), RunResult[Decision])
    assert_type(await typed.aresume("run_1"), RunResult[Decision])
    assert_type(await typed.start("q"), RunResult[Decision])


def untyped(agent: Agent, result: RunResult) -> Any:
    return agent, result.output  # bare names need no type arguments


verdict: str = result.output.verdict  # error: the output may be None
wrong: Other = result.output_or_raise()  # error: it is a Decision
amount = result.output_or_raise().amount  # error: a Decision has no amount
text: str = plain.run("q").output  # error: an agent without output_type gives None
"""


def test_mypy_knows_the_output_type(tmp_path: Path) -> None:
    """mypy --strict accepts every stated type and reports exactly the misuses."""
    program = tmp_path / "uses_output.py"
    program.write_text(textwrap.dedent(PROGRAM))
    expected = {
        number
        for number, line in enumerate(program.read_text().splitlines(), 1)
        if "# error" in line
    }
    out, err, _status = mypy_api.run(
        ["--strict", "--no-error-summary", "--show-error-codes",
         "--cache-dir", str(ROOT / ".mypy_cache"), str(program)]
    )  # fmt: skip
    errors = [line for line in out.splitlines() if ": error:" in line]
    lines = {int(m.group(1)) for e in errors if (m := re.search(r":(\d+): error:", e))}
    assert lines == expected, out + err
    assert len(errors) == len(expected), out


class Decision(pydantic.BaseModel):
    verdict: str
    reason: str


@pytest.fixture
def server() -> Iterator[FakeAnthropicServer]:
    with FakeAnthropicServer() as fake:
        yield fake


class TestOutputOrRaise:
    """`output_or_raise()` gives the typed answer or raises `NoOutputError`."""

    def test_a_validated_answer_through_the_real_sdk(self, server: FakeAnthropicServer) -> None:
        """A `final_result` call through the real SDK: the accessor returns the instance,
        on the result and on the stream's `RunEnded` alike."""
        payload = {"verdict": "approve", "reason": "covered"}
        server.add(replies.tool_use("final_result", payload))
        server.add(replies.tool_use("final_result", payload))
        model = AnthropicModel(api_key="sk-ant-test", base_url=server.base_url)
        agent = Agent(model, output_type=Decision)
        result = agent.run("claim 1")
        assert_end_state(result, "finished")
        assert result.output_or_raise() == Decision(**payload)
        ended = [e for e in agent.stream("claim 2") if isinstance(e, RunEnded)]
        assert [e.result.output_or_raise() for e in ended] == [Decision(**payload)]
        assert server.invalid_requests == []

    def test_no_answer_raises_naming_the_end_state(self, server: FakeAnthropicServer) -> None:
        """A prose answer with no retry left ends `failed`; the accessor raises an
        `Error` that is a `LookupError`, naming the run, its end state and reason."""
        server.add(replies.text("Looks fine."))
        model = AnthropicModel(api_key="sk-ant-test", base_url=server.base_url)
        result = Agent(model, output_type=Decision, output_retries=0).run("claim")
        assert_end_state(result, "failed")
        assert result.output is None
        with pytest.raises(NoOutputError) as raised:
            result.output_or_raise()
        assert isinstance(raised.value, Error)
        assert isinstance(raised.value, LookupError)
        assert raised.value.result is result
        message = str(raised.value)
        assert result.run_id in message
        assert "ended in failed" in message
        assert result.reason in message
        assert server.invalid_requests == []

    def test_an_agent_without_output_type_has_none(self) -> None:
        """A free-text run (an `Agent[None]`) completes `ok` with no typed output."""
        result = Agent(ScriptedModel([replies.text("hi")])).run("q")
        assert result.ok
        with pytest.raises(NoOutputError, match="ended in completed"):
            result.output_or_raise()

    @settings(max_examples=40, deadline=None)
    @given(
        end_state=st.sampled_from([end.name for end in ENDS]),
        output=st.none() | st.integers() | st.text() | st.builds(Decision, verdict=st.text(),
                                                                 reason=st.text()),
        reason=st.text(),
    )  # fmt: skip
    def test_returns_exactly_the_output_or_raises(
        self, end_state: Any, output: Any, reason: str
    ) -> None:
        """For any end state and any output, the accessor returns the very output when
        there is one and raises `NoOutputError` (its message naming the end state and
        the reason, verbatim) when there is none."""
        result: RunResult[Any] = RunResult(
            end_state=end_state, text="", reason=reason, run_id="run_x", iterations=0,
            turn=1, usage=Usage(), cost_usd=0.0, elapsed_s=0.0, messages=[], trail=(),
            output=output,
        )  # fmt: skip
        if output is None:
            with pytest.raises(NoOutputError) as raised:
                result.output_or_raise()
            assert f"ended in {end_state} " in str(raised.value)
            assert str(raised.value).endswith(reason)
        else:
            assert result.output_or_raise() is output


class TestConstructorOverloads:
    """The overloads of `Agent.__init__` differ only in `output_type`."""

    def test_settings_match_the_signature(self) -> None:
        """`_Settings` holds every keyword-only setting but `output_type`, each with the
        signature's type, so the overloads accept exactly what the constructor takes."""
        signature = inspect.signature(Agent.__init__)
        keyword_only = {
            name: parameter.annotation
            for name, parameter in signature.parameters.items()
            if parameter.kind is inspect.Parameter.KEYWORD_ONLY and name != "output_type"
        }
        declared = {
            name: hint.__forward_arg__ for name, hint in core._Settings.__annotations__.items()
        }
        assert declared == keyword_only
        hints = get_type_hints(core._Settings, vars(core))
        assert set(hints) == set(keyword_only)
