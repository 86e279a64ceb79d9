"""The FastAPI service of `examples/fastapi_service.py`, driven end to end over HTTP.

FastAPI's TestClient sends real requests through the app: a run starts, pauses for
approval, is approved or denied by a second request, and ends; its checkpoints and
audit file are read back as a service operator would read them.
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
    )
    with TestClient(app) as test_client:
        yield test_client


def start(client: TestClient) -> dict[str, Any]:
    response = client.post("/runs", json={"prompt": "Ask Ken to lunch."})
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def decide(client: TestClient, run_id: str, decision: dict[str, Any]) -> Any:
    return client.post(
        f"/runs/{run_id}/approvals", json={"reviewer": "aya", "decisions": {CALL: decision}}
    )


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
        state = client.get(f"/runs/{run_id}").json()
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
        state = client.get(f"/runs/{run_id}").json()
        assert (state["state"], state["pending"], state["iterations"]) == ("completed", [], 2)

    def test_audit_file_holds_the_approval_trail(self, client: TestClient) -> None:
        """The run's audit file has the deferral, the resume and the approved call."""
        run_id = start(client)["run_id"]
        audit_path = decide(client, run_id, {"decision": "approve"}).json()["audit_path"]
        events = read_events(Path(audit_path))
        decided = [(e["decision"], e["source"]) for e in events if e["event"] == "approval.decided"]
        assert decided == [("defer", "default"), ("approve", "resume")]
        names = [e["event"] for e in events]
        assert names.count("run.started") == names.count("run.resumed") == 1
        assert names[-1] == "run.ended"
        finished = next(e for e in events if e["event"] == "tool.finished")
        assert finished["tool_use_id"] == CALL

    def test_user_is_stamped_on_every_event(self, client: TestClient) -> None:
        """The requesting user, passed as the run's metadata, is on every audit event,
        the resumed part included."""
        started = client.post("/runs", json={"prompt": "Ask Ken to lunch.", "user": "aya"})
        run_id = started.json()["run_id"]
        audit_path = decide(client, run_id, {"decision": "approve"}).json()["audit_path"]
        events = read_events(Path(audit_path))
        assert {json.dumps(e.get("metadata")) for e in events} == {json.dumps({"user": "aya"})}

    def test_edit_sends_the_reviewers_version(self, client: TestClient) -> None:
        """An edit decision runs the call with the reviewer's input."""
        run_id = start(client)["run_id"]
        edited = {**MAIL, "body": "Noon at the usual place?"}
        done = decide(client, run_id, {"decision": "edit", "input": edited})
        assert done.json()["end_state"] == "completed"
        assert [mail["body"] for mail in outbox(client)] == ["Noon at the usual place?"]


class TestDeny:
    """A denial reaches the model as an error result; nothing is sent."""

    def test_deny_completes_without_sending(self, client: TestClient) -> None:
        """The run completes, the outbox stays empty, the audit file names the denial."""
        run_id = start(client)["run_id"]
        done = decide(client, run_id, {"decision": "deny", "message": "Not today."})
        assert done.json()["end_state"] == "completed"
        assert outbox(client) == []
        events = read_events(Path(done.json()["audit_path"]))
        failed = next(e for e in events if e["event"] == "tool.failed")
        assert (failed["error_kind"], failed["content"]) == ("denied", "Not today.")


class TestErrors:
    """Requests that cannot be served are refused with the status that says why."""

    def test_unknown_run_is_404(self, client: TestClient) -> None:
        """GET and approvals of a run id nobody started answer 404."""
        assert client.get("/runs/run_nope").status_code == 404
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
            json={"reviewer": "aya", "decisions": {"toolu_other": {"decision": "approve"}}},
        )
        assert response.status_code == 422
        assert client.get(f"/runs/{run_id}").json()["state"] == "awaiting_approval"

    def test_malformed_decision_is_422(self, client: TestClient) -> None:
        """A decision kind the service does not know fails validation."""
        run_id = start(client)["run_id"]
        assert decide(client, run_id, {"decision": "maybe"}).status_code == 422


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
                script("Done."), state_dir=tmp_path / "state", audit_dir=tmp_path / "audit"
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
        assert "POST /runs -> awaiting_approval" in out
        assert "-> completed: The Q3 report is on its way to Ken." in out

    def test_docs_quote_the_example(self) -> None:
        """Every python block of docs/embedding.md is a verbatim excerpt of the example."""
        text = (ROOT / "docs" / "embedding.md").read_text(encoding="utf-8")
        blocks = re.findall(r"^```python\n(.*?)^```", text, re.M | re.S)
        source = EXAMPLE.read_text(encoding="utf-8")
        assert len(blocks) >= 3
        for block in blocks:
            assert block in source, f"docs/embedding.md quotes code the example lacks:\n{block}"


# -- streaming over a real HTTP connection -------------------------------------------------


@pytest.fixture
def live(tmp_path: Path) -> Iterator[tuple[str, FakeAnthropicServer, Any]]:
    """The service under uvicorn on 127.0.0.1, its model Claude through the real SDK
    against the local API server (so replies really stream)."""
    with FakeAnthropicServer() as api:
        model = AnthropicModel(api_key=API_KEY, base_url=api.base_url)
        app = service.create_app(model, state_dir=tmp_path / "state", audit_dir=tmp_path / "audit")
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


def stream_run(url: str, prompt: str) -> list[tuple[str, dict[str, Any]]]:
    with httpx.stream("POST", f"{url}/runs/stream", json={"prompt": prompt, "user": "aya"},
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
        done = httpx.post(f"{url}/runs/{run_id}/approvals", timeout=30,
                          json={"reviewer": "aya", "decisions": decisions})  # fmt: skip
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
                              timeout=30) as response:  # fmt: skip
                for name, data in read_sse(response.iter_lines()):
                    if name == "text_delta":
                        run_id = data["run_id"]
                        break
            state: dict[str, Any] = {}
            for _ in range(500):
                state = httpx.get(f"{url}/runs/{run_id}", timeout=30).json()
                if state["ended"]:
                    break
                time.sleep(0.02)
        finally:
            resume.set()
        assert state["state"] == "cancelled"
