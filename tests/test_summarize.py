"""The second context layer: older exchanges replaced by a summary, in `summarize`.

Runs cross `ContextPolicy.summarize_at_tokens`, pass through `summarize`, and go
on with a smaller prompt holding the summary and the last exchanges verbatim;
every request is checked by the strict validator (the scripted model's, or the
local server's through the real SDK). The summary call's failures, a summary
that would not help, the budget, cancellation and a crash each have their path.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from statemachine_agent import (
    Agent,
    AnthropicModel,
    Audit,
    Budget,
    CancelToken,
    ContextPolicy,
    MemoryCheckpointer,
    MemorySink,
    ModelError,
    ScriptedModel,
    tool,
)
from statemachine_agent.audit.sink import read_events
from statemachine_agent.context.summary import SUMMARY_SYSTEM, summarized, summary_cut
from statemachine_agent.models.base import JSON, ModelReply, ModelRequest
from statemachine_agent.replay import replay
from statemachine_agent.report.build import build
from statemachine_agent.testing import FakeAnthropicServer, replies
from statemachine_agent.testing.assertions import assert_end_state, assert_fired
from statemachine_agent.testing.validator import validate_request


@tool
def page(n: int) -> str:
    """Returns a page of a long document.

    Args:
        n: The page number.
    """
    return f"page {n} says fact-{n}=" + str(1000 + n) + " " + "y" * 800


POLICY = ContextPolicy(summarize_at_tokens=600, keep_last=2, compact_at_tokens=None)
"""Three pages pass the threshold; two exchanges are kept."""


def pages(count: int) -> list[JSON]:
    return [replies.tool_use("page", {"n": n}, id=f"toolu_page{n}") for n in range(count)]


def summary_of(request: ModelRequest) -> JSON:
    """A summary naming every fact of the transcript it was given, as a summarizer should."""
    prompt = str(request.messages[0]["content"])
    facts = sorted(set(re.findall(r"fact-\d+=\d+", prompt)))
    return replies.text(f"Asked: read the pages. Found: {', '.join(facts)}. Left: the rest.")


def summarizer(count: int = 10) -> ScriptedModel:
    return ScriptedModel([summary_of] * count, name="claude-haiku-4-5")


def events_named(sink: MemorySink, name: str) -> list[dict[str, Any]]:
    return [e for e in sink.events if e["event"] == name]


def agent(
    model: ScriptedModel, summary: ScriptedModel | None, sink: MemorySink, **options: Any
) -> Agent:
    options.setdefault("context", POLICY)
    return Agent(model, tools=[page], stall=None, summary_model=summary,
                 audit=Audit(sinks=[sink]), **options)  # fmt: skip


def loop_tokens(request: ModelRequest) -> int:
    return sum(len(str(m)) for m in request.messages)


class TestLongScriptedRun:
    def test_crosses_the_threshold_summarizes_and_completes(self) -> None:
        """A long run passes through summarize, goes on with the summary and the last
        exchanges verbatim, every request valid, and ends completed."""
        model = ScriptedModel([*pages(8), replies.text("done")])
        summary = summarizer()
        sink = MemorySink()
        result = agent(model, summary, sink).run("read the pages")
        assert_end_state(result, "completed")
        assert_fired(result, "perceive", "prepared", "summarize", via=["summary_due"])
        assert_fired(result, "summarize", "summarized", "perceive")
        done = events_named(sink, "context.summarized")
        assert len(done) >= 2
        assert all(e["tokens_after"] < e["tokens_before"] for e in done)
        for request in [*model.requests, *summary.requests]:
            assert validate_request(request.to_api()) == []
        # the loop call right after the first summary: the summary, then two exchanges
        first = done[0]
        after = model.requests[first["iteration"]]
        head = after.messages[0]["content"][0]["text"]
        assert head.startswith(f"[Summary of the {first['messages_replaced']} earlier messages")
        assert "fact-0=1000" in head
        assert len(after.messages) == 1 + 2 * POLICY.keep_last
        # smaller than the prompt it stands for: the previous one plus the newest exchange
        before = model.requests[first["iteration"] - 1]
        assert before.messages[-2:] != after.messages[-2:]
        unsummarized = [*before.messages, *after.messages[-2:]]
        assert loop_tokens(after) < sum(len(str(m)) for m in unsummarized)
        # the kept exchanges are verbatim: the same blocks the model and the tool produced
        kept = [m for m in after.messages[1:] if m["role"] == "assistant"]
        assert [m["content"][0]["id"] for m in kept] == [
            f"toolu_page{n}" for n in range(first["iteration"] - 2, first["iteration"])
        ]
        # later summaries fold the earlier one in: its facts survive
        last = model.requests[-1].messages[0]["content"][0]["text"]
        assert "fact-0=1000" in last
        assert "fact-5=1005" in last

    def test_the_summary_call_is_charged_but_is_not_an_iteration(self) -> None:
        """Usage and cost include every summary call; iterations count loop calls only."""
        model = ScriptedModel([*pages(5), replies.text("done")])
        summary = summarizer()
        result = agent(model, summary, MemorySink()).run("q")
        assert_end_state(result, "completed")
        assert summary.requests
        assert result.iterations == len(model.requests)
        calls = len(model.requests) + len(summary.requests)
        assert result.usage.input_tokens == calls * replies.DEFAULT_USAGE["input_tokens"]

    def test_without_a_summary_model_the_agents_model_summarizes(self) -> None:
        """The summary is asked of the agent's own model when no summary_model is given."""

        def route(request: ModelRequest) -> JSON:
            if request.system and request.system[0]["text"] == SUMMARY_SYSTEM:
                return summary_of(request)
            return script.pop(0)

        script = [*pages(4), replies.text("done")]
        model = ScriptedModel([route] * 12)
        sink = MemorySink()
        result = agent(model, None, sink).run("q")
        assert_end_state(result, "completed")
        asked = [r for r in model.requests if not r.tools]
        assert len(asked) == len(events_named(sink, "context.summarized")) >= 1
        assert asked[0].max_tokens > 0

    def test_a_run_below_the_threshold_never_summarizes(self) -> None:
        """Under the threshold the guard is false and the summary model is never asked."""
        model = ScriptedModel([*pages(1), replies.text("done")])
        summary = summarizer()
        result = agent(model, summary, MemorySink()).run("q")
        assert_end_state(result, "completed")
        assert summary.requests == []
        assert "summarize" not in result.path


class TestFallback:
    def test_a_failing_summary_call_falls_back_to_placeholders(self) -> None:
        """The summary call fails: nothing is replaced, compact puts placeholders in, and
        the trail and the events say so; the run goes on and completes."""
        model = ScriptedModel([*pages(4), replies.text("done")])
        summary = ScriptedModel([ModelError("overloaded", status=529, retryable=True)] * 5)
        sink = MemorySink()
        policy = ContextPolicy(summarize_at_tokens=600, keep_last=2, keep_tool_results=1,
                               compact_at_tokens=None)  # fmt: skip
        result = agent(model, summary, sink, context=policy).run("q")
        assert_end_state(result, "completed")
        assert_fired(result, "summarize", "summary_failed", "compact")
        assert_fired(result, "compact", "compacted", "perceive")
        failed = events_named(sink, "context.summary_failed")
        assert failed
        assert "overloaded" in failed[0]["reason"]
        assert failed[0]["fallback"] == "compact"
        assert events_named(sink, "context.compacted")
        assert events_named(sink, "context.summarized") == []
        last = model.requests[-1].messages
        results = [b for m in last if m["role"] == "user" and isinstance(m["content"], list)
                   for b in m["content"] if b["type"] == "tool_result"]  # fmt: skip
        assert results[0]["content"].startswith("[Earlier tool result removed")
        assert not any(e["event"] == "model.failed" and e.get("purpose") is None
                       for e in sink.events)  # fmt: skip
        for request in model.requests:
            assert validate_request(request.to_api()) == []

    def test_a_summary_that_would_not_shrink_the_prompt_is_not_used(self) -> None:
        """A summary longer than what it replaces is discarded for the placeholders."""
        model = ScriptedModel([*pages(4), replies.text("done")])
        summary = ScriptedModel([replies.text("z" * 20_000)] * 5)
        sink = MemorySink()
        result = agent(model, summary, sink).run("q")
        assert_end_state(result, "completed")
        failed = events_named(sink, "context.summary_failed")
        assert failed
        assert "would not make the prompt smaller" in failed[0]["reason"]
        assert "z" * 100 not in str(model.requests[-1].messages)

    def test_a_cut_or_empty_summary_is_not_used(self) -> None:
        """A summary stopped at its output limit, or empty, may miss what is left."""
        model = ScriptedModel([*pages(5), replies.text("done")])
        summary = ScriptedModel(
            [replies.text("half a sum", stop_reason="max_tokens"), replies.text("  ")] * 3
        )
        sink = MemorySink()
        result = agent(model, summary, sink).run("q")
        assert_end_state(result, "completed")
        reasons = [e["reason"] for e in events_named(sink, "context.summary_failed")]
        assert any("max_tokens" in r for r in reasons)
        assert any("empty" in r for r in reasons)

    def test_never_loops_at_most_one_attempt_per_model_call(self) -> None:
        """When even the kept exchanges pass the threshold, summarize is tried at most
        once between two loop calls, and the run still ends."""
        model = ScriptedModel([*pages(6), replies.text("done")])
        summary = summarizer()
        policy = ContextPolicy(summarize_at_tokens=50, keep_last=1, compact_at_tokens=None)
        result = agent(model, summary, MemorySink(), context=policy).run("q")
        assert_end_state(result, "completed")
        entered = [t.iteration for t in result.trail if t.dest == "summarize"]
        assert entered
        assert len(entered) == len(set(entered))


class TestBudget:
    def test_no_summary_past_a_limit(self) -> None:
        """A spent budget ends the run at perceive by its row, before any summary call."""
        model = ScriptedModel([*pages(6), replies.text("done")])
        summary = summarizer()
        per_call = sum(replies.DEFAULT_USAGE[k] for k in ("input_tokens", "output_tokens"))
        budget = Budget(max_total_tokens=3 * per_call)
        result = agent(model, summary, MemorySink(), budget=budget).run("q")
        assert_end_state(result, "budget_exhausted")
        assert summary.requests == []
        assert_fired(result, "perceive", "prepared", "budget_exhausted", via=["budget_exceeded"])

    def test_a_summary_that_spends_the_budget_ends_the_run_next(self) -> None:
        """The summary's usage counts: when it passes the limit, the next perceive ends the
        run in budget_exhausted and no further call is made."""
        model = ScriptedModel([*pages(6), replies.text("done")])
        costly = replies.text("Found: fact-0.", usage={"input_tokens": 5000})
        summary = ScriptedModel([costly] * 3)
        budget = Budget(max_total_tokens=5000)
        result = agent(model, summary, MemorySink(), budget=budget).run("q")
        assert_end_state(result, "budget_exhausted")
        assert len(summary.requests) == 1
        assert result.path[-3:] == ["summarize", "perceive", "budget_exhausted"]
        assert result.usage.input_tokens >= 5000


class HangingSummary:
    """A summary model whose call never returns; it cancels the run once asked."""

    name = "claude-haiku-4-5"

    def __init__(self, token: CancelToken) -> None:
        self.token = token

    async def acomplete(self, request: ModelRequest) -> ModelReply:
        self.token.cancel()
        await asyncio.sleep(3600)
        raise AssertionError("the summary call was not abandoned")


class TestCancellation:
    def test_cancel_during_the_summary_call_abandons_it_and_resumes(self) -> None:
        """Cancelled mid-call: the call is abandoned, the run ends cancelled with the history
        untouched, and resuming measures again and carries on without a second attempt."""
        token = CancelToken()
        store = MemoryCheckpointer()
        model = ScriptedModel([*pages(4), replies.text("done")])
        sink = MemorySink()
        first = Agent(model, tools=[page], stall=None, context=POLICY, checkpointer=store,
                      summary_model=HangingSummary(token), audit=Audit(sinks=[sink]))  # fmt: skip
        result = first.run("q", cancel=token, run_id="r1")
        assert_end_state(result, "cancelled")
        assert_fired(result, "summarize", "summary_failed", "cancelled", via=["cancel_requested"])
        assert "cancelled by the host" in events_named(sink, "context.summary_failed")[0]["reason"]
        resumed = first.replace(summary_model=summarizer()).resume("r1")
        assert_end_state(resumed, "completed")
        assert_fired(resumed, "cancelled", "resumed", "perceive", via=["cancelled_in_summarize"])

    def test_cancel_right_after_summarizing_keeps_the_summary(self) -> None:
        """A cancel seen after the summary was made ends the run with the summary kept."""
        token = CancelToken()

        def cancel_then_summarize(request: ModelRequest) -> JSON:
            token.cancel()
            return summary_of(request)

        model = ScriptedModel([*pages(4), replies.text("done")])
        summary = ScriptedModel([cancel_then_summarize])
        store = MemoryCheckpointer()
        first = agent(model, summary, MemorySink(), checkpointer=store)
        result = first.run("q", cancel=token, run_id="r2")
        assert_end_state(result, "cancelled")
        assert_fired(result, "summarize", "summarized", "cancelled", via=["cancel_requested"])
        assert result.messages[0]["content"][0]["text"].startswith("[Summary of the")
        # the shorter history was checkpointed: the resumed run sends the summary first
        sent = len(model.requests)
        resumed = first.replace(summary_model=summarizer()).resume("r2")
        assert_end_state(resumed, "completed")
        again = model.requests[sent].messages  # the latest one carries a cache breakpoint
        assert len(again) == len(result.messages)
        assert again[:-1] == result.messages[:-1]


def test_a_defect_in_summarize_ends_the_run_failed(monkeypatch: pytest.MonkeyPatch) -> None:
    """A bug inside the phase is the crashed row, named in the reason."""
    from statemachine_agent.phases import summarize

    async def broken(self: object, ctx: object) -> str:
        raise ZeroDivisionError("bug in summarize")

    monkeypatch.setattr(summarize.Summarize, "run", broken)
    model = ScriptedModel([*pages(4), replies.text("done")])
    result = agent(model, summarizer(), MemorySink()).run("q")
    assert_fired(result, "summarize", "crashed", "failed")
    assert "bug in summarize" in result.reason


class TestHistory:
    def test_the_cut_is_in_front_of_an_assistant_message(self) -> None:
        """The kept part starts with the assistant, so pairing and alternation hold."""
        history: list[JSON] = [{"role": "user", "content": "q"}]
        for n in range(4):
            history.append(
                {
                    "role": "assistant",
                    "content": [
                        {"type": "tool_use", "id": f"toolu_{n}", "name": "page", "input": {"n": n}}
                    ],
                }
            )
            history.append({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": f"toolu_{n}", "content": "r"}]})  # fmt: skip
        cut = summary_cut(history, 2)
        assert cut == 5
        assert history[cut]["role"] == "assistant"
        new = summarized(history, cut, "the summary")
        assert new[1:] == history[5:]
        body = {"model": "m", "max_tokens": 10, "messages": new,
                "tools": [{"name": "page", "input_schema": {"type": "object"}}]}  # fmt: skip
        assert validate_request(body) == []

    def test_too_few_older_messages_are_not_summarized(self) -> None:
        """One older message is not replaced by one summary message."""
        history: list[JSON] = [
            {"role": "user", "content": "q"},
            {"role": "assistant", "content": "a"},
            {"role": "user", "content": "b"},
        ]
        assert summary_cut(history, 1) == 0
        assert summary_cut(history, 5) == 0

    def test_keep_last_must_be_positive(self) -> None:
        with pytest.raises(ValueError, match="keep_last"):
            ContextPolicy(keep_last=0)
        with pytest.raises(ValueError, match="summarize_at_tokens"):
            ContextPolicy(summarize_at_tokens=0)


class TestAuditReplayReport:
    def test_replay_reproduces_the_summaries(self, tmp_path: Path) -> None:
        """The recorded run replays to the same path, summaries included."""
        model = ScriptedModel([*pages(6), replies.text("done")])
        result = Agent(model, tools=[page], stall=None, context=POLICY,
                       summary_model=summarizer(), audit=tmp_path).run("q")  # fmt: skip
        assert_end_state(result, "completed")
        report = replay(tmp_path / f"{result.run_id}.jsonl")
        assert report.matched, report.difference
        assert report.result.messages == result.messages

    def test_the_report_shows_each_summary_as_its_own_step(self, tmp_path: Path) -> None:
        """The report lists the summaries apart from the iterations, with their figures."""
        model = ScriptedModel([*pages(6), replies.text("done")])
        result = Agent(model, tools=[page], stall=None, context=POLICY,
                       summary_model=summarizer(), audit=tmp_path).run("q")  # fmt: skip
        events = read_events(tmp_path / f"{result.run_id}.jsonl")
        built = build(events)
        recorded = [e for e in events if e["event"] == "context.summarized"]
        assert [s.after_iteration for s in built.summaries] == [e["iteration"] for e in recorded]
        step = built.summaries[0]
        assert step.messages_replaced == recorded[0]["messages_replaced"]
        assert step.tokens_before > step.tokens_after
        assert "fact-0=1000" in step.summary
        assert step.call is not None
        assert step.call.purpose == "summary"


@pytest.fixture
def server() -> Iterator[FakeAnthropicServer]:
    with FakeAnthropicServer() as fake:
        yield fake


class TestThroughTheSDK:
    def test_summarize_through_the_real_sdk(self, server: FakeAnthropicServer) -> None:
        """The real anthropic SDK against the strict local server: the run crosses the
        threshold, the agent's model summarizes, the next request is smaller and holds the
        summary and the last exchanges, every request valid, and the run completes."""
        script = [*pages(6), replies.text("done")]

        def route(body: JSON) -> JSON:
            system = body.get("system") or [{}]
            if system[0].get("text") == SUMMARY_SYSTEM:
                facts = sorted(set(re.findall(r"fact-\d+=\d+", str(body["messages"]))))
                return replies.text("Found: " + ", ".join(facts))
            return script.pop(0)

        server.add(*[route] * 12)
        model = AnthropicModel(api_key="sk-ant-test-0000", base_url=server.base_url)
        sink = MemorySink()
        result = Agent(model, tools=[page], stall=None, context=POLICY,
                       audit=Audit(sinks=[sink])).run("read the pages")  # fmt: skip
        assert_end_state(result, "completed")
        assert server.invalid_requests == []
        assert server.errors == []
        loop = [r for r in server.requests if r.get("tools")]
        asked = [r for r in server.requests if not r.get("tools")]
        done = events_named(sink, "context.summarized")
        assert len(asked) == len(done) >= 1
        after = loop[done[0]["iteration"]]
        assert after["messages"][0]["content"][0]["text"].startswith("[Summary of the")
        assert "fact-0=1000" in after["messages"][0]["content"][0]["text"]
        before = loop[done[0]["iteration"] - 1]["messages"]
        unsummarized = [*before, *after["messages"][-2:]]
        assert len(str(after["messages"])) < len(str(unsummarized))
        assert after["messages"][-1]["content"][-1]["cache_control"] == {"type": "ephemeral"}

    def test_counted_by_the_api(self, server: FakeAnthropicServer) -> None:
        """With count_tokens on, the API's counter measures the prompt summarize_due reads."""
        script = [*pages(5), replies.text("done")]

        def route(body: JSON) -> JSON:
            if not body.get("tools"):
                return replies.text("Found: the pages so far.")
            return script.pop(0)

        policy = ContextPolicy(summarize_at_tokens=700, keep_last=2, compact_at_tokens=None,
                               count_tokens=True)  # fmt: skip
        server.add(*[route] * 12)
        model = AnthropicModel(api_key="sk-ant-test-0000", base_url=server.base_url)
        result = Agent(model, tools=[page], stall=None, context=policy).run("q")
        assert_end_state(result, "completed")
        assert server.invalid_requests == []
        assert len(server.count_tokens_requests) >= result.iterations
        assert "summarize" in result.path


class TestWithServerSideEditing:
    def test_the_summary_acts_first_and_the_edits_go_with_every_loop_call(self) -> None:
        """Server-side context editing configured too: the client-side summary is made
        before the request is sent, the edits travel with every loop request (the server
        applies them to what it receives), and never with the summary request."""
        edits = {"edits": [{"type": "clear_tool_uses_20250919",
                            "trigger": {"type": "input_tokens", "value": 50_000}}]}  # fmt: skip
        policy = ContextPolicy(summarize_at_tokens=600, keep_last=2, compact_at_tokens=None,
                               server_edits=edits)  # fmt: skip
        model = ScriptedModel([*pages(5), replies.text("done")])
        summary = summarizer()
        result = agent(model, summary, MemorySink(), context=policy).run("q")
        assert_end_state(result, "completed")
        assert "summarize" in result.path
        assert all(r.to_api()["context_management"] == edits for r in model.requests)
        assert summary.requests
        assert all("context_management" not in r.to_api() for r in summary.requests)
        for request in [*model.requests, *summary.requests]:
            assert validate_request(request.to_api()) == []


class TestWithServerSideCompaction:
    def test_server_compaction_and_the_client_summary_through_the_sdk(
        self, server: FakeAnthropicServer
    ) -> None:
        """Server-side compaction configured too, through the real SDK: a `compaction` stop
        keeps its block and the loop goes on; the client summary acts before the requests
        are sent, keeps the compaction block's message verbatim, and every request (the
        beta ones with their edits, the summary one without) is valid."""
        compact = {"edits": [{"type": "compact_20260112", "pause_after_compaction": True}]}
        paused = replies.reply(
            {"type": "compaction", "content": "Server summary: pages 0-2 read."},
            stop_reason="compaction",
        )
        script = [*pages(3), paused, *pages(6)[3:], replies.text("done")]

        def route(body: JSON) -> JSON:
            system = body.get("system") or [{}]
            if system[0].get("text") == SUMMARY_SYSTEM:
                return replies.text("Found: " + ", ".join(re.findall(r"fact-\d+=\d+", str(body))))
            return script.pop(0)

        server.add(*[route] * 16)
        policy = ContextPolicy(summarize_at_tokens=600, keep_last=2, compact_at_tokens=None,
                               server_edits=compact)  # fmt: skip
        model = AnthropicModel(api_key="sk-ant-test-0000", base_url=server.base_url)
        result = Agent(model, tools=[page], stall=None, context=policy).run("q")
        assert_end_state(result, "completed")
        assert server.invalid_requests == []
        assert server.errors == []
        assert_fired(result, "reason", "replied", "perceive", via=["is_compaction"])
        assert "summarize" in result.path
        loop = [r for r in server.requests if r.get("tools")]
        asked = [r for r in server.requests if not r.get("tools")]
        assert asked
        assert all(r["context_management"] == compact for r in loop)
        assert all("context_management" not in r for r in asked)
        assert "Server summary" in str(result.messages) or "Server summary" in str(asked)
