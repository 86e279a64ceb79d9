"""Benchmark 1: overhead per iteration of the agent loop, against a bare loop and peers.

Every system runs the same conversation: a zero-latency model asks for a trivial
tool 50 times (`lookup(n)`, distinct arguments), then answers with text: 51 model
calls, 50 tool executions. What is timed is everything but the model's thinking,
divided by 51. Cases:

  (a) bare loop     a `while` loop in the Anthropic-SDK style (dicts, a sync tool): the floor
  (g) transitions   the same loop driving a 4-working-state `transitions.Machine` with
                    conditions, built once and fired per run like the engine does
  (b) engine        `Agent.arun`, events to the silent stdlib logger (no sink)
  (c) engine+JSONL  the same with `audit=<folder>` (one JSONL file per run)
  (d) engine+SQLite the same with `checkpointer=SQLiteCheckpointer(...)`, when it exists
  (e) LangGraph     `create_react_agent` with a fake chat model: no checkpointer,
                    `InMemorySaver`, `SqliteSaver` (sync `invoke`, its fastest path here)
                    and async `ainvoke`
  (f) pydantic-ai   `Agent` with a `FunctionModel`, async tool

Diagnostic rows (engine with the stall detector off, engine with a sync tool)
split the engine's own figure; see docs/performance.md.
"""

from __future__ import annotations

import asyncio
import sqlite3
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks import common

CALLS = 50
ITERATIONS = CALLS + 1


# -- (a) the floor ---------------------------------------------------------------------


def _api_bodies() -> list[dict[str, Any]]:
    """Messages API response bodies, as the SDK's `.model_dump()` would give them."""
    return common.tool_script(CALLS)


def bare_loop() -> Callable[[int], float]:
    bodies = _api_bodies()
    tools = {"lookup": lambda n: f"item {n}"}

    def create(messages: list[dict[str, Any]]) -> dict[str, Any]:
        return bodies[len(messages) // 2]

    def case(runs: int) -> float:
        start = time.perf_counter()
        for _ in range(runs):
            messages: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
            while True:
                reply = create(messages)
                messages.append({"role": "assistant", "content": reply["content"]})
                if reply["stop_reason"] != "tool_use":
                    break
                results = [
                    {
                        "type": "tool_result",
                        "tool_use_id": block["id"],
                        "content": tools[block["name"]](**block["input"]),
                    }
                    for block in reply["content"]
                    if block["type"] == "tool_use"
                ]
                messages.append({"role": "user", "content": results})
        elapsed = time.perf_counter() - start
        assert len(messages) == 2 * ITERATIONS, len(messages)
        return elapsed

    return case


# -- (g) transitions alone -------------------------------------------------------------


class _LoopRun:
    """The model object `transitions` moves: state plus what the conditions read."""

    def __init__(self) -> None:
        self.state = "perceive"
        self.messages: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
        self.reply: dict[str, Any] | None = None
        self.iteration = 0


def transitions_alone() -> Callable[[int], float]:
    from transitions import Machine

    bodies = _api_bodies()
    tools = {"lookup": lambda n: f"item {n}"}
    machine = Machine(
        model=None,
        states=["perceive", "reason", "act", "observe", "done"],
        initial=None,
        auto_transitions=False,
        send_event=True,
    )
    within_budget = lambda e: e.model.iteration < 100  # noqa: E731
    wants_tools = lambda e: e.model.reply["stop_reason"] == "tool_use"  # noqa: E731
    machine.add_transition("prepared", "perceive", "reason", conditions=[within_budget])
    machine.add_transition("prepared", "perceive", "done")
    machine.add_transition("replied", "reason", "act", conditions=[wants_tools])
    machine.add_transition("replied", "reason", "done")
    machine.add_transition("tools_done", "act", "observe")
    machine.add_transition("observed", "observe", "perceive")
    fire = {name: event.trigger for name, event in machine.events.items()}

    def case(runs: int) -> float:
        start = time.perf_counter()
        for _ in range(runs):
            run = _LoopRun()
            while run.state != "done":
                if run.state == "perceive":
                    fire["prepared"](run)
                elif run.state == "reason":
                    run.reply = bodies[len(run.messages) // 2]
                    run.iteration += 1
                    run.messages.append({"role": "assistant", "content": run.reply["content"]})
                    fire["replied"](run)
                elif run.state == "act":
                    assert run.reply is not None
                    results = [
                        {
                            "type": "tool_result",
                            "tool_use_id": b["id"],
                            "content": tools[b["name"]](**b["input"]),
                        }
                        for b in run.reply["content"]
                        if b["type"] == "tool_use"
                    ]
                    run.messages.append({"role": "user", "content": results})
                    fire["tools_done"](run)
                else:
                    fire["observed"](run)
        elapsed = time.perf_counter() - start
        assert run.iteration == ITERATIONS
        return elapsed

    return case


# -- (b), (c), (d) this engine ---------------------------------------------------------


def engine(tool_kind: str = "async", **options: Any) -> Callable[[int], float]:
    from statemachine_agent import Agent, Budget

    agent = Agent(
        model=common.FakeModel(common.tool_script(CALLS)),
        tools=[common.lookup_tool(tool_kind)],
        budget=Budget(max_iterations=ITERATIONS + 10),
        **options,
    )

    def case(runs: int) -> float:
        async def many() -> tuple[float, Any]:
            start = time.perf_counter()
            for _ in range(runs):
                result = await agent.arun("go")
            return time.perf_counter() - start, result

        elapsed, result = asyncio.run(many())
        assert result.end_state == "completed", result.reason
        assert result.iterations == ITERATIONS, result.iterations
        return elapsed

    return case


# -- (e) LangGraph ---------------------------------------------------------------------


def _langgraph_agent(
    checkpointer: Any, sync_tool: bool, interrupt_before: list[str] | None = None
) -> Any:
    from langchain_core.language_models.chat_models import BaseChatModel
    from langchain_core.messages import AIMessage
    from langchain_core.outputs import ChatGeneration, ChatResult
    from langchain_core.tools import tool as lc_tool
    from langgraph.prebuilt import create_react_agent

    class FakeToolModel(BaseChatModel):
        """Returns tool calls, then text; chosen by the conversation's length."""

        @property
        def _llm_type(self) -> str:
            return "fake-tool-model"

        def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
            return self

        def _answer(self, messages: list[Any]) -> ChatResult:
            done = len(messages) // 2
            if done < CALLS:
                call = {
                    "name": "lookup",
                    "args": {"n": done},
                    "id": f"call_{done}",
                    "type": "tool_call",
                }
                message = AIMessage(content="", tool_calls=[call])
            else:
                message = AIMessage(content="done")
            return ChatResult(generations=[ChatGeneration(message=message)])

        def _generate(
            self, messages: Any, stop: Any = None, run_manager: Any = None, **kwargs: Any
        ) -> ChatResult:
            return self._answer(messages)

        async def _agenerate(
            self, messages: Any, stop: Any = None, run_manager: Any = None, **kwargs: Any
        ) -> ChatResult:
            return self._answer(messages)

    if sync_tool:

        def lookup(n: int) -> str:
            """Look up an item."""
            return f"item {n}"
    else:

        async def lookup(n: int) -> str:  # type: ignore[misc]
            """Look up an item."""
            return f"item {n}"

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # create_react_agent's move to `langchain.agents`
        return create_react_agent(
            FakeToolModel(),
            [lc_tool(lookup)],
            checkpointer=checkpointer,
            interrupt_before=interrupt_before,
        )


def langgraph(checkpointer: str | None, tmp: Path, mode: str = "sync") -> Callable[[int], float]:
    saver: Any = None
    if checkpointer == "memory":
        from langgraph.checkpoint.memory import InMemorySaver

        saver = InMemorySaver()
    elif checkpointer == "sqlite":
        from langgraph.checkpoint.sqlite import SqliteSaver

        saver = SqliteSaver(sqlite3.connect(tmp / "langgraph.db", check_same_thread=False))
    graph = _langgraph_agent(saver, sync_tool=mode == "sync")
    counter = iter(range(10**9))

    def config() -> dict[str, Any]:
        return {
            "recursion_limit": 4 * ITERATIONS,
            "configurable": {"thread_id": f"t{next(counter)}"},
        }

    def case(runs: int) -> float:
        if mode == "sync":
            start = time.perf_counter()
            for _ in range(runs):
                out = graph.invoke({"messages": [("user", "go")]}, config())
            elapsed = time.perf_counter() - start
        else:

            async def many() -> tuple[float, Any]:
                start = time.perf_counter()
                for _ in range(runs):
                    out = await graph.ainvoke({"messages": [("user", "go")]}, config())
                return time.perf_counter() - start, out

            elapsed, out = asyncio.run(many())
        assert len(out["messages"]) == 2 * ITERATIONS, len(out["messages"])
        return elapsed

    return case


# -- (f) pydantic-ai -------------------------------------------------------------------


def pydantic_ai() -> Callable[[int], float]:
    from pydantic_ai import Agent, UsageLimits
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    def respond(messages: list[Any], info: AgentInfo) -> ModelResponse:
        done = len(messages) // 2
        if done < CALLS:
            return ModelResponse(
                parts=[ToolCallPart("lookup", {"n": done}, tool_call_id=f"call_{done}")]
            )
        return ModelResponse(parts=[TextPart("done")])

    agent = Agent(FunctionModel(respond))

    @agent.tool_plain
    async def lookup(n: int) -> str:
        """Look up an item."""
        return f"item {n}"

    limits = UsageLimits(request_limit=ITERATIONS + 10)

    def case(runs: int) -> float:
        async def many() -> tuple[float, Any]:
            start = time.perf_counter()
            for _ in range(runs):
                result = await agent.run("go", usage_limits=limits)
            return time.perf_counter() - start, result

        elapsed, result = asyncio.run(many())
        assert result.output == "done"
        assert len(result.all_messages()) == 2 * ITERATIONS
        return elapsed

    return case


# -- the table -------------------------------------------------------------------------

# key: (label, tool kind shown in the table)
LABELS = {
    "a_bare_loop": ("(a) bare loop, SDK style", "sync"),
    "g_transitions": ("(g) transitions alone, 4-state Machine", "sync"),
    "b_engine": ("(b) engine, null sink", "async"),
    "b_engine_no_stall": ("(b) diag: engine, stall detector off", "async"),
    "b_engine_sync_tool": ("(b) diag: engine, sync tool (pooled threads)", "sync"),
    "c_engine_jsonl": ("(c) engine, JSONL audit sink", "async"),
    "d_engine_sqlite": ("(d) engine, SQLite checkpointer", "async"),
    "e_langgraph": ("(e) LangGraph prebuilt, no checkpointer", "sync"),
    "e_langgraph_async": ("(e) LangGraph prebuilt, ainvoke, no checkpointer", "async"),
    "e_langgraph_memory": ("(e) LangGraph prebuilt, InMemorySaver", "sync"),
    "e_langgraph_sqlite": ("(e) LangGraph prebuilt, SqliteSaver", "sync"),
    "f_pydantic_ai": ("(f) pydantic-ai, FunctionModel", "async"),
}


def cases(tmp: Path) -> dict[str, Callable[[int], float]]:
    import structlog

    assert not structlog.is_configured(), "structlog is configured: (b) would not be a null sink"
    built: dict[str, Callable[[int], float]] = {
        "a_bare_loop": bare_loop(),
        "g_transitions": transitions_alone(),
        "b_engine": engine(),
        "b_engine_no_stall": engine(stall=None),
        "b_engine_sync_tool": engine("sync"),
        "c_engine_jsonl": engine(audit=tmp / "audit"),
    }
    if common.persistence_ready():
        from statemachine_agent.persistence import SQLiteCheckpointer

        built["d_engine_sqlite"] = engine(checkpointer=SQLiteCheckpointer(tmp / "runs.db"))
    built["e_langgraph"] = langgraph(None, tmp)
    built["e_langgraph_async"] = langgraph(None, tmp, mode="async")
    built["e_langgraph_memory"] = langgraph("memory", tmp)
    built["e_langgraph_sqlite"] = langgraph("sqlite", tmp)
    built["f_pydantic_ai"] = pydantic_ai()
    return built


def targets(stats: dict[str, Any]) -> list[dict[str, Any]]:
    def check(name: str, case: str, over: str, limit: float, text: str) -> dict[str, Any]:
        if case not in stats:
            return {"target": name, "text": text, "status": "pending"}
        value = common.ratio(stats[case], stats[over])
        return {
            "target": name,
            "text": text,
            "value": value,
            "limit": limit,
            "status": "met" if value <= limit else "missed",
        }

    return [
        check("b_vs_g", "b_engine", "g_transitions", 5.0, "(b) <= 5x (g)"),
        check(
            "b_vs_langgraph",
            "b_engine",
            "e_langgraph",
            1 / 10,
            "(b) <= 1/10 of LangGraph without checkpointer",
        ),
        check(
            "d_vs_langgraph_sqlite",
            "d_engine_sqlite",
            "e_langgraph_sqlite",
            1 / 6,
            "(d) <= 1/6 of LangGraph with its SQLite saver",
        ),
        check("c_vs_b", "c_engine_jsonl", "b_engine", 1.3, "(c) JSONL audit sink <= 1.3x (b)"),
    ]


def render(stats: dict[str, Any], checks: list[dict[str, Any]]) -> str:
    rows = []
    for key, (label, tool) in LABELS.items():
        if key not in stats:
            rows.append([label, tool, common.PENDING_PERSISTENCE.split(":")[0], "-", "-"])
            continue
        rows.append(
            [
                label,
                tool,
                common.fmt_range(stats[key]),
                f"{common.ratio(stats[key], stats['a_bare_loop']):,.1f}x",
                f"{common.ratio(stats[key], stats['g_transitions']):,.2f}x",
            ]
        )
    text = common.table(
        ["system", "tool", "us/iteration, median (min-max)", "vs (a)", "vs (g)"], rows
    )
    lines = [text, ""]
    for c in checks:
        if c["status"] == "pending":
            lines.append(f"- target {c['text']}: pending")
        else:
            lines.append(f"- target {c['text']}: {c['value']:.3g} -> {c['status']}")
    return "\n".join(lines)


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="bench-overhead-") as tmp:
        built = cases(Path(tmp))
        per_unit = dict.fromkeys(built, 1000000.0 / ITERATIONS)
        stats = common.interleave(built, per_unit)
    checks = targets(stats)
    text = render(stats, checks)
    print(f"Overhead per iteration ({CALLS} tool calls + 1 final text = {ITERATIONS} model calls)")
    print(text)
    figures = {
        "unit": "us per iteration",
        "iterations_per_run": ITERATIONS,
        "cases": {k: {**v, "label": LABELS[k][0], "tool": LABELS[k][1]} for k, v in stats.items()},
        "pending": [] if "d_engine_sqlite" in stats else ["d_engine_sqlite"],
        "targets": checks,
    }
    print("wrote", common.write_result("overhead", figures, text))


if __name__ == "__main__":
    main()
