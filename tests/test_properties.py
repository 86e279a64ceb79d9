"""Invariants that hold for any script a model could follow (Hypothesis).

Whatever the model answers (tool calls good and bad, text, every stop_reason,
unknown ones, API errors), a run ends in a named end state within its budget,
the trail is a connected path through the table, and every request the engine
built is one the real API would accept.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from statemachine_agent import (
    Agent,
    Audit,
    Budget,
    MemorySink,
    ModelError,
    ReflectionPolicy,
    ScriptedModel,
    calculate,
    finish,
    tool,
)
from statemachine_agent.machine.table import END_STATES, RESERVED_STATES, ROWS
from statemachine_agent.policy.context import ContextPolicy
from statemachine_agent.policy.stall import StallPolicy
from statemachine_agent.policy.verify import Verdict
from statemachine_agent.testing import replies
from statemachine_agent.testing.validator import validate_request


@tool
def explode(reason: str = "") -> str:
    """A tool that always raises."""
    raise RuntimeError(f"exploded {reason}")


@tool
def echo(value: str) -> str:
    """Returns its input; empty strings exercise the empty-result path."""
    return value


TOOL_NAMES = ["calculate", "explode", "echo", "finish", "does_not_exist"]
STOP_REASONS = [
    "end_turn",
    "stop_sequence",
    "max_tokens",
    "refusal",
    "pause_turn",
    "compaction",
    "model_context_window_exceeded",
    "tool_use",
    "something_new",
]

inputs = st.one_of(
    st.fixed_dictionaries({"expression": st.sampled_from(["1+2", "9**9**9", "1/0", "x"])}),
    st.fixed_dictionaries({"value": st.text(max_size=5)}),
    st.fixed_dictionaries(
        {"status": st.sampled_from(["completed", "failed", "bogus"]), "summary": st.just("s")}
    ),
    st.dictionaries(st.sampled_from(["a", "b"]), st.integers(), max_size=2),
)
call = st.tuples(st.sampled_from(TOOL_NAMES), inputs)


@st.composite
def script_entry(draw: st.DrawFn) -> Any:
    kind = draw(st.sampled_from(["text", "tools", "stop", "error", "empty"]))
    if kind == "text":
        return replies.text(draw(st.text(min_size=1, max_size=10)))
    if kind == "tools":
        return replies.tool_uses(*draw(st.lists(call, min_size=1, max_size=3)))
    if kind == "stop":
        reason = draw(st.sampled_from(STOP_REASONS))
        body = draw(st.sampled_from([[replies.text_block("partial")], []]))
        return replies.reply(*body, stop_reason=reason)
    if kind == "error":
        status = draw(st.sampled_from([400, 401, 404, 500, 529]))
        return ModelError("scripted", status=status, context_exceeded=draw(st.booleans()))
    return replies.reply(stop_reason="end_turn")


features = st.fixed_dictionaries(
    {},
    optional={
        "reflection": st.integers(1, 3).map(ReflectionPolicy),
        "max_continuations": st.integers(0, 2),
        "verify": st.sampled_from(
            [lambda c: Verdict(ok=True), lambda c: Verdict(ok=False, feedback="no")]
        ),
        "stall": st.sampled_from([None, StallPolicy(threshold=2, max_interventions=1)]),
        "context": st.just(ContextPolicy(compact_at_tokens=200, keep_tool_results=1)),
    },
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    script=st.lists(script_entry(), max_size=12),
    limit=st.integers(1, 6),
    per_tool=st.sampled_from([None, 1, 2]),
    options=features,
)
def test_any_script_ends_in_a_named_state_within_budget(
    script: list[Any], limit: int, per_tool: int | None, options: dict[str, Any]
) -> None:
    """Every run ends in a named end state, within max_iterations, with valid requests,
    whatever guards are switched on."""
    model = ScriptedModel(script, validate=False)
    budget = Budget(max_iterations=limit, max_calls_per_tool=per_tool)
    agent = Agent(model, tools=[calculate, explode, echo, finish], budget=budget, **options)
    result = agent.run("go")

    assert result.end_state in END_STATES
    assert result.end_state not in RESERVED_STATES
    assert result.reason
    assert result.iterations <= limit
    # Failed calls are not billed; past the limit at most one (salvage) call is made.
    failed_calls = sum(isinstance(e, ModelError) for e in script[: len(model.requests)])
    assert len(model.requests) - failed_calls <= limit + 1
    for request in model.requests:
        assert validate_request(request.to_api()) == []
    path = result.path
    assert path[0] == "perceive"
    assert path[-1] == result.end_state
    rows = {row.key for row in ROWS}
    for step in result.trail:
        assert step.key in rows
    for before, after in zip(result.trail, result.trail[1:], strict=False):
        assert before.dest == after.source


@settings(max_examples=60, deadline=None)
@given(calls=st.lists(call, min_size=1, max_size=4))
def test_every_tool_use_is_answered_in_order(calls: list[tuple[str, dict[str, Any]]]) -> None:
    """Whatever tools are called, the next message answers each tool_use, in call order."""
    script = [replies.tool_uses(*calls), replies.text("done")]
    model = ScriptedModel(script)
    result = Agent(model, tools=[calculate, explode, echo, finish]).run("go")
    asked = [b["id"] for b in result.messages[1]["content"] if b["type"] == "tool_use"]
    blocks = result.messages[2]["content"]
    kinds = [b["type"] for b in blocks]
    assert kinds == sorted(kinds, key=lambda k: k != "tool_result"), "tool_result blocks first"
    answers = [b for b in blocks if b["type"] == "tool_result"]
    assert [b["tool_use_id"] for b in answers] == asked
    assert all(isinstance(b.get("is_error", False), bool) for b in answers)
    assert all(b["content"] for b in answers)


@tool
def leaf(n: int) -> str:
    """Returns a long page, so that a run soon passes its summary threshold."""
    return f"leaf {n} " + "w" * 600


loop_entry = st.one_of(
    st.integers(0, 9).map(lambda n: replies.tool_use("leaf", {"n": n})),
    st.just(replies.text("done")),
    st.just(ModelError("overloaded", status=529, retryable=True)),
)
loop_script = st.tuples(
    st.lists(st.integers(0, 9).map(lambda n: replies.tool_use("leaf", {"n": n})), max_size=9),
    st.lists(loop_entry, max_size=3),
).map(lambda parts: [*parts[0], *parts[1]])
summary_entry = st.one_of(
    st.just(replies.text("Found: the leaves so far.")),
    st.integers(0, 4000).map(lambda n: replies.text("Found: all.", usage={"input_tokens": n})),
    st.just(ModelError("overloaded", status=529, retryable=True)),
    st.just(replies.text("z" * 20_000)),
    st.just(replies.text("cut", stop_reason="max_tokens")),
)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    script=loop_script,
    summaries=st.lists(summary_entry, max_size=8),
    limit=st.integers(2, 12),
    max_tokens=st.one_of(st.none(), st.integers(30, 12_000)),
    threshold=st.integers(100, 1200),
    keep_last=st.integers(1, 3),
)
def test_summary_calls_are_budgeted_charged_once_and_never_loop(
    script: list[Any],
    summaries: list[Any],
    limit: int,
    max_tokens: int | None,
    threshold: int,
    keep_last: int,
) -> None:
    """Whatever the loop and the summary model answer: no summary call starts past a
    limit, each is charged exactly once, at most one is tried per loop call, every
    request is valid, and the run ends in a named state within max_iterations."""
    model = ScriptedModel(script, validate=False)
    writer = ScriptedModel(summaries, validate=False, name="claude-haiku-4-5")
    sink = MemorySink()
    policy = ContextPolicy(summarize_at_tokens=threshold, keep_last=keep_last,
                           keep_tool_results=1, compact_at_tokens=None)  # fmt: skip
    agent = Agent(
        model,
        tools=[leaf],
        budget=Budget(max_iterations=limit, max_total_tokens=max_tokens),
        stall=None,
        context=policy,
        summary_model=writer,
        audit=Audit(sinks=[sink]),
    )
    result = agent.run("go")

    assert result.end_state in END_STATES
    assert result.iterations <= limit
    entries = [step for step in result.trail if step.dest == "summarize"]
    assert len(writer.requests) == len(entries)
    for step in entries:
        assert step.guards["budget_exceeded"] is False
        assert (
            max_tokens is None
            or step.usage_total["input_tokens"] + step.usage_total["output_tokens"] < max_tokens
        )
    assert len({step.iteration for step in entries}) == len(entries)
    replied = [e for e in sink.events if e["event"] == "model.replied"]
    assert result.usage.input_tokens == sum(e["usage"]["input_tokens"] for e in replied)
    assert result.usage.output_tokens == sum(e["usage"]["output_tokens"] for e in replied)
    for request in [*model.requests, *writer.requests]:
        assert validate_request(request.to_api()) == []
