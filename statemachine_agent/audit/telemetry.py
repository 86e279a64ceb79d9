"""OpenTelemetry traces of runs, following the GenAI semantic conventions.

Like the stream, tracing observes: `TraceSink` is an audit sink that turns the
run's events (already redacted) into spans, so the machine needs no hooks of its
own and a trace shows exactly what the audit trail says. A run is a span
`invoke_agent <agent name>`; each model call a child `chat <model>`, each tool
call a child `execute_tool <tool name>`; every transition an event of the run's
span, with its guards' verdicts. Taint shows too: a run into which untrusted text
entered has `statemachine_agent.tainted` (and the source's tool and call id) on its
span, and each call its `TaintPolicy` gated is an event of the run span and has
`statemachine_agent.taint.gated` (`approve` or `deny`) on its tool span.

Only `opentelemetry-api` is needed (the `otel` extra): the application brings the
SDK and its exporter. Without a configured tracer provider nothing is built.
Message content is recorded only when the application opts in, with the
convention's `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true`.

A run driven by a DBOS or Temporal worker continues the trace of whoever started
it: `trace_carrier` takes the caller's W3C trace context (`traceparent`,
`tracestate`) into a dict that travels with the workflow's input, and the worker
runs the agent inside `continued(carrier)`, so its run span is a child of the
caller's span, in whatever process that was. Workers trace through `RunTraces`,
which the engines' replay gate holds back while a workflow replays, like every
other sink.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
from collections.abc import Iterator, Mapping
from typing import Any

from statemachine_agent.machine.ends import SUCCESS_STATES

try:  # the `otel` extra
    from opentelemetry import context as otel_context
    from opentelemetry import propagate, trace
    from opentelemetry.context import Context
    from opentelemetry.trace import Span, SpanKind, Status, StatusCode
except ImportError:  # pragma: no cover - exercised only without the extra
    trace = None  # type: ignore[assignment]

CAPTURE_CONTENT = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
"""The GenAI conventions' opt-in for recording message content on spans."""

TRACER_NAME = "statemachine_agent"


def tracer_provider(given: Any = None) -> Any:
    """The provider runs are traced to: `given`, else the application's global one; None
    when the API is not installed, no provider is configured or `given` is False (nothing
    is traced)."""
    if trace is None or given is False:
        return None
    provider = given if given is not None else trace.get_tracer_provider()
    if isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider):
        return None
    return provider


def trace_carrier() -> dict[str, str] | None:
    """The caller's trace context as a W3C carrier (`traceparent`, `tracestate`, baggage),
    to store with a run started elsewhere; None when nothing is traced here."""
    if trace is None:
        return None
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return carrier or None


@contextlib.contextmanager
def continued(carrier: Mapping[str, str] | None) -> Iterator[None]:
    """Inside the block the trace of `carrier` (from `trace_carrier`) is the current one:
    a run driven there is a child of the span that started it."""
    if trace is None or not carrier:
        yield
        return
    token = otel_context.attach(propagate.extract(dict(carrier)))
    try:
        yield
    finally:
        otel_context.detach(token)


def capture_content() -> bool:
    return os.environ.get(CAPTURE_CONTENT, "").strip().lower() == "true"


def provider_name(model: object) -> str:
    """The `gen_ai.provider.name` of a model adapter (the conventions' well-known names)."""
    known = {"AnthropicModel": "anthropic", "OpenAIModel": "openai"}
    kind = type(model).__name__
    return known.get(kind, kind.lower())


class TraceSink:
    """The spans of one run, built from its audit events (see the module's docstring)."""

    def __init__(
        self,
        tracers: Any,
        agent_name: str,
        provider: str,
        *,
        content: bool | None = None,
        parent: Span | None = None,
    ) -> None:
        """`tracers`: the `TracerProvider` (see `tracer_provider`); `parent`: the span
        the run's span is a child of (a sub-agent's: its parent's tool call); without one,
        the span current now (the caller's, or the trace `continued` made current)."""
        self._tracers = tracers
        self._parent = parent
        self._context = otel_context.get_current()
        self._tracer = tracers.get_tracer(TRACER_NAME)
        self._agent = agent_name
        self._provider = provider
        self._content = capture_content() if content is None else content
        self._run: Span | None = None
        self._calls: dict[int, Span] = {}
        self._tools: dict[str, Span] = {}
        self._metadata: dict[str, Any] = {}

    def for_child(self, agent_name: str, provider: str, tool_use_id: str) -> TraceSink:
        """The trace sink of a sub-agent's run started by the tool call `tool_use_id` of
        this one: its run span is a child of that call's span."""
        parent = self._tools.get(tool_use_id) or self._run
        return TraceSink(self._tracers, agent_name, provider, content=self._content,
                         parent=parent)  # fmt: skip

    # -- the audit-sink protocol ------------------------------------------------------

    def write(self, record: Mapping[str, Any]) -> None:
        handler = _HANDLERS.get(str(record.get("event")))
        if handler is not None:
            handler(self, record)

    def close(self) -> None:
        """End whatever is still open (a run whose process is going away)."""
        self.close_children()
        if self._run is not None:
            self._run.end()
            self._run = None

    def close_children(self) -> None:
        for span in [*self._tools.values(), *self._calls.values()]:
            span.end()
        self._tools.clear()
        self._calls.clear()

    # -- events to spans ----------------------------------------------------------------

    def _child(self, name: str, attributes: dict[str, Any]) -> Span:
        parent = (
            trace.set_span_in_context(self._run, self._context)
            if self._run is not None
            else self._parent_context()
        )
        merged = {**attributes, **self._metadata}
        span: Span = self._tracer.start_span(name, context=parent, kind=SpanKind.CLIENT,
                                             attributes=merged)  # fmt: skip
        return span

    def _started(self, record: Mapping[str, Any]) -> None:
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": self._agent,
            "gen_ai.provider.name": self._provider,
            "gen_ai.request.model": str(record.get("model") or ""),
            "gen_ai.conversation.id": str(record["run_id"]),
            "statemachine_agent.resumed": record.get("event") == "run.resumed",
        }
        for link in ("parent_run_id", "parent_tool_use_id"):  # a sub-agent's run
            if record.get(link):
                attributes[f"statemachine_agent.{link}"] = str(record[link])
        if record.get("event") not in ("run.started", "run.resumed"):
            attributes["statemachine_agent.recovered"] = True
        self._metadata = _metadata_attributes(record)
        attributes.update(self._metadata)
        name = f"invoke_agent {self._agent}"
        self._run = self._tracer.start_span(name, context=self._parent_context(),
                                            kind=SpanKind.INTERNAL,
                                            attributes=attributes)  # fmt: skip

    def _parent_context(self) -> Context:
        """Where the run's span hangs: the parent span given, else the context of creation."""
        if self._parent is None:
            return self._context
        return trace.set_span_in_context(self._parent, self._context)

    def recovered(self, record: Mapping[str, Any]) -> None:
        """Open the run's span at `record`, a later event than its start: this process
        took the run over (a worker recovering it after a crash; its start, and the span
        opened then, were in the process that died)."""
        self._started(record)

    def _requested(self, record: Mapping[str, Any]) -> None:
        model = str(record.get("model") or "")
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": self._provider,
            "gen_ai.request.model": model,
            "gen_ai.request.max_tokens": int(record.get("max_tokens") or 0),
            "gen_ai.conversation.id": str(record["run_id"]),
        }
        if record.get("purpose"):
            attributes["statemachine_agent.purpose"] = str(record["purpose"])
        self._end_call(int(record.get("iteration") or 0))  # a fallback replaces the call
        self._calls[int(record.get("iteration") or 0)] = self._child(f"chat {model}", attributes)

    def _replied(self, record: Mapping[str, Any]) -> None:
        span = self._calls.pop(int(record.get("iteration") or 0), None)
        if span is None:
            return
        usage = record.get("usage") or {}
        span.set_attributes({
            "gen_ai.response.model": str(record.get("model") or ""),
            "gen_ai.response.id": str(record.get("message_id") or ""),
            "gen_ai.response.finish_reasons": [str(record.get("stop_reason") or "")],
            "gen_ai.usage.input_tokens": int(usage.get("input_tokens") or 0),
            "gen_ai.usage.output_tokens": int(usage.get("output_tokens") or 0),
            "gen_ai.usage.cache_read.input_tokens": int(usage.get("cache_read_tokens") or 0),
            "gen_ai.usage.cache_creation.input_tokens": int(usage.get("cache_write_5m_tokens")
                                                            or 0)
            + int(usage.get("cache_write_1h_tokens") or 0),
            "statemachine_agent.cost_usd": float(record.get("cost_usd") or 0.0),
        })  # fmt: skip
        if self._content:
            output = [{"role": "assistant", "parts": list(record.get("content") or [])}]
            span.set_attribute("gen_ai.output.messages", json.dumps(output))
        span.end()

    def _failed(self, record: Mapping[str, Any]) -> None:
        span = self._calls.pop(int(record.get("iteration") or 0), None)
        if span is None:
            return
        error = str(record.get("error") or "model call failed")
        span.set_attribute("error.type", error.split(" ", 1)[0] or "ModelError")
        span.set_status(Status(StatusCode.ERROR, error))
        span.end()

    def _end_call(self, iteration: int) -> None:
        span = self._calls.pop(iteration, None)
        if span is not None:
            span.end()

    def _tool_called(self, record: Mapping[str, Any]) -> None:
        name = str(record.get("tool") or "")
        call_id = str(record.get("tool_use_id") or "")
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": name,
            "gen_ai.tool.call.id": call_id,
            "gen_ai.conversation.id": str(record["run_id"]),
        }
        if self._content:
            attributes["gen_ai.tool.call.arguments"] = json.dumps(record.get("input"))
        span = self._child(f"execute_tool {name}", attributes)
        self._tools[call_id] = span

    def _tool_done(self, record: Mapping[str, Any]) -> None:
        span = self._tools.pop(str(record.get("tool_use_id") or ""), None)
        if span is None:
            return
        if self._content:
            span.set_attribute("gen_ai.tool.call.result", str(record.get("content", "")))
        if record.get("event") == "tool.failed":
            kind = str(record.get("error_kind") or "tool_error")
            span.set_attribute("error.type", kind)
            span.set_status(Status(StatusCode.ERROR, str(record.get("content", ""))[:500]))
        span.end()

    def _transition(self, record: Mapping[str, Any]) -> None:
        if self._run is None:
            return
        attributes: dict[str, Any] = {
            "statemachine_agent.seq": int(record.get("seq") or 0),
            "statemachine_agent.source": str(record.get("source")),
            "statemachine_agent.trigger": str(record.get("trigger")),
            "statemachine_agent.dest": str(record.get("dest")),
            "statemachine_agent.guards": json.dumps(record.get("guards") or {}),
        }
        self._run.add_event("transition", attributes)

    def _tainted(self, record: Mapping[str, Any]) -> None:
        """Untrusted text entered the run: the run span says so from now on (a backend
        can select tainted runs by attribute), and an event marks when and from where."""
        if self._run is None:
            return
        source = {
            "statemachine_agent.taint.tool": str(record.get("tool") or ""),
            "statemachine_agent.taint.tool_use_id": str(record.get("tool_use_id") or ""),
        }
        self._run.set_attributes({"statemachine_agent.tainted": True, **source})
        self._run.add_event("taint.entered", source)

    def _taint_gated(self, record: Mapping[str, Any]) -> None:
        """A side-effect call was gated: on its tool span (open since its `tool.called`)
        and as an event of the run span. A gate implies taint, so a resumed run's span,
        opened after its `taint.entered`, is marked tainted here too."""
        call_id = str(record.get("tool_use_id") or "")
        action = str(record.get("action") or "")
        call = self._tools.get(call_id)
        if call is not None:
            call.set_attribute("statemachine_agent.taint.gated", action)
        if self._run is None:
            return
        self._run.set_attribute("statemachine_agent.tainted", True)
        self._run.add_event("taint.gated", {
            "gen_ai.tool.name": str(record.get("tool") or ""),
            "gen_ai.tool.call.id": call_id,
            "statemachine_agent.taint.action": action,
        })  # fmt: skip

    def _ended(self, record: Mapping[str, Any]) -> None:
        if self._run is None:
            return
        span, self._run = self._run, None
        state = str(record.get("end_state"))
        usage = record.get("usage_total") or {}
        span.set_attributes({
            "statemachine_agent.end_state": state,
            "statemachine_agent.reason": str(record.get("reason") or ""),
            "statemachine_agent.cost_usd": float(record.get("cost_usd") or 0.0),
            "statemachine_agent.iterations": int(record.get("iterations") or 0),
            "gen_ai.usage.input_tokens": int(usage.get("input_tokens") or 0),
            "gen_ai.usage.output_tokens": int(usage.get("output_tokens") or 0),
        })  # fmt: skip
        if state in SUCCESS_STATES:
            span.set_status(Status(StatusCode.OK))
        elif state != "awaiting_approval":  # a pause is not an error; its state says it
            span.set_attribute("error.type", state)
            span.set_status(Status(StatusCode.ERROR, f"{state}: {record.get('reason')}"))
        for open_span in self._tools.values():  # deferred or never answered: not run here
            open_span.set_attribute("statemachine_agent.tool.finished", False)
        self.close_children()
        span.end()


class RunTraces:
    """The spans of every run of one agent in a DBOS or Temporal worker.

    One sink for all the agent's runs, as a worker's agent has: a `TraceSink` per run,
    built at the run's first event here, in the trace `continued` made current. A run
    whose first event here is not its start gets a run span marked
    `statemachine_agent.recovered` (see `TraceSink.recovered`).
    """

    def __init__(self, given: Any, agent_name: str, provider: str) -> None:
        """`given`: `Audit.tracer_provider` (None: the global provider, read per run)."""
        self._given = given
        self._agent = agent_name
        self._provider = provider
        self._runs: dict[str, TraceSink] = {}
        self._lock = threading.Lock()

    def write(self, record: Mapping[str, Any]) -> None:
        run_id = str(record.get("run_id") or "")
        event = record.get("event")
        with self._lock:
            sink = self._runs.get(run_id)
            if sink is None:
                tracers = tracer_provider(self._given)
                if tracers is None or not run_id:
                    return
                sink = self._runs[run_id] = TraceSink(tracers, self._agent, self._provider)
                if event not in ("run.started", "run.resumed"):
                    sink.recovered(record)
            if event == "run.ended":
                del self._runs[run_id]
        sink.write(record)

    def close(self) -> None:
        """Nothing to do: each run's spans end with the run (the sink outlives runs)."""


def _metadata_attributes(record: Mapping[str, Any]) -> dict[str, Any]:
    """The run's metadata, one attribute per key (`statemachine_agent.metadata.<key>`)."""
    metadata = record.get("metadata") or {}
    return {
        f"statemachine_agent.metadata.{key}": value
        if isinstance(value, str | bool | int | float)
        else json.dumps(value)
        for key, value in metadata.items()
    }


_HANDLERS = {
    "run.started": TraceSink._started,
    "run.resumed": TraceSink._started,
    "model.requested": TraceSink._requested,
    "model.replied": TraceSink._replied,
    "model.failed": TraceSink._failed,
    "tool.called": TraceSink._tool_called,
    "tool.finished": TraceSink._tool_done,
    "tool.failed": TraceSink._tool_done,
    "transition.fired": TraceSink._transition,
    "taint.entered": TraceSink._tainted,
    "taint.gated": TraceSink._taint_gated,
    "run.ended": TraceSink._ended,
}
