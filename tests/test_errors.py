"""One root for every error the library raises on purpose (`statemachine_agent.Error`).

A service embedding the agent writes one `except statemachine_agent.Error` and
relies on it; a new exception class that forgets the root silently breaks that
promise. So these tests walk every module of the package (not a hand-kept list)
and fail on any exception class that is neither an `Error` nor a named internal
signal, pin the built-in base each class had before the root existed (so an old
`except KeyError` keeps working), raise the errors for real (an unknown run id,
a missing key, a refused request from the real SDK against the local server),
and keep `docs/errors.md` equal to what the classes generate.
"""

from __future__ import annotations

import importlib
import inspect
import json
import pkgutil
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import statemachine_agent
from scripts import docgen
from statemachine_agent import (
    Agent,
    AnthropicModel,
    Error,
    MemoryCheckpointer,
    MissingAPIKeyError,
    ModelError,
    RunNotFoundError,
    ScriptedModel,
    UnknownModelPriceError,
    read_events,
)
from statemachine_agent.audit.chain import ENCRYPTED
from statemachine_agent.models.base import ModelRequest
from statemachine_agent.policy.pricing import DEFAULT_PRICE_TABLE
from statemachine_agent.testing import FakeAnthropicServer, FakeError, replies

ROOT = Path(__file__).resolve().parents[1]

PREVIOUS_BASES: dict[str, type[BaseException]] = {
    "AuditFileError": ValueError,
    "BudgetSpentError": Exception,
    "CalculationError": ValueError,
    "CheckpointCorruptError": Exception,
    "ConversationConflictError": RuntimeError,
    "ConversationEndedError": RuntimeError,
    "DecisionTypeError": TypeError,
    "EvalError": ValueError,
    "ForkPointError": ValueError,
    "GoldenFileError": ValueError,
    "GraphvizError": RuntimeError,
    "InvalidIdError": ValueError,
    "GraphvizNotFoundError": RuntimeError,
    "InvalidRequestError": ValueError,
    "KeyMismatchError": ValueError,
    "LeaseLostError": RuntimeError,
    "MissingAPIKeyError": ValueError,
    "MissingOpenAIKeyError": ValueError,
    "MissingToolsError": ValueError,
    "ModelError": Exception,
    "NoOutputError": LookupError,
    "OutputTypeError": TypeError,
    "PayloadAlteredError": ValueError,
    "PostgresNotFoundError": RuntimeError,
    "ReplayDivergenceError": RuntimeError,
    "ReplayError": ValueError,
    "ReportError": ValueError,
    "RunAlreadyEndedError": ValueError,
    "RunLockedError": RuntimeError,
    "RunNotFoundError": KeyError,
    "SerializationError": TypeError,
    "TemporalCLINotFoundError": RuntimeError,
    "ToolError": Exception,
    "ToolsetError": Exception,
    "UnknownAgentError": LookupError,
    "UnknownModelPriceError": KeyError,
    "UnsafeStoreError": PermissionError,
    "UsageError": Exception,
}
"""Every `Error` subclass of the package, with the built-in `except` that caught it
before `Error` existed (and must still catch it)."""

INTERNAL_SIGNALS = {
    "statemachine_agent.machine.engine.MachineDefinitionError",
    "statemachine_agent.machine.failures.ComponentError",
    "statemachine_agent.machine.failures.GuardError",
    "statemachine_agent.models.waiting.RetryWaitExceededError",
    "statemachine_agent.persistence.packing.UnpackError",
    "statemachine_agent.replay.ProcessDied",
    "statemachine_agent.tools._execution.AbandonedError",
    "statemachine_agent.tools._execution.EscapedError",
    "statemachine_agent.tools._execution.HandlerTimeoutError",
}
"""Exception classes left outside `Error` on purpose: each is caught and turned into
something else before it can reach a caller (the reasons are in `errors.py`).
Private `_...` classes are internal by their name and need no entry."""

DOCUMENTED_MODULES = (
    "statemachine_agent",
    "statemachine_agent.audit",
    "statemachine_agent.cli.common",
    "statemachine_agent.diagrams",
    "statemachine_agent.durable",
    "statemachine_agent.durable.dbos",
    "statemachine_agent.durable.devserver",
    "statemachine_agent.durable.temporal",
    "statemachine_agent.effects",
    "statemachine_agent.models.anthropic",
    "statemachine_agent.models.openai",
    "statemachine_agent.persistence",
    "statemachine_agent.persistence.crypto",
    "statemachine_agent.persistence.lease",
    "statemachine_agent.replay",
    "statemachine_agent.report",
    "statemachine_agent.stream.events",
    "statemachine_agent.testing",
    "statemachine_agent.testing.postgres",
    "statemachine_agent.tools",
    *(
        f"statemachine_agent.policy.{info.name}"
        for info in pkgutil.iter_modules(
            importlib.import_module("statemachine_agent.policy").__path__
        )
    ),
)
"""The modules the docs teach importing from (every `policy` module included)."""


def exports(module_name: str) -> dict[str, object]:
    """What a module offers its users: its `__all__`, else the public names it defines
    (not the ones it merely imports)."""
    module = importlib.import_module(module_name)
    names = getattr(module, "__all__", None)
    if names is None:
        names = [
            name
            for name, value in vars(module).items()
            if not name.startswith("_") and getattr(value, "__module__", None) == module_name
        ]
    return {name: getattr(module, name) for name in names}


def exception_classes(namespace: dict[str, object]) -> dict[str, type[BaseException]]:
    return {
        name: value
        for name, value in namespace.items()
        if inspect.isclass(value) and issubclass(value, BaseException)
    }


def qualified(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def package_exceptions() -> dict[str, type[BaseException]]:
    """Every exception class the package defines at module level, by qualified name."""
    found: dict[str, type[BaseException]] = {}
    for name, module in docgen.package_modules().items():
        for value in exception_classes(vars(module)).values():
            if value.__module__ == name:
                found[qualified(value)] = value
    return found


class TestTheRoot:
    def test_error_is_exported_from_the_package(self) -> None:
        """`statemachine_agent.Error` is a public name, an `Exception`, and lives in errors.py."""
        assert "Error" in statemachine_agent.__all__
        assert statemachine_agent.Error is Error
        assert Error.__module__ == "statemachine_agent.errors"
        assert Error.__bases__ == (Exception,)

    def test_errors_module_is_a_stdlib_only_leaf(self) -> None:
        """errors.py imports nothing of the package, so any module can derive from it."""
        source = (ROOT / "statemachine_agent" / "errors.py").read_text(encoding="utf-8")
        assert "import statemachine_agent" not in source
        assert "from statemachine_agent" not in source
        assert "from ." not in source


class TestEveryErrorDerives:
    @pytest.mark.parametrize("module_name", DOCUMENTED_MODULES)
    def test_documented_exports_are_errors(self, module_name: str) -> None:
        """Each exception class a documented module exports derives from `Error`."""
        outside = [
            name
            for name, cls in exception_classes(exports(module_name)).items()
            if not issubclass(cls, Error) and qualified(cls) not in INTERNAL_SIGNALS
        ]
        assert outside == [], f"{module_name} exports non-Error exceptions: {outside}"

    def test_documented_modules_export_the_errors_users_meet(self) -> None:
        """The walk above is not vacuous: it meets the errors the issue names."""
        met = {
            name
            for module_name in DOCUMENTED_MODULES
            for name in exception_classes(exports(module_name))
        }
        assert met >= {
            "CheckpointCorruptError",
            "ConversationConflictError",
            "GoldenFileError",
            "InvalidRequestError",
            "KeyMismatchError",
            "MissingOpenAIKeyError",
            "ReportError",
            "RunLockedError",
            "UnknownAgentError",
            "UnknownModelPriceError",
            "UsageError",
        }

    def test_every_exception_class_of_the_package_is_an_error_or_a_named_signal(
        self,
    ) -> None:
        """No module defines an exception class outside `Error` unless it is a listed
        internal signal or private; a new class that forgets the root fails here."""
        stray = sorted(
            qualified
            for qualified, cls in package_exceptions().items()
            if not issubclass(cls, Error)
            and qualified not in INTERNAL_SIGNALS
            and not cls.__name__.startswith("_")
        )
        assert stray == []

    def test_internal_signals_exist_and_stay_internal(self) -> None:
        """Each listed signal still exists (the list cannot go stale) and none is in the
        `__all__` of a documented module."""
        assert set(package_exceptions()) >= INTERNAL_SIGNALS
        listed = {
            f"{value.__module__}.{value.__qualname__}"
            for module_name in DOCUMENTED_MODULES
            for name in getattr(importlib.import_module(module_name), "__all__", ())
            if inspect.isclass(value := getattr(importlib.import_module(module_name), name))
        }
        assert sorted(INTERNAL_SIGNALS & listed) == []


class TestBuiltinBasesKept:
    def test_pinned_list_is_every_error(self) -> None:
        """`PREVIOUS_BASES` names exactly the package's `Error` subclasses."""
        errors = {cls.__name__ for cls in docgen.error_classes() if cls is not Error}
        assert errors == set(PREVIOUS_BASES)

    @pytest.mark.parametrize("name", sorted(PREVIOUS_BASES))
    def test_each_keeps_its_builtin_base(self, name: str) -> None:
        """Each error is an `Error` and still the built-in it was, nearest in its MRO."""
        (cls,) = {c for c in docgen.error_classes() if c.__name__ == name}
        assert issubclass(cls, Error)
        assert issubclass(cls, PREVIOUS_BASES[name])
        assert docgen.builtin_base(cls) is PREVIOUS_BASES[name]

    @pytest.mark.parametrize("name", sorted(PREVIOUS_BASES))
    def test_each_has_its_own_docstring(self, name: str) -> None:
        """Each error says when it is raised (the docs' table is made from it)."""
        (cls,) = {c for c in docgen.error_classes() if c.__name__ == name}
        assert (cls.__doc__ or "").strip()


class TestCaughtForReal:
    def test_resume_of_an_unknown_run(self) -> None:
        """Resuming an id no store knows is caught as `Error`, and as `KeyError` as before."""
        agent = Agent(
            ScriptedModel([replies.text("never sent")]), checkpointer=MemoryCheckpointer()
        )
        with pytest.raises(Error) as caught:
            agent.resume("nope")
        assert isinstance(caught.value, RunNotFoundError)
        with pytest.raises(KeyError):
            agent.resume("nope")

    @given(st.from_regex(r"[A-Za-z0-9_.-]{1,40}", fullmatch=True).filter(lambda s: s.strip(".")))
    def test_resume_of_any_unknown_id(self, run_id: str) -> None:
        """Whatever the (well-formed) id, an empty store's refusal is an `Error` and a
        `KeyError`."""
        agent = Agent(
            ScriptedModel([replies.text("never sent")]), checkpointer=MemoryCheckpointer()
        )
        with pytest.raises(Error) as caught:
            agent.resume(run_id)
        assert isinstance(caught.value, KeyError)

    @given(st.text(max_size=12))
    def test_resume_of_any_id_at_all(self, run_id: str) -> None:
        """Whatever the id, well-formed or not (a path, a reserved prefix, a newline),
        resuming it raises an `Error`: not found, or an `InvalidIdError` naming the rule."""
        agent = Agent(
            ScriptedModel([replies.text("never sent")]), checkpointer=MemoryCheckpointer()
        )
        with pytest.raises(Error) as caught:
            agent.resume(run_id)
        assert isinstance(caught.value, KeyError | ValueError)

    def test_anthropic_model_without_a_key(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """No key anywhere: caught as `Error`, and as `ValueError` as before."""
        monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
        with pytest.raises(Error) as caught:
            AnthropicModel()
        assert isinstance(caught.value, MissingAPIKeyError)
        with pytest.raises(ValueError, match="ANTHROPIC_API_KEY is not set"):
            AnthropicModel()

    def test_a_refused_request_through_the_real_sdk(self) -> None:
        """A 401 from the local API, through the real anthropic SDK, is an `Error`."""
        with FakeAnthropicServer() as server:
            server.add(FakeError(401, "invalid x-api-key"))
            model = AnthropicModel(api_key="sk-ant-test", base_url=server.base_url)
            request = ModelRequest(
                model=model.name,
                max_tokens=64,
                messages=[{"role": "user", "content": "hi"}],
            )
            with pytest.raises(Error) as caught:
                model.complete(request)
        assert isinstance(caught.value, ModelError)
        assert caught.value.status == 401

    @pytest.mark.parametrize(
        "line",
        ['{"event": "run.started"', '"just a string"', '{"no": "event"}', "\udcff"],
        ids=["cut-off", "not-an-object", "not-an-event", "not-utf8"],
    )
    def test_an_unreadable_audit_file(self, tmp_path: Path, line: str) -> None:
        """A malformed audit line is an `Error` naming the line, and a `ValueError` as before."""
        path = tmp_path / "audit.jsonl"
        path.write_bytes(line.encode("utf-8", "surrogateescape") + b"\n")
        with pytest.raises(Error, match=r"audit\.jsonl:1: ") as caught:
            read_events(path)
        assert isinstance(caught.value, ValueError)

    def test_an_encrypted_audit_file_without_its_key(self, tmp_path: Path) -> None:
        """An encrypted audit line read without a key is an `Error` that says to give one."""
        path = tmp_path / "audit.jsonl"
        path.write_text(json.dumps({ENCRYPTED: "c2VhbGVk"}) + "\n", encoding="utf-8")
        with pytest.raises(Error, match="no encryption key was given") as caught:
            read_events(path)
        assert isinstance(caught.value, ValueError)

    def test_an_unknown_model_price(self) -> None:
        """Asking the price of an unknown model is an `Error` and a `KeyError`."""
        with pytest.raises(Error) as caught:
            DEFAULT_PRICE_TABLE.require("no-such-model")
        assert isinstance(caught.value, UnknownModelPriceError)
        assert isinstance(caught.value, KeyError)


class TestTheDocs:
    def test_errors_doc_is_fresh(self) -> None:
        """docs/errors.md is exactly what the classes generate now."""
        committed = (ROOT / "docs" / "errors.md").read_text(encoding="utf-8")
        assert committed == docgen.errors_markdown(), (
            "docs/errors.md is stale: run `make docs` and commit the result"
        )

    def test_the_tree_draws_every_error_with_its_builtin_base(self) -> None:
        """Each error appears in the tree as `Name (BuiltinBase)`, under its parent."""
        tree = docgen.error_tree()
        assert tree.splitlines()[0] == "Error (Exception)"
        for name, base in PREVIOUS_BASES.items():
            assert f"── {name} ({base.__name__})" in tree
        lines = tree.splitlines()
        parent = lines.index(next(line for line in lines if "── MissingAPIKeyError" in line))
        assert "└── MissingOpenAIKeyError (ValueError)" in lines[parent + 1]

    def test_readme_links_the_errors_doc(self) -> None:
        """The README's docs list points at the error reference."""
        assert "(docs/errors.md)" in (ROOT / "README.md").read_text(encoding="utf-8")
