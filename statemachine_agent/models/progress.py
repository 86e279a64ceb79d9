"""A scripted model that answers by how far the conversation has got.

`ScriptedModel` answers with its next entry, counting its own calls. A durable
engine breaks that count: a recovered run is finished by a fresh process whose
model has answered nothing yet, and a replayed step is answered from the record
without calling the model at all. Answering by the number of assistant turns
already in the request gives every process the same reply at the same point of
the same run, which is what a worker test or a demo on an engine needs.
"""

from __future__ import annotations

from collections.abc import Iterable

from statemachine_agent.models.base import DEFAULT_MODEL, ModelError, ModelReply, ModelRequest
from statemachine_agent.models.scripted import (
    ScriptEntry,
    check_entry,
    check_request,
    handed_out,
    reply_of,
)

ProgressEntry = ScriptEntry
"""A progress script's entry: the same kinds as `ScriptedModel`'s, checked the same way."""


class ProgressModel:
    """Replies with the entry whose index is the number of assistant turns in the request.

    Entries are Messages API response bodies, exceptions to raise (a
    `ModelError` to test an engine's retries) or functions of the request
    returning either. Give tool_use blocks explicit ids: generated ones depend
    on how many replies a process built before, so two processes would differ.
    """

    def __init__(
        self,
        replies: Iterable[ProgressEntry],
        *,
        name: str = DEFAULT_MODEL,
        validate: bool = True,
    ) -> None:
        self.name = name
        self.validate = validate
        self._script: list[ProgressEntry] = list(replies)
        for index, entry in enumerate(self._script):
            check_entry(index, entry)

    def __repr__(self) -> str:
        return f"<ProgressModel {self.name} {len(self._script)} replies>"

    @staticmethod
    def progress(request: ModelRequest) -> int:
        """The number of assistant turns the request already holds."""
        return sum(1 for message in request.messages if message.get("role") == "assistant")

    async def acomplete(self, request: ModelRequest) -> ModelReply:
        if self.validate:
            check_request(request)
        turn = self.progress(request)
        if turn >= len(self._script):
            raise ModelError(
                f"the progress script has no reply for turn {turn} ({len(self._script)} replies)",
                error_type="ScriptExhausted",
            )
        reply = reply_of(self._script[turn], request, request_id=f"req_progress_{turn + 1}")
        return handed_out(reply)
