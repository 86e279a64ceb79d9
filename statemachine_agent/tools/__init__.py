"""Tools: declared with `@tool`, collected and safely executed by a `ToolRegistry`."""

from .base import Tool, ToolCall, ToolOutcome
from .builtin import calculate, end_chat, finish, get_current_time, make_current_time_tool
from .decorator import tool
from .registry import ToolError, ToolRegistry

__all__ = [
    "Tool",
    "ToolCall",
    "ToolError",
    "ToolOutcome",
    "ToolRegistry",
    "calculate",
    "end_chat",
    "finish",
    "get_current_time",
    "make_current_time_tool",
    "tool",
]
