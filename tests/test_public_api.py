"""The public names: what `from statemachine_agent import ...` promises users.

Removing or renaming an exported name breaks every user who imported it, so the
export lists are pinned here: a change to them has to be a deliberate one.
"""

from __future__ import annotations

import importlib

import pytest

import statemachine_agent
import statemachine_agent.testing

REQUIRED = {
    "Agent",
    "AnthropicModel",
    "ScriptedModel",
    "Tool",
    "tool",
    "ToolRegistry",
    "Budget",
    "RunResult",
    "calculate",
    "get_current_time",
    "finish",
}
"""The names the README and the design promise; more may be exported, none of these dropped."""

REQUIRED_TESTING = {
    "replies",
    "FakeAnthropicServer",
    "FakeError",
    "assert_end_state",
    "assert_fired",
    "assert_not_fired",
    "assert_path",
    "fired",
    "path",
    "validate_request",
}
"""The helpers docs/testing.md teaches."""


def ruff_order(name: str) -> tuple[int, str]:
    """How ruff's RUF022 sorts `__all__`: CONSTANTS, then Classes, then functions."""
    rank = 0 if name.isupper() else 1 if name[:1].isupper() else 2
    return (rank, name)


class TestPackageExports:
    def test_all_is_sorted_and_unique(self) -> None:
        """`__all__` is kept sorted, plainly or as ruff sorts it, without duplicates."""
        names = list(statemachine_agent.__all__)
        assert names in (sorted(names), sorted(names, key=ruff_order))
        assert len(names) == len(set(names))

    def test_required_names_are_exported(self) -> None:
        """The documented entry points are all in `__all__`."""
        assert set(statemachine_agent.__all__) >= REQUIRED

    @pytest.mark.parametrize("name", sorted(statemachine_agent.__all__))
    def test_every_name_is_importable(self, name: str) -> None:
        """Each exported name resolves on the package."""
        module = importlib.import_module("statemachine_agent")
        assert getattr(module, name) is not None

    def test_star_import_gives_exactly_all(self) -> None:
        """`from statemachine_agent import *` binds every name of `__all__`."""
        namespace: dict[str, object] = {}
        exec("from statemachine_agent import *", namespace)
        assert set(statemachine_agent.__all__) <= set(namespace)

    def test_the_readme_import_line_works(self) -> None:
        """The README's import line imports."""
        from statemachine_agent import (  # noqa: F401
            Agent,
            AnthropicModel,
            Budget,
            RunResult,
            ScriptedModel,
            Tool,
            ToolRegistry,
            tool,
        )


class TestTestingExports:
    def test_all_is_unique_and_importable(self) -> None:
        """Every name of `statemachine_agent.testing.__all__` resolves."""
        names = list(statemachine_agent.testing.__all__)
        assert len(names) == len(set(names))
        for name in names:
            assert getattr(statemachine_agent.testing, name) is not None

    def test_documented_helpers_are_exported(self) -> None:
        """The helpers the testing guide uses are in `__all__`."""
        assert set(statemachine_agent.testing.__all__) >= REQUIRED_TESTING
