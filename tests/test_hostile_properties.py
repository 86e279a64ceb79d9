"""Generated hostile tools against the boundary's promises (issue #11).

Each example is a run whose model calls tools that raise `BaseException`s from
async code, swallow cancellation past their timeout, mutate their arguments
later, return invalid Unicode, non-JSON values or huge outputs, with a verifier
that rejects at random. Whatever they do: no exception escapes, the run ends in
a named end state, every request is valid, no secret reaches the audit file,
and the transcript says what the tools did (a call that ran is never "not run").
Bounded examples keep the suite fast.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from statemachine_agent import Agent, Audit, Budget, ScriptedModel, Verdict, tool
from statemachine_agent.machine.ends import END_STATES
from statemachine_agent.persistence.base import MemoryCheckpointer
from statemachine_agent.testing import replies
from statemachine_agent.testing.validator import validate_request

SECRET = "sk-ant-api03-HostilePropertySecret42"

BEHAVIOURS = [
    "ok",
    "system_exit",
    "keyboard_interrupt",
    "custom_base",
    "swallow_cancel",
    "mutate_later",
    "lone_surrogate",
    "non_json",
    "huge",
    "leak_secret",
]


class CustomBase(BaseException):
    pass


KEPT: list[list[Any]] = []


async def behave(kind: str, items: list[Any]) -> Any:
    """One hostile tool: what it does is named by `kind`."""
    if kind == "system_exit":
        raise SystemExit(2)
    if kind == "keyboard_interrupt":
        raise KeyboardInterrupt
    if kind == "custom_base":
        raise CustomBase("odd")
    if kind == "swallow_cancel":
        loop = asyncio.get_running_loop()
        end = loop.time() + 5
        while loop.time() < end:
            try:
                await asyncio.sleep(0.01)
            except asyncio.CancelledError:
                continue
        return "late"
    if kind == "mutate_later":
        if KEPT:
            KEPT[-1].append("mutated")
        KEPT.append(items)
        return "kept"
    if kind == "lone_surrogate":
        return "bad \udcff text"
    if kind == "non_json":
        return {"a_set": {1, 2}, "raw": b"\xff\x00", "error": ValueError(SECRET)}
    if kind == "huge":
        return "x" * 300_000
    if kind == "leak_secret":
        return {SECRET: [SECRET.upper()], "password": "pw"}
    return f"ok {len(items)}"


hostile = tool(name="hostile", description="Does what its kind says.", timeout=0.05)(behave)

call = st.fixed_dictionaries(
    {
        "kind": st.sampled_from(BEHAVIOURS),
        "items": st.lists(st.sampled_from(["a", "b"]), max_size=2),
    }
)
turn = st.lists(call, min_size=1, max_size=3)


def script(turns: list[list[dict[str, Any]]], final: str) -> list[Any]:
    out: list[Any] = [
        replies.tool_uses(*[("hostile", c) for c in calls], text=f"step {i}")
        for i, calls in enumerate(turns)
    ]
    out.append(replies.text(final))
    out.append(replies.text("again: " + final))  # for a verifier rejection
    return out


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow,
          HealthCheck.function_scoped_fixture])  # fmt: skip
@given(
    turns=st.lists(turn, min_size=1, max_size=3),
    final=st.sampled_from(["Done.", f"The key is {SECRET}.", "caf\udce9"]),
    rejections=st.lists(st.booleans(), max_size=2),
)
def test_hostile_tools_never_break_a_promise(
    tmp_path: Path, turns: list[list[dict[str, Any]]], final: str, rejections: list[bool]
) -> None:
    KEPT.clear()
    verdicts = iter(rejections)

    def verifier(claim: Any) -> Verdict:
        return Verdict(ok=not next(verdicts, False), feedback="Try again.")

    model = ScriptedModel(script(turns, final), validate=False)
    audit_dir = tmp_path / f"audit_{len(list(tmp_path.iterdir()))}"
    agent = Agent(
        model,
        tools=[hostile],
        verify=verifier,
        budget=Budget(max_iterations=8),
        checkpointer=MemoryCheckpointer(),
        audit=Audit(dir=audit_dir, secrets=[SECRET]),
    )
    result = agent.run("Go.")  # an escaping exception fails the test here

    assert result.end_state in END_STATES
    for request in model.requests:
        assert validate_request(request.to_api()) == [], request
    for path in audit_dir.glob("*"):
        text = path.read_text(encoding="utf-8")
        assert SECRET.lower() not in text.lower()
    # The transcript agrees with the tools: every call answered once, none that ran "not run".
    asked = [
        b["id"]
        for m in result.messages
        if m["role"] == "assistant" and isinstance(m["content"], list)
        for b in m["content"]
        if b.get("type") == "tool_use"
    ]
    answered = [
        b
        for m in result.messages
        if m["role"] == "user" and isinstance(m["content"], list)
        for b in m["content"]
        if b.get("type") == "tool_result"
    ]
    assert sorted(asked) == sorted(b["tool_use_id"] for b in answered)
    ran = {
        e["tool_use_id"]
        for e in _events(audit_dir)
        if e["event"] in ("tool.finished", "tool.failed")
    }
    for block in answered:
        if block["tool_use_id"] in ran:
            assert not str(block["content"]).startswith("Not run")
    # Inputs in the history are what the model sent, whatever the tools did later.
    sent = [c["items"] for calls in turns for c in calls]
    recorded = [
        b["input"]["items"]
        for m in result.messages
        if m["role"] == "assistant" and isinstance(m["content"], list)
        for b in m["content"]
        if b.get("type") == "tool_use"
    ]
    assert recorded == sent[: len(recorded)]
    json.dumps(result.messages, ensure_ascii=False).encode("utf-8")


def _events(audit_dir: Path) -> list[dict[str, Any]]:
    return [
        json.loads(line)
        for path in audit_dir.glob("*.jsonl")
        for line in path.read_text().splitlines()
    ]


OPTIONS = st.fixed_dictionaries(
    {},
    optional={
        "temperature": st.sampled_from([0, 0.5]),
        "top_k": st.just(5),
        "mcp_servers": st.just([{"type": "url", "url": "https://mcp.example.com", "name": "m"}]),
        "betas": st.just(["fine-grained-tool-streaming-2025-05-14"]),
    },
)
EDITS = st.sampled_from(
    [None, {"edits": [{"type": "clear_tool_uses_20250919"}]},
     {"edits": [{"type": "compact_20260112", "pause_after_compaction": True}]}]
)  # fmt: skip
STOPS = st.lists(
    st.sampled_from(["tool_use", "compaction", "pause_turn", "end_turn_with_tool", "mystery"]),
    max_size=3,
)


def sdk_reply(stop: str, index: int) -> Any:
    if stop == "tool_use":
        return replies.tool_use("hostile", {"kind": "ok", "items": ["a"]}, id=f"toolu_{index}")
    if stop == "end_turn_with_tool":
        return replies.reply(
            replies.text_block("done?"),
            replies.tool_use_block("hostile", {"kind": "ok", "items": []}, f"toolu_e{index}"),
            stop_reason="end_turn",
        )
    if stop == "compaction":
        return replies.reply({"type": "compaction", "content": "summary"}, stop_reason="compaction")
    if stop == "pause_turn":
        return replies.reply(
            {"type": "server_tool_use", "id": f"srvtoolu_{index}", "name": "web_search",
             "input": {"query": "x"}},
            stop_reason="pause_turn",
        )  # fmt: skip
    return replies.reply(replies.text_block("?"), stop_reason="mystery_reason")


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(options=OPTIONS, edits=EDITS, stops=STOPS, reject=st.booleans())
def test_real_sdk_runs_send_only_valid_requests(
    options: dict[str, Any], edits: Any, stops: list[str], reject: bool
) -> None:
    from statemachine_agent import ContextPolicy
    from statemachine_agent.models.anthropic import AnthropicModel
    from statemachine_agent.testing.server import FakeAnthropicServer

    script = [sdk_reply(stop, i) for i, stop in enumerate(stops)]
    script += [replies.text("final"), replies.text("final again")]
    verdicts = iter([not reject])
    with FakeAnthropicServer(script) as server:
        model = AnthropicModel(api_key=SECRET, base_url=server.base_url, max_retries=0)
        agent = Agent(
            model,
            tools=[hostile],
            request_options=options,
            context=ContextPolicy(server_edits=edits),
            verify=lambda claim: Verdict(ok=next(verdicts, True), feedback="again"),
            budget=Budget(max_iterations=8),
        )
        result = agent.run("Go.")
    assert result.end_state in END_STATES
    assert server.invalid_requests == []
    if stops[:1] == ["mystery"]:  # an unknown stop reason ends the run in failed, named
        assert result.end_state == "failed"
        assert "mystery_reason" in result.reason
