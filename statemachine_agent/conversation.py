"""`Conversation`: the outer loop around the agent loop.

A chat has two loops: the conversation (one user message a turn) and, inside
each turn, the agent loop (one or more model calls). `Conversation` keeps the
history between turns and runs the machine once per `send`; turns and
iterations are counted apart. The model ends the conversation by calling
`end_chat`: the signal travels in the run record and its result, never in a
module-level flag.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Mapping
from typing import Any

from statemachine_agent.agent import Agent
from statemachine_agent.blocking import run_blocking
from statemachine_agent.machine.engine import CancelToken
from statemachine_agent.machine.result import RunResult
from statemachine_agent.models.base import JSON
from statemachine_agent.policy.approval import Decision
from statemachine_agent.stream.events import StreamEvent
from statemachine_agent.stream.run import iter_sync


class ConversationEndedError(RuntimeError):
    """The model ended the conversation; start a new one to go on."""


class Conversation:
    """Turns of a chat with one agent, sharing one history."""

    def __init__(self, agent: Agent, history: list[JSON] | None = None) -> None:
        self.agent = agent
        self.history: list[JSON] = list(history or [])
        self.results: list[RunResult] = []
        self.ended = False
        """Set when the model called `end_chat`."""

    @property
    def turns(self) -> int:
        """User messages answered so far."""
        return len(self.results)

    @property
    def iterations(self) -> int:
        """Model calls made over all turns."""
        return sum(result.iterations for result in self.results)

    def send(
        self,
        text: str,
        *,
        cancel: CancelToken | None = None,
        deps: Any = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> RunResult:
        """Run one turn (blocking)."""
        return run_blocking(self.asend(text, cancel=cancel, deps=deps, metadata=metadata))

    async def asend(
        self,
        text: str,
        *,
        cancel: CancelToken | None = None,
        deps: Any = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> RunResult:
        """Run one turn: the machine once, over the shared history; `deps` and `metadata`
        are the turn's run's (see `Agent.arun`)."""
        self._check_open()
        result = await self.agent.arun(
            text, history=self.history, cancel=cancel, deps=deps, metadata=metadata
        )
        return self._keep(result)

    async def astream(
        self,
        text: str,
        *,
        cancel: CancelToken | None = None,
        deps: Any = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> AsyncIterator[StreamEvent]:
        """Run one turn, handing out its events as `Agent.astream` does; the turn is kept
        (in `results` and the history) when its run ends, even if the stream is left early."""
        self._check_open()
        stream = self.agent.astream(
            text, history=self.history, cancel=cancel, deps=deps, metadata=metadata
        )
        try:
            async for event in stream:
                yield event
        finally:
            await stream.aclose()
            if stream.result is not None:
                self._keep(stream.result)

    def stream(
        self,
        text: str,
        *,
        cancel: CancelToken | None = None,
        deps: Any = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> Iterator[StreamEvent]:
        """`astream` for synchronous code."""
        token = cancel or CancelToken()
        return iter_sync(
            lambda: self.astream(text, cancel=token, deps=deps, metadata=metadata), token
        )

    def _check_open(self) -> None:
        if self.ended:
            raise ConversationEndedError("the conversation was ended with end_chat")
        if self.results and self.results[-1].end_state == "awaiting_approval":
            raise ValueError("the last turn waits for approval: call resume(decisions) first")

    async def aresume(self, decisions: Mapping[str, Decision], *, deps: Any = None) -> RunResult:
        """Finish a turn that paused for approval (the agent needs a checkpointer)."""
        if not self.results or self.results[-1].end_state != "awaiting_approval":
            raise ValueError("the last turn is not waiting for approval")
        previous = self.results.pop()
        result = await self.agent.aresume(previous.run_id, decisions=decisions, deps=deps)
        return self._keep(result)

    def resume(self, decisions: Mapping[str, Decision], *, deps: Any = None) -> RunResult:
        return run_blocking(self.aresume(decisions, deps=deps))

    def _keep(self, result: RunResult) -> RunResult:
        self.results.append(result)
        if result.end_state != "awaiting_approval":
            self.history = list(result.messages)
        self.ended = self.ended or result.chat_ended
        return result
