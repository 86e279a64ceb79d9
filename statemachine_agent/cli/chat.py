"""The interactive chat REPL behind `statemachine-agent chat`.

One line a turn; `/exit` (or end of input) leaves. Ctrl-C during a turn
cancels that turn only (the run ends in `cancelled`, its work kept in the
history) and the prompt comes back; Ctrl-C at the prompt just gives a new one.
A line sent while another process takes a turn of the same stored conversation
is not sent, and said so; the prompt comes back.
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from types import FrameType
from typing import TextIO

from statemachine_agent.agent.conversation import Conversation
from statemachine_agent.machine.cancel import CancelToken
from statemachine_agent.persistence.lease import RunLockedError
from statemachine_agent.report.fmt import printable

PROMPT = "you> "


def _cancelling(token: CancelToken) -> Callable[[int, FrameType | None], None]:
    """A SIGINT handler that cancels the current turn instead of the session."""

    def interrupt(_signum: int, _frame: FrameType | None) -> None:
        token.cancel()

    return interrupt


def repl(conversation: Conversation, read: Callable[[str], str], out: TextIO) -> int:
    """Run turns until `/exit`, end of input, or the model ends the chat; returns 0."""
    while not conversation.ended:
        try:
            line = read(PROMPT).strip()
        except EOFError:
            break
        except KeyboardInterrupt:
            print(file=out)
            continue
        if line == "/exit":
            break
        if not line:
            continue
        token = CancelToken()
        previous = signal.signal(signal.SIGINT, _cancelling(token))
        try:
            result = conversation.send(line, cancel=token)
        except RunLockedError as exc:  # a stored conversation another process is taking a turn of
            print(f"[not sent: {exc}]", file=out, flush=True)
            continue
        finally:
            signal.signal(signal.SIGINT, previous)
        if result.text:
            print(f"assistant> {printable(conversation.agent.redact(result.text))}", file=out)
        if not result.ok:
            reason = printable(conversation.agent.redact(result.reason))
            print(f"[{result.end_state}: {reason}]", file=out)
        print(
            f"[turn {conversation.turns}, {result.iterations} model calls, ${result.cost_usd:.4f}]",
            file=out,
            flush=True,
        )
    if conversation.ended:
        print("[the assistant ended the conversation]", file=out)
    return 0
