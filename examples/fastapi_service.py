"""Embed the agent in a web service: start runs, read their state, approve their tool calls.

Four endpoints over one `Agent`, which serves every run of the service:

- `POST /runs` starts a run and answers when it ends or pauses: its `run_id`, end
  state and reason, the answer, and the calls waiting for a decision when it paused
  in `awaiting_approval`.
- `POST /runs/stream` starts a run and streams its events to the browser as
  Server-Sent Events as they happen (the answer word by word, tool calls, every
  transition), the last one `run_ended` with the same facts `POST /runs` answers;
  a run that pauses for approval ends its stream there, and is approved as any other.
- `GET /runs/{run_id}` reads the run's state from the checkpointer, so any process
  that opens the same state dir sees the same thing.
- `POST /runs/{run_id}/approvals` takes a decision per waiting call and resumes the run.

Every transition is checkpointed in `<state_dir>/runs.sqlite3`; every event of a run,
approvals included, is in `<audit_dir>/<run_id>.jsonl`. The only tool, `send_email`,
needs approval and takes an `idempotency_key`, so a call repeated after a crash sends
nothing twice. See docs/embedding.md.

Serve it (any ASGI server, e.g. `pip install uvicorn`; needs ANTHROPIC_API_KEY):

    uvicorn --app-dir examples --factory fastapi_service:service

Run it offline: `python examples/fastapi_service.py` (a scripted model driven through
FastAPI's TestClient: start, approval pause, approve, done).
"""

from __future__ import annotations

import json
import logging
import os
import sys
import tempfile
from collections.abc import AsyncIterator, MutableMapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal, TextIO

import structlog
from fastapi import FastAPI, HTTPException
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, Field

from statemachine_agent import (
    Agent,
    AnthropicModel,
    Approve,
    Budget,
    Deny,
    Edit,
    Model,
    Redactor,
    RunResult,
    ScriptedModel,
    Tool,
    tool,
)
from statemachine_agent.machine.run import RunRecord
from statemachine_agent.machine.table import END_STATES
from statemachine_agent.persistence import RunNotFoundError, load_record
from statemachine_agent.policy.approval import DEFAULT_DENIAL, Decision
from statemachine_agent.stream.events import to_json
from statemachine_agent.testing import replies

SYSTEM = (
    "You are an office assistant. Send e-mail with send_email when the user asks for it; "
    "a person approves every send. If a send is declined, say so and stop."
)

# -- the side effect: an outbox that refuses to send twice -------------------------------


class Outbox:
    """Sent mail, one JSON line each; a key already used sends nothing again."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)

    def sent(self) -> list[dict[str, str]]:
        if not self.path.exists():
            return []
        return [json.loads(line) for line in self.path.read_text(encoding="utf-8").splitlines()]

    def send(self, to: str, subject: str, body: str, key: str) -> str:
        if any(mail["key"] == key for mail in self.sent()):
            return f"Sent to {to}."  # the first attempt's answer: a retry is not a new send
        mail = {"key": key, "to": to, "subject": subject, "body": body}
        with self.path.open("a", encoding="utf-8") as out:
            out.write(json.dumps(mail) + "\n")
        return f"Sent to {to}."


def email_tools(outbox: Outbox) -> list[Tool]:
    @tool(requires_approval=True, side_effect=True, sequential=True)
    def send_email(to: str, subject: str, body: str, idempotency_key: str) -> str:
        """Send an e-mail. A person approves every send before it happens.

        Args:
            to: The recipient's address.
            subject: The subject line.
            body: The message, in plain text.
        """
        # idempotency_key is not shown to the model: the engine passes
        # "<run_id>:<tool_use_id>", the same on every retry and resume.
        return outbox.send(to, subject, body, idempotency_key)

    return [send_email]


# -- logging: the library configures none; the service does ------------------------------

BULKY = ("messages", "tools", "system", "settings", "content")
"""Keys left out of the service log: the audit file keeps them whole."""


def slim(_logger: Any, _method: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    for key in BULKY:
        event.pop(key, None)
    return event


def configure_logging(stream: TextIO = sys.stdout) -> None:
    """One JSON object a line; the engine's events arrive here as `statemachine_agent` logs."""
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            slim,
            Redactor(secrets=[os.environ.get("ANTHROPIC_API_KEY", "")]),
            structlog.processors.JSONRenderer(),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.INFO),
        logger_factory=structlog.PrintLoggerFactory(stream),
        cache_logger_on_first_use=False,
    )


# -- the HTTP shapes ----------------------------------------------------------------------


class StartRun(BaseModel):
    prompt: str = Field(min_length=1)
    user: str | None = None
    """Who asked: stamped on every audit event of the run as its metadata."""


class PendingCall(BaseModel):
    tool_use_id: str
    name: str
    input: Any


class RunOutcome(BaseModel):
    """How a run ended, or why it paused."""

    run_id: str
    end_state: str
    reason: str
    text: str
    pending: list[PendingCall]
    iterations: int
    cost_usd: float
    audit_path: str | None


class RunState(BaseModel):
    """A run as its last checkpoint has it."""

    run_id: str
    state: str
    ended: bool
    pending: list[PendingCall]
    transitions: int
    iterations: int
    cost_usd: float
    audit_path: str | None


class ApproveCall(BaseModel):
    decision: Literal["approve"]


class DenyCall(BaseModel):
    decision: Literal["deny"]
    message: str = DEFAULT_DENIAL


class EditCall(BaseModel):
    decision: Literal["edit"]
    input: dict[str, Any]


DecisionBody = Annotated[ApproveCall | DenyCall | EditCall, Field(discriminator="decision")]


class Approvals(BaseModel):
    """A reviewer's decisions, by tool_use id; calls left out stay waiting."""

    reviewer: str = Field(min_length=1)
    decisions: dict[str, DecisionBody]


def to_decision(body: DecisionBody) -> Decision:
    if isinstance(body, ApproveCall):
        return Approve()
    if isinstance(body, DenyCall):
        return Deny(body.message)
    return Edit(body.input)


def outcome(result: RunResult) -> RunOutcome:
    pending = (result.details or {}).get("pending", [])
    return RunOutcome(
        run_id=result.run_id,
        end_state=result.end_state,
        reason=result.reason,
        text=result.text,
        pending=[PendingCall(**call) for call in pending],
        iterations=result.iterations,
        cost_usd=result.cost_usd,
        audit_path=str(result.audit_path) if result.audit_path else None,
    )


def waiting_calls(record: RunRecord) -> list[PendingCall]:
    if record.state != "awaiting_approval":
        return []
    return [
        PendingCall(tool_use_id=call.id, name=call.name, input=call.input)
        for call in record.pending_calls
        if call.id in record.approval.awaiting
    ]


# -- the service --------------------------------------------------------------------------


def default_model() -> Model:
    """Claude through the Anthropic SDK; reads ANTHROPIC_API_KEY (and ANTHROPIC_BASE_URL)."""
    return AnthropicModel()


@dataclass
class Service:
    agent: Agent
    outbox: Outbox
    resuming: set[str] = field(default_factory=set)
    """Runs being resumed by this process: a second approval for one of them is refused."""


def create_app(
    model: Model | None = None,
    *,
    state_dir: str | Path = "state",
    audit_dir: str | Path = "audit",
) -> FastAPI:
    """The service over one agent; `model` defaults to `AnthropicModel()`."""
    state = Path(state_dir)
    outbox = Outbox(state / "outbox.jsonl")
    agent = Agent(
        model if model is not None else default_model(),
        tools=email_tools(outbox),
        system=SYSTEM,
        budget=Budget(max_iterations=10, max_cost_usd=0.50),
        checkpointer=state / "runs.sqlite3",  # a SQLite file: every transition
        audit=audit_dir,  # one JSONL audit file per run, in this folder
    )
    service = Service(agent, outbox)
    checkpointer = agent.checkpointer
    assert checkpointer is not None
    log = structlog.get_logger("service")

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        yield
        checkpointer.close()

    app = FastAPI(title="statemachine-agent service", lifespan=lifespan)
    app.state.service = service

    @app.post("/runs")
    async def start_run(body: StartRun) -> RunOutcome:
        metadata = {"user": body.user} if body.user else None  # on every event and checkpoint
        result = await agent.arun(body.prompt, metadata=metadata)
        return outcome(result)

    @app.post("/runs/stream")
    async def stream_run(body: StartRun) -> StreamingResponse:
        metadata = {"user": body.user} if body.user else None
        events = agent.astream(body.prompt, metadata=metadata)

        async def server_sent_events() -> AsyncIterator[str]:
            async with events:  # a client that hangs up cancels the run
                async for event in events:
                    yield f"event: {event.type}\ndata: {json.dumps(to_json(event))}\n\n"

        return StreamingResponse(server_sent_events(), media_type="text/event-stream")

    @app.get("/runs/{run_id}")
    async def get_run(run_id: str) -> RunState:
        try:
            record = load_record(checkpointer, run_id)
        except RunNotFoundError:
            raise HTTPException(404, f"no run {run_id!r}") from None
        return RunState(
            run_id=run_id,
            state=record.state,
            ended=record.state in END_STATES,
            pending=waiting_calls(record),
            transitions=record.seq,
            iterations=record.iteration,
            cost_usd=record.cost_usd,
            audit_path=str(record.audit_path) if record.audit_path else None,
        )

    @app.post("/runs/{run_id}/approvals")
    async def approve(run_id: str, body: Approvals) -> RunOutcome:
        try:
            record = load_record(checkpointer, run_id)
        except RunNotFoundError:
            raise HTTPException(404, f"no run {run_id!r}") from None
        if record.state != "awaiting_approval" or run_id in service.resuming:
            raise HTTPException(409, f"run {run_id!r} is not awaiting approval")
        waiting = {call.tool_use_id for call in waiting_calls(record)}
        unknown = sorted(set(body.decisions) - waiting)
        if unknown:
            raise HTTPException(422, f"no call waiting with id {', '.join(unknown)}")
        decisions = {call_id: to_decision(d) for call_id, d in body.decisions.items()}
        log.info(
            "approval.submitted",
            run_id=run_id,
            reviewer=body.reviewer,
            decisions={call_id: d.decision for call_id, d in body.decisions.items()},
        )
        service.resuming.add(run_id)
        try:
            result = await agent.aresume(run_id, decisions=decisions)
        finally:
            service.resuming.discard(run_id)
        return outcome(result)

    return app


def service() -> FastAPI:
    """What `uvicorn --factory` serves: JSON logs, Claude, ./state and ./audit."""
    configure_logging()
    return create_app()


# -- offline walk-through ------------------------------------------------------------------

SEND_CALL_ID = "toolu_send_report"


def demo_model() -> Model:
    """A scripted model: asks to send one e-mail, then confirms. For a real one:

    from statemachine_agent import AnthropicModel
    return AnthropicModel("claude-sonnet-5")  # reads ANTHROPIC_API_KEY
    """
    return ScriptedModel(
        [
            replies.tool_use(
                "send_email",
                {"to": "ken@example.com", "subject": "Q3 report", "body": "Attached."},
                id=SEND_CALL_ID,
            ),
            replies.text("The Q3 report is on its way to Ken."),
        ]
    )


def main() -> RunOutcome:
    """Start a run, see it pause for approval, approve it, and see it complete."""
    from fastapi.testclient import TestClient

    with tempfile.TemporaryDirectory() as tmp:
        app = create_app(demo_model(), state_dir=Path(tmp, "state"), audit_dir=Path(tmp, "audit"))
        with TestClient(app) as client:
            started = client.post("/runs", json={"prompt": "Send Ken the Q3 report."}).json()
            print(f"POST /runs -> {started['end_state']}: {started['reason']}")
            run_id = started["run_id"]
            state = client.get(f"/runs/{run_id}").json()
            print(f"GET /runs/{run_id} -> {state['state']}, pending {state['pending']}")
            decisions = {call["tool_use_id"]: {"decision": "approve"} for call in state["pending"]}
            done = client.post(
                f"/runs/{run_id}/approvals", json={"reviewer": "aya", "decisions": decisions}
            )
            result = RunOutcome.model_validate(done.json())
            print(f"POST /runs/{run_id}/approvals -> {result.end_state}: {result.text}")
    return result


if __name__ == "__main__":
    main()
