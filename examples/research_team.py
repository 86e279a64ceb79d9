"""A lead agent that delegates: a researcher sub-agent computes, a mailer sub-agent sends.

`Agent.as_tool` turns an agent into a tool of another. Each call starts a run of
the sub-agent, with its own record and trail, linked to the lead's run: its events
go into the lead's audit file, what it spends is charged to the lead, and the
lead's budget caps it. Here the lead asks the researcher a question (answered with
the calculator) and then asks the mailer to send the answer. Sending needs a
person's approval, so the mailer pauses, and with it the lead: the lead's run ends
in `awaiting_approval` listing the mailer's call. Resuming the lead with the
decision resumes the mailer, which sends, and then the lead answers. The runs are
checkpointed in one SQLite file, so the resume could happen in another process.

Run it: `python examples/research_team.py` (offline: scripted models; the reviewer
here approves the send after printing it).
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from statemachine_agent import (
    Agent,
    Approve,
    Audit,
    Budget,
    Model,
    RunResult,
    ScriptedModel,
    SQLiteCheckpointer,
    calculate,
    tool,
)
from statemachine_agent.policy.approval import Decision
from statemachine_agent.testing import replies

ASK_CALL_ID = "toolu_ask_researcher"
MAIL_CALL_ID = "toolu_ask_mailer"
SEND_CALL_ID = "toolu_send_answer"
PENDING_KEY = f"{MAIL_CALL_ID}/{SEND_CALL_ID}"
"""How the lead's pending list names the mailer's call: `<lead's call>/<mailer's call>`."""

SENT: list[dict[str, str]] = []
"""The e-mails sent (a real mailer would call an e-mail API)."""


@tool(requires_approval=True, side_effect=True)
def send_email(to: str, body: str) -> str:
    """Send an e-mail. A person approves every send."""
    SENT.append({"to": to, "body": body})
    return f"sent to {to}"


def make_models() -> dict[str, Model]:
    """The three agents' models. Swap the scripts for real models to run it live:

    from statemachine_agent import AnthropicModel
    lead = AnthropicModel("claude-sonnet-5")  # reads ANTHROPIC_API_KEY
    researcher = AnthropicModel("claude-haiku-4-5")
    """
    return {
        "lead": ScriptedModel(
            [
                replies.tool_use(
                    "researcher", {"task": "How many hours are there in a leap year?"},
                    id=ASK_CALL_ID,
                ),
                replies.tool_use(
                    "mailer",
                    {"task": "Mail ken@example.com: a leap year has 8784 hours."},
                    id=MAIL_CALL_ID,
                ),
                replies.text("A leap year has 8784 hours; Ken has been told."),
            ]
        ),
        "researcher": ScriptedModel(
            [
                replies.tool_use("calculate", {"expression": "366 * 24"}),
                replies.text("A leap year has 366 × 24 = 8784 hours."),
            ]
        ),
        "mailer": ScriptedModel(
            [
                replies.tool_use(
                    "send_email",
                    {"to": "ken@example.com", "body": "A leap year has 8784 hours."},
                    id=SEND_CALL_ID,
                ),
                replies.text("Sent to ken@example.com."),
            ]
        ),
    }  # fmt: skip


def build(folder: Path) -> Agent:
    """The lead with its two sub-agents, checkpointed and audited in `folder`."""
    models = make_models()
    researcher = Agent(
        models["researcher"], tools=[calculate], name="researcher",
        system="Answer one factual question; use calculate for arithmetic.",
    )  # fmt: skip
    mailer = Agent(models["mailer"], tools=[send_email], name="mailer",
                   system="Send the e-mail you are asked to send.")  # fmt: skip
    return Agent(
        models["lead"],
        tools=[
            researcher.as_tool(description="Answers one factual question, with a calculator."),
            mailer.as_tool(description="Sends an e-mail; a person approves each send."),
        ],
        system="Delegate: research with the researcher, send mail with the mailer.",
        budget=Budget(max_iterations=6, max_cost_usd=0.50),
        checkpointer=SQLiteCheckpointer(folder / "runs.sqlite3"),
        audit=Audit(dir=folder / "audit"),
    )


def main(
    folder: Path | None = None,
    review: Callable[[Mapping[str, Any]], Decision] = lambda call: Approve(),
) -> RunResult:
    """Run the lead until the mailer's send waits for a person, then resume with the
    reviewer's decision."""
    folder = folder or Path(tempfile.mkdtemp(prefix="research-team-"))
    lead = build(folder)
    paused = lead.run("How many hours has a leap year? Mail the answer to Ken.")
    if paused.end_state != "awaiting_approval":
        return paused
    pending = (paused.details or {}).get("pending", [])
    decisions = {call["tool_use_id"]: review(call) for call in pending}
    return lead.resume(paused.run_id, decisions=decisions)


if __name__ == "__main__":

    def show(call: Mapping[str, Any]) -> Decision:
        print(f"Reviewer approves {call['name']}({call['input']}) of {call['run_id']}")
        return Approve()

    result = main(review=show)
    print(result.text)
    print(f"[{result.end_state}] {result.reason}; ${result.cost_usd:.4f} for the team")
    print(f"Audit file: {result.audit_path}")
