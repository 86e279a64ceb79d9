"""What every model adapter speaks: a request in, a normalized reply out.

The engine never sees an SDK object. Adapters turn their backend's answer into a
`ModelReply` whose content blocks are plain Messages API JSON, so the history the
engine keeps is exactly what the API would accept back, whatever produced it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from statemachine_agent.errors import Error
from statemachine_agent.unicode import repair

JSON = dict[str, Any]

DEFAULT_MODEL = "claude-sonnet-5"
"""The model used when none is named: a current Sonnet."""

DEFAULT_MAX_TOKENS = 4096


@dataclass(frozen=True, slots=True)
class Usage:
    """Token counts, split the way they are billed."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_5m_tokens: int = 0
    """Cache writes with the default five-minute lifetime."""
    cache_write_1h_tokens: int = 0
    """Cache writes with the one-hour lifetime, priced higher."""

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cache_read_tokens + other.cache_read_tokens,
            self.cache_write_5m_tokens + other.cache_write_5m_tokens,
            self.cache_write_1h_tokens + other.cache_write_1h_tokens,
        )

    @property
    def total_tokens(self) -> int:
        """Every token the call touched, cached or not."""
        return (
            self.input_tokens
            + self.output_tokens
            + self.cache_read_tokens
            + self.cache_write_5m_tokens
            + self.cache_write_1h_tokens
        )

    def to_dict(self) -> dict[str, int]:
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cache_read_tokens": self.cache_read_tokens,
            "cache_write_5m_tokens": self.cache_write_5m_tokens,
            "cache_write_1h_tokens": self.cache_write_1h_tokens,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Usage:
        return cls(**{k: int(data.get(k, 0)) for k in cls.__dataclass_fields__})

    @classmethod
    def from_api(cls, usage: Mapping[str, Any] | None) -> Usage:
        """Read the `usage` object of a Messages API response.

        The API reports all cache writes in `cache_creation_input_tokens` and, when
        it knows, splits them by lifetime in `cache_creation`; writes it does not
        split are counted as five-minute writes (the cheaper, default lifetime).
        """
        if not usage:
            return cls()
        writes = int(usage.get("cache_creation_input_tokens") or 0)
        split = usage.get("cache_creation") or {}
        one_hour = int(split.get("ephemeral_1h_input_tokens") or 0)
        return cls(
            input_tokens=int(usage.get("input_tokens") or 0),
            output_tokens=int(usage.get("output_tokens") or 0),
            cache_read_tokens=int(usage.get("cache_read_input_tokens") or 0),
            cache_write_5m_tokens=max(writes - one_hour, 0),
            cache_write_1h_tokens=one_hour,
        )


@dataclass(frozen=True, slots=True)
class ModelRequest:
    """One Messages API call, as the engine means to send it."""

    model: str
    max_tokens: int
    messages: Sequence[JSON]
    system: Sequence[JSON] = ()
    tools: Sequence[JSON] = ()
    tool_choice: JSON | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)
    """Further Messages API parameters passed through untouched (temperature, ...)."""

    def to_api(self) -> JSON:
        """The keyword arguments of `client.messages.create`."""
        body: JSON = {
            "model": self.model,
            "max_tokens": self.max_tokens,
            "messages": self.messages if isinstance(self.messages, list) else list(self.messages),
        }
        if self.system:
            body["system"] = list(self.system)
        if self.tools:
            body["tools"] = list(self.tools)
        if self.tool_choice is not None:
            body["tool_choice"] = self.tool_choice
        body.update(self.extra)
        return body


@dataclass(frozen=True, slots=True)
class ModelReply:
    """A model's answer, normalized to Messages API JSON."""

    content: tuple[JSON, ...]
    """Every block of the assistant message, verbatim, including ones we do not know."""
    stop_reason: str | None
    usage: Usage
    model: str = ""
    id: str = ""
    stop_details: JSON | None = None
    """Extra detail the API gives about the stop (for instance on a refusal)."""
    request_id: str | None = None

    def __post_init__(self) -> None:
        """Repair invalid Unicode (lone surrogates) in the reply: it must not break a write."""
        content = repair(self.content)
        if content is not self.content:
            object.__setattr__(self, "content", content)
        if self.stop_details is not None:
            object.__setattr__(self, "stop_details", repair(self.stop_details))

    @property
    def tool_uses(self) -> list[JSON]:
        return [b for b in self.content if b.get("type") == "tool_use"]

    @property
    def text(self) -> str:
        return "".join(str(b.get("text", "")) for b in self.content if b.get("type") == "text")

    def to_message(self) -> JSON:
        """The assistant message to append to the history."""
        return {"role": "assistant", "content": [dict(b) for b in self.content]}

    @classmethod
    def from_api(cls, body: Mapping[str, Any], *, request_id: str | None = None) -> ModelReply:
        """Build a reply from the JSON body of a Messages API response."""
        details = body.get("stop_details")
        if details is not None:
            details = dict(details) if isinstance(details, Mapping) else None
        return cls(
            content=tuple(map(dict, body.get("content") or ())),
            stop_reason=body.get("stop_reason"),
            usage=Usage.from_api(body.get("usage")),
            model=str(body.get("model") or ""),
            id=str(body.get("id") or ""),
            stop_details=details,
            request_id=request_id,
        )


class ModelError(Error):
    """A model call that failed after the adapter's own retries.

    `retryable` says whether trying again later could help (overload, rate limit);
    `context_exceeded` marks the API's "prompt is too long" answer, which the
    machine treats as its own end state rather than a generic failure.
    """

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        request_id: str | None = None,
        error_type: str | None = None,
        retryable: bool = False,
        context_exceeded: bool = False,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.request_id = request_id
        self.error_type = error_type
        self.retryable = retryable
        self.context_exceeded = context_exceeded

    def describe(self) -> str:
        parts = [self.error_type or type(self).__name__]
        if self.status is not None:
            parts.append(f"status {self.status}")
        if self.request_id:
            parts.append(f"request id {self.request_id}")
        return f"{self.message} ({', '.join(parts)})"


@runtime_checkable
class Model(Protocol):
    """The one method the engine needs from a model backend."""

    name: str

    async def acomplete(self, request: ModelRequest) -> ModelReply:
        """Make one call. Raise `ModelError` for failures the run should see."""
        ...
