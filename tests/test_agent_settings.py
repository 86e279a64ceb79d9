"""An agent's settings: each stored once, read-only, changed by `replace`; one storage parameter."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from statemachine_agent import (
    Agent,
    AnthropicModel,
    Approve,
    Audit,
    Budget,
    ContextPolicy,
    MemoryCheckpointer,
    MemorySink,
    ReflectionPolicy,
    ScriptedModel,
    SQLiteCheckpointer,
    StallPolicy,
    Verdict,
    VerifyPolicy,
    calculate,
    tool,
)
from statemachine_agent.agent import SETTINGS
from statemachine_agent.effects.base import InProcessEffects
from statemachine_agent.testing import replies


@tool(requires_approval=True)
def send(to: str) -> str:
    """Send a message.

    Args:
        to: Whom to send it to.
    """
    return f"sent to {to}"


def asks_to_send() -> ScriptedModel:
    return ScriptedModel([replies.tool_use("send", {"to": "ken"}, id="toolu_send")])


def echo_model(*texts: str) -> ScriptedModel:
    return ScriptedModel([replies.text(t) for t in texts or ("ok",)])


class OtherEffects:
    """Effects that are not the in-process ones (as a durable engine's are not)."""

    def __init__(self) -> None:
        self._inner = InProcessEffects()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class TestReadOnlySettings:
    @pytest.mark.parametrize("name", SETTINGS)
    def test_assigning_a_setting_raises_with_the_replace_hint(self, name: str) -> None:
        """Each constructor parameter is a read-only property; assigning one says what to do."""
        agent = Agent(echo_model(), system="s")
        before = getattr(agent, name)
        with pytest.raises(AttributeError, match=rf"agent\.replace\({name}=\.\.\.\)"):
            setattr(agent, name, before)
        assert getattr(agent, name) is before

    def test_every_parameter_is_a_property(self) -> None:
        """Each parameter of `Agent.__init__` reads back through a property of its name."""
        for name in SETTINGS:
            assert isinstance(getattr(Agent, name), property), name

    def test_system_assignment_is_no_longer_silently_ignored(self) -> None:
        """`agent.system = ...` fails loudly, and the replaced agent's runs send the new prompt."""
        agent = Agent(echo_model("a", "b"), system="old")
        with pytest.raises(AttributeError):
            agent.system = "new"  # type: ignore[misc]
        newer = agent.replace(system="new", model=echo_model("b"))
        newer.run("hi")
        assert isinstance(newer.model, ScriptedModel)
        assert newer.model.requests[0].system[0]["text"] == "new"
        assert agent.system == "old"

    @settings(max_examples=80, deadline=None)
    @given(name=st.from_regex(r"[a-z][a-z0-9_]{0,15}", fullmatch=True), value=st.integers())
    def test_no_public_name_can_be_set(self, name: str, value: int) -> None:
        """Whatever public name is assigned, the agent refuses and its settings stay as they are."""
        agent = Agent(echo_model(), system="s")
        before = {setting: getattr(agent, setting) for setting in SETTINGS}
        with pytest.raises(AttributeError):
            setattr(agent, name, value)
        assert not hasattr(agent, "__dict__")
        assert all(getattr(agent, setting) is before[setting] for setting in SETTINGS)

    def test_derived_properties_are_read_only_too(self) -> None:
        """`agent.models` (derived, not a setting) cannot be assigned either."""
        agent = Agent(echo_model())
        with pytest.raises(AttributeError, match="derived from the agent's settings"):
            agent.models = []  # type: ignore[misc]

    def test_unknown_attributes_cannot_be_set_or_deleted(self) -> None:
        """A typo (`agent.sytem = ...`) is an error naming it, not a new, unused attribute."""
        agent = Agent(echo_model())
        with pytest.raises(AttributeError, match="'sytem'"):
            agent.sytem = "x"
        with pytest.raises(AttributeError, match="read-only"):
            del agent.system

    def test_values_read_back_normalized(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Shorthands read back as what they built: a model, a policy, an audit, a store."""
        monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test-key-0000")
        check = lambda claim: Verdict(ok=True)  # noqa: E731
        agent = Agent(
            "claude-haiku-4-5",
            tools=[calculate],
            verify=check,
            audit="audit-folder",
            reflection=ReflectionPolicy(2, critic="claude-haiku-4-5"),
            fallback_models=["claude-sonnet-5"],
        )
        assert isinstance(agent.model, AnthropicModel)
        assert agent.model.name == "claude-haiku-4-5"
        assert agent.verify == VerifyPolicy(check)
        assert agent.audit == Audit(dir=Path("audit-folder"))
        assert agent.reflection is not None
        assert isinstance(agent.reflection.critic, AnthropicModel)
        assert [m.name for m in agent.fallback_models] == ["claude-sonnet-5"]
        assert agent.models == [agent.model, *agent.fallback_models, agent.reflection.critic]
        assert agent.budget == Budget()
        assert agent.context == ContextPolicy()
        assert list(agent.tools.names) == ["calculate"]

    def test_request_options_cannot_be_changed_through_the_agent(self) -> None:
        """The options read back as a read-only view; the caller's dict stays the caller's."""
        options = {"temperature": 0.2}
        agent = Agent(echo_model(), request_options=options)
        with pytest.raises(TypeError):
            agent.request_options["temperature"] = 1.0  # type: ignore[index]
        options["temperature"] = 1.0
        assert agent.request_options == {"temperature": 0.2}

    def test_audit_keeps_its_own_copy_of_the_sinks(self) -> None:
        """A list of sinks changed after the agent was built does not change the agent."""
        sinks = [MemorySink()]
        agent = Agent(echo_model(), audit=Audit(sinks=sinks))
        sinks.append(MemorySink())
        assert len(agent.audit.sinks) == 1


class TestReplace:
    def test_changes_applied_original_untouched(self) -> None:
        """`replace` returns a new agent with the changes; every setting of the first stays."""
        agent = Agent(echo_model(), tools=[calculate], system="a", budget=Budget(max_iterations=3))
        before = {name: getattr(agent, name) for name in SETTINGS}
        other = agent.replace(system="b", budget=Budget(max_iterations=5), name="second")
        assert other is not agent
        assert (other.system, other.budget.max_iterations, other.name) == ("b", 5, "second")
        for name in SETTINGS:
            assert getattr(agent, name) is before[name], name

    def test_unchanged_settings_are_shared(self) -> None:
        """What is not changed is the same object: model, registry, store, audit, effects."""
        agent = Agent(echo_model(), tools=[calculate], checkpointer=MemoryCheckpointer())
        other = agent.replace(system="b")
        for name in SETTINGS:
            if name not in ("system", "tools"):
                assert getattr(other, name) == getattr(agent, name), name
        assert other.model is agent.model
        assert other.checkpointer is agent.checkpointer
        assert other.effects is agent.effects
        assert other.tools.names == agent.tools.names

    def test_copy_replace_protocol_is_the_same_call(self) -> None:
        """`__replace__` (what `copy.replace` calls) is `replace`."""
        agent = Agent(echo_model(), name="a")
        assert agent.__replace__(name="b").name == "b"
        assert agent.name == "a"

    def test_unknown_names_raise_type_error_naming_them(self) -> None:
        """Misspelled settings are refused, every one named, before anything is built."""
        agent = Agent(echo_model())
        with pytest.raises(TypeError, match=r"unknown setting\(s\): state_dir, sytem;"):
            agent.replace(sytem="x", state_dir="y", name="fine")

    def test_a_new_context_applies_to_tools_given_as_a_list(self) -> None:
        """The registry is rebuilt from the tools given, so the new result limit holds."""
        agent = Agent(echo_model(), tools=[calculate])
        smaller = agent.replace(context=ContextPolicy(max_tool_result_chars=100))
        assert smaller.tools.max_result_chars == 100
        assert agent.tools.max_result_chars == ContextPolicy().max_tool_result_chars

    def test_replaced_agent_resumes_the_runs_of_the_default_store(self) -> None:
        """The in-memory store an approval agent got by default is shared by its replacement."""
        agent = Agent(asks_to_send(), tools=[send])
        paused = agent.run("send it", run_id="r")
        assert paused.end_state == "awaiting_approval"
        later = agent.replace(model=echo_model("sent"))
        assert later.checkpointer is agent.checkpointer
        done = later.resume("r", decisions={"toolu_send": Approve()})
        assert done.end_state == "completed"

    def test_no_store_stays_no_store(self) -> None:
        """`checkpointer=False` survives a replace: no in-memory store appears."""
        agent = Agent(asks_to_send(), tools=[send], checkpointer=False)
        assert agent.replace(name="b").checkpointer is None

    def test_the_default_is_derived_again_when_none_was_in_use(self) -> None:
        """An agent without a store gets the default one when its new tools need approval."""
        agent = Agent(echo_model(), tools=[calculate])
        assert agent.checkpointer is None
        assert isinstance(agent.replace(tools=[send]).checkpointer, MemoryCheckpointer)

    @settings(max_examples=60, deadline=None)
    @given(
        changes=st.fixed_dictionaries(
            {},
            optional={
                "system": st.one_of(st.none(), st.text(max_size=20)),
                "name": st.text(min_size=1, max_size=10),
                "max_tokens": st.integers(1, 8192),
                "max_continuations": st.integers(0, 3),
                "cache_prompt": st.booleans(),
                "budget": st.integers(1, 20).map(lambda n: Budget(max_iterations=n)),
                "stall": st.sampled_from([None, StallPolicy(threshold=2)]),
                "reflection": st.one_of(st.none(), st.integers(1, 4).map(ReflectionPolicy)),
                "request_options": st.dictionaries(
                    st.sampled_from(["temperature", "top_k"]), st.integers(0, 5)
                ),
            },
        )
    )
    def test_any_changes_read_back_and_leave_the_rest(self, changes: dict[str, Any]) -> None:
        """Whatever is changed reads back as given; every other setting is the original's."""
        agent = Agent(
            echo_model(), tools=[calculate], system="base", budget=Budget(max_iterations=9)
        )
        other = agent.replace(**changes)
        for name in SETTINGS:
            if name in changes:
                assert getattr(other, name) == changes[name], name
            elif name != "tools":
                assert getattr(other, name) == getattr(agent, name), name
        assert other.tools.names == agent.tools.names
        assert agent.system == "base"
        assert agent.budget == Budget(max_iterations=9)


class TestStorage:
    def test_a_checkpointer_is_used_as_given(self) -> None:
        """A `Checkpointer` object is the store."""
        store = MemoryCheckpointer()
        assert Agent(echo_model(), checkpointer=store).checkpointer is store

    @pytest.mark.parametrize("form", [str, Path])
    def test_a_path_is_a_sqlite_file(self, tmp_path: Path, form: type) -> None:
        """A `str` or `Path` is a SQLite store in that file (folders created), shared by path."""
        path = tmp_path / "nested" / "runs.sqlite3"
        first = Agent(asks_to_send(), tools=[send], checkpointer=form(path))
        assert isinstance(first.checkpointer, SQLiteCheckpointer)
        assert first.checkpointer.path == path
        assert first.run("send it", run_id="r").end_state == "awaiting_approval"
        assert path.is_file()
        later = Agent(echo_model("sent"), tools=[send], checkpointer=form(path))
        done = later.resume("r", decisions={"toolu_send": Approve()})
        assert done.end_state == "completed"

    def test_a_folder_is_refused_naming_a_file_to_use(self, tmp_path: Path) -> None:
        """A folder (the old `state_dir=`) is a clear error suggesting the file inside it."""
        with pytest.raises(ValueError, match=r"is a folder; name the SQLite file.*runs\.sqlite3"):
            Agent(echo_model(), checkpointer=tmp_path)

    def test_false_means_no_store_even_for_approval_tools(self) -> None:
        """`False` switches storage off; a paused run then cannot be resumed, and says so."""
        agent = Agent(asks_to_send(), tools=[send], checkpointer=False)
        assert agent.checkpointer is None
        assert agent.run("send it", run_id="r").end_state == "awaiting_approval"
        with pytest.raises(ValueError, match="resume needs a checkpointer"):
            agent.resume("r", decisions={"toolu_send": Approve()})

    def test_default_is_memory_for_approval_tools_only(self) -> None:
        """By default only an in-process agent with approval tools gets an in-memory store."""
        assert isinstance(Agent(echo_model(), tools=[send]).checkpointer, MemoryCheckpointer)
        assert Agent(echo_model(), tools=[calculate]).checkpointer is None
        engine_effects: Any = OtherEffects()
        assert Agent(echo_model(), tools=[send], effects=engine_effects).checkpointer is None

    @pytest.mark.parametrize("value", [True, 42, {"path": "x"}])
    def test_anything_else_is_a_type_error(self, value: Any) -> None:
        """`True`, a number or a plain mapping is not a store: a TypeError saying what is."""
        with pytest.raises(TypeError, match="Checkpointer"):
            Agent(echo_model(), checkpointer=value)

    def test_state_dir_is_gone(self, tmp_path: Path) -> None:
        """The old second way to choose storage no longer exists."""
        with pytest.raises(TypeError, match="state_dir"):
            Agent(echo_model(), state_dir=tmp_path)  # type: ignore[call-arg]


class TestPolicies:
    def test_reflection_interval_is_checked(self) -> None:
        """An interval below 1, or not an int, is refused when the policy is made."""
        with pytest.raises(ValueError, match="at least 1"):
            ReflectionPolicy(0)
        with pytest.raises(TypeError, match="int"):
            ReflectionPolicy(True)

    def test_verify_policy_is_checked(self) -> None:
        """A verifier must be callable; rejections cannot be negative."""
        with pytest.raises(TypeError, match="callable"):
            VerifyPolicy("yes")  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="max_rejections"):
            VerifyPolicy(lambda c: Verdict(ok=True), max_rejections=-1)

    def test_audit_normalizes_and_checks(self, tmp_path: Path) -> None:
        """The folder becomes a Path, sinks and keys tuples; one string of keys is refused."""
        audit = Audit(dir=str(tmp_path), sinks=[MemorySink()], redact=iter(["email"]))
        assert audit.dir == tmp_path
        assert isinstance(audit.sinks, tuple)
        assert audit.redact == ("email",)
        assert audit.run_file("r") == tmp_path / "r.jsonl"
        with pytest.raises(TypeError, match="list of keys"):
            Audit(redact="email")

    def test_audit_folder_writes_each_run_there(self, tmp_path: Path) -> None:
        """`audit=<folder>` writes `<folder>/<run_id>.jsonl`, redacting the keys given."""
        sink = MemorySink()
        agent = Agent(echo_model("hi"), audit=Audit(dir=tmp_path, sinks=[sink], redact=["system"]))
        result = agent.run("hello", run_id="r")
        assert result.audit_path == tmp_path / "r.jsonl"
        started = next(e for e in sink.events if e["event"] == "run.started")
        assert started["system"] == "[REDACTED]"

    def test_policies_are_frozen(self) -> None:
        """The policy objects are values: changed by `dataclasses.replace`, never in place."""
        for policy in (ReflectionPolicy(1), VerifyPolicy(lambda c: Verdict(ok=True)), Audit()):
            with pytest.raises(dataclasses.FrozenInstanceError):
                policy.__setattr__(dataclasses.fields(policy)[0].name, None)
