"""What `Agent(...)` makes of its arguments: models from names, a tool registry from
tools and functions, a store from a path, and services with an output type."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from os import PathLike
from pathlib import Path
from typing import TYPE_CHECKING, Any

from statemachine_agent.machine.phase_env import AgentDeps
from statemachine_agent.models.base import Model
from statemachine_agent.persistence.sqlite import SQLiteCheckpointer
from statemachine_agent.tools.base import Tool
from statemachine_agent.tools.decorator import tool as make_tool
from statemachine_agent.tools.output import OUTPUT_TOOL, output_spec
from statemachine_agent.tools.registry import ToolRegistry
from statemachine_agent.tools.toolset import Toolset

if TYPE_CHECKING:
    from statemachine_agent.agent import Storage


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
