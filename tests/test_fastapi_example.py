"""The FastAPI service of `examples/fastapi_service.py`, driven end to end over HTTP.

FastAPI's TestClient sends real requests through the app: a run starts, pauses for
approval, is approved or denied by a second request, and ends; its checkpoints and
audit file are read back as a service operator would read them. `TestAccess` tries
every rule of who may do what with a second, third and fourth caller.
"""

from __future__ import annotations

import importlib.util
import io
import json
import re
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any
from urllib.parse import quote

import httpx
import pytest
import structlog
import uvicorn
from fastapi.testclient import TestClient

from statemachine_agent import AnthropicModel, ScriptedModel
from statemachine_agent.audit.sink import read_events
from statemachine_agent.testing import FakeAnthropicServer, PausedStream, replies

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "fastapi_service.py"
CALL = "toolu_mail"
API_KEY = "sk-ant-api03-TESTSECRET-abcdefghijklmnop"
MAIL = {"to": "ken@example.com", "subject": "Lunch", "body": "Noon?"}
KEN = {"Authorization": "Bearer t-ken"}
"""A requester of tenant acme: starts the runs."""
BOB = {"Authorization": "Bearer t-bob"}
"""Another requester of acme."""
AYA = {"Authorization": "Bearer t-aya"}
"""A reviewer of acme."""
EVE = {"Authorization": "Bearer t-eve"}
"""A reviewer of another tenant, globex."""


def load() -> ModuleType:
    """Import the example by path (the folder is not a package)."""
    spec = importlib.util.spec_from_file_location("example_fastapi_service", EXAMPLE)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # pydantic resolves the models' annotations here
    spec.loader.exec_module(module)
    return module


service = load()


def script(after: str) -> ScriptedModel:
    """The model asks to send one e-mail, then answers `after` once it sees the result."""
    return ScriptedModel([replies.tool_use("send_email", MAIL, id=CALL), replies.text(after)])


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    app = service.create_app(
        script("Sent, or not: see the tool result."),
        state_dir=tmp_path / "state",
        audit_dir=tmp_path / "audit",
        tokens=tokens(),
    )
    with TestClient(app) as test_client:
        yield test_client


def tokens() -> dict[str, Any]:
    principal = service.Principal
    return {
        "t-ken": principal("acme", "ken", "requester"),
        "t-bob": principal("acme", "bob", "requester"),
        "t-aya": principal("acme", "aya", "reviewer"),
        "t-eve": principal("globex", "eve", "reviewer"),
    }


def start(client: TestClient, who: dict[str, str] = KEN) -> dict[str, Any]:
    response = client.post("/runs", json={"prompt": "Ask Ken to lunch."}, headers=who)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def decide(
    client: TestClient, run_id: str, decision: dict[str, Any], who: dict[str, str] = AYA
) -> Any:
    return client.post(f"/runs/{run_id}/approvals", json={"decisions": {CALL: decision}},
                       headers=who)  # fmt: skip


def audit_file(tmp_path: Path, run_id: str) -> Path:
    """Where the service writes a run's audit file (the answers do not say)."""
    return tmp_path / "audit" / f"{run_id}.jsonl"


def outbox(client: TestClient) -> list[dict[str, str]]:
    sent: list[dict[str, str]] = client.app.state.service.outbox.sent()  # type: ignore[attr-defined]
    return sent


class TestApprove:
    """Start, pause in awaiting_approval, approve, complete: the e-mail is sent once."""

    def test_start_pauses_with_the_pending_call(self, client: TestClient) -> None:
        """POST /runs answers awaiting_approval, listing the call; nothing is sent yet."""
        started = start(client)
        assert started["end_state"] == "awaiting_approval"
        assert started["pending"] == [{"tool_use_id": CALL, "name": "send_email", "input": MAIL}]
        assert re.fullmatch(r"run_[0-9a-f]{16}", started["run_id"])
        assert outbox(client) == []

    def test_get_reads_the_checkpoint(self, client: TestClient) -> None:
        """GET /runs/{id} shows the paused state and the same pending call."""
        run_id = start(client)["run_id"]
        state = client.get(f"/runs/{run_id}", headers=KEN).json()
        assert state["state"] == "awaiting_approval"
        assert state["ended"] is True
        assert [call["tool_use_id"] for call in state["pending"]] == [CALL]
        assert state["iterations"] == 1

    def test_approval_resumes_to_completed(self, client: TestClient) -> None:
        """The approval request resumes the run, which sends the mail with a stable key."""
        run_id = start(client)["run_id"]
        done = decide(client, run_id, {"decision": "approve"})
        assert done.status_code == 200, done.text
        assert done.json()["end_state"] == "completed"
        assert done.json()["pending"] == []
        assert outbox(client) == [{"key": f"{run_id}:{CALL}", **MAIL}]
        state = client.get(f"/runs/{run_id}", headers=KEN).json()
        assert (state["state"], state["pending"], state["iterations"]) == ("completed", [], 2)

    def test_audit_file_holds_the_approval_trail(self, client: TestClient, tmp_path: Path) -> None:
        """The run's audit file has the deferral, the resume and the approved call."""
        run_id = start(client)["run_id"]
        decide(client, run_id, {"decision": "approve"})
        events = read_events(audit_file(tmp_path, run_id))
        decided = [(e["decision"], e["source"]) for e in events if e["event"] == "approval.decided"]
        assert decided == [("defer", "default"), ("approve", "resume")]
        names = [e["event"] for e in events]
        assert names.count("run.started") == names.count("run.resumed") == 1
        assert names[-1] == "run.ended"
        finished = next(e for e in events if e["event"] == "tool.finished")
        assert finished["tool_use_id"] == CALL

    def test_owner_is_stamped_on_every_event(self, client: TestClient, tmp_path: Path) -> None:
        """The requester's tenant and user, from the credential, are the run's metadata on
        every audit event; the resumed part also names the reviewer."""
        run_id = start(client)["run_id"]
        decide(client, run_id, {"decision": "approve"})
        events = read_events(audit_file(tmp_path, run_id))
        resumed = next(i for i, e in enumerate(events) if e["event"] == "run.resumed")
        owner = {"tenant": "acme", "user": "ken"}
        assert all(e["metadata"] == owner for e in events[:resumed])
        assert all(e["metadata"] == {**owner, "reviewer": "aya"} for e in events[resumed:])

    def test_edit_sends_the_reviewers_version(self, client: TestClient) -> None:
        """An edit decision runs the call with the reviewer's input."""
        run_id = start(client)["run_id"]
        edited = {**MAIL, "body": "Noon at the usual place?"}
        done = decide(client, run_id, {"decision": "edit", "input": edited})
        assert done.json()["end_state"] == "completed"
        assert [mail["body"] for mail in outbox(client)] == ["Noon at the usual place?"]


class TestDeny:
    """A denial reaches the model as an error result; nothing is sent."""

    def test_deny_completes_without_sending(self, client: TestClient, tmp_path: Path) -> None:
        """The run completes, the outbox stays empty, the audit file names the denial."""
        run_id = start(client)["run_id"]
        done = decide(client, run_id, {"decision": "deny", "message": "Not today."})
        assert done.json()["end_state"] == "completed"
        assert outbox(client) == []
        events = read_events(audit_file(tmp_path, run_id))
        failed = next(e for e in events if e["event"] == "tool.failed")
        assert (failed["error_kind"], failed["content"]) == ("denied", "Not today.")


class TestErrors:
    """Requests that cannot be served are refused with the status that says why."""

    def test_unknown_run_is_404(self, client: TestClient) -> None:
        """GET and approvals of a run id nobody started answer 404."""
        assert client.get("/runs/run_nope", headers=KEN).status_code == 404
        assert decide(client, "run_nope", {"decision": "approve"}).status_code == 404

    def test_approving_an_ended_run_is_409(self, client: TestClient) -> None:
        """A second approval, after the run completed, changes nothing."""
        run_id = start(client)["run_id"]
        decide(client, run_id, {"decision": "approve"})
        again = decide(client, run_id, {"decision": "approve"})
        assert again.status_code == 409
        assert len(outbox(client)) == 1

    def test_decision_for_an_unknown_call_is_422(self, client: TestClient) -> None:
        """A decision naming a call that is not waiting is refused before resuming."""
        run_id = start(client)["run_id"]
        response = client.post(
            f"/runs/{run_id}/approvals",
            json={"decisions": {"toolu_other": {"decision": "approve"}}},
            headers=AYA,
        )
        assert response.status_code == 422
        assert client.get(f"/runs/{run_id}", headers=KEN).json()["state"] == "awaiting_approval"

    def test_malformed_decision_is_422(self, client: TestClient) -> None:
        """A decision kind the service does not know fails validation."""
        run_id = start(client)["run_id"]
        assert decide(client, run_id, {"decision": "maybe"}).status_code == 422


class TestAccess:
    """Who may do what: every rule tried by the caller it is meant to stop."""

    @pytest.mark.parametrize(
        ("method", "path"),
        [("POST", "/runs"), ("POST", "/runs/stream"), ("GET", "/runs/{id}"),
         ("POST", "/runs/{id}/approvals")],
    )  # fmt: skip
    @pytest.mark.parametrize(
        "headers", [{}, {"Authorization": "Bearer t-nobody"}, {"Authorization": "Basic a2VuOg=="}]
    )
    def test_no_credential_is_401(
        self, client: TestClient, method: str, path: str, headers: dict[str, str]
    ) -> None:
        """Without a known bearer token every endpoint answers 401 and does nothing."""
        run_id = start(client)["run_id"]
        body: dict[str, Any] = {"prompt": "Hi"} if "approvals" not in path else {"decisions": {}}
        response = client.request(method, path.format(id=run_id), json=body, headers=headers)
        assert response.status_code == 401
        assert response.headers["www-authenticate"] == "Bearer"
        assert outbox(client) == []

    @pytest.mark.parametrize("field", ["user", "tenant", "metadata"])
    def test_the_body_cannot_name_the_owner(self, client: TestClient, field: str) -> None:
        """Who asked comes from the credential: a body that says otherwise is refused."""
        response = client.post("/runs", json={"prompt": "Hi", field: "aya"}, headers=KEN)
        assert response.status_code == 422

    @pytest.mark.parametrize("other", [BOB, EVE], ids=["same-tenant-requester", "other-tenant"])
    def test_another_principals_run_is_404(self, client: TestClient, other: dict[str, str]) -> None:
        """Reading or approving a run someone else may not see answers exactly as for a
        run that does not exist; the run stays untouched."""
        run_id = start(client)["run_id"]
        missing = client.get("/runs/run_0000000000000000", headers=other)
        seen = client.get(f"/runs/{run_id}", headers=other)
        approved = decide(client, run_id, {"decision": "edit", "input": {**MAIL, "to": "x@evil"}},
                          who=other)  # fmt: skip
        assert (seen.status_code, approved.status_code) == (404, 404)
        assert seen.json() == approved.json() == missing.json()
        assert outbox(client) == []
        assert client.get(f"/runs/{run_id}", headers=KEN).json()["state"] == "awaiting_approval"

    def test_a_reviewer_of_the_tenant_sees_and_approves(self, client: TestClient) -> None:
        """The tenant's reviewer reads the pending call and approves it."""
        run_id = start(client)["run_id"]
        assert client.get(f"/runs/{run_id}", headers=AYA).json()["pending"][0]["input"] == MAIL
        assert decide(client, run_id, {"decision": "approve"}, who=AYA).status_code == 200
        assert len(outbox(client)) == 1

    def test_the_requester_cannot_approve(self, client: TestClient) -> None:
        """The run's owner, a requester, is refused (403: they may see their run)."""
        run_id = start(client)["run_id"]
        assert decide(client, run_id, {"decision": "approve"}, who=KEN).status_code == 403
        assert outbox(client) == []

    def test_a_reviewer_cannot_approve_their_own_run(self, client: TestClient) -> None:
        """A reviewer who started a run is its requester: another reviewer must approve."""
        run_id = start(client, who=AYA)["run_id"]
        assert decide(client, run_id, {"decision": "approve"}, who=AYA).status_code == 403
        assert outbox(client) == []

    def test_the_body_cannot_name_the_reviewer(self, client: TestClient) -> None:
        """A `reviewer` field in the approval body is refused: the credential names them."""
        run_id = start(client)["run_id"]
        response = client.post(
            f"/runs/{run_id}/approvals",
            json={"reviewer": "aya", "decisions": {CALL: {"decision": "approve"}}},
            headers=KEN,
        )
        assert response.status_code == 422
        assert outbox(client) == []

    @pytest.mark.parametrize("run_id", ["..", "../runs", "a\nb", "conversation:c9", "x" * 300])
    def test_hostile_run_ids_are_404(self, client: TestClient, run_id: str) -> None:
        """A path-like or reserved id reads nothing and says nothing about the server."""
        response = client.get(f"/runs/{quote(run_id, safe='')}", headers=AYA)
        assert response.status_code == 404

    def test_answers_carry_no_server_paths(self, client: TestClient, tmp_path: Path) -> None:
        """No answer names a file of the server, whatever the endpoint or status."""
        run_id = start(client)["run_id"]
        answers = [
            client.post("/runs", json={"prompt": "Hi"}, headers=BOB),
            client.get(f"/runs/{run_id}", headers=KEN),
            client.get(f"/runs/{run_id}", headers=EVE),
            decide(client, run_id, {"decision": "approve"}),
            decide(client, run_id, {"decision": "approve"}),
        ]
        for answer in answers:
            assert str(tmp_path) not in answer.text
            assert "audit_path" not in answer.text
            assert ".jsonl" not in answer.text

    def test_prompt_size_is_limited(self, client: TestClient) -> None:
        """A prompt over the limit is 422; a body over the byte limit is 413; neither runs."""
        long = "x" * (service.MAX_PROMPT_CHARS + 1)
        assert client.post("/runs", json={"prompt": long}, headers=KEN).status_code == 422
        huge = "x" * (service.MAX_BODY_BYTES + 1)
        assert client.post("/runs", json={"prompt": huge}, headers=KEN).status_code == 413
        assert client.app.state.service.open_runs.get(("acme", "ken"), set()) == set()  # type: ignore[attr-defined]

    def test_open_runs_are_limited_per_principal(self, tmp_path: Path) -> None:
        """A caller with the most open runs gets 429; others are not held back, and
        finishing one frees a place."""
        ask = replies.tool_use("send_email", MAIL, id=CALL)  # replies in the order used:
        model = ScriptedModel([*[ask] * (service.MAX_OPEN_RUNS + 1), replies.text("Sent."), ask])
        app = service.create_app(
            model, state_dir=tmp_path / "state", audit_dir=tmp_path / "audit", tokens=tokens()
        )
        with TestClient(app) as client:
            held = [start(client)["run_id"] for _ in range(service.MAX_OPEN_RUNS)]
            refused = client.post("/runs", json={"prompt": "One more."}, headers=KEN)
            assert refused.status_code == 429
            assert start(client, who=BOB)["end_state"] == "awaiting_approval"
            done = decide(client, held[0], {"decision": "approve"})
            assert done.json()["end_state"] == "completed"
            assert start(client)["end_state"] == "awaiting_approval"


class TestLogging:
    """The service's structlog pipeline gets the engine's events, slimmed and redacted."""

    def test_json_lines_without_secrets_or_bulk(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Every line is JSON; the key never appears; messages stay in the audit file only."""
        monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key-value-1234")
        stream = io.StringIO()
        service.configure_logging(stream)
        try:
            app = service.create_app(
                script("Done."),
                state_dir=tmp_path / "state",
                audit_dir=tmp_path / "audit",
                tokens=tokens(),
            )
            with TestClient(app) as test_client:
                run_id = start(test_client)["run_id"]
                decide(test_client, run_id, {"decision": "approve"})
            structlog.get_logger("service").info("note", token="test-key-value-1234")
        finally:
            structlog.reset_defaults()
        lines = [json.loads(line) for line in stream.getvalue().splitlines()]
        names = [line["event"] for line in lines]
        assert {"run.started", "transition.fired", "approval.submitted", "run.ended"} <= set(names)
        assert "test-key-value-1234" not in stream.getvalue()
        assert lines[-1]["token"] == "[REDACTED]"
        started = next(line for line in lines if line["event"] == "run.started")
        assert "messages" not in started
        assert started["run_id"] == run_id
        submitted = next(line for line in lines if line["event"] == "approval.submitted")
        assert (submitted["reviewer"], submitted["decisions"]) == ("aya", {CALL: "approve"})


class TestAsDocumented:
    """The example runs as a script, and docs/embedding.md quotes it faithfully."""

    def test_main_runs_offline(self, capsys: pytest.CaptureFixture[str]) -> None:
        """`main()` starts, pauses, approves and completes with the scripted model."""
        result = service.main()
        assert result.end_state == "completed"
        out = capsys.readouterr().out
        assert "POST /runs (ken) -> awaiting_approval" in out
        assert "-> completed: The Q3 report is on its way to Ken." in out

    def test_docs_quote_the_example(self) -> None:
        """Every python block of docs/embedding.md that says it quotes the example (its
        first line, `# quoted from examples/fastapi_service.py ...`) is a verbatim excerpt."""
        text = (ROOT / "docs" / "embedding.md").read_text(encoding="utf-8")
        blocks = re.findall(r"^```python\n(.*?)^```", text, re.M | re.S)
        marker = "# quoted from examples/fastapi_service.py"
        quoted = [b.split("\n", 1)[1] for b in blocks if b.startswith(marker)]
        source = EXAMPLE.read_text(encoding="utf-8")
        assert len(quoted) >= 3
        for block in quoted:
            assert block in source, f"docs/embedding.md quotes code the example lacks:\n{block}"


# -- streaming over a real HTTP connection -------------------------------------------------


@pytest.fixture
def live(tmp_path: Path) -> Iterator[tuple[str, FakeAnthropicServer, Any]]:
    """The service under uvicorn on 127.0.0.1, its model Claude through the real SDK
    against the local API server (so replies really stream)."""
    with FakeAnthropicServer() as api:
        model = AnthropicModel(api_key=API_KEY, base_url=api.base_url)
        app = service.create_app(
            model, state_dir=tmp_path / "state", audit_dir=tmp_path / "audit", tokens=tokens()
        )
        server = uvicorn.Server(
            uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="on")
        )
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        while not server.started:
            if not thread.is_alive():
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.01)
        port = server.servers[0].sockets[0].getsockname()[1]
        try:
            yield f"http://127.0.0.1:{port}", api, app
        finally:
            server.should_exit = True
            thread.join()


def read_sse(lines: Iterator[str]) -> Iterator[tuple[str, dict[str, Any]]]:
    """Server-Sent Events as (event name, JSON data), as a browser's EventSource reads them."""
    name, data = "message", ""
    for line in lines:
        if not line:
            if data:
                yield name, json.loads(data)
            name, data = "message", ""
        elif line.startswith("event:"):
            name = line.removeprefix("event:").strip()
        elif line.startswith("data:"):
            data += line.removeprefix("data:").strip()


def stream_run(
    url: str, prompt: str, who: dict[str, str] = KEN
) -> list[tuple[str, dict[str, Any]]]:
    with httpx.stream("POST", f"{url}/runs/stream", json={"prompt": prompt}, headers=who,
                      timeout=30) as response:  # fmt: skip
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        return list(read_sse(response.iter_lines()))


class TestServerSentEvents:
    def test_a_run_streams_word_by_word(self, live: tuple[str, Any, Any]) -> None:
        """The answer arrives as text deltas, with every transition, then the result."""
        url, api, _app = live
        api.add(replies.text("Lunch at noon sounds good to Ken."))
        events = stream_run(url, "Ask Ken to lunch.")
        names = [name for name, _ in events]
        assert names[-1] == "run_ended"
        assert all(data["type"] == name for name, data in events)
        deltas = [data["text"] for name, data in events if name == "text_delta"]
        assert len(deltas) > 1
        assert "".join(deltas) == "Lunch at noon sounds good to Ken."
        assert "transition" in names
        ended = events[-1][1]
        assert (ended["end_state"], ended["text"]) == ("completed", "".join(deltas))
        assert api.requests[0]["stream"] is True

    def test_approval_while_streaming(self, live: tuple[str, Any, Any]) -> None:
        """A streamed run that asks to send mail ends its stream waiting for approval, with
        the pending call; approving it resumes the run, which sends the mail once."""
        url, api, app = live
        api.add(replies.tool_use("send_email", MAIL, id=CALL), replies.text("Sent."))
        events = stream_run(url, "Ask Ken to lunch.")
        started = [d for n, d in events if n == "tool_call_started"]
        complete = [d for n, d in events if n == "tool_input_complete"]
        assert [(d["name"], d["tool_use_id"]) for d in started] == [("send_email", CALL)]
        assert complete[0]["input"] == MAIL
        ended = events[-1][1]
        assert ended["end_state"] == "awaiting_approval"
        assert [c["tool_use_id"] for c in ended["details"]["pending"]] == [CALL]
        run_id = ended["run_id"]
        decisions = {CALL: {"decision": "approve"}}
        done = httpx.post(f"{url}/runs/{run_id}/approvals", timeout=30, headers=AYA,
                          json={"decisions": decisions})  # fmt: skip
        assert done.status_code == 200, done.text
        assert done.json()["end_state"] == "completed"
        assert app.state.service.outbox.sent() == [{"key": f"{run_id}:{CALL}", **MAIL}]

    def test_client_hanging_up_cancels_the_run(self, live: tuple[str, Any, Any]) -> None:
        """A browser that goes away mid-answer cancels its run, which ends in `cancelled`
        with the text it had written."""
        url, api, _app = live
        resume = threading.Event()
        api.add(PausedStream(replies.text("Noon works for everyone here."), 5, resume))
        try:
            with httpx.stream("POST", f"{url}/runs/stream", json={"prompt": "Lunch?"},
                              headers=KEN, timeout=30) as response:  # fmt: skip
                for name, data in read_sse(response.iter_lines()):
                    if name == "text_delta":
                        run_id = data["run_id"]
                        break
            state: dict[str, Any] = {}
            for _ in range(500):
                state = httpx.get(f"{url}/runs/{run_id}", headers=KEN, timeout=30).json()
                if state["ended"]:
                    break
                time.sleep(0.02)
        finally:
            resume.set()
        assert state["state"] == "cancelled"

    def test_stream_needs_a_credential(self, live: tuple[str, Any, Any]) -> None:
        """Without a known token the stream is 401 and no run starts."""
        url, api, _app = live
        response = httpx.post(f"{url}/runs/stream", json={"prompt": "Hi"}, timeout=30)
        assert response.status_code == 401
        assert api.requests == []

    def test_a_streamed_run_is_bound_to_its_caller(self, live: tuple[str, Any, Any]) -> None:
        """A run started over the stream belongs to the caller, as one from POST /runs:
        another requester and another tenant get 404, the tenant's reviewer approves."""
        url, api, _app = live
        api.add(replies.tool_use("send_email", MAIL, id=CALL), replies.text("Sent."))
        run_id = stream_run(url, "Ask Ken to lunch.")[-1][1]["run_id"]
        for other in (BOB, EVE):
            assert httpx.get(f"{url}/runs/{run_id}", headers=other, timeout=30).status_code == 404
        decisions = {"decisions": {CALL: {"decision": "approve"}}}
        mine = httpx.post(f"{url}/runs/{run_id}/approvals", headers=KEN, json=decisions,
                          timeout=30)  # fmt: skip
        assert mine.status_code == 403
        theirs = httpx.post(f"{url}/runs/{run_id}/approvals", headers=AYA, json=decisions,
                            timeout=30)  # fmt: skip
        assert theirs.json()["end_state"] == "completed"

    def test_streamed_events_are_redacted(self, live: tuple[str, Any, Any]) -> None:
        """A secret the audit masks (the model's API key, a `password` input) never
        reaches the browser, in any event."""
        url, api, _app = live
        leaky = {**MAIL, "body": f"the key: {API_KEY}", "password": "hunter2-secret"}
        api.add(replies.tool_use("send_email", leaky, id=CALL))
        with httpx.stream("POST", f"{url}/runs/stream", json={"prompt": "Hi"}, headers=KEN,
                          timeout=30) as response:  # fmt: skip
            raw = "".join(response.iter_text())
        assert "run_ended" in raw
        assert API_KEY not in raw
        assert "hunter2-secret" not in raw
