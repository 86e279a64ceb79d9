"""What `Agent(...)` makes of its arguments: models from names, a tool registry from
tools and functions, a store from a path, and services with an output type."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from os import PathLike
from pathlib import Path
from typing import TYPE_CHECKING, Any

from statemachine_agent._args import check_bool, check_int, check_type, described
from statemachine_agent.machine.phase_env import AgentDeps
from statemachine_agent.models.base import Model
from statemachine_agent.persistence.sqlite import SQLiteCheckpointer
from statemachine_agent.policy.budget import Budget
from statemachine_agent.policy.commit import CommitPolicy
from statemachine_agent.policy.context import ContextPolicy
from statemachine_agent.policy.reflection import ReflectionPolicy
from statemachine_agent.policy.stall import StallPolicy
from statemachine_agent.policy.taint import TaintPolicy
from statemachine_agent.policy.verify import VerifyPolicy
from statemachine_agent.tools.base import Tool
from statemachine_agent.tools.decorator import tool as make_tool
from statemachine_agent.tools.output import OUTPUT_TOOL, output_spec
from statemachine_agent.tools.registry import ToolRegistry
from statemachine_agent.tools.toolset import Toolset

if TYPE_CHECKING:
    from statemachine_agent.agent import Storage


def check_arguments(args: Mapping[str, Any]) -> None:
    """`Agent(...)`'s arguments (its `locals()`) checked before anything is built, each
    refused by name with what it got and what it takes: a wrong type would otherwise
    surface as an `AttributeError` inside the first run, or as the API's 400."""
    model = args["model"]
    if not isinstance(model, str) and not (
        hasattr(model, "name") and callable(getattr(model, "acomplete", None))
    ):
        raise TypeError(
            "model must be a Model (AnthropicModel, ScriptedModel, OpenAIModel, ...) or a "
            f"Claude model name, got {described(model)}"
        )
    budget = args["budget"]
    if isinstance(budget, Mapping) and all(isinstance(k, str) for k in budget):
        spelled = ", ".join(f"{k}={v!r}" for k, v in budget.items())
        raise TypeError(f"budget must be a Budget, got a dict: write budget=Budget({spelled})")
    if isinstance(budget, int | float) and not isinstance(budget, bool):
        raise TypeError(
            f"budget must be a Budget, got {described(budget)}: for an iteration limit "
            f"write budget=Budget(max_iterations={budget!r})"
        )
    check_type("budget", budget, Budget, "a Budget", optional=True)
    tools = args["tools"]
    if isinstance(tools, str | bytes | Mapping) or not isinstance(tools, Iterable):
        raise TypeError(
            "tools must be a list of tools (Tool, @tool functions, toolsets) or a "
            f"ToolRegistry, got {described(tools)}"
        )
    check_type("system", args["system"], str, "a str (the system prompt) or None", optional=True)
    check_type("name", args["name"], str, "a str")
    check_int("max_tokens", args["max_tokens"], at_least=1)
    check_int("max_continuations", args["max_continuations"], at_least=0)
    check_int("output_retries", args["output_retries"], at_least=0)
    check_bool("cache_prompt", args["cache_prompt"])
    for param, kind in (("stall", StallPolicy), ("context", ContextPolicy),
                        ("reflection", ReflectionPolicy)):  # fmt: skip
        check_type(param, args[param], kind, f"a {kind.__name__} or None", optional=True)
    check_type("commit", args["commit"], CommitPolicy, "a CommitPolicy or None", optional=True)
    for param in ("request_options", "prices"):
        check_type(param, args[param], Mapping, "a mapping or None", optional=True)
    check_type("taint", args["taint"], TaintPolicy, "a TaintPolicy or None", optional=True)
    if args["approval"] is not None and not callable(args["approval"]):
        raise TypeError(
            f"approval must be a callable policy or None, got {described(args['approval'])}"
        )
    verify = args["verify"]
    if verify is not None and not isinstance(verify, VerifyPolicy) and not callable(verify):
        raise TypeError(
            f"verify must be a VerifyPolicy, a verifier (a callable) or None, got "
            f"{described(verify)}"
        )
    fallbacks = args["fallback_models"]
    if isinstance(fallbacks, str) or not isinstance(fallbacks, Sequence):
        raise TypeError(
            f"fallback_models must be a list of models or model names, got {described(fallbacks)}"
        )


def model_of(model: Model | str) -> Model:
    """A model name means a Claude model through the Anthropic SDK."""
    if isinstance(model, str):
        from statemachine_agent.models.anthropic import AnthropicModel

        return AnthropicModel(model)
    return model


def tool_of(item: Tool | Toolset | Callable[..., Any]) -> Tool | Toolset:
    return item if isinstance(item, Tool | Toolset) else make_tool(item)


def registry_of(tools: Iterable[Tool | Toolset], max_result_chars: int) -> ToolRegistry:
    registry = ToolRegistry(max_result_chars=max_result_chars)
    for item in tools:
        if isinstance(item, Toolset):
            registry.add_toolset(item)
        else:
            registry.register(item)
    return registry


def storage_option(checkpointer: Storage) -> Storage:
    """The `checkpointer=` argument checked, a path opened as its SQLite store."""
    if checkpointer is None or checkpointer is False:
        return checkpointer
    if isinstance(checkpointer, bool):
        raise TypeError(
            "checkpointer=True names no store: pass a Checkpointer, a SQLite file path, "
            "or False for none"
        )
    if isinstance(checkpointer, str | PathLike):
        path = Path(checkpointer)
        if path.is_dir():
            raise ValueError(
                f"checkpointer={str(path)!r} is a folder; name the SQLite file, "
                f"e.g. checkpointer={str(path / 'runs.sqlite3')!r}"
            )
        return SQLiteCheckpointer(path)
    missing = [m for m in ("append", "bodies", "runs", "close") if not hasattr(checkpointer, m)]
    if missing:
        raise TypeError(
            f"checkpointer={checkpointer!r} is not a Checkpointer (it lacks "
            f"{', '.join(missing)}); pass a Checkpointer, a SQLite file path, or False"
        )
    return checkpointer


def with_output(deps: AgentDeps, output_type: Any) -> AgentDeps:
    """The services with `output_type` as the answer's type: its `final_result` tool
    replaces any other output type's.

    A tool of the user's own named `final_result` is refused: the model would answer
    through one of the two, and which one ran would decide whether the answer was
    validated."""
    spec = output_spec(output_type)
    if deps.output is None and OUTPUT_TOOL in deps.tools.names:
        raise ValueError(
            f"tools: a tool is named {OUTPUT_TOOL!r}, the name of the tool through which "
            f"the model gives its typed answer when output_type is set; rename the tool "
            f"(e.g. @tool(name=...)) or leave output_type unset"
        )
    tools = [t for t in deps.tools if t.name != OUTPUT_TOOL]
    registry = ToolRegistry(
        [*tools, spec.tool()], max_result_chars=deps.context.max_tool_result_chars
    )
    return dataclasses.replace(deps, tools=registry, output=spec)
