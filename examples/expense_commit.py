"""An expense-approval agent whose decision takes effect only after it was checked.

The seed's exercise 3 (chapter 5): the agent reads an expense claim and the
company policy, then approves the claim or returns it to the employee. Approving
pays money and returning notifies a person, so neither should happen on a guess.
Following "put side effects last", `approve_claim` and `return_claim` are
declared `deferrable`: when the model calls one, nothing happens yet; the call is
*staged* and answered "staged: ... reference S1". When the model says it is done,
a verifier checks the staged plan against the policy. Only if it agrees does the
run enter the `commit` state, where the staged calls run, once each. If it
disagrees, the model is told why and can take the call back with the built-in
`unstage` tool and stage the right one; the wrong decision never ran.

Run it: `python examples/expense_commit.py` (offline: a scripted model whose first
plan for the hotel claim is wrong, so the verifier's rejection can be seen).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from statemachine_agent import Agent, Budget, Model, RunResult, ScriptedModel, Tool, Verdict, tool
from statemachine_agent.policy.verify import Claim
from statemachine_agent.testing import replies
from statemachine_agent.tools import ToolError

CLAIMS: Mapping[str, Mapping[str, Any]] = {
    "E-1024": {"employee": "Aya", "category": "taxi", "amount": 3200, "nights": 0,
               "note": "Taxi home at 23:40 after the release", "receipt": True},
    "E-1025": {"employee": "Ken", "category": "hotel", "amount": 48000, "nights": 2,
               "note": "Hotel in Tokyo for the trade fair", "receipt": True},
}  # fmt: skip
"""The claims waiting for a decision (a real agent reads them from the expense system)."""

POLICY: Mapping[str, Mapping[str, Any]] = {
    "taxi": {"rule": "Taxis are covered after 22:00, up to ¥5000, with a receipt.",
             "limit": 5000, "per_night": False},
    "hotel": {"rule": "Hotels are covered up to ¥15000 a night, with a receipt.",
              "limit": 15000, "per_night": True},
}  # fmt: skip
"""The expense policy, by category: its wording and the limit the verifier applies."""

DECISIONS = ("approve_claim", "return_claim")
"""The writes: the tools whose calls are staged and committed."""


@dataclass
class Ledger:
    """Where decisions land (a real one would be the expense system's API)."""

    approved: list[dict[str, Any]] = field(default_factory=list)
    returned: list[dict[str, Any]] = field(default_factory=list)


def expense_tools(ledger: Ledger) -> list[Tool]:
    """The agent's tools: two reads that run at once, two decisions that are staged."""

    @tool
    def read_claim(claim_id: str) -> dict[str, Any]:
        """Read an expense claim: who, what, how much, and whether a receipt is attached."""
        if claim_id not in CLAIMS:
            raise ToolError(f"No claim {claim_id!r}; open claims: {sorted(CLAIMS)}.")
        return {"claim_id": claim_id, **CLAIMS[claim_id]}

    @tool
    def read_policy(category: str) -> str:
        """Read the expense policy for a category (taxi, hotel)."""
        if category not in POLICY:
            raise ToolError(f"No policy for {category!r}; categories: {sorted(POLICY)}.")
        return str(POLICY[category]["rule"])

    @tool(side_effect=True, deferrable=True)
    def approve_claim(claim_id: str, amount: int, idempotency_key: str) -> str:
        """Approve a claim for payment. Runs only when the task is complete and checked."""
        ledger.approved.append({"claim_id": claim_id, "amount": amount, "key": idempotency_key})
        return f"{claim_id} approved: ¥{amount} will be paid"

    @tool(side_effect=True, deferrable=True)
    def return_claim(claim_id: str, reason: str, idempotency_key: str) -> str:
        """Return a claim to the employee with the reason. Runs only when the task is
        complete and checked."""
        ledger.returned.append({"claim_id": claim_id, "reason": reason, "key": idempotency_key})
        return f"{claim_id} returned to the employee"

    return [read_claim, read_policy, approve_claim, return_claim]


def staged_plan(messages: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """The decisions still staged, by reference: each decision call whose result said
    "staged ... reference S<n>", less those the model took back with `unstage`."""
    calls: dict[str, dict[str, Any]] = {}
    plan: dict[str, dict[str, Any]] = {}
    for message in messages:
        content = message.get("content")
        if not isinstance(content, list):
            continue
        for block in content:
            if block.get("type") == "tool_use":
                calls[block["id"]] = block
                if block["name"] == "unstage":
                    plan.pop(str(block["input"].get("reference")), None)
            elif block.get("type") == "tool_result":
                call = calls.get(block["tool_use_id"], {})
                found = re.search(r"^staged:.*reference (S\d+)", str(block.get("content")))
                if found and call.get("name") in DECISIONS:
                    plan[found.group(1)] = {"tool": call["name"], **call["input"]}
    return plan


def check_plan(claim: Claim) -> Verdict:
    """The verifier: every staged decision follows the policy, one per claim.

    It reads the plan, not the model's prose: an approval must be for the claimed
    amount, within the category's limit and with a receipt; anything else must be
    returned."""
    decided: dict[str, str] = {}
    for ref, decision in staged_plan(claim.messages).items():
        claim_id = str(decision.get("claim_id"))
        if claim_id in decided:
            return Verdict(ok=False, feedback=f"{claim_id} is decided twice ({ref}).")
        decided[claim_id] = ref
        expense, policy = (
            CLAIMS.get(claim_id),
            POLICY.get(str(CLAIMS.get(claim_id, {}).get("category"))),
        )
        if expense is None or policy is None:
            return Verdict(ok=False, feedback=f"{ref} names no known claim: {claim_id}.")
        limit = policy["limit"] * (max(1, expense["nights"]) if policy["per_night"] else 1)
        allowed = expense["receipt"] and expense["amount"] <= limit
        if decision["tool"] == "approve_claim" and not allowed:
            return Verdict(ok=False, feedback=(
                f"{ref} approves {claim_id} for ¥{expense['amount']}, over the policy's "
                f"limit of ¥{limit}: return it with the reason."))  # fmt: skip
        if decision["tool"] == "approve_claim" and decision.get("amount") != expense["amount"]:
            return Verdict(ok=False, feedback=f"{ref} pays another amount than claimed.")
        if decision["tool"] == "return_claim" and allowed:
            return Verdict(ok=False, feedback=f"{ref} returns {claim_id}, which the policy covers.")
    missing = sorted(set(CLAIMS) - set(decided))
    if missing:
        return Verdict(ok=False, feedback=f"No decision staged for {', '.join(missing)}.")
    return Verdict(ok=True)


HOTEL_RETURN = {
    "claim_id": "E-1025",
    "reason": "¥48000 for 2 nights is over the ¥15000 a night limit (¥30000).",
}


def make_model() -> Model:
    """The model that decides. Swap the script for a real model to run it live:

        from statemachine_agent import AnthropicModel
        return AnthropicModel("claude-sonnet-5")  # reads ANTHROPIC_API_KEY

    The script reads both claims and their policies, stages an approval for each
    (the hotel one is wrong), is told so by the verifier, unstages it and stages a
    return instead.
    """
    use = replies.tool_use_block
    return ScriptedModel(
        [
            replies.reply(
                use("read_claim", {"claim_id": "E-1024"}),
                use("read_claim", {"claim_id": "E-1025"}),
                stop_reason="tool_use",
            ),
            replies.reply(
                use("read_policy", {"category": "taxi"}),
                use("read_policy", {"category": "hotel"}),
                stop_reason="tool_use",
            ),
            replies.reply(
                use("approve_claim", {"claim_id": "E-1024", "amount": 3200}),
                use("approve_claim", {"claim_id": "E-1025", "amount": 48000}),
                stop_reason="tool_use",
            ),
            replies.text("Both claims are approved."),
            replies.reply(
                use("unstage", {"reference": "S2"}),
                use("return_claim", HOTEL_RETURN),
                stop_reason="tool_use",
            ),
            replies.text("E-1024 is approved; E-1025 goes back to Ken: it is over the limit."),
        ]
    )


def main(ledger: Ledger | None = None) -> RunResult:
    ledger = ledger if ledger is not None else Ledger()
    agent = Agent(
        make_model(),
        tools=expense_tools(ledger),
        system=(
            "You process expense claims. Read each claim and the policy for its category, "
            "then approve it (approve_claim) or return it with the reason (return_claim)."
        ),
        # A deferrable tool switches staging on: its calls run in `commit`, after the
        # verifier accepted (Agent(commit=CommitPolicy(on_failure="retry")) to let the
        # model fix a staged call that fails when it runs).
        verify=check_plan,
        budget=Budget(max_iterations=8),
    )
    return agent.run("Decide the open expense claims E-1024 and E-1025.")


if __name__ == "__main__":
    done = main()
    for ref, outcome in (
        (c["ref"], c["content"]) for c in (done.details or {}).get("committed", [])
    ):
        print(f"{ref}: {outcome}")
    print(f"[{done.end_state}] {done.text}")
