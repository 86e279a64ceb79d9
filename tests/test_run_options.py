"""The per-run options, declared once, and the typed bundle the agent's helpers take.

Every entry point of `Agent` and `Conversation` takes `**options` of one family
(`RunOptions`, `ResumeOptions`, `TurnOptions`), checked and defaulted by one
function: a misspelled option raises `TypeError` naming it before anything runs.
The helpers beside `Agent` (`_records`, `_resume`, `_driving`) take its
`AgentParts`, never the agent.
"""

from __future__ import annotations

import ast
import asyncio
import dataclasses
import inspect
import pydoc
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given as for_all
from hypothesis import strategies as st

import statemachine_agent
from statemachine_agent import (
    Agent,
    AnthropicModel,
    Audit,
    CancelToken,
    Conversation,
    MemoryCheckpointer,
    MemorySink,
    ResumeOptions,
    RunOptions,
    TurnOptions,
)
from statemachine_agent.agent import options as options_module
from statemachine_agent.agent._parts import AgentParts, deps_for
from statemachine_agent.agent.options import OPTIONS, Given, OptionOutputT, given, keys_of
from statemachine_agent.testing import FakeAnthropicServer, replies
from statemachine_agent.tools.output import OUTPUT_TOOL

API_KEY = "sk-ant-api03-TESTSECRET-abcdefghijklmnop"
FAMILIES = {"RunOptions": RunOptions, "ResumeOptions": ResumeOptions, "TurnOptions": TurnOptions}
HELPERS = Path(statemachine_agent.__file__).parent / "agent"


@pytest.fixture
def server() -> Iterator[FakeAnthropicServer]:
    with FakeAnthropicServer() as fake:
        yield fake


def sdk_agent(server: FakeAnthropicServer, **settings: Any) -> Agent:
    """An agent on the real `anthropic` SDK, talking to the strict local server."""
    return Agent(AnthropicModel(api_key=API_KEY, base_url=server.base_url), **settings)


async def _first_event(conversation: Conversation, kw: dict[str, Any]) -> None:
    stream = conversation.astream("hi", **kw)
    try:
        await stream.__anext__()
    finally:
        await stream.aclose()


ENTRY_POINTS: dict[str, tuple[Any, Callable[[Agent, Conversation, dict[str, Any]], object]]] = {
    "Agent.run": (RunOptions, lambda a, c, kw: a.run("hi", **kw)),
    "Agent.arun": (RunOptions, lambda a, c, kw: asyncio.run(a.arun("hi", **kw))),
    "Agent.astream": (RunOptions, lambda a, c, kw: a.astream("hi", **kw)),
    "Agent.stream": (RunOptions, lambda a, c, kw: a.stream("hi", **kw)),
    "Agent.start": (RunOptions, lambda a, c, kw: a.start("hi", **kw)),
    "Agent.resume": (ResumeOptions, lambda a, c, kw: a.resume("run_x", **kw)),
    "Agent.aresume": (ResumeOptions, lambda a, c, kw: asyncio.run(a.aresume("run_x", **kw))),
    "Conversation.send": (TurnOptions, lambda a, c, kw: c.send("hi", **kw)),
    "Conversation.asend": (TurnOptions, lambda a, c, kw: asyncio.run(c.asend("hi", **kw))),
    "Conversation.astream": (TurnOptions, lambda a, c, kw: asyncio.run(_first_event(c, kw))),
    "Conversation.stream": (TurnOptions, lambda a, c, kw: c.stream("hi", **kw)),
    "Conversation.resume": (TurnOptions, lambda a, c, kw: c.resume({}, **kw)),
    "Conversation.aresume": (TurnOptions, lambda a, c, kw: asyncio.run(c.aresume({}, **kw))),
}


class TestOneDeclaration:
    def test_the_families_are_exported_from_the_root(self) -> None:
        """`statemachine_agent.RunOptions` (and the others) are the declared TypedDicts."""
        for name, family in FAMILIES.items():
            assert getattr(statemachine_agent, name) is family
            assert name in statemachine_agent.__all__

    def test_the_families_share_the_turn_options(self) -> None:
        """A fresh run adds `history` and `run_id`, a resume `decisions`, to a turn's."""
        turn = keys_of(TurnOptions)
        assert turn == {"cancel", "deadline", "output_type", "deps", "metadata", "wait"}
        assert keys_of(RunOptions) == turn | {"history", "run_id"}
        assert keys_of(ResumeOptions) == turn | {"decisions"}
        for family in FAMILIES.values():
            assert family.__required_keys__ == frozenset()

    def test_defaults_and_docs_cover_exactly_the_declared_keys(self) -> None:
        """`Given` (the defaults) and `OPTIONS` (the docs) name every key, and only those,
        with the same types as the TypedDicts (`output_type`'s is the families' type
        parameter, whose default, `Any`, is what `Given` holds)."""
        declared: dict[str, str] = {}
        for family in FAMILIES.values():
            for key, hint in family.__annotations__.items():
                declared[key] = hint.__forward_arg__
        assert declared["output_type"] == OptionOutputT.__name__
        assert OptionOutputT.__default__ is Any
        declared["output_type"] = "Any"
        assert {f.name: f.type for f in dataclasses.fields(Given)} == declared
        assert set(OPTIONS) == set(declared)

    @pytest.mark.parametrize("where", sorted(ENTRY_POINTS))
    def test_every_entry_point_takes_its_family(self, where: str) -> None:
        """Each entry point's signature is its first positional argument and `**options`
        of its family; its docstring lists every option of that family."""
        owner, method = where.split(".")
        function = getattr(Agent if owner == "Agent" else Conversation, method)
        family = ENTRY_POINTS[where][0]
        params = list(inspect.signature(function).parameters.values())
        assert params[-1].kind is inspect.Parameter.VAR_KEYWORD
        assert params[-1].annotation == f"Unpack[{family.__name__}]"
        assert all(p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD for p in params[:-1])
        doc = inspect.getdoc(function) or ""
        assert f"Options ({family.__name__}):" in doc
        for key in keys_of(family):
            assert f"    {key}: {OPTIONS[key][:20]}" in doc

    def test_help_of_run_lists_the_options(self) -> None:
        """`help(Agent.run)` shows each option and what it means, not just `**options`."""
        text = pydoc.render_doc(Agent.run, renderer=pydoc.plaintext)
        assert "**options: 'Unpack[RunOptions]'" in text
        for key in keys_of(RunOptions):
            assert f"{key}: " in text
        assert "history: the messages before the prompt" in text


class TestMisspelledOptions:
    @pytest.mark.parametrize("where", sorted(ENTRY_POINTS))
    def test_a_misspelled_option_raises_naming_it(
        self, where: str, server: FakeAnthropicServer
    ) -> None:
        """Every entry point refuses an unknown keyword with a `TypeError` that names it,
        its likely meaning and the entry point, before any request is sent."""
        server.add(replies.text("never sent"))
        agent = sdk_agent(server, checkpointer=MemoryCheckpointer())
        conversation = Conversation(agent)
        call = ENTRY_POINTS[where][1]
        with pytest.raises(TypeError) as caught:
            call(agent, conversation, {"metdata": {"tenant": "acme"}})
        message = str(caught.value)
        assert f"{where}() got an unexpected keyword argument 'metdata'" in message
        assert "did you mean 'metadata'?" in message
        assert server.requests == []

    @pytest.mark.parametrize("where", ["Conversation.send", "Agent.start"])
    def test_an_option_of_another_family_is_refused(self, where: str) -> None:
        """A conversation names its turns' runs itself: `run_id` is not a turn's option;
        `decisions` is a resume's, not a fresh run's."""
        agent = Agent(statemachine_agent.ScriptedModel([replies.text("unused")]))
        bad = {"run_id": "run_1"} if where.startswith("Conversation") else {"decisions": {}}
        with pytest.raises(TypeError, match=repr(next(iter(bad)))):
            ENTRY_POINTS[where][1](agent, Conversation(agent), bad)

    @for_all(
        family=st.sampled_from(sorted(FAMILIES)),
        names=st.lists(
            st.one_of(
                st.sampled_from(sorted(OPTIONS)),
                st.from_regex(r"[a-z_][a-z0-9_]{0,12}", fullmatch=True),
            ),
            max_size=6,
            unique=True,
        ),
    )
    def test_given_accepts_exactly_the_family(self, family: str, names: list[str]) -> None:
        """For any keywords: unknown ones raise `TypeError` naming each of them; known ones
        come back as given, every other option at its declared default."""
        allowed = keys_of(FAMILIES[family])
        values = {name: object() for name in names}
        unknown = [name for name in names if name not in allowed]
        if unknown:
            with pytest.raises(TypeError) as caught:
                given("Agent.run", values, FAMILIES[family])
            for name in unknown:
                assert repr(name) in str(caught.value)
            return
        resolved = given("Agent.run", values, FAMILIES[family])
        for field in dataclasses.fields(Given):
            expected = values.get(field.name, field.default)
            assert getattr(resolved, field.name) is expected


@dataclass
class City:
    name: str


class TestOptionsThroughTheSDK:
    def test_one_options_value_serves_run_and_stream(self, server: FakeAnthropicServer) -> None:
        """A `RunOptions` built once gives `run` and `stream` the same history and
        metadata: the requests carry the history, every event the metadata."""
        server.add(replies.text("first"), replies.text("second"))
        sink = MemorySink()
        agent = sdk_agent(server, audit=Audit(sinks=[sink]))
        history = [
            {"role": "user", "content": "My name is Ada."},
            {"role": "assistant", "content": "Hello Ada."},
        ]
        options: RunOptions = {"history": history, "metadata": {"tenant": "acme"}, "wait": 1.0}
        result = agent.run("Who am I?", **options)
        events = list(agent.stream("Who am I, again?", **options))
        assert result.text == "first"
        assert events[-1].result.text == "second"  # type: ignore[attr-defined]
        assert [r["messages"][:2] for r in server.requests] == [history, history]
        assert server.invalid_requests == []
        assert sink.events
        assert all(e["metadata"] == {"tenant": "acme"} for e in sink.events)

    def test_start_uses_the_given_token_and_id(self, server: FakeAnthropicServer) -> None:
        """`start` takes the whole family: a given token is the handle's, so cancelling
        the handle cancels the host's token (and the run)."""
        server.add(replies.text("never needed"))
        agent = sdk_agent(server)
        token = CancelToken()

        async def go() -> Any:
            handle = agent.start("hi", cancel=token, run_id="run_given")
            handle.cancel()
            return handle.run_id, await handle

        run_id, result = asyncio.run(go())
        assert token.cancelled
        assert (run_id, result.run_id, result.end_state) == ("run_given", "run_given", "cancelled")

    def test_a_turn_takes_an_output_type(self, server: FakeAnthropicServer) -> None:
        """A conversation's turn passes the run options on: `output_type` gives the turn a
        typed answer, through the SDK."""
        server.add(replies.tool_use(OUTPUT_TOOL, {"name": "Paris"}))
        conversation = Conversation(sdk_agent(server))
        result = conversation.send("Capital of France?", output_type=City, deadline=60.0)
        assert result.output == City("Paris")
        assert conversation.turns == 1
        assert server.requests[0]["tools"][-1]["name"] == OUTPUT_TOOL


class TestHelpersTakeTheBundle:
    def test_the_agent_keeps_one_bundle(self) -> None:
        """The run-making parts live in one frozen `AgentParts`, not in loose attributes."""
        assert "_parts" in Agent.__slots__
        for loose in ("_deps", "_settings", "_redactor", "_engine", "_audit", "_outputs"):
            assert loose not in Agent.__slots__
        agent = Agent(statemachine_agent.ScriptedModel([]))
        parts = agent._parts
        with pytest.raises(dataclasses.FrozenInstanceError):
            parts.name = "other"  # type: ignore[misc]

    @pytest.mark.parametrize("module", ["_records", "_resume", "_driving", "_building"])
    def test_the_helpers_never_see_the_agent(self, module: str) -> None:
        """No helper names `Agent` or reads one of its private attributes."""
        tree = ast.parse((HELPERS / f"{module}.py").read_text(encoding="utf-8"))
        names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
        imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)
                    for a in n.names}  # fmt: skip
        attributes = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
        assert "Agent" not in names | imported
        assert not attributes & {"_deps", "_settings", "_redactor", "_engine", "_deps_for"}

    def test_deps_for_makes_each_output_type_once(self) -> None:
        """Runs with the same `output_type` share its services; another type gets its own;
        none means the agent's own."""
        parts = Agent(statemachine_agent.ScriptedModel([]))._parts
        assert isinstance(parts, AgentParts)
        assert deps_for(parts, None) is parts.deps
        first = deps_for(parts, City)
        assert deps_for(parts, City) is first
        assert first.output is not None
        assert first.output.output_type is City
        assert deps_for(parts, dict[str, int]) is not first

    def test_the_options_module_imports_no_agent(self) -> None:
        """The options are plain declarations: their module imports nothing of `agent/`
        at run time, so any module may name them."""
        tree = ast.parse(inspect.getsource(options_module))
        runtime = [n for n in tree.body if isinstance(n, ast.Import | ast.ImportFrom)]
        assert all(
            not (isinstance(n, ast.ImportFrom) and (n.module or "").startswith("statemachine_"))
            for n in runtime
        )


class TestExample:
    def test_the_run_options_example(self) -> None:
        """`examples/run_options.py` reuses one options value over two turns, and its
        deliberate misspelling is refused by name (mypy refuses it too: `make typecheck`
        fails if its `type: ignore[call-arg]` stops being needed)."""
        path = Path(statemachine_agent.__file__).parent.parent / "examples" / "run_options.py"
        namespace: dict[str, Any] = {"__name__": "example_run_options"}
        exec(compile(path.read_text(encoding="utf-8"), str(path), "exec"), namespace)
        results, slip = namespace["main"]()
        assert [r.text for r in results] == [
            "Order 7 ships on Monday.",
            "Order 8 ships on Tuesday.",
        ]
        assert results[1].messages[:2] == results[0].messages
        assert "Agent.run() got an unexpected keyword argument 'histroy'" in slip
        assert "did you mean 'history'?" in slip
