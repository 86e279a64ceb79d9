"""Mistakes are refused where they are made, naming the parameter (issue 26).

Each row is one misuse a new user met: what they wrote, the exact exception class
it must raise at once (not an `AttributeError` inside a run, nor the API's 400),
and the parameter its message must name. A property then throws values of every
wrong kind at the constructors' parameters: each is refused by name, and never
by an error the caller cannot read.
"""

from __future__ import annotations

import asyncio
import warnings
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from statemachine_agent import Agent, Budget, ScriptedModel, tool
from statemachine_agent.durable import ProgressModel
from statemachine_agent.testing import FakeAnthropicServer, replies


def _model() -> ScriptedModel:
    return ScriptedModel([replies.text("hi")])


def _server_add_a_list() -> None:
    with FakeAnthropicServer() as server:
        server.add([replies.text("a"), replies.text("b")])  # type: ignore[arg-type]


def _for_over_astream() -> None:
    async def main() -> None:
        stream = Agent(_model()).astream("hi")
        try:
            for _ in stream:
                pass
        finally:
            await stream.aclose()

    asyncio.run(main())


def _tool_without_docstring() -> None:
    @tool
    def lookup(order_id: str) -> str:
        return order_id


MISUSES: list[tuple[str, Callable[[], object], type[Exception], str]] = [
    ("a number for the model", lambda: Agent(123), TypeError, "model"),  # type: ignore[arg-type]
    ("a number for the budget", lambda: Agent(_model(), budget=5), TypeError,  # type: ignore[arg-type]
     "budget=Budget(max_iterations=5)"),
    ("a dict for the budget", lambda: Agent(_model(), budget={"max_iterations": 5}),  # type: ignore[arg-type]
     TypeError, "budget=Budget(max_iterations=5)"),
    ("a string limit", lambda: Budget(max_iterations="5"), TypeError,  # type: ignore[arg-type]
     "Budget.max_iterations"),
    ("a zero limit", lambda: Budget(max_iterations=0), ValueError, "Budget.max_iterations"),
    ("a string cost limit", lambda: Budget(max_cost_usd="1"), TypeError,  # type: ignore[arg-type]
     "Budget.max_cost_usd"),
    ("a list for the system prompt", lambda: Agent(_model(), system=["a", "b"]),  # type: ignore[arg-type]
     TypeError, "system"),
    ("a word for max_tokens", lambda: Agent(_model(), max_tokens="big"), TypeError,  # type: ignore[arg-type]
     "max_tokens"),
    ("no output tokens", lambda: Agent(_model(), max_tokens=0), ValueError, "max_tokens"),
    ("negative retries", lambda: Agent(_model(), output_retries=-1), ValueError,
     "output_retries"),
    ("a string for tools", lambda: Agent(_model(), tools="calculate"), TypeError,  # type: ignore[arg-type]
     "tools"),
    ("a bare string as a reply", lambda: ScriptedModel(["hello"]), TypeError,  # type: ignore[list-item]
     "replies[0]"),
    ("a dict that is no response", lambda: ScriptedModel([{"text": "hi"}]), ValueError,
     "replies[0]"),
    ("a progress script's bare string", lambda: ProgressModel(["hello"]), TypeError,  # type: ignore[list-item]
     "replies[0]"),
    ("a list given to server.add", _server_add_a_list, TypeError, "add(*answers)"),
    ("for over an async stream", _for_over_astream, TypeError, "async for"),
    ("a tool without a docstring", _tool_without_docstring, TypeError, "no description"),
    ("a typo in replace", lambda: Agent(_model()).replace(sytem="x"), TypeError, "sytem"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("misuse", "make", "error", "named"), MISUSES, ids=[row[0] for row in MISUSES]
)
def test_a_misuse_is_refused_at_once_by_name(
    misuse: str, make: Callable[[], object], error: type[Exception], named: str
) -> None:
    """The exact class (not a subclass such as a run's later AttributeError), with the
    parameter named in the message."""
    with pytest.raises(error) as caught:
        make()
    assert not isinstance(caught.value, AttributeError), misuse
    assert named in str(caught.value), str(caught.value)


def test_a_partly_documented_tool_warns_naming_the_argument() -> None:
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")

        @tool
        def refund(order_id: str, amount: float) -> str:
            """Refund an order.

            Args:
                order_id: the order.
            """
            return order_id

    (warning,) = [w for w in seen if issubclass(w.category, UserWarning)]
    assert "'amount'" in str(warning.message)
    assert warning.filename == __file__
    assert refund.input_schema["properties"]["amount"] == {"type": "number"}


def test_a_fully_documented_tool_does_not_warn() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")

        @tool
        def refund(order_id: str, amount: float) -> str:
            """Refund an order.

            Args:
                order_id: the order.
                amount: how much.
            """
            return order_id


_WRONG = st.one_of(
    st.text(max_size=5), st.floats(allow_nan=True), st.booleans(), st.none(),
    st.lists(st.integers(), max_size=2), st.dictionaries(st.text(max_size=3), st.integers(),
                                                         max_size=2),
    st.integers(max_value=-1),
)  # fmt: skip
_INT_PARAMS = ("max_tokens", "max_continuations", "output_retries")
_BUDGET_PARAMS = ("max_iterations", "max_total_tokens", "salvage_max_tokens", "max_cost_usd")


@settings(max_examples=60, deadline=None)
@given(param=st.sampled_from(_INT_PARAMS + _BUDGET_PARAMS), value=_WRONG)
def test_any_wrong_value_is_refused_by_name_or_accepted_whole(param: str, value: Any) -> None:
    """Whatever is passed, the constructor either accepts a value of the right kind or
    raises TypeError/ValueError naming the parameter; nothing else escapes."""
    refused = _refusal(param, value)
    if refused is not None:
        assert param in str(refused)
        return
    optional = param in ("max_total_tokens", "max_cost_usd")
    assert (value is None and optional) or (
        isinstance(value, int | float) and not isinstance(value, bool) and value >= 0
    )


def _refusal(param: str, value: Any) -> Exception | None:
    """The TypeError or ValueError passing `value` as `param` raises (None if accepted);
    any other exception escapes and fails the test."""
    try:
        if param in _BUDGET_PARAMS:
            Budget(**{param: value})
        else:
            Agent(_model(), **{param: value})
    except (TypeError, ValueError) as exc:
        return exc
    return None


@pytest.mark.parametrize("param", ["max_cost_usd", "max_seconds", "salvage_max_cost_usd"])
def test_a_nan_limit_is_refused_by_name(param: str) -> None:
    """NaN passes every `<= 0` check and fails every `>=` comparison, so a NaN limit would
    never trip: a run with `max_cost_usd=nan` would run away with money."""
    with pytest.raises(ValueError, match=f"Budget.{param}.*nan"):
        Budget(**{param: float("nan")})
