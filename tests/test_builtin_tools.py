"""The built-in tools, exercised through a registry as the engine will call them."""

from __future__ import annotations

import asyncio
import json
import re
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import jsonschema
import pytest

import statemachine_agent.tools as tools_pkg
from statemachine_agent.tools import (
    Tool,
    ToolCall,
    ToolOutcome,
    ToolRegistry,
    calculate,
    end_chat,
    finish,
    get_current_time,
    make_current_time_tool,
)

PINNED = datetime(2026, 4, 11, 2, 28, tzinfo=UTC)


def execute(item: Tool, payload: dict[str, Any] | None = None) -> ToolOutcome:
    registry = ToolRegistry([item])
    return asyncio.run(registry.execute(ToolCall(id="t1", name=item.name, input=payload or {})))


class TestCurrentTime:
    def test_pinned_clock_in_a_zone(self) -> None:
        """An injected clock gives a reproducible local time with offset and zone name."""
        pinned = make_current_time_tool(lambda: PINNED)
        outcome = execute(pinned, {"timezone": "Asia/Tokyo"})
        assert not outcome.is_error
        assert outcome.content == "2026-04-11T11:28:00+09:00 (Asia/Tokyo)"

    def test_default_zone_is_utc(self) -> None:
        """Without a timezone argument the answer is in UTC."""
        outcome = execute(make_current_time_tool(lambda: PINNED))
        assert outcome.content == "2026-04-11T02:28:00+00:00 (UTC)"

    def test_daylight_saving_offset(self) -> None:
        """Offsets follow the zone's rules on that date (summer time in Paris)."""
        outcome = execute(make_current_time_tool(lambda: PINNED), {"timezone": "Europe/Paris"})
        assert outcome.content == "2026-04-11T04:28:00+02:00 (Europe/Paris)"

    def test_clock_in_another_offset(self) -> None:
        """A clock returning a non-UTC aware time is converted correctly."""
        local = PINNED.astimezone(timezone(timedelta(hours=-5)))
        outcome = execute(make_current_time_tool(lambda: local), {"timezone": "UTC"})
        assert outcome.content == "2026-04-11T02:28:00+00:00 (UTC)"

    def test_naive_clock_is_taken_as_utc(self) -> None:
        """A naive clock is read as UTC rather than as the machine's local time."""
        naive = PINNED.replace(tzinfo=None)
        outcome = execute(make_current_time_tool(lambda: naive), {"timezone": "Asia/Tokyo"})
        assert outcome.content == "2026-04-11T11:28:00+09:00 (Asia/Tokyo)"

    def test_unknown_zone(self) -> None:
        """An unknown zone is a ToolError suggesting valid IANA names."""
        outcome = execute(get_current_time, {"timezone": "Mars/Olympus"})
        assert outcome.is_error
        assert outcome.error_kind == "raised"
        assert outcome.content.startswith("Unknown time zone 'Mars/Olympus'.")
        assert '"Asia/Tokyo"' in outcome.content

    def test_wrong_case_gets_a_suggestion(self) -> None:
        """A zone in the wrong case is pointed at its proper spelling."""
        outcome = execute(get_current_time, {"timezone": "asia/tokyo"})
        assert outcome.is_error
        assert "Did you mean 'Asia/Tokyo'" in outcome.content

    @pytest.mark.parametrize("name", ["", "../../etc/passwd", "/etc/localtime"])
    def test_odd_zone_names(self, name: str) -> None:
        """Empty or path-like names are errors for the model, never crashes."""
        outcome = execute(get_current_time, {"timezone": name})
        assert outcome.is_error
        assert outcome.error_kind == "raised"

    def test_real_clock(self) -> None:
        """The default tool reads the real clock."""
        outcome = execute(get_current_time)
        stamp = outcome.content.removesuffix(" (UTC)")
        now = datetime.fromisoformat(stamp)
        assert abs((datetime.now(UTC) - now).total_seconds()) < 5

    def test_name_and_schema(self) -> None:
        """Both variants present the same definition to the model."""
        pinned = make_current_time_tool(lambda: PINNED)
        assert pinned.to_api() == get_current_time.to_api()
        assert get_current_time.name == "get_current_time"
        assert get_current_time.input_schema["properties"]["timezone"]["default"] == "UTC"
        assert "required" not in get_current_time.input_schema


class TestCalculate:
    def test_result_as_text(self) -> None:
        """The value comes back as str(number)."""
        assert execute(calculate, {"expression": "(17.5 * 4) / 2"}).content == "35.0"
        assert execute(calculate, {"expression": "2**64 - 1"}).content == "18446744073709551615"

    def test_error_is_the_calculators_message(self) -> None:
        """Calculator errors reach the model verbatim as a ToolError."""
        outcome = execute(calculate, {"expression": "1/0"})
        assert outcome.is_error
        assert outcome.error_kind == "raised"
        assert outcome.content == "Division by zero is undefined"

    def test_hostile_input(self) -> None:
        """A power tower is refused through the tool as well."""
        outcome = execute(calculate, {"expression": "9**9**9"})
        assert outcome.is_error
        assert "Exponent" in outcome.content

    def test_missing_argument(self) -> None:
        """Calling without an expression is an invalid_input error."""
        assert execute(calculate, {}).error_kind == "invalid_input"

    def test_direct_call(self) -> None:
        """The Tool still works as a plain function."""
        assert calculate(expression="6*7") == "42"


class TestFinish:
    def test_data_carries_the_structured_result(self) -> None:
        """finish returns a dict, so the outcome's data holds status, summary and result."""
        outcome = execute(
            finish, {"status": "completed", "summary": "Found 2 flights.", "result": [1, 2]}
        )
        assert not outcome.is_error
        expected = {"status": "completed", "summary": "Found 2 flights.", "result": [1, 2]}
        assert outcome.data == expected
        assert outcome.content == json.dumps(expected)

    def test_result_defaults_to_none(self) -> None:
        """result is optional."""
        outcome = execute(finish, {"status": "needs_user_input", "summary": "Which city?"})
        assert outcome.data == {
            "status": "needs_user_input",
            "summary": "Which city?",
            "result": None,
        }

    def test_bad_status(self) -> None:
        """A status outside the three allowed values is invalid input."""
        outcome = execute(finish, {"status": "done", "summary": "x"})
        assert outcome.error_kind == "invalid_input"
        assert "'done' is not one of" in outcome.content

    def test_flags(self) -> None:
        """finish ends the run, and runs after any other calls of the same reply."""
        assert finish.ends_run is True
        assert finish.sequential is True
        assert "instead of" in finish.description
        assert finish.input_schema["required"] == ["status", "summary"]
        assert finish.input_schema["properties"]["status"]["enum"] == [
            "completed",
            "failed",
            "needs_user_input",
        ]


class TestEndChat:
    def test_returns_confirmation(self) -> None:
        """end_chat only confirms; the conversation layer reacts to its name."""
        outcome = execute(end_chat, {"reason": "user said bye"})
        assert outcome.content == "Conversation marked as complete."
        assert not outcome.is_error

    def test_reason_optional_and_not_ending_the_run(self) -> None:
        """The reason may be omitted, and end_chat is not a run-ending tool."""
        assert execute(end_chat).content == "Conversation marked as complete."
        assert end_chat.ends_run is False


class TestPackage:
    def test_exports(self) -> None:
        """The package re-exports the public API."""
        assert set(tools_pkg.__all__) == {
            "Tool",
            "ToolCall",
            "ToolOutcome",
            "ToolRegistry",
            "ToolError",
            "tool",
            "calculate",
            "get_current_time",
            "finish",
            "end_chat",
            "make_current_time_tool",
        }
        for name in tools_pkg.__all__:
            assert getattr(tools_pkg, name) is not None

    def test_builtin_definitions_are_valid(self) -> None:
        """Every built-in has an API-valid name and a valid Draft 2020-12 schema."""
        registry = ToolRegistry([get_current_time, calculate, finish, end_chat])
        for definition in registry.definitions():
            assert re.fullmatch(r"[a-zA-Z0-9_-]{1,64}", definition["name"])
            assert definition["description"]
            jsonschema.Draft202012Validator.check_schema(definition["input_schema"])
