"""How much of the history the model is shown, and what is cached.

Three layers keep a long run inside the context window (docs/configuration.md
says what triggers each): results too large are cut when they arrive (with a
notice); past a threshold, old exchanges are replaced by a model's summary of
them (the `summarize` state), or old tool results by a placeholder; and the
API's own context editing (`server_edits`) acts on the server. As a last resort
an overflow reported by the API triggers one forced compaction and a retry.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class ContextPolicy:
    """Context management settings; the defaults suit a 200k-token model."""

    max_tool_result_chars: int = 50_000
    """A tool result longer than this is cut, with a notice saying how much was left out."""
    compact_at_tokens: int | None = 120_000
    """Past this many prompt tokens, old tool results are replaced by a placeholder."""
    keep_tool_results: int = 4
    """Tool results kept whole when compacting (the most recent ones)."""
    count_tokens: bool = False
    """Ask the API's token counter instead of estimating locally (one extra request)."""
    cache_tools: bool = True
    """Mark the tool definitions as a cache breakpoint."""
    cache_history: bool = True
    """Move a cache breakpoint onto the latest message, so the history is read from cache."""
    retry_on_overflow: bool = True
    """On a context overflow from the API, compact once (keeping one result) and retry."""
    server_edits: Mapping[str, Any] | None = None
    """Passed through as the request's `context_management` (server-side clearing)."""
    summarize_at_tokens: int | None = None
    """Past this many prompt tokens, the run passes through `summarize`: older exchanges
    are replaced by a model's summary of them. Off by default: it costs a model call."""
    keep_last: int = 4
    """Exchanges (an assistant message and the user message answering it) kept verbatim
    after the summary; at least 1, so the model always sees its latest step whole."""
    window_tokens: int | None = None
    """The model's context window in tokens, when known. Some servers report a full
    window as `max_tokens`; with the window known, a reply stopped so whose prompt and
    output reached it goes through the context rows (compact once, then
    `context_overflow`) instead of `truncated`, since a larger max_tokens cannot help."""

    def __post_init__(self) -> None:
        if self.max_tool_result_chars < 100:
            raise ValueError("ContextPolicy.max_tool_result_chars must be at least 100")
        if self.compact_at_tokens is not None and self.compact_at_tokens < 1:
            raise ValueError("ContextPolicy.compact_at_tokens must be positive or None")
        if self.keep_tool_results < 0:
            raise ValueError("ContextPolicy.keep_tool_results must be >= 0")
        if self.summarize_at_tokens is not None and self.summarize_at_tokens < 1:
            raise ValueError("ContextPolicy.summarize_at_tokens must be positive or None")
        if self.keep_last < 1:
            raise ValueError("ContextPolicy.keep_last must be at least 1")
        if self.window_tokens is not None and self.window_tokens < 1:
            raise ValueError("ContextPolicy.window_tokens must be positive or None")
