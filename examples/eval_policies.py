"""Does a stall policy or a verifier make the agent end better, and what does it cost?

Twenty-four order-lookup questions, each solved by two tool calls (find the order,
then its shipping status) and answered with the status. The model is
`MisbehavingModel`, seeded: on some questions it repeats a call forever, drifts
between two calls, answers at once without looking, or goes through the calls
twice. Four variants of one agent are evaluated on the same cases:

- `baseline`: no stall detection, no verifier;
- `stall`: the stall policy (an intervention on repetition, `stalled` if it persists);
- `verifier`: a verifier that rejects an answer citing no looked-up status;
- `both`: the two together.

What it prints (reproducible: the model is seeded and costs come from its usage):

    variant   runs  success  cost $  median $  p90 iter  stalls  ...  end states
    baseline  24    54%      0.3487  0.0044    12        0       ...  completed 15, budget_exh. 9
    stall     24    92%      0.1437  0.0044    5         10      ...  completed 24
    verifier  24    62%      0.3588  0.0054    12        0       ...  completed 15, budget_exh. 9
    both      24    100%     0.1538  0.0054    5         10      ...  completed 24
    stall vs baseline: success 92% vs 54%, difference +38% (95% CI +21% to +58%), ...

The stall policy cuts what the looping runs cost (they end after an intervention
instead of running into the iteration budget), and the verifier raises the success
rate (an early answer is sent back, and the model then looks it up).

Run it: `python examples/eval_policies.py [OUT_DIR]` (offline, no key). The same from
the command line: `statemachine-agent eval examples/eval_policies.py --out evals-out`.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from statemachine_agent import Agent, Budget, Model, StallPolicy, Verdict, tool
from statemachine_agent.evals import Case, Dataset, Report, Variant, evaluate, trajectory
from statemachine_agent.evals.scorers import Scorer, answer_match
from statemachine_agent.policy.verify import Claim
from statemachine_agent.testing.simulated import MisbehavingModel, Task

STATUSES = ("shipped", "in transit", "delivered", "held at customs")


def status_of(order: str) -> str:
    """The shipping status of an order (a pure function of its number)."""
    return STATUSES[int(order[-2:]) % len(STATUSES)]


def order_of(customer: str) -> str:
    """A customer's latest order number (a pure function of the name)."""
    return f"A{sum(map(ord, customer)) % 90 + 10:02d}"


@tool
def find_order(customer: str) -> str:
    """Find a customer's latest order number."""
    return order_of(customer)


@tool
def shipping_status(order: str) -> str:
    """The shipping status of an order."""
    return f"Order {order}: {status_of(order)}"


CUSTOMERS = [f"customer-{i:02d}" for i in range(24)]


def question(customer: str) -> str:
    return f"Where is the latest order of {customer}?"


def answer(customer: str) -> str:
    order = order_of(customer)
    return f"Order {order}: {status_of(order)}"


def calls(customer: str) -> tuple[dict[str, object], ...]:
    order = order_of(customer)
    return (
        {"name": "find_order", "input": {"customer": customer}},
        {"name": "shipping_status", "input": {"order": order}},
    )


dataset = Dataset(
    [
        Case(
            id=customer,
            prompt=question(customer),
            expected=answer(customer),
            trajectory=calls(customer),
        )
        for customer in CUSTOMERS
    ],
    name="order-lookups",
)


def make_model() -> Model:
    """The model under evaluation. For a live evaluation use a real one:

    from statemachine_agent import AnthropicModel
    return AnthropicModel("claude-sonnet-5")  # reads ANTHROPIC_API_KEY
    """
    tasks = {
        question(c): Task(calls(c), answer(c), wrong_answer="It has shipped.") for c in CUSTOMERS
    }
    return MisbehavingModel(tasks, seed=7, repeat=0.2, drift=0.15, early=0.2, overrun=0.1)


def cites_a_status(claim: Claim) -> Verdict:
    """An objective check: the answer quotes a status a tool returned in this run."""
    looked_up = [
        str(block.get("content"))
        for message in claim.messages
        if isinstance(message.get("content"), list)
        for block in message["content"]
        if block.get("type") == "tool_result" and "Order " in str(block.get("content"))
    ]
    if any(result in claim.text for result in looked_up):
        return Verdict(True)
    return Verdict(False, "Look the order up with the tools and quote the status they return.")


base = Agent(
    make_model(),
    [find_order, shipping_status],
    system="Answer with the order's shipping status, as the tools give it.",
    budget=Budget(max_iterations=12),
    stall=None,
)

variants = [
    Variant("baseline", base),
    Variant("stall", base.replace(stall=StallPolicy())),
    Variant("verifier", base.replace(verify=cites_a_status)),
    Variant("both", base.replace(stall=StallPolicy(), verify=cites_a_status)),
]

scorers: list[Scorer] = [answer_match(), trajectory("superset")]


def main(out: str | Path | None = None) -> Report:
    """Evaluate the four variants and print the table and where the report went."""
    folder = Path(out) if out is not None else Path(tempfile.mkdtemp(prefix="eval-policies-"))
    report = evaluate(dataset, variants, scorers, concurrency=4, out=folder)
    from statemachine_agent.evals import write_html

    write_html(report, folder / "report.html")
    (folder / "report.json").write_text(report.to_json(), encoding="utf-8")
    print(report.table(), end="")
    print(f"report: {folder / 'report.html'}")
    return report


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else None)
