"""The audit layer: redaction, the emitter, sinks, and the library's hands-off logging."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
import structlog
from structlog.testing import capture_logs

from statemachine_agent import Agent, Audit, MemoryCheckpointer, ScriptedModel, calculate, tool
from statemachine_agent.audit.events import Emitter
from statemachine_agent.audit.redact import REDACTED, Redactor
from statemachine_agent.audit.sink import JsonlSink, MemorySink, read_events
from statemachine_agent.testing import replies


class TestRedactor:
    def test_secret_keys_are_masked_at_any_depth(self) -> None:
        """Keys such as api_key and Authorization are masked wherever they appear."""
        event = {
            "headers": {"Authorization": "Bearer x", "x-api-key": "k"},
            "items": [{"password": "p"}],
        }
        assert Redactor().redact(event) == {
            "headers": {"Authorization": REDACTED, "x-api-key": REDACTED},
            "items": [{"password": REDACTED}],
        }

    def test_configured_fields_are_masked(self) -> None:
        """Fields named by the agent's configuration are masked too."""
        assert Redactor(keys=["customer_ssn"]).redact({"customer_ssn": "123"}) == {
            "customer_ssn": REDACTED
        }

    def test_known_secret_values_are_masked_inside_text(self) -> None:
        """A secret value quoted inside a string is cut out of it."""
        redactor = Redactor(secrets=["hunter2-very-secret"])
        assert redactor.redact("the key is hunter2-very-secret!") == f"the key is {REDACTED}!"

    def test_key_shapes_are_masked_without_being_told(self) -> None:
        """Anything shaped like an Anthropic or OpenAI key is masked."""
        text = "keys: sk-ant-api03-abcdefgh and sk-ABCDEFGHIJKLMNOPQRSTUV"
        assert Redactor().redact(text) == f"keys: {REDACTED} and {REDACTED}"

    def test_plain_text_and_numbers_pass(self) -> None:
        """Ordinary values, including token counts, are left alone."""
        event = {"input_tokens": 10, "text": "a task about skis", "ok": True}
        assert Redactor().redact(event) == event

    def test_is_a_structlog_processor(self) -> None:
        """It plugs into a service's own structlog pipeline."""
        assert Redactor()(None, "info", {"api_key": "x"}) == {"api_key": REDACTED}


class TestEmitter:
    def test_events_reach_structlog_when_the_application_configured_it(self) -> None:
        """With structlog configured by the app, every transition is a structlog event."""
        with capture_logs() as logs:
            Agent(ScriptedModel([replies.text("hi")])).run("q")
        names = [log["event"] for log in logs]
        assert names[0] == "run.started"
        assert names[-1] == "run.ended"
        assert "transition.fired" in names
        fired = next(log for log in logs if log["event"] == "transition.fired")
        assert fired["source"] == "perceive"

    def test_redaction_applies_before_sinks_and_loggers(self) -> None:
        """Neither a sink nor the logger ever sees a secret."""
        sink = MemorySink()
        with capture_logs() as logs:
            Emitter("r", sinks=[sink], redactor=Redactor(secrets=["s3cr3t-value"])).emit(
                "tool.finished", content="got s3cr3t-value", api_key="k"
            )
        assert sink.events[0]["content"] == f"got {REDACTED}"
        assert sink.events[0]["api_key"] == REDACTED
        assert logs[0]["content"] == f"got {REDACTED}"

    def test_library_configures_no_logging(self) -> None:
        """Running an agent leaves structlog and the root logger as the application set them."""
        structlog.reset_defaults()
        handlers = list(logging.getLogger().handlers)
        Agent(ScriptedModel([replies.text("hi")])).run("q")
        assert not structlog.is_configured()
        assert logging.getLogger().handlers == handlers

    def test_a_sink_alone_does_not_feed_a_silent_logger(self) -> None:
        """With an audit sink but no logger that keeps events, the logger is not called
        (passing every event through structlog to a dropped record cost ~8% of a run);
        once the stdlib logger is enabled for INFO, every event of the next run's emitter
        reaches it (decided once per run, not per event)."""
        structlog.reset_defaults()
        stdlib = logging.getLogger("statemachine_agent")
        level = stdlib.level
        calls: list[str] = []

        class Counting:
            def info(self, event: str, **fields: object) -> None:
                calls.append(event)

        sink = MemorySink()
        emitter = Emitter("r", sinks=[sink])
        emitter.logger = Counting()
        try:
            stdlib.setLevel(logging.WARNING)
            emitter.emit("tool.finished", n=1)
            assert (len(sink.events), calls) == (1, [])
            stdlib.setLevel(logging.INFO)
            emitter.emit("tool.finished", n=2)
            assert (len(sink.events), calls) == (2, [])
            emitter = Emitter("r2", sinks=[sink])
            emitter.logger = Counting()
            emitter.emit("tool.finished", n=3)
            assert (len(sink.events), calls) == (3, ["tool.finished"])
        finally:
            stdlib.setLevel(level)


class TestSinks:
    def test_jsonl_file_per_run(self, tmp_path: Path) -> None:
        """audit_dir gets one JSONL file per run, named by run id, one event a line."""
        result = Agent(
            ScriptedModel(
                [replies.tool_use("calculate", {"expression": "1+1"}), replies.text("2")]
            ),
            tools=[calculate],
            audit=tmp_path,
        ).run("q")
        assert result.audit_path == tmp_path / f"{result.run_id}.jsonl"
        events = read_events(result.audit_path)
        fired = [e for e in events if e["event"] == "transition.fired"]
        assert [(e["source"], e["dest"]) for e in fired] == [
            (t.source, t.dest) for t in result.trail
        ]
        assert all(e["run_id"] == result.run_id for e in events)

    def test_read_events_takes_any_path_form(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """`read_events` takes a `str` (relative or absolute) like every other path
        parameter, not only a `Path`, and reads the same events."""
        result = Agent(ScriptedModel([replies.text("hi")]), audit=tmp_path).run("q")
        assert result.audit_path is not None
        monkeypatch.chdir(tmp_path)
        expected = read_events(result.audit_path)
        assert read_events(str(result.audit_path)) == expected
        assert read_events(result.audit_path.name) == expected

    def test_lines_are_written_in_batches(self, tmp_path: Path) -> None:
        """Lines wait in memory until a flush, a full batch or close; none is lost."""
        path = tmp_path / "a.jsonl"
        sink = JsonlSink(path, batch=3)
        sink.write({"event": "x.y", "n": 1})
        sink.write({"event": "x.y", "n": 2})
        assert path.read_text() == ""
        sink.write({"event": "x.y", "n": 3})
        assert [e["n"] for e in read_events(path)] == [1, 2, 3]
        sink.write({"event": "x.y", "n": 4})
        sink.flush()
        assert [e["n"] for e in read_events(path)] == [1, 2, 3, 4]
        sink.write({"event": "x.y", "n": 5})
        sink.close()
        assert [e["n"] for e in read_events(path)] == [1, 2, 3, 4, 5]
        with pytest.raises(ValueError, match="closed"):
            sink.write({"event": "x.y"})

    def test_batch_of_one_writes_every_line_at_once(self, tmp_path: Path) -> None:
        """`batch=1` is the line-at-a-time sink (what the scale-out engines' gate uses)."""
        sink = JsonlSink(tmp_path / "a.jsonl", batch=1)
        sink.write({"event": "x.y", "n": 1})
        assert json.loads((tmp_path / "a.jsonl").read_text()) == {
            "event": "x.y",
            "n": 1,
            "prev": None,
        }
        sink.close()

    def test_a_batch_must_hold_a_line(self, tmp_path: Path) -> None:
        with pytest.raises(ValueError, match="at least 1"):
            JsonlSink(tmp_path / "a.jsonl", batch=0)

    def test_the_file_is_on_disk_before_every_checkpoint_and_every_tool(
        self, tmp_path: Path
    ) -> None:
        """At each checkpoint and when each tool starts, the audit file already holds every
        event emitted so far, so a crash never leaves the store ahead of the trail."""
        seen = MemorySink()
        lags: list[str] = []

        def on_disk() -> int:
            files = list((tmp_path / "audit").glob("*.jsonl"))
            return len(read_events(files[0])) if files else 0

        class Watching(MemoryCheckpointer):
            def append(self, run_id: str, delta: Any) -> None:
                if on_disk() != len(seen.events):
                    lags.append(f"checkpoint after {seen.events[-1]['event']}")
                super().append(run_id, delta)

        @tool
        def probe(n: int) -> str:
            """Report how far the audit file is."""
            if on_disk() != len(seen.events):
                lags.append(f"tool {n}")
            return "ok"

        script = [replies.tool_use("probe", {"n": n}, id=f"toolu_{n}") for n in range(6)]
        agent = Agent(
            ScriptedModel([*script, replies.text("done")]),
            tools=[probe],
            checkpointer=Watching(),
            audit=Audit(dir=tmp_path / "audit", sinks=[seen]),
        )
        result = agent.run("go")
        assert result.end_state == "completed"
        assert lags == []
        assert result.audit_path is not None
        assert read_events(result.audit_path) == seen.events

    def test_malformed_lines_are_named(self, tmp_path: Path) -> None:
        """read_events names the line of a malformed event."""
        path = tmp_path / "bad.jsonl"
        path.write_text('{"event": "a.b"}\n[1, 2]\n')
        with pytest.raises(ValueError, match=r"bad.jsonl:2: not an audit event"):
            read_events(path)
