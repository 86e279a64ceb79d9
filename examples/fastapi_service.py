"""Embed the agent in a web service: start runs, read their state, approve their tool calls.

Four endpoints over one `Agent`, which serves every run of the service, each for an
authenticated caller only (`Authorization: Bearer <token>`):

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

Who may do what: a run belongs to the caller who started it (its tenant and user,
taken from the credential, never from the body, are the run's metadata). Only its
owner and the reviewers of its tenant see it; anyone else gets 404, as for a run that
does not exist. Only a reviewer who is not the run's owner approves its calls. Prompts
are limited in size (422; a larger request body 413), and each caller in open runs
(429). Answers and streamed events are redacted like the audit trail and carry no
server paths. The token table here is a stand-in: see `authenticate` for where real
authentication plugs in.

Every transition is checkpointed in `<state_dir>/runs.sqlite3`; every event of a run,
approvals included, is in `<audit_dir>/<run_id>.jsonl`. The only tool, `send_email`,
needs approval and takes an `idempotency_key`, so a call repeated after a crash sends
nothing twice. See docs/embedding.md.

Serve it (any ASGI server, e.g. `pip install uvicorn`; needs ANTHROPIC_API_KEY and
SERVICE_TOKENS, a JSON object `{"<token>": {"tenant": ..., "user": ..., "role": ...}}`):

    uvicorn --app-dir examples --factory fastapi_service:service

Run it offline: `python examples/fastapi_service.py` (a scripted model driven through
FastAPI's TestClient: start, approval pause, approve by a reviewer, done).
"""

from __future__ import annotations

import hmac
import json
import logging
import os
import sys
import tempfile
from collections.abc import AsyncIterator, Mapping, MutableMapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal, TextIO

import structlog
from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.responses import StreamingResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, ConfigDict, Field

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
from statemachine_agent.agent import new_run_id
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


# -- who is calling: principals and their credentials --------------------------------------

Role = Literal["requester", "reviewer"]


@dataclass(frozen=True)
class Principal:
    """An authenticated caller. Runs are bound to (tenant, user); reviewers approve."""

    tenant: str
    user: str
    role: Role = "requester"


DEMO_TOKENS: Mapping[str, Principal] = {
    "token-ken": Principal("acme", "ken", "requester"),
    "token-aya": Principal("acme", "aya", "reviewer"),
    "token-eve": Principal("globex", "eve", "requester"),
}
"""The offline walk-through's callers. A real service never ships tokens in code."""


def tokens_from_env() -> dict[str, Principal]:
    """`SERVICE_TOKENS`, a JSON object token -> {tenant, user, role}; none if unset."""
    table = json.loads(os.environ.get("SERVICE_TOKENS", "{}"))
    return {token: Principal(**who) for token, who in table.items()}


def authenticate(tokens: Mapping[str, Principal], token: str) -> Principal | None:
    """The principal a bearer token stands for, or None.

    This is where real authentication plugs in: verify a JWT from your identity
    provider (its `sub` the user, a claim the tenant and role), look an API key's
    hash up in your database, or read what an authenticating proxy vouches for.
    Whatever it is, the tenant and user come from the credential, never from the body.
    """
    for known, principal in tokens.items():
        if hmac.compare_digest(known.encode(), token.encode()):  # no timing oracle
            return principal
    return None


# -- the HTTP shapes ----------------------------------------------------------------------

MAX_PROMPT_CHARS = 8_000
"""A longer prompt is refused (422): it costs tokens and fills the audit trail."""
MAX_BODY_BYTES = 64_000
"""A larger request body is refused (413) before it is parsed."""
MAX_OPEN_RUNS = 3
"""Runs one caller may have in flight or waiting for approval at once (else 429)."""


BEARER = HTTPBearer(auto_error=False)
"""Reads `Authorization: Bearer <token>`; a missing header is ours to refuse (401)."""


async def caller(
    request: Request,
    auth: Annotated[HTTPAuthorizationCredentials | None, Depends(BEARER)],
) -> Principal:
    """Every endpoint's first check: who is calling (401 if nobody we know), and a
    request body that is not too large to read (413)."""
    tokens: Mapping[str, Principal] = request.app.state.tokens
    who = authenticate(tokens, auth.credentials) if auth is not None else None
    if who is None:
        raise HTTPException(
            401, "unknown or missing bearer token", headers={"WWW-Authenticate": "Bearer"}
        )
    if int(request.headers.get("content-length") or 0) > MAX_BODY_BYTES:
        raise HTTPException(413, f"request body over {MAX_BODY_BYTES} bytes")
    return who


Caller = Annotated[Principal, Depends(caller)]
"""The authenticated principal of a request: every endpoint takes one."""


class StartRun(BaseModel):
    model_config = ConfigDict(extra="forbid")  # no "user" or "tenant": the credential says

    prompt: str = Field(min_length=1, max_length=MAX_PROMPT_CHARS)


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


class RunState(BaseModel):
    """A run as its last checkpoint has it."""

    run_id: str
    state: str
    ended: bool
    pending: list[PendingCall]
    transitions: int
    iterations: int
    cost_usd: float


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
    """A reviewer's decisions, by tool_use id; calls left out stay waiting. The
    reviewer is the authenticated caller, so the body cannot name one."""

    model_config = ConfigDict(extra="forbid")

    decisions: dict[str, DecisionBody]


def to_decision(body: DecisionBody) -> Decision:
    if isinstance(body, ApproveCall):
        return Approve()
    if isinstance(body, DenyCall):
        return Deny(body.message)
    return Edit(body.input)


def outcome(agent: Agent, result: RunResult) -> RunOutcome:
    """The answer for a run, redacted like its audit file, without server paths."""
    pending = (result.details or {}).get("pending", [])
    return RunOutcome(
        run_id=result.run_id,
        end_state=result.end_state,
        reason=agent.redact(result.reason),
        text=agent.redact(result.text),
        pending=[PendingCall(**agent.redact(call)) for call in pending],
        iterations=result.iterations,
        cost_usd=result.cost_usd,
    )


def waiting_calls(agent: Agent, record: RunRecord) -> list[PendingCall]:
    if record.state != "awaiting_approval":
        return []
    return [
        PendingCall(tool_use_id=call.id, name=call.name, input=agent.redact(call.input))
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
    open_runs: dict[tuple[str, str], set[str]] = field(default_factory=dict)
    """Each (tenant, user)'s runs in flight or waiting for approval, in this process."""


def owner(record: RunRecord) -> tuple[str, str]:
    """The (tenant, user) a run is bound to: its metadata, set from the credential."""
    return str(record.metadata.get("tenant")), str(record.metadata.get("user"))


def may_see(who: Principal, record: RunRecord) -> bool:
    """The run's owner, and the reviewers of its tenant, see it; nobody else."""
    tenant, user = owner(record)
    return who.tenant == tenant and (who.user == user or who.role == "reviewer")


def create_app(
    model: Model | None = None,
    *,
    state_dir: str | Path = "state",
    audit_dir: str | Path = "audit",
    tokens: Mapping[str, Principal] | None = None,
) -> FastAPI:
    """The service over one agent; `model` defaults to `AnthropicModel()`, `tokens`
    (bearer token -> principal) to `SERVICE_TOKENS` from the environment."""
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

    def visible_run(who: Principal, run_id: str) -> RunRecord:
        """The run, if `who` may see it; 404 otherwise, as for a run that does not
        exist, so its id tells another caller nothing."""
        try:
            record = load_record(checkpointer, run_id)
        except (RunNotFoundError, ValueError):  # ValueError: not a valid run id
            raise HTTPException(404, "no such run") from None
        if not may_see(who, record):
            raise HTTPException(404, "no such run")
        return record

    def open_run(who: Principal) -> str:
        """A new run id held for `who`, or 429 when they have too many open runs."""
        held = service.open_runs.setdefault((who.tenant, who.user), set())
        if len(held) >= MAX_OPEN_RUNS:
            raise HTTPException(429, f"{MAX_OPEN_RUNS} runs already open: finish one first")
        run_id = new_run_id()
        held.add(run_id)
        return run_id

    def settle(tenant: str, user: str, run_id: str, result: RunResult | None) -> None:
        """A run that ended is no longer open; one waiting for approval still is."""
        if result is None or result.end_state != "awaiting_approval":
            service.open_runs.get((tenant, user), set()).discard(run_id)

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        yield
        checkpointer.close()

    app = FastAPI(title="statemachine-agent service", lifespan=lifespan)
    app.state.service = service
    app.state.tokens = dict(tokens) if tokens is not None else tokens_from_env()

    @app.post("/runs")
    async def start_run(body: StartRun, who: Caller) -> RunOutcome:
        run_id = open_run(who)
        metadata = {"tenant": who.tenant, "user": who.user}  # on every event and checkpoint
        result: RunResult | None = None
        try:
            result = await agent.arun(body.prompt, run_id=run_id, metadata=metadata)
        finally:
            settle(who.tenant, who.user, run_id, result)
        return outcome(agent, result)

    @app.post("/runs/stream")
    async def stream_run(body: StartRun, who: Caller) -> StreamingResponse:
        run_id = open_run(who)
        metadata = {"tenant": who.tenant, "user": who.user}
        events = agent.astream(body.prompt, run_id=run_id, metadata=metadata)

        async def server_sent_events() -> AsyncIterator[str]:
            try:
                async with events:  # a client that hangs up cancels the run
                    async for event in events:
                        data = json.dumps(agent.redact(to_json(event)))  # as the audit has it
                        yield f"event: {event.type}\ndata: {data}\n\n"
            finally:
                settle(who.tenant, who.user, run_id, events.result)

        return StreamingResponse(server_sent_events(), media_type="text/event-stream")

    @app.get("/runs/{run_id}")
    async def get_run(run_id: str, who: Caller) -> RunState:
        record = visible_run(who, run_id)
        return RunState(
            run_id=run_id,
            state=record.state,
            ended=record.state in END_STATES,
            pending=waiting_calls(agent, record),
            transitions=record.seq,
            iterations=record.iteration,
            cost_usd=record.cost_usd,
        )

    @app.post("/runs/{run_id}/approvals")
    async def approve(run_id: str, body: Approvals, who: Caller) -> RunOutcome:
        record = visible_run(who, run_id)
        tenant, user = owner(record)
        if who.role != "reviewer" or who.user == user:
            raise HTTPException(403, "only a reviewer other than the run's owner approves")
        if record.state != "awaiting_approval" or run_id in service.resuming:
            raise HTTPException(409, f"run {run_id!r} is not awaiting approval")
        waiting = {call.tool_use_id for call in waiting_calls(agent, record)}
        unknown = sorted(set(body.decisions) - waiting)
        if unknown:
            raise HTTPException(422, f"no call waiting with id {', '.join(unknown)}")
        decisions = {call_id: to_decision(d) for call_id, d in body.decisions.items()}
        log.info(
            "approval.submitted",
            run_id=run_id,
            reviewer=who.user,
            decisions={call_id: d.decision for call_id, d in body.decisions.items()},
        )
        service.resuming.add(run_id)
        try:  # the reviewer joins the run's metadata: its later events name who decided
            result = await agent.aresume(run_id, decisions=decisions,
                                         metadata={"reviewer": who.user})  # fmt: skip
        finally:
            service.resuming.discard(run_id)
        settle(tenant, user, run_id, result)
        return outcome(agent, result)

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
    """Ken starts a run and sees it pause for approval; Aya, a reviewer, approves it."""
    from fastapi.testclient import TestClient

    ken = {"Authorization": "Bearer token-ken"}
    aya = {"Authorization": "Bearer token-aya"}
    with tempfile.TemporaryDirectory() as tmp:
        app = create_app(
            demo_model(),
            state_dir=Path(tmp, "state"),
            audit_dir=Path(tmp, "audit"),
            tokens=DEMO_TOKENS,
        )
        with TestClient(app) as client:
            prompt = {"prompt": "Send Ken the Q3 report."}
            started = client.post("/runs", json=prompt, headers=ken).json()
            print(f"POST /runs (ken) -> {started['end_state']}: {started['reason']}")
            run_id = started["run_id"]
            state = client.get(f"/runs/{run_id}", headers=aya).json()
            print(f"GET /runs/{run_id} (aya) -> {state['state']}, pending {state['pending']}")
            decisions = {call["tool_use_id"]: {"decision": "approve"} for call in state["pending"]}
            done = client.post(
                f"/runs/{run_id}/approvals", json={"decisions": decisions}, headers=aya
            )
            result = RunOutcome.model_validate(done.json())
            print(f"POST /runs/{run_id}/approvals (aya) -> {result.end_state}: {result.text}")
    return result


if __name__ == "__main__":
    main()
