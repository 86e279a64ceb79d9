"""statemachine-agent: an LLM agent loop as an explicit, auditable state machine.

Every public name is importable from here: the agent and its settings, the
models, tools and policies, what a verifier, an approval policy, an audit sink
or a store is written against, and the errors the API raises. The subpackages
are implementation; `statemachine_agent.testing` (test helpers) and the engine
adapters (`statemachine_agent.durable.dbos`, `.temporal`) are imported on their own.

Every name is imported on first use (PEP 562 `__getattr__`), so importing the
package, or running `statemachine-agent --help`, loads none of the SDKs, the
terminal library or the engine until something asks for them; type checkers
read the same imports from the `TYPE_CHECKING` block.
"""

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from statemachine_agent.agent import Agent, RunHandle
    from statemachine_agent.agent._fork import ForkPointError
    from statemachine_agent.agent.conversation import (
        Conversation,
        ConversationConflictError,
        ConversationEndedError,
    )
    from statemachine_agent.agent.options import ResumeOptions, RunOptions, TurnOptions
    from statemachine_agent.audit.config import Audit
    from statemachine_agent.audit.redact import Redactor
    from statemachine_agent.audit.sink import (
        AuditFileError,
        AuditSink,
        JsonlSink,
        MemorySink,
        read_events,
    )
    from statemachine_agent.effects.base import Effects
    from statemachine_agent.errors import Error
    from statemachine_agent.machine.cancel import CancelToken
    from statemachine_agent.machine.ids import InvalidIdError
    from statemachine_agent.machine.result import NoOutputError, RunResult
    from statemachine_agent.machine.resume import MissingToolsError, RunAlreadyEndedError
    from statemachine_agent.machine.run import TransitionRecord
    from statemachine_agent.models.anthropic import AnthropicModel, MissingAPIKeyError
    from statemachine_agent.models.base import Model, ModelError, ModelReply, ModelRequest, Usage
    from statemachine_agent.models.openai import MissingOpenAIKeyError, OpenAIModel
    from statemachine_agent.models.replay import ReplayDivergenceError, ReplayModel
    from statemachine_agent.models.scripted import ScriptedModel
    from statemachine_agent.persistence.base import (
        CheckpointCorruptError,
        Checkpointer,
        LeasingCheckpointer,
        MemoryCheckpointer,
        RunNotFoundError,
        RunSummary,
        UnsafeStoreError,
        load_record,
    )
    from statemachine_agent.persistence.codec import SerializationError
    from statemachine_agent.persistence.crypto import generate_key
    from statemachine_agent.persistence.lease import RunLockedError
    from statemachine_agent.persistence.postgres import PostgresCheckpointer
    from statemachine_agent.persistence.sqlite import SQLiteCheckpointer
    from statemachine_agent.policy.approval import (
        ApprovalPolicy,
        ApprovalRecord,
        Approve,
        Decision,
        DecisionTypeError,
        Defer,
        Deny,
        Edit,
        PolicyAnswer,
    )
    from statemachine_agent.policy.budget import Budget
    from statemachine_agent.policy.context import ContextPolicy
    from statemachine_agent.policy.pricing import Price, UnknownModelPriceError
    from statemachine_agent.policy.reflection import ReflectionPolicy
    from statemachine_agent.policy.stall import StallPolicy
    from statemachine_agent.policy.taint import TaintPolicy
    from statemachine_agent.policy.verify import Claim, Verdict, Verifier, VerifyPolicy
    from statemachine_agent.tools.base import TaintSource, Tool, ToolCall, ToolOutcome
    from statemachine_agent.tools.builtin import calculate, end_chat, finish, get_current_time
    from statemachine_agent.tools.decorator import tool
    from statemachine_agent.tools.mcp import MCPToolset
    from statemachine_agent.tools.output import OutputTypeError
    from statemachine_agent.tools.registry import ToolError, ToolRegistry
    from statemachine_agent.tools.scope import RunContext


def _exports() -> dict[str, str]:
    """Each public name and the module it comes from, read off the `TYPE_CHECKING`
    imports above (so every name is declared once, there)."""
    import ast
    from pathlib import Path

    tree = ast.parse(Path(__file__).read_text(encoding="utf-8"))
    block = next(node for node in tree.body if isinstance(node, ast.If))
    return {
        alias.name: str(node.module)
        for node in block.body
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }


_LAZY = _exports()
"""Names imported on first use, with their modules."""


__version__: str
"""The installed distribution's version (read on first use, not at import)."""


def _version() -> str:
    """The version pip installed, or a marker when the package runs from a bare checkout
    that was never installed (no distribution metadata to read)."""
    from importlib import metadata

    try:
        return metadata.version("statemachine-agent")
    except metadata.PackageNotFoundError:
        return "0+unknown"


def __getattr__(name: str) -> object:
    if name == "__version__":
        globals()[name] = version = _version()
        return version
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


__all__ = [
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
