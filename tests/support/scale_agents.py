"""The agents the scale-out tests run, registered by name for every worker process.

Each worker (DBOS or Temporal, in the test process or a child) imports this
module and so builds the same agents. What varies per test comes from the
environment, which child processes inherit:

- `SMA_SCALE_LEDGER`: a file every model call and tool execution appends a line
  to (`<worker> <kind> <key>`), so a test can count what really ran, where;
- `SMA_SCALE_WORKER`: the name this process writes in the ledger;
- `SMA_SCALE_KILL_AT`: a tool_use id; the process SIGKILLs itself once, inside
  that tool, right after its ledger line (a crash mid-step);
- `SMA_SCALE_TOOL_DELAY`: seconds each lookup takes (to keep workers busy);
- `SMA_SCALE_APPROVAL_TIMEOUT`: seconds the approval agent waits for a decision;
- `SMA_SCALE_AUDIT`: a folder for the payments agent's audit files;
- `SMA_SCALE_SPANS`: a folder this process's OpenTelemetry spans go to (`export_spans`).

The model answers by conversation progress and every tool_use id is explicit,
so any process gives the same reply at the same point of the same run.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor

from statemachine_agent import Agent, ModelError, ModelRequest, ToolCall, Verdict, tool
from statemachine_agent.durable import ProgressModel, WaitsForApproval, register_agent
from statemachine_agent.effects.base import Effects
from statemachine_agent.policy.approval import ApprovalPolicy
from statemachine_agent.testing import replies

PAYMENTS = "scale-payments"
APPROVAL = "scale-approval"
FLAKY = "scale-flaky"
FATAL = "scale-fatal"
COMMIT = "scale-commit"
COMMIT_APPROVAL = "scale-commit-approval"

LEDGER_ENV = "SMA_SCALE_LEDGER"
WORKER_ENV = "SMA_SCALE_WORKER"
KILL_ENV = "SMA_SCALE_KILL_AT"
DELAY_ENV = "SMA_SCALE_TOOL_DELAY"
APPROVAL_TIMEOUT_ENV = "SMA_SCALE_APPROVAL_TIMEOUT"
AUDIT_ENV = "SMA_SCALE_AUDIT"
SPANS_ENV = "SMA_SCALE_SPANS"
FINAL_TEXT = "Paid 12 in total; a=A, b=B."


def record(kind: str, key: str) -> None:
    """Append one line to the ledger, if the test asked for one."""
    ledger = os.environ.get(LEDGER_ENV)
    if not ledger:
        return
    worker = os.environ.get(WORKER_ENV, "main")
    with open(ledger, "a", encoding="utf-8") as out:
        out.write(f"{worker} {kind} {key}\n")


def ledger_lines(path: Path) -> list[tuple[str, str, str]]:
    """The ledger as (worker, kind, key) triples."""
    if not path.exists():
        return []
    lines = path.read_text(encoding="utf-8").splitlines()
    return [(a, b, c) for a, b, c in (line.split(" ", 2) for line in lines if line)]


def export_spans() -> None:
    """With `SMA_SCALE_SPANS` set, trace this process: its spans go to `<pid>.jsonl` in that
    folder, one JSON line each, as they end (the OpenTelemetry SDK's console exporter)."""
    folder = os.environ.get(SPANS_ENV)
    if not folder:
        return
    out = open(Path(folder) / f"{os.getpid()}.jsonl", "a", encoding="utf-8")  # noqa: SIM115
    exporter = ConsoleSpanExporter(out=out, formatter=lambda span: span.to_json(indent=None) + "\n")
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)


def run_spans(folder: Path, run_id: str) -> list[dict[str, Any]]:
    """The spans of run `run_id` every process wrote to `folder` (see `export_spans`), each
    with the `process` (its pid) that wrote it."""
    return [
        {**span, "process": path.stem}
        for path in sorted(folder.glob("*.jsonl"))
        for line in path.read_text(encoding="utf-8").splitlines()
        if line
        for span in [json.loads(line)]
        if span["attributes"].get("gen_ai.conversation.id") == run_id
    ]


def span_ids(span: dict[str, Any]) -> tuple[str, str, str | None]:
    """(trace id, span id, parent span id) of an exported span, in hex as W3C writes them."""
    parent = span.get("parent_id")
    return (
        span["context"]["trace_id"].removeprefix("0x"),
        span["context"]["span_id"].removeprefix("0x"),
        parent.removeprefix("0x") if parent else None,
    )


def prompt_of(request: ModelRequest) -> str:
    """The run's prompt (its first message), which the tests make unique per run."""
    first = request.messages[0]["content"] if request.messages else ""
    if isinstance(first, str):
        return first
    return "".join(str(block.get("text", "")) for block in first if block.get("type") == "text")


def maybe_die(tool_use_id: str) -> None:
    """SIGKILL this process inside the chosen tool call, once per ledger."""
    target = os.environ.get(KILL_ENV)
    ledger = os.environ.get(LEDGER_ENV)
    if not target or not ledger or not tool_use_id.endswith(":" + target):
        return
    mark = Path(ledger + ".killed")
    if mark.exists():
        return
    mark.write_text(tool_use_id, encoding="utf-8")
    os.kill(os.getpid(), signal.SIGKILL)


class LedgerModel(ProgressModel):
    """A progress model that writes each call it answers to the ledger."""

    async def acomplete(self, request: ModelRequest) -> Any:
        record("model", f"{prompt_of(request)}#{self.progress(request)}")
        return await super().acomplete(request)


def payments_script() -> list[dict[str, Any]]:
    return [
        replies.tool_uses(
            ("lookup", {"key": "a"}), ("lookup", {"key": "b"}), ids=("toolu_look_a", "toolu_look_b")
        ),
        replies.tool_uses(
            ("pay", {"amount": 5}), ("pay", {"amount": 7}), ids=("toolu_pay5", "toolu_pay7")
        ),
        replies.text(FINAL_TEXT),
    ]


@register_agent(PAYMENTS)
def payments(effects: Effects) -> Agent:
    """Two concurrent read-only lookups, two sequential payments, then an answer."""

    @tool
    def lookup(key: str, idempotency_key: str) -> str:
        """Read a value (read-only: safe to run again)."""
        record("tool", idempotency_key)
        time.sleep(float(os.environ.get(DELAY_ENV) or 0))
        return key.upper()

    @tool(side_effect=True, sequential=True)
    def pay(amount: int, idempotency_key: str) -> str:
        """Pay an amount; a real payment API would refuse a repeated idempotency key."""
        record("tool", idempotency_key)
        maybe_die(idempotency_key)
        return f"paid {amount}"

    return Agent(
        LedgerModel(payments_script()),
        tools=[lookup, pay],
        system="Pay the user's bills.",
        stall=None,
        audit=os.environ.get(AUDIT_ENV) or None,
        effects=effects,
    )


COMMIT_TEXT = "Both payments are staged; they run at commit."


def commit_script() -> list[dict[str, Any]]:
    return [
        replies.tool_uses(("lookup", {"key": "claim"}), ids=("toolu_read",)),
        replies.tool_uses(
            ("pay", {"amount": 5}), ("pay", {"amount": 7}), ids=("toolu_pay5", "toolu_pay7")
        ),
        replies.tool_uses(
            ("notify", {"to": "a"}), ("notify", {"to": "b"}), ids=("toolu_note_a", "toolu_note_b")
        ),
        replies.text(COMMIT_TEXT),
    ]


@register_agent(COMMIT)
def commit(effects: Effects) -> Agent:
    """Side effects last (issue 34): a read, two payments (sequential) and two notices
    (concurrent) staged, a verifier that accepts, then `commit` runs them, each once.
    Each keeps a ledger line keyed by idempotency key, so a test counts what really ran,
    and `SMA_SCALE_KILL_AT` can kill a worker inside one."""

    @tool
    def lookup(key: str, idempotency_key: str) -> str:
        """Read a value (read-only: safe to run again)."""
        record("tool", idempotency_key)
        return key.upper()

    @tool(side_effect=True, deferrable=True, sequential=True)
    def pay(amount: int, idempotency_key: str) -> str:
        """Pay an amount; staged during the loop, run at commit."""
        record("tool", idempotency_key)
        maybe_die(idempotency_key)
        return f"paid {amount}"

    @tool(side_effect=True, deferrable=True)
    def notify(to: str, idempotency_key: str) -> str:
        """Tell someone the claim was paid; staged, run at commit, concurrently. The first
        notice is slow, so it finishes after the second one (staged after it)."""
        time.sleep(0.2 if to == "a" else 0)
        record("tool", idempotency_key)
        return f"told {to}"

    def accept(claim: Any) -> Verdict:
        """Accepts the claim, so the run goes on to `commit`."""
        return Verdict(ok=True)

    return Agent(
        LedgerModel(commit_script()),
        tools=[lookup, pay, notify],
        verify=accept,
        stall=None,
        audit=os.environ.get(AUDIT_ENV) or None,
        effects=effects,
    )


@register_agent(APPROVAL)
def approval(effects: Effects) -> Agent:
    """An e-mail that a human must approve; the engine waits for the decision."""

    @tool(requires_approval=True, side_effect=True)
    def send_email(to: str, body: str, idempotency_key: str) -> str:
        """Send an e-mail."""
        record("tool", idempotency_key)
        return f"sent to {to}"

    script = [
        replies.tool_use("send_email", {"to": "boss@example.com", "body": "hi"}, id="toolu_mail"),
        replies.text("Sent."),
    ]
    return Agent(
        LedgerModel(script),
        tools=[send_email],
        approval=_engine_approval(effects),
        stall=None,
        effects=effects,
    )


def _engine_approval(effects: Effects) -> ApprovalPolicy | None:
    """The engine's wait for a decision (a DBOS message, a Temporal signal), its timeout
    read per call, so one worker serves tests with different ones."""
    if not isinstance(effects, WaitsForApproval):
        return None
    waits = effects

    def policy(call: ToolCall) -> Any:
        return waits.approval(float(os.environ.get(APPROVAL_TIMEOUT_ENV) or 30))(call)

    return policy


@register_agent(COMMIT_APPROVAL)
def commit_approval(effects: Effects) -> Agent:
    """Two staged payments a person must approve: `commit` asks for both at once, waits
    for the engine's decisions, then runs each once."""

    @tool(side_effect=True, deferrable=True, requires_approval=True, sequential=True)
    def pay(amount: int, idempotency_key: str) -> str:
        """Pay an amount; staged during the loop, approved and run at commit."""
        record("tool", idempotency_key)
        return f"paid {amount}"

    script = [commit_script()[1], replies.text(COMMIT_TEXT)]
    return Agent(LedgerModel(script), tools=[pay], approval=_engine_approval(effects),
                 stall=None, effects=effects)  # fmt: skip


def _flaky(request: ModelRequest) -> dict[str, Any]:
    """Overloaded at the first attempt, fine at the next (a transient failure)."""
    ledger = os.environ.get(LEDGER_ENV)
    key = f"{prompt_of(request)}#0"
    attempts = sum(1 for line in ledger_lines(Path(ledger)) if line[2] == key) if ledger else 1
    if attempts <= 1:
        raise ModelError("Overloaded", status=529, error_type="overloaded_error", retryable=True)
    return replies.text("Recovered.")


def _fatal(request: ModelRequest) -> dict[str, Any]:
    raise ModelError(
        "invalid x-api-key", status=401, error_type="authentication_error", retryable=False
    )


@register_agent(FLAKY)
def flaky(effects: Effects) -> Agent:
    """The model fails once with a retryable error; the engine's retry recovers."""
    return Agent(LedgerModel([_flaky]), stall=None, effects=effects)


@register_agent(FATAL)
def fatal(effects: Effects) -> Agent:
    """The model rejects the key (401): no engine may retry that."""
    return Agent(LedgerModel([_fatal]), stall=None, effects=effects)


PAYMENT_SPANS = [
    "chat claude-sonnet-5",
    "chat claude-sonnet-5",
    "chat claude-sonnet-5",
    "execute_tool lookup",
    "execute_tool lookup",
    "execute_tool pay",
    "execute_tool pay",
]


def assert_one_trace(spans: list[dict[str, Any]], trace_id: str, caller_id: str) -> None:
    """The payments run's spans: a run span, child of the caller's span, with every model
    and tool call its child, all in the caller's trace (ids in hex)."""
    (run_span,) = [s for s in spans if s["name"].startswith("invoke_agent ")]
    assert span_ids(run_span)[0] == trace_id
    assert span_ids(run_span)[2] == caller_id
    assert run_span["attributes"]["statemachine_agent.end_state"] == "completed"
    children = [s for s in spans if s is not run_span]
    assert sorted(s["name"] for s in children) == PAYMENT_SPANS
    assert {span_ids(s)[0] for s in children} == {trace_id}
    assert {span_ids(s)[2] for s in children} == {span_ids(run_span)[1]}


def assert_recovered_trace(spans: list[dict[str, Any]], trace_id: str, caller_id: str) -> None:
    """A run whose worker died and that another process finished is one trace: the first
    process's calls (their run span died with it), then a run span of the process that
    took over, marked recovered, child of the caller's span, with the rest of the calls."""
    assert {span_ids(s)[0] for s in spans} == {trace_id}
    (run_span,) = [s for s in spans if s["name"].startswith("invoke_agent")]
    after = [s for s in spans if s["process"] == run_span["process"]]
    before = [s for s in spans if s["process"] != run_span["process"]]
    assert len({s["process"] for s in before}) == 1
    assert len({span_ids(s)[2] for s in before}) == 1
    assert caller_id not in {span_ids(s)[2] for s in before}
    assert run_span["attributes"]["statemachine_agent.recovered"] is True
    assert run_span["attributes"]["statemachine_agent.end_state"] == "completed"
    assert span_ids(run_span)[2] == caller_id
    children = [s for s in after if s is not run_span]
    assert "chat claude-sonnet-5" in {s["name"] for s in children}
    assert {span_ids(s)[2] for s in children} == {span_ids(run_span)[1]}
