"""The records that cross the boundary between the engine and tools.

A tool never raises into the loop: whatever happens, its call ends as a
`ToolOutcome`, and whether it failed is said by `is_error` (and why, by
`error_kind`), never guessed from the text. What a failure *means* for the run
is the tool's own policy (`Tool.on_error`): most failures are news for the
model, some are fatal, and some are worth trying again first.
"""

from __future__ import annotations

import base64
import hashlib
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from statemachine_agent.unicode import repair, repair_text

JSON = dict[str, Any]

ErrorKind = Literal[
    "unknown_tool",
    "invalid_input",
    "raised",
    "timeout",
    "abandoned",
    "limit",
    "not_run",
    "denied",
]

IDEMPOTENCY_PARAM = "idempotency_key"
"""A handler parameter of this name receives the call's stable idempotency key
(`<run_id>:<tool_use_id>`) instead of a value from the model."""

OnError = Literal["return", "fail", "retry"]
"""What a tool's failure (it raised, or timed out) does; see `Tool.on_error`."""

DEFAULT_TOOL_TIMEOUT = 30.0
"""Seconds a tool may run before its call is answered with a timeout error."""

DEFAULT_RETRY_ON: tuple[type[BaseException], ...] = (TimeoutError, ConnectionError)
"""Exceptions that usually mean "try again later" rather than "this cannot work"."""


@dataclass(frozen=True, slots=True)
class Tool:
    """What the model is shown and what runs, declared in one place.

    The defaults keep a tool's failures as plain news for the model; the
    policy fields say otherwise for the tools where that is wrong. Only a
    *failure* of the tool (its handler raised, or it timed out) follows the
    policy: an unknown tool name or an input that does not fit the schema is
    the model's mistake, and always goes back to the model to fix.
    """

    name: str
    description: str
    input_schema: Mapping[str, Any]
    handler: Callable[..., Any]
    """Called with the validated input as keyword arguments; may be sync or async."""
    timeout: float | None = DEFAULT_TOOL_TIMEOUT
    sequential: bool = False
    """Run alone, after the concurrent calls of the same reply (e.g. a DB write)."""
    ends_run: bool = False
    """A successful call ends the run in `finished` (the `finish` tool)."""
    on_error: OnError = "return"
    """What a failure does, since only the tool's author knows what its failures mean:

    - `"return"`: the error goes back to the model, which can try another way
      or explain the problem (flexible, but the loop runs longer).
    - `"fail"`: the outcome is still an error, marked `fatal`, so the engine
      ends the run in `failed` naming the tool. For failures no rewording by
      the model can fix (missing permission, an internal bug). A `ToolError`
      is the author's own message *to the model*, so it is never fatal.
    - `"retry"`: transient failures (see `retry_on`) are tried again with
      exponential backoff before the error goes back to the model.
    """
    retries: int = 2
    """With `on_error="retry"`: extra attempts after the first, so at most `retries + 1`."""
    retry_backoff: float = 0.5
    """With `on_error="retry"`: seconds before the first retry, doubling before each next one."""
    retry_on: tuple[type[BaseException], ...] = DEFAULT_RETRY_ON
    """With `on_error="retry"`: exception types worth retrying (instances of them are).

    The registry's own timeout always counts as transient; anything else (a
    `ValueError`, a `ToolError`) would fail the same way again and is not
    retried. Each attempt gets the full `timeout`, and a timed-out sync
    handler's thread keeps running, so a retried hang can pile up threads.
    """
    side_effect: bool = False
    """The tool changes the world (sends, writes, pays). Its recorded result is never
    re-executed on resume, and a handler with an `idempotency_key` parameter gets a
    key stable across retries and resumes, so it can refuse to act twice. (A retry
    under `on_error="retry"` repeats the call with the same key.)

    It is also what the agent's `TaintPolicy` gates: once untrusted text has entered
    the run, a call of a side-effect tool goes to the approval policy (by default;
    or is refused, `side_effects="deny"`), since that is what a prompt injection
    wants done. Mark every tool that sends, writes, pays or deletes."""
    deferrable: bool = False
    """A write whose result the model does not need in order to go on (a refund, an
    e-mail, approving a claim). Side effects last: during the loop such a call is only
    *staged* (validated, recorded, answered "staged"), and the staged calls run
    together in the `commit` state once the run would end successfully, after the
    verifier, so a run that stalls, runs out of budget or is rejected has changed
    nothing. Only for `side_effect=True` tools; see `CommitPolicy`."""
    requires_approval: bool = False
    """Each call is put to the agent's approval policy (by default: deferred to a
    human, the run pausing in `awaiting_approval`) before it runs."""
    untrusted: bool = False
    """The tool returns outside content (web pages, e-mails, scraped text).

    Such text is the main route for prompt injection ("ignore your previous
    instructions..."), so its results, and its own error texts (an exception's
    message, a `ToolError`, an MCP server's error), are wrapped in delimiters
    with a boundary of their own and a note that they are data, not
    instructions. Only the registry's own words (unknown tool, invalid input,
    timeout) stay unwrapped.
    """

    def __post_init__(self) -> None:
        """Reject a policy that cannot work now, rather than at its first failure mid-run."""
        if self.on_error not in get_args(OnError):
            choices = ", ".join(repr(choice) for choice in get_args(OnError))
            raise ValueError(
                f"Tool {self.name!r}: on_error must be one of {choices}, got {self.on_error!r}"
            )
        if isinstance(self.retries, bool) or not isinstance(self.retries, int):
            raise TypeError(f"Tool {self.name!r}: retries must be an int, got {self.retries!r}")
        if self.retries < 0:
            raise ValueError(f"Tool {self.name!r}: retries must be >= 0, got {self.retries}")
        backoff: object = self.retry_backoff
        if isinstance(backoff, bool) or not isinstance(backoff, int | float):
            raise TypeError(
                f"Tool {self.name!r}: retry_backoff must be a number, got {self.retry_backoff!r}"
            )
        if not (backoff >= 0 and math.isfinite(backoff)):
            raise ValueError(
                f"Tool {self.name!r}: retry_backoff must be a finite number >= 0, got {backoff!r}"
            )
        if self.deferrable and (not self.side_effect or self.ends_run):
            raise ValueError(
                f"Tool {self.name!r}: deferrable=True is for side_effect=True tools that do "
                "not end the run (a staged call runs only after the run's answer)"
            )
        retry_on: object = self.retry_on
        if not isinstance(retry_on, tuple) or not all(
            isinstance(kind, type) and issubclass(kind, BaseException) for kind in retry_on
        ):
            raise TypeError(
                f"Tool {self.name!r}: retry_on must be a tuple of exception types, "
                f"got {self.retry_on!r}"
            )

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the handler directly, as the plain function it wraps."""
        return self.handler(*args, **kwargs)

    def to_api(self) -> JSON:
        """The tool definition as the Messages API expects it."""
        return {
            "name": self.name,
            "description": self.description,
            "input_schema": dict(self.input_schema),
        }


@dataclass(frozen=True, slots=True)
class ToolContent:
    """A handler's result that text alone cannot carry (an MCP server's images, documents).

    The registry answers with `text` as the result's text, `blocks` (Messages API
    `image` or `document` blocks) after it, and `data` as the raw value.
    """

    text: str
    blocks: tuple[JSON, ...] = ()
    data: Any = None


@dataclass(frozen=True, slots=True)
class TaintSource:
    """Where untrusted text entered a run: the call whose result brought it in."""

    tool: str
    """The untrusted tool (or the sub-agent tool whose tainted run answered in free text)."""
    tool_use_id: str
    """The call whose result brought the text (for a sub-agent's call: the parent's id)."""
    excerpt: str = ""
    """The start of that result, on one line, so a reviewer sees what was read."""
    iteration: int = 0
    """The model call of the run whose reply made that call."""


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One `tool_use` block the model asked for."""

    id: str
    name: str
    input: Any
    """Usually a dict; anything else is rejected by validation, not by a crash."""
    idempotency_key: str = ""
    """`<run_id>:<tool_use_id>`, set by the engine; passed to handlers that ask for it."""
    tainted_by: tuple[TaintSource, ...] = ()
    """For a side-effect call the run's `TaintPolicy` gates: the untrusted sources whose
    text the model had read when it asked for it, so the approval policy (or the person
    resuming) decides knowing why it is asked. Empty for every other call."""

    @classmethod
    def from_block(cls, block: Mapping[str, Any]) -> ToolCall:
        return cls(
            id=str(block.get("id", "")), name=str(block.get("name", "")), input=block.get("input")
        )


@dataclass(frozen=True, slots=True)
class ToolOutcome:
    """The answer to one call, ready to become a `tool_result` block."""

    tool_use_id: str
    name: str
    content: str
    is_error: bool = False
    error_kind: ErrorKind | None = None
    duration_s: float = 0.0
    data: Any = None
    """The handler's raw return value when it was not a string (e.g. `finish`'s input)."""
    extra: JSON = field(default_factory=dict)
    fatal: bool = False
    """The tool failed under `on_error="fail"`: the engine should end the run in `failed`.

    Still an ordinary error outcome (the registry never raises into the loop);
    the engine decides what to do with the flag. Never set for the model's own
    mistakes (unknown tool, invalid input).
    """
    blocks: tuple[JSON, ...] = ()
    """Content blocks sent after the text (images, documents: what text cannot carry),
    from a handler that returned a `ToolContent`. `content` stays the text the audit
    trail, the stall detector and truncation see."""

    def __post_init__(self) -> None:
        """Repair invalid Unicode (lone surrogates) in what the tool returned."""
        content = repair_text(self.content)
        if content is not self.content:
            object.__setattr__(self, "content", content)
        if self.data is not None:
            object.__setattr__(self, "data", repair(self.data))

    def block_records(self) -> list[JSON]:
        """What the audit trail keeps of `blocks`: each one's kind, media type, size and
        SHA-256 digest, never its bytes.

        The audit file says that an image (or a document) went to the model and which
        one (the digest identifies it), without holding a second copy of data the run's
        messages already carry, which would swell every audit file by megabytes.
        """
        return [_block_record(block) for block in self.blocks]

    def to_block(self) -> JSON:
        block: JSON = {
            "type": "tool_result",
            "tool_use_id": self.tool_use_id,
            "content": (
                [{"type": "text", "text": self.content}, *(dict(b) for b in self.blocks)]
                if self.blocks
                else self.content
            ),
        }
        if self.is_error:
            block["is_error"] = True
        return block


def _block_record(block: Mapping[str, Any]) -> JSON:
    record: JSON = {"type": block.get("type")}
    source = block.get("source")
    if isinstance(source, Mapping):
        record["media_type"] = source.get("media_type")
        data = source.get("data")
        if isinstance(data, str):
            try:
                raw = base64.b64decode(data, validate=False)
            except ValueError:  # not base64 after all: describe the text as sent
                raw = data.encode("utf-8", "surrogatepass")
            record["bytes"] = len(raw)
            record["sha256"] = hashlib.sha256(raw).hexdigest()
    return record
