"""statemachine-agent: an LLM agent loop as an explicit, auditable state machine."""

from statemachine_agent.agent import Agent
from statemachine_agent.audit.redact import Redactor
from statemachine_agent.audit.sink import JsonlSink, MemorySink
from statemachine_agent.conversation import Conversation
from statemachine_agent.machine.engine import CancelToken
from statemachine_agent.machine.result import RunResult
from statemachine_agent.machine.run import TransitionRecord
from statemachine_agent.models.anthropic import AnthropicModel, MissingAPIKeyError
from statemachine_agent.models.base import Model, ModelError, ModelReply, ModelRequest, Usage
from statemachine_agent.models.replay import ReplayModel
from statemachine_agent.models.scripted import ScriptedModel
from statemachine_agent.persistence.base import MemoryCheckpointer
from statemachine_agent.persistence.sqlite import SQLiteCheckpointer
from statemachine_agent.policy.approval import Approve, Defer, Deny, Edit
from statemachine_agent.policy.budget import Budget
from statemachine_agent.policy.pricing import Price
from statemachine_agent.tools.base import Tool, ToolCall, ToolOutcome
from statemachine_agent.tools.builtin import calculate, end_chat, finish, get_current_time
from statemachine_agent.tools.decorator import tool
from statemachine_agent.tools.registry import ToolError, ToolRegistry


def __getattr__(name: str) -> object:
    """`OpenAIModel` is imported on first use: it needs the optional `openai` package."""
    if name == "OpenAIModel":
        from statemachine_agent.models.openai import OpenAIModel

        return OpenAIModel
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "Agent",
    "AnthropicModel",
    "Approve",
    "Budget",
    "CancelToken",
    "Conversation",
    "Defer",
    "Deny",
    "Edit",
    "JsonlSink",
    "MemoryCheckpointer",
    "MemorySink",
    "MissingAPIKeyError",
    "Model",
    "ModelError",
    "ModelReply",
    "ModelRequest",
    "OpenAIModel",
    "Price",
    "Redactor",
    "ReplayModel",
    "RunResult",
    "SQLiteCheckpointer",
    "ScriptedModel",
    "Tool",
    "ToolCall",
    "ToolError",
    "ToolOutcome",
    "ToolRegistry",
    "TransitionRecord",
    "Usage",
    "calculate",
    "end_chat",
    "finish",
    "get_current_time",
    "tool",
]
