"""The public names: what `from statemachine_agent import ...` promises users.

Removing or renaming an exported name breaks every user who imported it, so the
export lists are pinned here: a change to them has to be a deliberate one.
"""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
from pathlib import Path

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
    # what a verifier, a policy or a store is written against (issue #10)
    "Verdict",
    "Claim",
    "VerifyPolicy",
    "ContextPolicy",
    "StallPolicy",
    "ApprovalPolicy",
    "ReflectionPolicy",
    "Audit",
    "Checkpointer",
    "PostgresCheckpointer",
    "RunAlreadyEndedError",
    "RunContext",
    "RunNotFoundError",
    "SerializationError",
}
"""The names the README and the design promise; more may be exported, none of these dropped."""

EXPORTED = [
    "Agent",
    "AnthropicModel",
    "ApprovalPolicy",
    "ApprovalRecord",
    "Approve",
    "Audit",
    "AuditFileError",
    "AuditSink",
    "Budget",
    "CancelToken",
    "CheckpointCorruptError",
    "Checkpointer",
    "Claim",
    "ContextPolicy",
    "Conversation",
    "ConversationConflictError",
    "ConversationEndedError",
    "Decision",
    "DecisionTypeError",
    "Defer",
    "Deny",
    "Edit",
    "Effects",
    "Error",
    "ForkPointError",
    "InvalidIdError",
    "JsonlSink",
    "LeasingCheckpointer",
    "MCPToolset",
    "MemoryCheckpointer",
    "MemorySink",
    "MissingAPIKeyError",
    "MissingOpenAIKeyError",
    "MissingToolsError",
    "Model",
    "ModelError",
    "ModelReply",
    "ModelRequest",
    "NoOutputError",
    "OpenAIModel",
    "OutputTypeError",
    "PolicyAnswer",
    "PostgresCheckpointer",
    "Price",
    "Redactor",
    "ReflectionPolicy",
    "ReplayDivergenceError",
    "ReplayModel",
    "ResumeOptions",
    "RunAlreadyEndedError",
    "RunContext",
    "RunHandle",
    "RunLockedError",
    "RunNotFoundError",
    "RunOptions",
    "RunResult",
    "RunSummary",
    "SQLiteCheckpointer",
    "ScriptedModel",
    "SerializationError",
    "StallPolicy",
    "TaintPolicy",
    "TaintSource",
    "Tool",
    "ToolCall",
    "ToolError",
    "ToolOutcome",
    "ToolRegistry",
    "TransitionRecord",
    "TurnOptions",
    "UnknownModelPriceError",
    "UnsafeStoreError",
    "Usage",
    "Verdict",
    "Verifier",
    "VerifyPolicy",
    "calculate",
    "end_chat",
    "finish",
    "generate_key",
    "get_current_time",
    "load_record",
    "read_events",
    "tool",
]
"""The whole public surface, pinned: adding or removing a name means changing this list."""

LAZY = {
    "OpenAIModel": ("statemachine_agent.models.openai", "openai"),
    "MissingOpenAIKeyError": ("statemachine_agent.models.openai", "openai"),
    "PostgresCheckpointer": ("statemachine_agent.persistence.postgres", "psycopg"),
    "MCPToolset": ("statemachine_agent.tools.mcp", "mcp"),
}
"""Names whose modules serve an optional extra: name -> (module, the extra's package)."""

ROOT = Path(__file__).resolve().parent.parent

PUBLIC_MODULES = {
    "statemachine_agent",
    "statemachine_agent.testing",
    "statemachine_agent.effects",  # the engine adapters: `from ... import dbos, temporal`
    "statemachine_agent.durable",
    "statemachine_agent.replay",
    "statemachine_agent.report",  # the review API: `stats` (the fleet view), `build`, `html`
    "statemachine_agent.evals",  # evaluating loop policies: `Case`, `Dataset`, `evaluate`
}
"""The modules the docs may teach importing from; every other module is implementation."""

REQUIRED_TESTING = {
    "replies",
    "FakeAnthropicServer",
    "FakeError",
    "assert_end_state",
    "assert_fired",
    "assert_not_fired",
    "assert_path",
    "assert_trail_matches",
    "capture_events",
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

    def test_all_is_pinned(self) -> None:
        """`__all__` is exactly the pinned list: no name appears or goes unnoticed."""
        assert statemachine_agent.__all__ == EXPORTED

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

    @pytest.mark.parametrize("name", sorted(LAZY))
    def test_optional_names_resolve_to_their_modules(self, name: str) -> None:
        """A lazily exported name is the class of its module, importable from the root."""
        module, _extra = LAZY[name]
        assert getattr(statemachine_agent, name) is getattr(importlib.import_module(module), name)

    def test_optional_packages_are_not_imported_with_the_package(self) -> None:
        """`import statemachine_agent` loads neither `openai` nor `psycopg` (optional extras)."""
        extras = sorted({extra for _module, extra in LAZY.values()})
        code = (
            "import sys, statemachine_agent\n"
            f"loaded = [m for m in {extras!r} if m in sys.modules]\n"
            "print(', '.join(loaded)); sys.exit(1 if loaded else 0)"
        )
        done = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=False
        )
        assert done.returncode == 0, f"loaded: {done.stdout}{done.stderr}"

    def test_unknown_name_is_an_attribute_error(self) -> None:
        """A name the package does not have raises AttributeError naming it."""
        with pytest.raises(AttributeError, match="NoSuchThing"):
            _ = statemachine_agent.NoSuchThing

    def test_docs_import_only_public_modules(self) -> None:
        """The README's and the guides' code imports from the root or a public module only."""
        pattern = re.compile(r"^\s*from (statemachine_agent[\w.]*) import", re.M)
        for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
            for module in pattern.findall(page.read_text(encoding="utf-8")):
                assert module in PUBLIC_MODULES, f"{page.name} imports from {module}"

    def test_extension_points_are_written_from_the_root(self) -> None:
        """A verifier, an approval policy, an audit sink and a store need only root names."""
        namespace: dict[str, object] = {}
        exec(EXTENSIONS, namespace)
        result = namespace["result"]
        assert isinstance(result, statemachine_agent.RunResult)
        assert result.end_state == "completed"
        assert namespace["seen"] == ["approve", True]


EXTENSIONS = """
from collections.abc import Iterable, Mapping
from typing import Any

from statemachine_agent import (
    Agent, Approve, ApprovalPolicy, Audit, AuditSink, Checkpointer, Claim, PolicyAnswer,
    RunSummary, ScriptedModel, ToolCall, Verdict, VerifyPolicy, Verifier, tool,
)
from statemachine_agent.testing import replies

seen: list[object] = []


class ListStore:
    def __init__(self) -> None:
        self.rows: dict[str, list[Mapping[str, Any]]] = {}

    def append(self, run_id: str, body: Mapping[str, Any]) -> None:
        self.rows.setdefault(run_id, []).append(body)

    def bodies(self, run_id: str) -> Iterable[Mapping[str, Any]]:
        return list(self.rows.get(run_id, []))

    def runs(self) -> list[RunSummary]:
        return [RunSummary(r, "?", len(b), 0) for r, b in self.rows.items()]

    def close(self) -> None:
        pass


class Decisions:
    def write(self, event: Mapping[str, Any]) -> None:
        if event["event"] == "approval.decided":
            seen.append(event["decision"])

    def close(self) -> None:
        pass


def approve(call: ToolCall) -> PolicyAnswer:
    return Approve()


def check(claim: Claim) -> Verdict:
    seen.append(claim.text == "sent")
    return Verdict(ok=True)


@tool(requires_approval=True)
def send(to: str) -> str:
    \"\"\"Send a message.

    Args:
        to: Whom to.
    \"\"\"
    return "ok"


store: Checkpointer = ListStore()
sink: AuditSink = Decisions()
policy: ApprovalPolicy = approve
verifier: Verifier = check
agent = Agent(
    ScriptedModel([replies.tool_use("send", {"to": "ken"}), replies.text("sent")]),
    tools=[send],
    approval=policy,
    verify=VerifyPolicy(verifier),
    checkpointer=store,
    audit=Audit(sinks=[sink]),
)
result = agent.run("send it", run_id="r")
assert agent.checkpointer is store and store.rows["r"]
"""


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


class TestMovedModules:
    """Documented modules that moved into the package's rooms keep their old names."""

    @pytest.mark.parametrize(
        ("old", "new"),
        [
            ("statemachine_agent.effects.dbos", "statemachine_agent.durable.dbos"),
            ("statemachine_agent.effects.temporal", "statemachine_agent.durable.temporal"),
        ],
    )
    def test_an_adapter_is_the_same_module_under_its_old_name(self, old: str, new: str) -> None:
        assert importlib.import_module(old) is importlib.import_module(new)

    def test_the_scale_package_reaches_the_durable_helpers(self) -> None:
        import statemachine_agent.durable as durable
        import statemachine_agent.scale as scale

        assert scale.__all__ == durable.__all__
        for name in durable.__all__:
            assert getattr(scale, name) is getattr(durable, name), name

    def test_the_root_holds_at_most_eight_modules(self) -> None:
        """The edges live in rooms (agent/, cli/, durable/, ...), not loose at the root."""
        root = Path(statemachine_agent.__file__).parent
        loose = sorted(p.name for p in root.glob("*.py") if p.name != "__init__.py")
        assert len(loose) <= 8, loose

    def test_every_room_says_what_lives_there(self) -> None:
        root = Path(statemachine_agent.__file__).parent
        for init in sorted(root.glob("*/__init__.py")):
            module = importlib.import_module(f"statemachine_agent.{init.parent.name}")
            assert (module.__doc__ or "").strip(), (
                f"{init.parent.name}/__init__.py has no docstring"
            )
