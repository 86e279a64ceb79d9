"""`Conversation`: the outer loop around the agent loop.

A chat has two loops: the conversation (one user message a turn) and, inside
each turn, the agent loop (one or more model calls). `Conversation` keeps the
history between turns and runs the machine once per `send`; turns and
iterations are counted apart. The model ends the conversation by calling
`end_chat`: the signal travels in the run record and its result, never in a
module-level flag.

With a `conversation_id` the conversation is kept in the agent's store (its
checkpointer: SQLite, PostgreSQL, any `Checkpointer`), one entry a turn under
the key `conversation:<id>`, so `Conversation.open(agent, id)` in another
process carries on where it stopped. Each entry holds only what the turn
changed in the history, so the log grows with the conversation, not its square.
A turn holds the store's lease on that key while it runs (in a store that leases),
so one turn runs at a time, whichever process takes it.

A conversation is generic in its agent's output type, as the agent is: the turns
of a `Conversation(Agent(model, output_type=Decision))` return
`RunResult[Decision]`; a turn's own `output_type=` types that turn's result as
`Agent.run`'s does.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Self, TypeVar, Unpack, overload

from statemachine_agent.agent import Agent, new_run_id
from statemachine_agent.agent.options import Given, RunOptions, TurnOptions, documented, given
from statemachine_agent.blocking import run_blocking
from statemachine_agent.errors import Error
from statemachine_agent.machine.cancel import CancelToken
from statemachine_agent.machine.ids import check_conversation_id
from statemachine_agent.machine.result import OutputT, RunResult
from statemachine_agent.models.base import JSON
from statemachine_agent.persistence.base import Checkpointer, LeasingCheckpointer
from statemachine_agent.persistence.lease import take_lease
from statemachine_agent.policy.approval import Decision, check_decisions
from statemachine_agent.stream.events import StreamEvent
from statemachine_agent.stream.run import iter_sync

U = TypeVar("U")

_KEY = "conversation:{}"
_KIND = "conversation.turn"


class ConversationEndedError(Error, RuntimeError):
    """The model ended the conversation; start a new one to go on."""


class ConversationConflictError(Error, RuntimeError):
    """Another process took a turn of the same stored conversation meanwhile (only in a
    store without leases: one with leases lets one turn run at a time)."""


@dataclass(frozen=True, slots=True)
class _Turn:
    """One stored turn: which run answered it, how it ended, what it changed."""

    turn: int
    run_id: str
    end_state: str
    iterations: int
    keep: int
    """Messages of the history before the turn that it left as they were."""
    added: tuple[JSON, ...]
    ended: bool

    def to_body(self) -> JSON:
        return {
            "kind": _KIND,
            "seq": self.turn,
            "state_name": self.end_state,
            "turn": self.turn,
            "run_id": self.run_id,
            "end_state": self.end_state,
            "iterations": self.iterations,
            "keep": self.keep,
            "added": list(self.added),
            "ended": self.ended,
        }

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> _Turn:
        return cls(
            turn=int(body["turn"]),
            run_id=str(body["run_id"]),
            end_state=str(body["end_state"]),
            iterations=int(body["iterations"]),
            keep=int(body["keep"]),
            added=tuple(dict(m) for m in body["added"]),
            ended=bool(body["ended"]),
        )


class Conversation(Generic[OutputT]):
    """Turns of a chat with one agent, sharing one history (its turns' results typed
    as the agent's: a `RunResult[OutputT]`)."""

    def __init__(
        self,
        agent: Agent[OutputT],
        history: list[JSON] | None = None,
        *,
        conversation_id: str | None = None,
    ) -> None:
        """A new conversation; with `conversation_id`, stored in the agent's checkpointer.

        Raises `ValueError` for an id that is not `[A-Za-z0-9_-]{1,100}`, an agent
        without a checkpointer, or an id already stored (`Conversation.open` carries
        that one on).
        """
        self.agent = agent
        self.history: list[JSON] = list(history or [])
        self.results: list[RunResult[OutputT]] = []
        self.ended = False
        """Set when the model called `end_chat`."""
        self.conversation_id = conversation_id
        self._stored: list[_Turn] = []
        """The turns as they stand (a resumed turn in place of its paused entry)."""
        self._appended: list[_Turn] = []
        """Every entry of the stored log, in order, as this object last read it."""
        self._paused: str | None = None
        """The run id of a turn waiting for approval."""
        self._current: str | None = None
        """The run id of the turn running now in this process (what `steer` adds to)."""
        if conversation_id is not None:
            store = _store(agent, conversation_id)
            if list(store.bodies(_KEY.format(conversation_id))):
                raise ValueError(
                    f"conversation {conversation_id!r} is already stored; "
                    f"Conversation.open(agent, {conversation_id!r}) carries it on"
                )

    @classmethod
    def open(cls, agent: Agent[OutputT], conversation_id: str) -> Self:
        """The stored conversation `conversation_id`, ready for its next turn (in any
        process with the same store); a new, empty one if none is stored yet."""
        store = _store(agent, conversation_id)
        conversation = cls(agent)
        conversation.conversation_id = conversation_id
        conversation._load(store)
        return conversation

    @property
    def turns(self) -> int:
        """User messages answered so far (by earlier processes too, for a stored one)."""
        return len(self._stored) if self.conversation_id else len(self.results)

    @property
    def iterations(self) -> int:
        """Model calls made over all turns."""
        if self.conversation_id:
            return sum(turn.iterations for turn in self._stored)
        return sum(result.iterations for result in self.results)

    @overload
    def send(self, text: str, **options: Unpack[TurnOptions[None]]) -> RunResult[OutputT]: ...
    @overload
    def send(self, text: str, **options: Unpack[TurnOptions[type[U]]]) -> RunResult[U]: ...
    @overload
    def send(self, text: str, **options: Unpack[TurnOptions]) -> RunResult[Any]: ...
    @documented(TurnOptions)
    def send(self, text: str, **options: Unpack[TurnOptions]) -> RunResult[Any]:
        """Run one turn (blocking); see `asend`."""
        given("Conversation.send", options, TurnOptions)
        return run_blocking(self.asend(text, **options))

    @overload
    async def asend(
        self, text: str, **options: Unpack[TurnOptions[None]]
    ) -> RunResult[OutputT]: ...
    @overload
    async def asend(self, text: str, **options: Unpack[TurnOptions[type[U]]]) -> RunResult[U]: ...
    @overload
    async def asend(self, text: str, **options: Unpack[TurnOptions]) -> RunResult[Any]: ...
    @documented(TurnOptions)
    async def asend(self, text: str, **options: Unpack[TurnOptions]) -> RunResult[Any]:
        """Run one turn: the machine once, over the shared history; the options are the
        turn's run's (see `Agent.arun`), except `wait`, which is the conversation's.

        A stored conversation's turn holds the conversation's lease in the store: while
        another process takes a turn this raises `RunLockedError`, or waits up to `wait`
        seconds for that turn to end (and then carries on after it).
        """
        turn = given("Conversation.asend", options, TurnOptions)
        async with self._leased(turn.wait):
            self._check_open()
            try:
                result = await self.agent.arun(text, **self._run_options(turn))
            finally:
                self._current = None
            return self._keep(result)

    @overload
    def astream(
        self, text: str, **options: Unpack[TurnOptions[None]]
    ) -> AsyncIterator[StreamEvent[OutputT]]: ...
    @overload
    def astream(
        self, text: str, **options: Unpack[TurnOptions[type[U]]]
    ) -> AsyncIterator[StreamEvent[U]]: ...
    @overload
    def astream(
        self, text: str, **options: Unpack[TurnOptions]
    ) -> AsyncIterator[StreamEvent[Any]]: ...
    @documented(TurnOptions)
    async def astream(
        self, text: str, **options: Unpack[TurnOptions]
    ) -> AsyncIterator[StreamEvent[Any]]:
        """Run one turn, handing out its events as `Agent.astream` does; the turn is kept
        (in `results` and the history) when its run ends, even if the stream is left early.
        Leased as `asend` is, for as long as the stream lasts."""
        turn = given("Conversation.astream", options, TurnOptions)
        async with self._leased(turn.wait):
            self._check_open()
            stream = self.agent.astream(text, **self._run_options(turn))
            try:
                async for event in stream:
                    yield event
            finally:
                self._current = None
                await stream.aclose()
                if stream.result is not None:
                    self._keep(stream.result)

    @overload
    def stream(
        self, text: str, **options: Unpack[TurnOptions[None]]
    ) -> Iterator[StreamEvent[OutputT]]: ...
    @overload
    def stream(
        self, text: str, **options: Unpack[TurnOptions[type[U]]]
    ) -> Iterator[StreamEvent[U]]: ...
    @overload
    def stream(self, text: str, **options: Unpack[TurnOptions]) -> Iterator[StreamEvent[Any]]: ...
    @documented(TurnOptions)
    def stream(self, text: str, **options: Unpack[TurnOptions]) -> Iterator[StreamEvent[Any]]:
        """`astream` for synchronous code."""
        given("Conversation.stream", options, TurnOptions)
        token = options.get("cancel") or CancelToken()
        turn: TurnOptions = {**options, "cancel": token}
        return iter_sync(lambda: self.astream(text, **turn), token)

    def steer(self, text: str, *, by: str | None = None) -> int | RunResult[OutputT]:
        """Add a user message to the conversation as it goes.

        While a turn runs (in this process) the message is steered into that turn's run
        (`Agent.steer`: delivered at its next `perceive`) and its number in the run's
        queue returned; a turn paused for approval gets it when it is resumed. When no
        turn is going (the last one ended, or none began) there is no run to steer: the
        message starts the next turn, as `send(text)` would (with `by` in the turn's
        metadata as `steered_by`), and that turn's `RunResult` is returned. A message
        steered while a turn is finishing its last reply may come too late for it
        (`RunAlreadyEndedError`); send it as the next turn then.
        """
        running = self._current or self._paused
        if running is not None:
            return self.agent.steer(running, text, by=by)
        return self.send(text, **_steered_by(by))

    async def asteer(self, text: str, *, by: str | None = None) -> int | RunResult[OutputT]:
        """`steer` from async code."""
        running = self._current or self._paused
        if running is not None:
            return await self.agent.asteer(running, text, by=by)
        turn: RunResult[OutputT] = await self.asend(text, **_steered_by(by))
        return turn

    def _run_options(self, turn: Given) -> RunOptions:
        """A turn's options as its run's: on the shared history, under the next turn's
        run id (the conversation's `wait` is for its own lease, taken already), which
        `steer` adds to while the turn runs."""
        self._current = self._next_run_id() or new_run_id()
        return {
            "history": self.history,
            "run_id": self._current,
            "cancel": turn.cancel,
            "deadline": turn.deadline,
            "output_type": turn.output_type,
            "deps": turn.deps,
            "metadata": turn.metadata,
        }

    def _check_open(self) -> None:
        self._catch_up()
        if self.ended:
            raise ConversationEndedError("the conversation was ended with end_chat")
        if self._paused is not None:
            raise ValueError("the last turn waits for approval: call resume(decisions) first")

    def _next_run_id(self) -> str | None:
        """The next turn's run id (unique, so a turn lost in a crash blocks nothing)."""
        if self.conversation_id is None:
            return None
        return f"{self.conversation_id}.turn-{len(self._stored) + 1}-{new_run_id()[4:12]}"

    @overload
    async def aresume(
        self, decisions: Mapping[str, Decision], **options: Unpack[TurnOptions[None]]
    ) -> RunResult[OutputT]: ...
    @overload
    async def aresume(
        self, decisions: Mapping[str, Decision], **options: Unpack[TurnOptions[type[U]]]
    ) -> RunResult[U]: ...
    @overload
    async def aresume(
        self, decisions: Mapping[str, Decision], **options: Unpack[TurnOptions]
    ) -> RunResult[Any]: ...
    @documented(TurnOptions)
    async def aresume(
        self, decisions: Mapping[str, Decision], **options: Unpack[TurnOptions]
    ) -> RunResult[Any]:
        """Finish a turn that paused for approval (the agent needs a checkpointer) with
        `decisions` by pending tool_use id; leased as `asend` is."""
        turn = given("Conversation.aresume", options, TurnOptions)
        check_decisions(decisions)  # before the lease: a refused resume leaves no trace
        async with self._leased(turn.wait):
            self._catch_up()
            if self._paused is None:
                raise ValueError("the last turn is not waiting for approval")
            paused = self._paused
            if self.results and self.results[-1].run_id == paused:
                self.results.pop()
            result = await self.agent.aresume(
                paused,
                decisions=decisions,
                cancel=turn.cancel,
                deadline=turn.deadline,
                output_type=turn.output_type,
                deps=turn.deps,
                metadata=turn.metadata,
            )
            return self._keep(result, resuming=True)

    @overload
    def resume(
        self, decisions: Mapping[str, Decision], **options: Unpack[TurnOptions[None]]
    ) -> RunResult[OutputT]: ...
    @overload
    def resume(
        self, decisions: Mapping[str, Decision], **options: Unpack[TurnOptions[type[U]]]
    ) -> RunResult[U]: ...
    @overload
    def resume(
        self, decisions: Mapping[str, Decision], **options: Unpack[TurnOptions]
    ) -> RunResult[Any]: ...
    @documented(TurnOptions)
    def resume(
        self, decisions: Mapping[str, Decision], **options: Unpack[TurnOptions]
    ) -> RunResult[Any]:
        """Finish a turn that paused for approval (blocking); see `aresume`."""
        given("Conversation.resume", options, TurnOptions)
        check_decisions(decisions)
        return run_blocking(self.aresume(decisions, **options))

    @contextlib.asynccontextmanager
    async def _leased(self, wait: float) -> AsyncIterator[None]:
        """Hold the stored conversation's lease for one turn, in a store that leases.

        The lease is the store's run lease, on the conversation's key: one turn at a
        time, whichever process takes it, renewed while the turn runs and free for
        another process once a crashed holder's lease has expired. An unstored
        conversation, or a store without leases, takes none (a turn stored meanwhile
        is then caught as `ConversationConflictError`).
        """
        store = self.agent.checkpointer if self.conversation_id is not None else None
        if not isinstance(store, LeasingCheckpointer):
            yield
            return
        lease = await take_lease(store, self._key, wait)
        try:
            yield
        finally:
            store.release(lease)

    def _keep(self, result: RunResult[Any], *, resuming: bool = False) -> RunResult[Any]:
        self.results.append(result)
        before = self.history
        paused = result.end_state == "awaiting_approval"
        if not paused:
            self.history = list(result.messages)
        self._paused = result.run_id if paused else None
        self.ended = self.ended or result.chat_ended
        if self.conversation_id is not None:
            self._store_turn(result, before, resuming=resuming)
        return result

    # -- the stored log ------------------------------------------------------

    def _store_turn(self, result: RunResult[Any], before: list[JSON], *, resuming: bool) -> None:
        keep = _common_prefix(before, self.history)
        number = len(self._stored) + (0 if resuming else 1)
        turn = _Turn(
            turn=number,
            run_id=result.run_id,
            end_state=result.end_state,
            iterations=result.iterations,
            keep=keep,
            added=tuple(self.history[keep:]),
            ended=self.ended,
        )
        store = self._store()
        if len(self._log(store)) != len(self._appended):
            raise ConversationConflictError(
                f"conversation {self.conversation_id!r} was carried on by another process "
                f"while turn {number} ran; its run {result.run_id!r} is stored, the turn is not"
            )
        store.append(self._key, turn.to_body())
        self._appended.append(turn)
        if resuming:
            self._stored[-1] = turn
        else:
            self._stored.append(turn)

    def _load(self, store: Checkpointer) -> None:
        self._appended = [_Turn.from_body(b) for b in self._log(store)]
        history: list[JSON] = []
        turns: dict[int, _Turn] = {}
        for turn in self._appended:
            history = [*history[: turn.keep], *turn.added]
            turns[turn.turn] = turn  # a resumed turn replaces its paused entry
        self.history = history
        self._stored = [turns[n] for n in sorted(turns)]
        last = self._stored[-1] if self._stored else None
        self.ended = bool(last and last.ended)
        self._paused = last.run_id if last and last.end_state == "awaiting_approval" else None

    def _catch_up(self) -> None:
        """Take on turns another process stored since this one last looked."""
        if self.conversation_id is None:
            return
        store = self._store()
        if len(self._log(store)) != len(self._appended):
            self._load(store)

    @property
    def _key(self) -> str:
        return _KEY.format(self.conversation_id)

    def _store(self) -> Checkpointer:
        assert self.conversation_id is not None
        return _store(self.agent, self.conversation_id)

    def _log(self, store: Checkpointer) -> list[Mapping[str, Any]]:
        return [b for b in store.bodies(self._key) if b.get("kind") == _KIND]


def _steered_by(by: str | None) -> TurnOptions[None]:
    """The options of a turn a steered message starts: who sent it, in its metadata."""
    return {} if by is None else {"metadata": {"steered_by": by}}


def _store(agent: Agent[Any], conversation_id: str) -> Checkpointer:
    check_conversation_id(conversation_id)
    if agent.checkpointer is None:
        raise ValueError(
            "a stored conversation needs the agent's store: Agent(checkpointer=<a "
            "Checkpointer or a SQLite file path>)"
        )
    return agent.checkpointer


def _common_prefix(before: Sequence[JSON], after: Sequence[JSON]) -> int:
    """How many leading messages the turn left unchanged."""
    count = 0
    for old, new in zip(before, after, strict=False):
        if old != new:
            break
        count += 1
    return count
