"""`ToolRegistry`: definitions, and execution that always answers with an outcome."""

from __future__ import annotations

import asyncio
import contextvars
import json
import threading
import time
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

import pytest

from statemachine_agent.tools import Tool, ToolCall, ToolError, ToolOutcome, ToolRegistry, tool

T = TypeVar("T")


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


@tool
def echo(text: str) -> str:
    """Repeat the text."""
    return text


@tool
def add(a: int, b: int = 0) -> int:
    """Add two integers."""
    return a + b


def make_tool(fn: Any, **options: Any) -> Tool:
    return tool(description="test tool", **options)(fn)


def returning(name: str, value: Any) -> Tool:
    """A hand-built tool taking no arguments and returning `value`."""
    return Tool(
        name=name,
        description="test tool",
        input_schema={"type": "object", "properties": {}, "additionalProperties": False},
        handler=lambda: value,
    )


def call(name: str, payload: Any = None, call_id: str = "c1") -> ToolCall:
    return ToolCall(id=call_id, name=name, input={} if payload is None else payload)


class TestRegistration:
    def test_order_and_lookup(self) -> None:
        """Tools keep registration order; lookup, membership and length work by name."""
        registry = ToolRegistry([echo, add])
        assert registry.names == ("echo", "add")
        assert [t.name for t in registry] == ["echo", "add"]
        assert len(registry) == 2
        assert "echo" in registry
        assert "nope" not in registry
        assert registry.get("add") is add
        assert registry.get("nope") is None

    def test_register_later(self) -> None:
        """register() appends after the tools given to the constructor."""
        registry = ToolRegistry([echo])
        registry.register(add)
        assert registry.names == ("echo", "add")

    def test_duplicate_name_rejected(self) -> None:
        """A second tool with the same name is a ValueError naming it."""
        registry = ToolRegistry([echo])
        other = returning("echo", "other")
        with pytest.raises(ValueError, match="'echo'"):
            registry.register(other)

    def test_duplicate_in_constructor(self) -> None:
        """Duplicates are caught in the constructor too."""
        with pytest.raises(ValueError, match="'echo'"):
            ToolRegistry([echo, echo])

    def test_not_a_tool(self) -> None:
        """Registering a plain function says what was forgotten."""
        with pytest.raises(TypeError, match="@tool"):
            ToolRegistry([print])  # type: ignore[list-item]

    def test_invalid_schema_rejected(self) -> None:
        """A hand-written schema that is not valid JSON Schema fails at registration."""
        bad = Tool(name="bad", description="x", input_schema={"type": 12}, handler=print)
        with pytest.raises(ValueError, match="'bad' has an invalid input_schema"):
            ToolRegistry([bad])

    def test_invalid_max_result_chars(self) -> None:
        """A non-positive truncation limit is a setup error."""
        with pytest.raises(ValueError, match="max_result_chars"):
            ToolRegistry(max_result_chars=0)

    def test_definitions(self) -> None:
        """definitions() is the API's tools list, in registration order."""
        registry = ToolRegistry([echo, add])
        definitions = registry.definitions()
        assert [d["name"] for d in definitions] == ["echo", "add"]
        assert definitions[0] == {
            "name": "echo",
            "description": "Repeat the text.",
            "input_schema": dict(echo.input_schema),
        }
        json.dumps(definitions)


class TestErrorKinds:
    def test_unknown_tool(self) -> None:
        """An unknown name lists the available tools."""
        outcome = run(ToolRegistry([echo, add]).execute(call("nope")))
        assert outcome.is_error
        assert outcome.error_kind == "unknown_tool"
        assert outcome.content == "Unknown tool 'nope'. Available tools: echo, add"
        assert outcome.tool_use_id == "c1"
        assert outcome.name == "nope"

    def test_input_not_an_object(self) -> None:
        """Input that is not a JSON object is invalid_input, showing the schema."""
        outcome = run(ToolRegistry([echo]).execute(call("echo", ["hi"])))
        assert outcome.error_kind == "invalid_input"
        assert "expected a JSON object" in outcome.content
        assert json.dumps(dict(echo.input_schema), ensure_ascii=False) in outcome.content

    def test_every_validation_error_is_named_with_its_path(self) -> None:
        """Each schema violation is listed with its JSON path, followed by the schema."""

        @tool
        def book(name: str, seats: list[int]) -> str:
            """Book seats."""
            return name

        outcome = run(
            ToolRegistry([book]).execute(call("book", {"seats": [1, "two"], "extra": True}))
        )
        assert outcome.is_error
        assert outcome.error_kind == "invalid_input"
        assert "(3 errors)" in outcome.content
        assert "- $: 'name' is a required property" in outcome.content
        assert "('extra' was unexpected)" in outcome.content
        assert "- $.seats[1]: 'two' is not of type 'integer'" in outcome.content
        assert json.dumps(dict(book.input_schema), ensure_ascii=False) in outcome.content

    def test_validation_happens_before_the_handler(self) -> None:
        """An invalid call never reaches the handler."""
        calls: list[int] = []

        def counted(n: int) -> None:
            calls.append(n)

        outcome = run(ToolRegistry([make_tool(counted)]).execute(call("counted", {})))
        assert outcome.error_kind == "invalid_input"
        assert calls == []

    def test_handler_raises(self) -> None:
        """An exception becomes 'Name raised Type: message'."""

        def explode() -> None:
            raise ValueError("bad things")

        outcome = run(ToolRegistry([make_tool(explode)]).execute(call("explode")))
        assert outcome.is_error
        assert outcome.error_kind == "raised"
        assert outcome.content == "explode raised ValueError: bad things"

    def test_handler_raises_timeout_error_itself(self) -> None:
        """A TimeoutError from the handler's own work is 'raised', not our timeout."""

        async def network() -> None:
            raise TimeoutError("upstream slow")

        outcome = run(ToolRegistry([make_tool(network)]).execute(call("network")))
        assert outcome.error_kind == "raised"
        assert outcome.content == "network raised TimeoutError: upstream slow"

    def test_tool_error_message_is_the_content(self) -> None:
        """ToolError's message is shown to the model exactly, without a wrapper."""

        def lookup(city: str) -> str:
            raise ToolError(f"No such city: {city}. Check the spelling.")

        outcome = run(ToolRegistry([make_tool(lookup)]).execute(call("lookup", {"city": "Pariss"})))
        assert outcome.is_error
        assert outcome.error_kind == "raised"
        assert outcome.content == "No such city: Pariss. Check the spelling."

    def test_async_handler_raises(self) -> None:
        """Async handlers' exceptions are caught the same way."""

        async def explode() -> None:
            raise KeyError("k")

        outcome = run(ToolRegistry([make_tool(explode)]).execute(call("explode")))
        assert outcome.content == "explode raised KeyError: 'k'"

    def test_sync_timeout(self) -> None:
        """A sync handler past its timeout is answered promptly; the run goes on."""
        release = threading.Event()

        def hang() -> str:
            release.wait(5)
            return "late"

        registry = ToolRegistry([make_tool(hang, timeout=0.2)])
        started = time.perf_counter()
        try:
            outcome = run(registry.execute(call("hang")))
        finally:
            release.set()
        assert time.perf_counter() - started < 2
        assert outcome.is_error
        assert outcome.error_kind == "timeout"
        assert outcome.content.startswith("Tool 'hang' did not finish within 0.2 s")

    def test_async_timeout(self) -> None:
        """An async handler past its timeout is cancelled and answered as a timeout."""
        cancelled = []

        async def slow() -> str:
            try:
                await asyncio.sleep(5)
            except asyncio.CancelledError:
                cancelled.append(True)
                raise
            return "late"

        registry = ToolRegistry([make_tool(slow, timeout=0.3)])
        started = time.perf_counter()
        outcome = run(registry.execute(call("slow")))
        elapsed = time.perf_counter() - started
        assert outcome.error_kind == "timeout"
        assert outcome.content.startswith("Tool 'slow' did not finish within 0.3 s")
        assert cancelled == [True]
        assert 0.25 < elapsed < 2

    def test_sync_handler_system_exit_is_contained(self) -> None:
        """A sync handler calling sys.exit() fails its call, not the whole run."""

        def quit_() -> None:
            raise SystemExit(3)

        outcome = run(ToolRegistry([make_tool(quit_, name="quit")]).execute(call("quit")))
        assert outcome.error_kind == "raised"
        assert outcome.content == "quit raised SystemExit: 3"

    def test_stray_cancelled_error_is_a_failure(self) -> None:
        """A handler raising CancelledError by itself (nobody cancelled us) is 'raised'."""

        async def confused() -> None:
            raise asyncio.CancelledError

        outcome = run(ToolRegistry([make_tool(confused)]).execute(call("confused")))
        assert outcome.error_kind == "raised"
        assert outcome.content == "confused raised CancelledError"

    def test_sync_handler_sees_context_variables(self) -> None:
        """Context variables (e.g. log context) reach the handler's thread."""
        request_id: contextvars.ContextVar[str] = contextvars.ContextVar("request_id")

        def whoami() -> str:
            return request_id.get("unset")

        async def scenario() -> ToolOutcome:
            request_id.set("req-7")
            return await ToolRegistry([make_tool(whoami)]).execute(call("whoami"))

        assert run(scenario()).content == "req-7"

    def test_cancellation_propagates(self) -> None:
        """Cancelling the caller is not swallowed into an outcome."""

        async def slow() -> None:
            await asyncio.sleep(5)

        registry = ToolRegistry([make_tool(slow)])

        async def scenario() -> None:
            task = asyncio.create_task(registry.execute(call("slow")))
            await asyncio.sleep(0.05)
            task.cancel()
            await task

        with pytest.raises(asyncio.CancelledError):
            run(scenario())


class TestResults:
    def test_string_as_is(self) -> None:
        """A string result is the content, with no data."""
        outcome = run(ToolRegistry([echo]).execute(call("echo", {"text": "héllo"})))
        assert outcome == ToolOutcome(
            tool_use_id="c1", name="echo", content="héllo", duration_s=outcome.duration_s
        )
        assert outcome.duration_s > 0

    @pytest.mark.parametrize("value", [None, "", "  \n\t"])
    def test_empty_result(self, value: Any) -> None:
        """None, empty and whitespace-only results say so explicitly."""
        blank = returning("blank", value)
        outcome = run(ToolRegistry([blank]).execute(call("blank")))
        assert not outcome.is_error
        assert outcome.content == "(empty result)"

    def test_non_string_is_json_with_raw_data(self) -> None:
        """Other values are JSON text (non-ASCII kept) and the raw value is kept in data."""
        value = {"city": "Zürich", "temps": [1.5, 2], "ok": True}
        weather = returning("weather", value)
        outcome = run(ToolRegistry([weather]).execute(call("weather")))
        assert outcome.content == '{"city": "Zürich", "temps": [1.5, 2], "ok": true}'
        assert outcome.data is value

    def test_integer_result(self) -> None:
        """A number is JSON too."""
        outcome = run(ToolRegistry([add]).execute(call("add", {"a": 2, "b": 3})))
        assert outcome.content == "5"
        assert outcome.data == 5

    def test_unserializable_values_fall_back_to_text(self) -> None:
        """Values json cannot encode are still answered, never raised."""

        @dataclass
        class Row:
            id: int

        odd = returning("odd", {"row": Row(1), "obj": object.__name__, "s": {3}})
        outcome = run(ToolRegistry([odd]).execute(call("odd")))
        assert not outcome.is_error
        assert json.loads(outcome.content) == {"row": {"id": 1}, "obj": "object", "s": [3]}

        keys = returning("keys", {(1, 2): "tuple key"})
        outcome = run(ToolRegistry([keys]).execute(call("keys")))
        assert not outcome.is_error
        assert outcome.content == "{(1, 2): 'tuple key'}"

    def test_truncation_notice(self) -> None:
        """A long result is cut at max_result_chars with a notice; data keeps it all."""
        big = returning("big", "x" * 250)
        outcome = run(ToolRegistry([big], max_result_chars=100).execute(call("big")))
        assert outcome.content == "x" * 100 + "\n\n[... 150 characters omitted; narrow the query]"
        assert outcome.extra["omitted_chars"] == 150
        assert not outcome.is_error

    def test_truncation_keeps_raw_data(self) -> None:
        """Truncating a JSON rendering does not touch the raw value."""
        rows = list(range(1000))
        many = returning("many", rows)
        outcome = run(ToolRegistry([many], max_result_chars=50).execute(call("many")))
        assert outcome.content.endswith("characters omitted; narrow the query]")
        assert outcome.data is rows

    def test_exact_limit_is_not_truncated(self) -> None:
        """A result of exactly max_result_chars is kept whole."""
        exact = returning("exact", "y" * 100)
        outcome = run(ToolRegistry([exact], max_result_chars=100).execute(call("exact")))
        assert outcome.content == "y" * 100

    def test_to_block(self) -> None:
        """Outcomes turn into tool_result blocks, flagged when they are errors."""
        registry = ToolRegistry([echo])
        ok = run(registry.execute(call("echo", {"text": "hi"})))
        bad = run(registry.execute(call("nope")))
        assert ok.to_block() == {"type": "tool_result", "tool_use_id": "c1", "content": "hi"}
        assert bad.to_block()["is_error"] is True


class TestExecuteAll:
    def test_sync_handlers_run_concurrently(self) -> None:
        """Three sync handlers sleeping 0.2 s finish well under 0.6 s in total."""

        def nap(n: int) -> int:
            time.sleep(0.2)
            return n

        registry = ToolRegistry([make_tool(nap)])
        calls = [call("nap", {"n": i}, call_id=f"c{i}") for i in range(3)]
        started = time.perf_counter()
        outcomes = run(registry.execute_all(calls))
        assert time.perf_counter() - started < 0.5
        assert [o.content for o in outcomes] == ["0", "1", "2"]

    def test_async_handlers_run_concurrently(self) -> None:
        """Three async handlers sleeping 0.2 s finish well under 0.6 s in total."""

        async def nap(n: int) -> int:
            await asyncio.sleep(0.2)
            return n

        registry = ToolRegistry([make_tool(nap)])
        calls = [call("nap", {"n": i}, call_id=f"c{i}") for i in range(3)]
        started = time.perf_counter()
        outcomes = run(registry.execute_all(calls))
        assert time.perf_counter() - started < 0.5
        assert [o.tool_use_id for o in outcomes] == ["c0", "c1", "c2"]

    def test_order_preserved_whatever_finishes_first(self) -> None:
        """Outcomes follow the calls' order, even when later calls finish first."""

        async def wait(s: float) -> float:
            await asyncio.sleep(s)
            return s

        registry = ToolRegistry([make_tool(wait), echo])
        calls = [
            call("wait", {"s": 0.15}, "a"),
            call("nope", {}, "b"),
            call("wait", {"s": 0.0}, "c"),
            call("echo", {"text": 1}, "d"),
            call("echo", {"text": "e"}, "e"),
        ]
        outcomes = run(registry.execute_all(calls))
        assert [o.tool_use_id for o in outcomes] == ["a", "b", "c", "d", "e"]
        assert [o.error_kind for o in outcomes] == [
            None,
            "unknown_tool",
            None,
            "invalid_input",
            None,
        ]

    def test_one_outcome_per_call_even_when_handlers_fail(self) -> None:
        """Failures in some calls do not lose or reorder the others."""

        def boom() -> None:
            raise RuntimeError("x")

        registry = ToolRegistry([make_tool(boom), echo])
        calls = [call("boom", {}, "1"), call("echo", {"text": "ok"}, "2"), call("boom", {}, "3")]
        outcomes = run(registry.execute_all(calls))
        assert [(o.tool_use_id, o.is_error) for o in outcomes] == [
            ("1", True),
            ("2", False),
            ("3", True),
        ]

    def test_empty(self) -> None:
        """No calls, no outcomes."""
        assert run(ToolRegistry([echo]).execute_all([])) == []

    def test_sequential_tool_runs_alone(self) -> None:
        """A sequential call waits for the batch before it, and the next batch waits for it."""
        events: list[str] = []
        active = 0
        overlap: list[str] = []

        async def track(label: str) -> None:
            nonlocal active
            active += 1
            events.append(f"start {label}")
            await asyncio.sleep(0.05)
            if active > 1 and label.startswith("w"):
                overlap.append(label)
            events.append(f"end {label}")
            active -= 1

        async def read(label: str) -> str:
            await track(label)
            return label

        async def write(label: str) -> str:
            await track(label)
            return label

        registry = ToolRegistry([make_tool(read), make_tool(write, sequential=True)])
        calls = [
            call("read", {"label": "r1"}, "1"),
            call("read", {"label": "r2"}, "2"),
            call("write", {"label": "w1"}, "3"),
            call("read", {"label": "r3"}, "4"),
            call("write", {"label": "w2"}, "5"),
        ]
        outcomes = run(registry.execute_all(calls))
        assert [o.content for o in outcomes] == ["r1", "r2", "w1", "r3", "w2"]
        assert overlap == []
        assert events[:2] == ["start r1", "start r2"]  # the reads before w1 overlap
        w1 = events.index("start w1")
        assert {"end r1", "end r2"} <= set(events[:w1])
        assert events[w1 + 1] == "end w1"
        assert events.index("start r3") > events.index("end w1")
        assert events.index("start w2") > events.index("end r3")

    def test_timeouts_do_not_hold_up_the_batch(self) -> None:
        """One call timing out still lets its neighbours answer normally."""

        async def slow() -> str:
            await asyncio.sleep(5)
            return "late"

        registry = ToolRegistry([make_tool(slow, timeout=0.1), echo])
        outcomes = run(
            registry.execute_all([call("slow", {}, "1"), call("echo", {"text": "hi"}, "2")])
        )
        assert [o.error_kind for o in outcomes] == ["timeout", None]
        assert outcomes[1].content == "hi"
