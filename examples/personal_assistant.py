"""A personal assistant that drafts e-mail freely but never sends one unapproved.

Drafting changes nothing, so `draft_email` runs at once. Sending cannot be taken
back, so `send_email` is declared `requires_approval=True`: when the model asks
to send, the call is not run; the run stops in `awaiting_approval`, checkpointed,
listing the call. A person reviews it, and `Agent.resume` carries on with the
decision (`Approve()`, `Deny("why")` or `Edit(input)`), exactly where it stopped.

Run it: `python examples/personal_assistant.py` (offline: a scripted model; the
reviewer here approves every send after printing it).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from statemachine_agent import (
    Agent,
    Approve,
    Budget,
    MemoryCheckpointer,
    Model,
    RunResult,
    ScriptedModel,
    Tool,
    tool,
)
from statemachine_agent.policy.approval import Decision
from statemachine_agent.testing import replies
from statemachine_agent.tools import ToolError

SEND_CALL_ID = "toolu_send_dinner_invite"
"""The id of the model's send_email call: a decision names the call it answers."""


@dataclass
class Mailbox:
    """Where the assistant's drafts and sent mail go (a real one would be an e-mail API)."""

    drafts: dict[str, dict[str, str]] = field(default_factory=dict)
    sent: list[dict[str, str]] = field(default_factory=list)


def assistant_tools(mailbox: Mailbox) -> list[Tool]:
    """The assistant's tools, bound to one mailbox."""

    @tool
    def draft_email(to: str, subject: str, body: str) -> dict[str, str]:
        """Write an e-mail draft. Nothing is sent; show the draft to the user.

        Args:
            to: The recipient's address.
            subject: The subject line.
            body: The message, in plain text.
        """
        draft_id = f"draft-{len(mailbox.drafts) + 1}"
        mailbox.drafts[draft_id] = {"to": to, "subject": subject, "body": body}
        return {"draft_id": draft_id, "status": "saved as draft, not sent"}

    @tool(requires_approval=True, side_effect=True, sequential=True)
    def send_email(draft_id: str) -> str:
        """Send a drafted e-mail. The user approves every send before it happens.

        Args:
            draft_id: The id draft_email returned.
        """
        draft = mailbox.drafts.pop(draft_id, None)
        if draft is None:
            raise ToolError(f"No draft {draft_id!r}; drafts: {sorted(mailbox.drafts)}.")
        mailbox.sent.append(draft)
        return f"Sent to {draft['to']}."

    return [draft_email, send_email]


def make_model() -> Model:
    """The model that answers. Swap the script for a real model to run it live:

        from statemachine_agent import AnthropicModel
        return AnthropicModel("claude-sonnet-5")  # reads ANTHROPIC_API_KEY

    or `OpenAIModel("gpt-4o-mini")` from `statemachine_agent.models.openai`.
    """
    return ScriptedModel(
        [
            replies.tool_use(
                "draft_email",
                {
                    "to": "ken@example.com",
                    "subject": "Dinner on Friday?",
                    "body": "Hi Ken,\n\nAre you free for dinner in Umeda on Friday at 19:00?"
                    "\n\nAya",
                },
            ),
            replies.tool_use(
                "send_email",
                {"draft_id": "draft-1"},
                id=SEND_CALL_ID,
                text="I drafted the invitation to Ken; sending it now.",
            ),
            replies.text("Done: the invitation is on its way to Ken."),
        ]
    )


Reviewer = Callable[[Mapping[str, Any]], Decision]
"""Decides on one waiting call, given its `tool_use_id`, `name` and `input`."""


def approve_every_send(call: Mapping[str, Any]) -> Decision:
    """Stands in for a person: shows the call and approves it (a real app would ask)."""
    print(f"approval needed: {call['name']}({call['input']})")
    return Approve()


def main(mailbox: Mailbox | None = None, review: Reviewer = approve_every_send) -> RunResult:
    mailbox = mailbox if mailbox is not None else Mailbox()
    agent = Agent(
        make_model(),
        tools=assistant_tools(mailbox),
        system=(
            "You are Aya's assistant. Draft e-mails with draft_email; send one with "
            "send_email only when Aya asked for it to be sent."
        ),
        budget=Budget(max_iterations=6),
        # Where each transition is checkpointed, so the run can be resumed. Use
        # checkpointer="state/runs.sqlite3" instead to resume from another process, hours later.
        checkpointer=MemoryCheckpointer(),
    )
    # Without an approval policy (Agent(approval=...)), every call that needs approval
    # waits for a person: the run ends in `awaiting_approval` and send_email has not run.
    paused = agent.run("Invite Ken to dinner in Umeda on Friday at 19:00, and send it.")
    if paused.end_state != "awaiting_approval":
        return paused
    pending = (paused.details or {}).get("pending", [])
    decisions = {call["tool_use_id"]: review(call) for call in pending}
    return agent.resume(paused.run_id, decisions=decisions)


if __name__ == "__main__":
    mailbox = Mailbox()
    result = main(mailbox)
    print(result.text)
    print(f"[{result.end_state}] {result.reason}; sent: {len(mailbox.sent)}")
