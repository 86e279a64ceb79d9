"""Reason: one model call, its reply kept whole.

The assistant message is appended verbatim (every block, not only the text):
tool_use ids, thinking signatures and server-tool blocks must go back to the
API unchanged. The call itself, its events and its charge are `call_model`'s.
"""

from __future__ import annotations

from typing import Literal

from statemachine_agent.machine.calls import call_model
from statemachine_agent.machine.guards import is_end_turn, output_expected
from statemachine_agent.machine.phase_env import PhaseEnv
from statemachine_agent.machine.run import RunError
from statemachine_agent.models.base import JSON, ModelError, ModelReply
from statemachine_agent.models.streaming import partial_text
from statemachine_agent.phases.perceive import build_request
from statemachine_agent.tools.base import ToolCall
from statemachine_agent.tools.output import TEXT_ANSWER


class Reason:
    """Calls the model once; names `replied` or `model_failed`."""

    def interrupted(self, ctx: PhaseEnv) -> Literal["model_failed"]:
        """A cancel abandoned the call in flight: its reply would be discarded anyway.

        The text it had streamed (to someone watching the run) is kept for the
        result and the audit trail: it is what that person last saw.
        """
        ctx.state.error = RunError(
            kind="Cancelled", message="the model call was cancelled by the host"
        )
        partial = partial_text()
        if partial:
            ctx.state.notes["partial_text"] = partial
            ctx.emitter.emit("model.interrupted", iteration=ctx.state.iteration + 1,
                             partial_text=partial)  # fmt: skip
        return "model_failed"

    async def run(self, ctx: PhaseEnv) -> Literal["replied", "model_failed"]:
        run = ctx.state
        run.notes.pop("partial_text", None)  # a new call: an older cut reply is history
        request = ctx.request or build_request(ctx)
        try:
            reply = await call_model(ctx, request, fallbacks=True)
        except ModelError as exc:
            run.error = RunError.from_model_error(exc)
            return "model_failed"
        ctx.request = None
        run.last_reply = reply
        run.reply_max_tokens = request.max_tokens
        append_reply(run.messages, reply)
        run.pending_calls = (
            [ToolCall.from_block(b) for b in reply.tool_uses]
            if reply.stop_reason == "tool_use"
            else []
        )
        if is_end_turn(run) and output_expected(run):
            # Text where a typed answer is expected is an invalid answer: counted here,
            # once, as the reply arrives; the rows then ask again or end in `failed`.
            run.invalid_answers += 1
            run.notes["answer_errors"] = TEXT_ANSWER
        return "replied"


def append_reply(messages: list[JSON], reply: ModelReply) -> None:
    """Add the reply to the history; a continued (paused) turn extends its own message.

    After `pause_turn` the paused assistant message is sent back as the last
    message and the model continues it, so the continuation belongs to that same
    message: appending a second assistant message would break role alternation.
    A reply with no content at all is not added: the API rejects empty messages.
    """
    if not reply.content:
        return
    if messages and messages[-1].get("role") == "assistant":
        previous = messages[-1]
        content = previous.get("content")
        blocks = (
            [{"type": "text", "text": content}] if isinstance(content, str) else list(content or [])
        )
        previous["content"] = blocks + [dict(b) for b in reply.content]
        return
    messages.append(reply.to_message())
