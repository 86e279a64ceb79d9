"""Per-run context: `deps=` and `metadata=` reach tools through `RunContext`, and
`metadata` is stamped on every audit event and checkpoint of the run.

Runs go through the real `anthropic` SDK against the local strict server, so
the tool's input schema the model is shown is checked as the API would.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from statemachine_agent import (
    Agent,
    AnthropicModel,
    Approve,
    Conversation,
    MemoryCheckpointer,
    MemorySink,
    RunContext,
    ScriptedModel,
    load_record,
    tool,
)
from statemachine_agent.audit.config import Audit
from statemachine_agent.testing import FakeAnthropicServer, replies
from statemachine_agent.tools.base import ToolCall
from statemachine_agent.tools.registry import ToolRegistry

API_KEY = "sk-ant-api03-TESTSECRET-abcdefghijklmnop"


@dataclass
class Deps:
    """What a host passes to its tools: here, a tenant and a place to write."""

    tenant: str
    seen: list[RunContext[Deps]] = field(default_factory=list)


@tool
def lookup(ctx: RunContext[Deps], city: str) -> str:
    """Look up a city for the tenant.

    Args:
        city: the city's name.
    """
    ctx.deps.seen.append(ctx)
    return f"{ctx.deps.tenant}: {city} is sunny"


@tool
async def alookup(city: str, context: RunContext[Deps]) -> str:
    """Look up a city for the tenant, asynchronously.

    Args:
        city: the city's name.
    """
    context.deps.seen.append(context)
    await asyncio.sleep(0)
    return f"{context.deps.tenant}: {city} is rainy"


@pytest.fixture
def server() -> Iterator[FakeAnthropicServer]:
    with FakeAnthropicServer() as fake:
        yield fake


def model_for(server: FakeAnthropicServer) -> AnthropicModel:
    return AnthropicModel(api_key=API_KEY, base_url=server.base_url)


class TestSchema:
    def test_context_parameter_is_not_in_the_schema(self) -> None:
        """The model is shown only its own arguments, never the context."""
        for item in (lookup, alookup):
            assert set(item.input_schema["properties"]) == {"city"}
            assert item.input_schema["required"] == ["city"]

    def test_two_context_parameters_are_refused(self) -> None:
        """A tool may declare one context parameter: the registry must know which to fill."""
        with pytest.raises(TypeError, match="2 RunContext parameters"):

            @tool
            def twice(a: RunContext[Deps], b: RunContext[Deps], x: int) -> int:
                """Twice."""
                return x

    def test_model_cannot_supply_the_context(self, server: FakeAnthropicServer) -> None:
        """A model naming the context parameter is answered as invalid input; the tool
        does not run with a forged context."""
        deps = Deps("acme")
        server.add(
            replies.tool_use("lookup", {"city": "Oslo", "ctx": {"deps": "forged"}}),
            replies.text("ok"),
        )
        result = Agent(model_for(server), tools=[lookup]).run("Weather?", deps=deps)
        assert deps.seen == []
        answer = server.requests[1]["messages"][2]["content"][0]
        assert answer["is_error"] is True
        assert "'ctx' was unexpected" in answer["content"]
        assert result.end_state == "completed"


class TestToolsReceiveTheContext:
    def test_sync_and_async_tools_get_deps_ids_and_metadata(
        self, server: FakeAnthropicServer
    ) -> None:
        """Each call gets the host's deps and metadata, the run's progress, and its own ids."""
        deps = Deps("acme")
        server.add(
            replies.tool_uses(("lookup", {"city": "Oslo"}), ("alookup", {"city": "Bergen"})),
            replies.text("Sunny and rainy."),
        )
        agent = Agent(model_for(server), tools=[lookup, alookup])
        result = agent.run("Weather?", deps=deps, metadata={"tenant": "acme", "user": "u1"})
        assert result.end_state == "completed"
        assert server.invalid_requests == []
        first = server.requests[0]
        assert {t["name"]: set(t["input_schema"]["properties"]) for t in first["tools"]} == {
            "lookup": {"city"},
            "alookup": {"city"},
        }
        uses = [b for b in server.requests[1]["messages"][1]["content"] if b["type"] == "tool_use"]
        by_id = {ctx.tool_call_id: ctx for ctx in deps.seen}
        assert set(by_id) == {u["id"] for u in uses}
        for use in uses:
            ctx = by_id[use["id"]]
            assert ctx.deps is deps
            assert ctx.run_id == result.run_id
            assert ctx.idempotency_key == f"{result.run_id}:{use['id']}"
            assert ctx.tool_name == use["name"]
            assert ctx.iteration == 1
            assert ctx.usage.output_tokens > 0
            assert dict(ctx.metadata) == {"tenant": "acme", "user": "u1"}
        contents = [r["content"] for r in server.requests[1]["messages"][2]["content"]]
        assert contents == ["acme: Oslo is sunny", "acme: Bergen is rainy"]

    def test_metadata_cannot_be_changed_by_a_tool(self) -> None:
        """The metadata a tool sees is read-only: one tool cannot rewrite another's view."""

        @tool
        def meddle(ctx: RunContext[None]) -> str:
            """Try to change the metadata."""
            try:
                ctx.metadata["tenant"] = "evil"  # type: ignore[index]
            except TypeError:
                return "refused"
            return "changed"

        model = ScriptedModel([replies.tool_use("meddle", {}), replies.text("done")])
        sink = MemorySink()
        result = Agent(model, tools=[meddle], audit=Audit(sinks=[sink])).run(
            "go", metadata={"tenant": "acme"}
        )
        assert result.messages[2]["content"][0]["content"] == "refused"
        assert {e["metadata"]["tenant"] for e in sink.events} == {"acme"}

    def test_without_deps_a_tool_gets_none(self) -> None:
        """A run given no deps hands its tools `deps=None`, not an error."""
        seen: list[RunContext[Any]] = []

        @tool
        def probe(ctx: RunContext[Any]) -> str:
            """Probe."""
            seen.append(ctx)
            return "ok"

        model = ScriptedModel([replies.tool_use("probe", {}), replies.text("done")])
        result = Agent(model, tools=[probe]).run("go")
        assert [c.deps for c in seen] == [None]
        assert seen[0].run_id == result.run_id
        assert dict(seen[0].metadata) == {}

    def test_registry_outside_a_run_gives_the_call_ids(self) -> None:
        """Executed outside any run (a worker of another process), the tool still gets its
        call's ids, with no deps."""
        seen: list[RunContext[Any]] = []

        @tool
        def probe(ctx: RunContext[Any]) -> str:
            """Probe."""
            seen.append(ctx)
            return "ok"

        registry = ToolRegistry([probe])
        call = ToolCall("toolu_1", "probe", {}, idempotency_key="run_x:toolu_1")
        outcome = asyncio.run(registry.execute(call))
        assert outcome.content == "ok"
        assert (seen[0].deps, seen[0].run_id, seen[0].tool_call_id) == (None, "run_x", "toolu_1")


class TestMetadataStamped:
    def test_every_event_and_the_checkpoint_carry_metadata(self) -> None:
        """Every audit event of the run names its metadata, and its checkpoint keeps it."""
        sink = MemorySink()
        store = MemoryCheckpointer()
        model = ScriptedModel([replies.tool_use("lookup", {"city": "Oslo"}), replies.text("ok")])
        agent = Agent(model, tools=[lookup], audit=Audit(sinks=[sink]), checkpointer=store)
        result = agent.run("go", deps=Deps("acme"), metadata={"request_id": "r-1"})
        assert sink.events
        assert all(e["metadata"] == {"request_id": "r-1"} for e in sink.events)
        assert load_record(store, result.run_id).metadata == {"request_id": "r-1"}

    def test_metadata_is_redacted_like_the_audit_trail(self) -> None:
        """A secret in the metadata is masked in the audit trail like anywhere else."""
        sink = MemorySink()
        model = ScriptedModel([replies.text("ok")])
        agent = Agent(model, audit=Audit(sinks=[sink], redact=("token",)))
        agent.run("go", metadata={"token": "s3cret", "user": "u1"})
        assert all(e["metadata"]["token"] != "s3cret" for e in sink.events)
        assert all(e["metadata"]["user"] == "u1" for e in sink.events)

    def test_metadata_must_be_json(self) -> None:
        """Metadata that a checkpoint cannot hold is refused before the run starts."""
        with pytest.raises(TypeError, match="metadata"):
            Agent(ScriptedModel([replies.text("ok")])).run("go", metadata={"db": object()})

    def test_resume_keeps_metadata_and_takes_fresh_deps(self) -> None:
        """A resumed run keeps its stored metadata (stamped on its new events) and gives
        its tools the deps passed to `resume`: deps are live objects, never stored."""

        @tool(requires_approval=True)
        def pay(ctx: RunContext[Deps], amount: int) -> str:
            """Pay an amount.

            Args:
                amount: in cents.
            """
            ctx.deps.seen.append(ctx)
            return f"{ctx.deps.tenant} paid {amount}"

        sink = MemorySink()
        model = ScriptedModel([replies.tool_use("pay", {"amount": 5}), replies.text("paid")])
        agent = Agent(model, tools=[pay], audit=Audit(sinks=[sink]))
        first = agent.run("pay 5", deps=Deps("old"), metadata={"tenant": "acme"})
        assert first.end_state == "awaiting_approval"
        call_id = first.messages[-1]["content"][0]["id"]
        fresh = Deps("new")
        done = agent.resume(first.run_id, decisions={call_id: Approve()}, deps=fresh)
        assert done.end_state == "completed"
        assert [c.deps.tenant for c in fresh.seen] == ["new"]
        assert dict(fresh.seen[0].metadata) == {"tenant": "acme"}
        resumed = [e for e in sink.events if e["event"] == "run.resumed"]
        assert resumed
        assert resumed[0]["metadata"] == {"tenant": "acme"}


class TestConversation:
    def test_each_turn_gets_its_own_deps_and_metadata(self) -> None:
        """`Conversation.send` passes deps and metadata to its turn's run."""
        model = ScriptedModel(
            [
                replies.tool_use("lookup", {"city": "Oslo"}),
                replies.text("sunny"),
                replies.tool_use("lookup", {"city": "Rome"}),
                replies.text("sunny too"),
            ]
        )
        chat = Conversation(Agent(model, tools=[lookup]))
        one, two = Deps("t1"), Deps("t2")
        chat.send("Oslo?", deps=one, metadata={"turn": 1})
        chat.send("Rome?", deps=two, metadata={"turn": 2})
        assert [dict(c.metadata) for c in one.seen + two.seen] == [{"turn": 1}, {"turn": 2}]
        assert [c.deps.tenant for c in one.seen + two.seen] == ["t1", "t2"]


class TestConcurrentRunsKeepApart:
    @settings(max_examples=15, deadline=None)
    @given(st.lists(st.sampled_from(["a", "b", "c"]), min_size=2, max_size=5))
    def test_concurrent_runs_never_see_each_others_deps(self, tenants: list[str]) -> None:
        """Runs of one agent at once, each with concurrent tool calls (sync on threads and
        async), each tool call sees only its own run's deps and metadata."""

        def script() -> list[Any]:
            return [
                replies.tool_uses(
                    ("lookup", {"city": "x"}), ("alookup", {"city": "y"}), ("lookup", {"city": "z"})
                ),
                replies.text("done"),
            ]

        async def main() -> list[tuple[Deps, str]]:
            runs = []
            for i, tenant in enumerate(tenants):
                agent = Agent(ScriptedModel(script()), tools=[lookup, alookup])
                deps = Deps(f"{tenant}{i}")
                runs.append((deps, agent.arun("go", deps=deps, metadata={"i": i})))
            results = await asyncio.gather(*(run for _, run in runs))
            return [(deps, result.run_id) for (deps, _), result in zip(runs, results, strict=True)]

        for i, (deps, run_id) in enumerate(asyncio.run(main())):
            assert len(deps.seen) == 3
            assert {c.run_id for c in deps.seen} == {run_id}
            assert {c.deps.tenant for c in deps.seen} == {deps.tenant}
            assert {c.metadata["i"] for c in deps.seen} == {i}
