"""A witness for every row an agent can reach: the shortest scripted scenario that fires it.

`witnesses(agent)` gives one `Witness` per reachable row (`reachable_rows`): the raw
replies of every model the run calls, in the order it calls them, the host's part
(a cancel when the run enters a state, a resume with approvals) and the verifier's
verdicts. The agent's tools are stubbed by name (each answers "ok"; a tool whose
failure ends the run fails), so no real effect runs. `Witness.run()` plays it
through `ScriptedModel`, `Witness.run(server=...)` through the real `anthropic` SDK
against a `FakeAnthropicServer`; both return the `RunResult` and raise
`AssertionError` unless the row fired.

Recipes are written per row, like XState's shortest paths: a row the table gains
without a recipe is listed by `unwitnessed(agent)`, which the tests require empty.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from statemachine_agent.machine import observers
from statemachine_agent.machine.cancel import CancelToken
from statemachine_agent.machine.reach import Setup
from statemachine_agent.machine.result import RunResult
from statemachine_agent.machine.run import TransitionRecord
from statemachine_agent.machine.table import INITIAL_STATE, Row
from statemachine_agent.models.base import ModelError, ModelReply, ModelRequest
from statemachine_agent.persistence.base import MemoryCheckpointer
from statemachine_agent.testing import replies
from statemachine_agent.testing.reachability import reachable_rows, setup_of
from statemachine_agent.testing.server import FakeAnthropicServer, FakeError
from statemachine_agent.testing.validator import validate_request
from statemachine_agent.tools.base import Tool

if TYPE_CHECKING:
    from statemachine_agent.agent.core import Agent

RowKey = tuple[str, str, str, tuple[str, ...]]
JSON = dict[str, Any]


@dataclass(frozen=True)
class Fault:
    """The API answers with an error instead of a reply (a 401, a "prompt is too long" 400)."""

    status: int
    message: str

    def as_exception(self) -> ModelError:
        too_long = self.status == 400 and "too long" in self.message
        return ModelError(
            self.message,
            status=self.status,
            context_exceeded=too_long,
            error_type="invalid_request_error" if too_long else "authentication_error",
        )


Answer = JSON | Fault
"""One answer of the model: a Messages API response body, or a fault."""


@dataclass(frozen=True)
class Scenario:
    """What a witness plays: the replies in order, and the host's part."""

    replies: tuple[Answer, ...] = ()
    """Answers of the loop's model, in call order (a salvage call's included)."""
    after_resume: tuple[Answer, ...] = ()
    """Answers after the run is resumed (cancelled or paused runs)."""
    cancel_on_entering: str | None = None
    """Cancel the run as it enters this state (`"start"`: before it begins)."""
    cancel_after_reply: int | None = None
    """Cancel as the loop's n-th reply (1-based) comes back: the reply is kept."""
    steer_on_entering: str | None = None
    """Steer the run (`Agent.steer`) as it first enters this state: its next `perceive`
    delivers the message."""
    resume: int = 0
    """Times to resume the run once it stopped (approving every pending call)."""
    verdicts: tuple[bool, ...] = ()
    """The verifier's verdicts, in order (rejections give feedback "not yet"); once they
    run out, every claim passes."""
    critic: tuple[Answer, ...] = ()
    """The critic's answers at reflections, in order; then "Keep going." each time."""
    summaries: tuple[Answer, ...] = ()
    """The summary model's answers, in order; then a short summary each time."""
    child: tuple[Answer, ...] | None = None
    """The answers of the sub-agents' models, in call order (all sub-agents share them);
    `None`: a child that may pause calls its tool needing approval, then answers."""
    defect_in: str | None = None
    """Inject a defect (see `inject_defect`) into this state's phase: a `crashed` row."""
    cancel_after_side_reply: str | None = None
    """Cancel as the first answer of this side model (`"summary"`, `"critic"`) comes back."""
    changes: Mapping[str, Any] = field(default_factory=dict)
    """Settings the witness needs changed (a budget of one iteration)."""
    failing: tuple[str, ...] = ()
    """Tools whose stub raises (a staged write that fails when committed)."""

    def describe(self) -> str:
        """The scenario in a sentence (the docstring of a generated test)."""
        said = ["the model answers " + _answers(self.replies) if self.replies else "no answer"]
        if self.cancel_on_entering == "start":
            said.append("the host cancels before the run starts")
        elif self.cancel_on_entering:
            said.append(f"the host cancels as the run enters {self.cancel_on_entering}")
        if self.cancel_after_reply:
            said.append(f"the host cancels as reply {self.cancel_after_reply} comes back")
        if self.cancel_after_side_reply:
            said.append(f"the host cancels as the {self.cancel_after_side_reply} comes back")
        if self.steer_on_entering:
            said.append(f"the host steers the run as it enters {self.steer_on_entering}")
        if self.resume:
            said.append(f"the host resumes it {self.resume}x, approving what is pending")
        if self.after_resume:
            said.append("then the model answers " + _answers(self.after_resume))
        if self.verdicts:
            said.append(
                "the verifier says " + ", ".join("yes" if v else "no" for v in self.verdicts)
            )
        if self.summaries:
            said.append("the summary model answers " + _answers(self.summaries))
        if self.defect_in:
            said.append(f"a defect is injected into {self.defect_in}")
        if self.failing:
            said.append(" and ".join(self.failing) + " fails when run")
        if self.changes:
            said.append("with " + ", ".join(sorted(self.changes)) + " changed")
        return "; ".join(said) + "."


def _answers(answers: Sequence[Answer]) -> str:
    return ", ".join(_answer(a) for a in answers)


def _answer(answer: Answer) -> str:
    if isinstance(answer, Fault):
        return f"an API error {answer.status}"
    calls = [b["name"] for b in answer.get("content") or () if b.get("type") == "tool_use"]
    if calls:
        return "a call of " + " and ".join(calls)
    stop = str(answer.get("stop_reason") or "no stop reason")
    said = any(b.get("type") == "text" and b.get("text") for b in answer.get("content") or ())
    return f"text ({stop})" if said else f"an empty reply ({stop})"


@dataclass(frozen=True)
class Witness:
    """A scenario that fires `row` under an agent's configuration."""

    row: Row
    agent: Agent[Any] = field(repr=False)
    scenario: Scenario

    @property
    def name(self) -> str:
        """A test name for the row: source, trigger, guards, destination."""
        parts = [self.row.source, self.row.trigger, *self.row.guards, self.row.dest]
        return "_".join(parts)

    def run(self, *, server: FakeAnthropicServer | None = None) -> RunResult:
        """Play the scenario (through the real SDK when given `server`); the row fires."""
        return asyncio.run(self.arun(server=server))

    async def arun(self, *, server: FakeAnthropicServer | None = None) -> RunResult:
        seen: set[RowKey] = set()
        run_ids: set[str] = set()

        def note(run_id: str, row: Row, record: TransitionRecord) -> None:
            if run_id in run_ids:
                seen.add(row.key)
                if row.dest == self.scenario.cancel_on_entering and not cancelled:
                    cancelled.append(row)  # once: the resumed run goes on
                    tokens[-1].cancel()
                if row.dest == self.scenario.steer_on_entering and not steered:
                    steered.append(agent.steer(run_id, "Also say which step you are on."))

        token = CancelToken()
        tokens = [token]  # a resumed run gets a fresh token: the host cancels the latest
        cancelled: list[Row] = []
        steered: list[int] = []
        run_id = replies.new_id("witness")
        run_ids.add(run_id)
        sides = _Sides(self.scenario, server is not None, tokens)
        agent = _stubbed(self.agent, self.scenario, token, server, sides)
        if self.scenario.cancel_on_entering == "start":
            token.cancel()
        defect = (
            inject_defect(self.scenario.defect_in, run_id=run_id)
            if self.scenario.defect_in
            else nullcontext()
        )
        with sides, defect, observers.watch_transitions(note):
            result = await agent.arun("Witness the row.", run_id=run_id, cancel=token)
            for _ in range(self.scenario.resume):
                if result.end_state not in ("cancelled", "awaiting_approval"):
                    break
                from statemachine_agent.policy.approval import Approve

                pending = (result.details or {}).get("pending") or []
                decisions = {p["tool_use_id"]: Approve() for p in pending}
                tokens.append(CancelToken())
                result = await agent.aresume(run_id, decisions=decisions or None, cancel=tokens[-1])
        if sides.invalid:
            raise AssertionError(f"witness {self.name}: invalid side requests: {sides.invalid}")
        if self.row.key not in seen:
            fired = ", ".join(f"{k[0]}->{k[2]}{list(k[3])}" for k in sorted(seen))
            raise AssertionError(
                f"witness {self.name} did not fire its row; it fired {fired}; "
                f"ended {result.end_state}: {result.reason}"
            )
        return result


def witnesses(agent: Agent[Any]) -> list[Witness]:
    """One witness per reachable row of `agent` that has a recipe (see `unwitnessed`)."""
    setup = setup_of(agent)
    found = []
    for row in reachable_rows(agent).reachable:
        recipe = RECIPES.get(row.key)
        if recipe is not None:
            found.append(Witness(row, agent, recipe(_Kit(agent, setup))))
    return found


def defect_witnesses(agent: Agent[Any]) -> list[Witness]:
    """One witness per defect row of `agent` (`Reachability.defect_rows`), kept apart from
    `witnesses`: the shortest scenario into the row's state, with `inject_defect` making
    that state's phase raise there. Its later answers are never asked for."""
    setup = setup_of(agent)
    reach = reachable_rows(agent)
    found = []
    for row in reach.defect_rows:
        into = next((r for r in reach.reachable if r.dest == row.source and r.key in RECIPES), None)
        if row.source == INITIAL_STATE:
            scenario = Scenario(_end(_Kit(agent, setup)))
        elif into is not None:
            scenario = RECIPES[into.key](_Kit(agent, setup))
        else:
            continue
        found.append(Witness(row, agent, dataclasses.replace(scenario, defect_in=row.source)))
    return found


@contextmanager
def inject_defect(state: str, *, run_id: str | None = None) -> Iterator[None]:
    """The test hook that fires a `crashed` row: while open, the phase that runs `state`
    raises a `ZeroDivisionError` (a bug, not a model or tool failure) the first time it
    runs (for the run `run_id` only, when given: not in a sub-agent's). It patches the
    phase's class, so use it in one test at a time (as pytest's `monkeypatch` would); it
    is put back on exit."""
    from statemachine_agent.machine.engine import PHASES

    if state not in PHASES:
        raise ValueError(f"inject_defect: no phase runs {state!r}; one of {sorted(PHASES)}")
    kind = type(PHASES[state])
    original = kind.run
    calls: list[None] = []

    async def broken(self: Any, ctx: Any) -> str:
        if not calls and (run_id is None or ctx.state.run_id == run_id):
            calls.append(None)
            raise ZeroDivisionError(f"defect injected into {state} (witnesses.inject_defect)")
        return await original(self, ctx)

    kind.run = broken  # type: ignore[method-assign]
    try:
        yield
    finally:
        kind.run = original  # type: ignore[method-assign]


def unwitnessed(agent: Agent[Any]) -> list[Row]:
    """Reachable rows of `agent` no recipe witnesses yet (a new row needs one here)."""
    return [row for row in reachable_rows(agent).reachable if row.key not in RECIPES]


# -- the kit recipes are written with ---------------------------------------------------


@dataclass(frozen=True)
class _Kit:
    agent: Agent[Any]
    setup: Setup

    @property
    def plain_tool(self) -> Tool | None:
        """A tool whose call goes straight through (no approval, no end, no failure)."""
        for tool in self.agent.tools:
            special = tool.requires_approval or tool.ends_run or tool.on_error == "fail"
            if not special and not _pauses(tool) and not self.stages(tool):
                return tool  # a sub-agent that cannot pause too; never a staged write
        return None

    def stages(self, tool: Tool) -> bool:
        """A call of `tool` is staged (a deferrable tool of an agent that commits)."""
        return tool.deferrable and self.setup.settings.commit is not None

    def pauses_in_act(self, tool: Tool) -> bool:
        """A call of `tool` may pause the run in `act` (a staged one waits for `commit`)."""
        return _pauses(tool) and not self.stages(tool)

    def staged(self, *, approval: bool = False) -> Tool:
        """A deferrable tool: one needing approval if `approval`, else preferably not."""
        found = [t for t in self.agent.tools if self.stages(t)]
        wanted = [t for t in found if t.requires_approval == approval]
        return (wanted or found)[0]

    def stage(self, tool: Tool, salt: str = "") -> JSON:
        """A call of the deferrable `tool` (staged, not run), its input salted."""
        given = _sample(tool.input_schema, salt)
        return replies.tool_use(tool.name, given, id=replies.new_id("toolu"))

    def call(self, tool: Tool | None = None) -> JSON:
        """A reply calling `tool` (a plain one by default) with a valid input."""
        chosen = tool or self.plain_tool or next(iter(self.agent.tools))
        return replies.tool_use(
            chosen.name, _sample(chosen.input_schema), id=replies.new_id("toolu")
        )

    def calls(self, n: int) -> tuple[JSON, ...]:
        """`n` plain calls with different inputs (so no stall is seen among them)."""
        chosen = self.plain_tool or next(iter(self.agent.tools))
        return tuple(
            replies.tool_use(
                chosen.name, _sample(chosen.input_schema, f"{i}"), id=replies.new_id("toolu")
            )
            for i in range(n)
        )

    @property
    def output_tool(self) -> Tool | None:
        """The `final_result` tool of an agent with an `output_type`."""
        if self.agent.output_type is None:
            return None
        from statemachine_agent.tools.output import output_spec

        return output_spec(self.agent.output_type).tool()

    def answer(self) -> JSON:
        """The reply that answers the task: a valid `final_result` call when the agent
        has an `output_type`, plain text otherwise."""
        spec = self.output_tool
        if spec is None:
            return _text()
        return replies.tool_use(spec.name, _sample(spec.input_schema), id=replies.new_id("toolu"))

    def finish(self, status: str) -> JSON:
        """A call of the run-ending tool: `finish` with `status`, else `final_result`."""
        for tool in self.agent.tools:
            if tool.ends_run and "status" in (tool.input_schema.get("properties") or {}):
                given = {"status": status, "summary": "Done."}
                return replies.tool_use(tool.name, given, id=replies.new_id("toolu"))
        return self.answer()

    def claim(self) -> JSON:
        """A claimed completion the verifier checks: the finish tool, or plain text."""
        if self.output_tool is None and not self.setup.ends_run:
            return _text()
        return self.finish("completed")

    def bad_answer(self) -> JSON:
        """A call of the run-ending tool its schema rejects (`final_result`, or `finish`)."""
        ending = self.output_tool or next((t for t in self.agent.tools if t.ends_run), None)
        name = ending.name if ending is not None else "final_result"
        return replies.tool_use(name, {"unexpected": [1]}, id=replies.new_id("toolu"))

    def step(self) -> JSON:
        """A reply that keeps the loop going: a plain tool call, or a paused turn."""
        if self.plain_tool is not None:
            return self.call()
        return replies.reply(replies.text_block("Working."), stop_reason="pause_turn")

    def tool(self, predicate: Callable[[Tool], bool]) -> Tool:
        return next(t for t in self.agent.tools if predicate(t))


def _text(words: str = "Done.") -> JSON:
    return replies.text(words)


def _usage(output: int, input: int = 20) -> dict[str, int]:
    return {"input_tokens": input, "output_tokens": output}


def _end(kit: _Kit) -> tuple[Answer, ...]:
    """The answers that end a run cleanly from a fresh request."""
    return (kit.answer(),)


Recipe = Callable[[_Kit], Scenario]


def _stall(kit: _Kit, *, persists: bool) -> Scenario:
    """The same call, repeated until the detector sees it (and, to persist, past every
    intervention), then an answer (a salvage summary, where the policy asks for one)."""
    policy = kit.setup.settings.stall
    assert policy is not None  # the rows are unreachable without one
    same = _sample(kit.plain_tool.input_schema) if kit.plain_tool else {}
    name = kit.plain_tool.name if kit.plain_tool else ""
    calls = policy.threshold + (policy.max_interventions if persists else 0)
    if persists:
        ending: tuple[Answer, ...] = (_text("Repeating myself."),) if policy.salvage else ()
    else:
        ending = (kit.answer(),)
    return Scenario(
        (
            *(replies.tool_use(name, same, id=replies.new_id("toolu")) for _ in range(calls)),
            *ending,
        )
    )


def _intervened(kit: _Kit, **host: Any) -> Scenario:
    stalled = _stall(kit, persists=False)
    return Scenario(stalled.replies[:-1], **host)


def _through(kit: _Kit, *, host: int = 0, cancel: str | None = None) -> Scenario:
    """A tool call that goes through to `observe`: a plain one, or an approved one (the
    run pauses, and is resumed approving it). `host` more resumes follow a cancel."""
    if kit.plain_tool is not None:
        return Scenario((kit.call(), kit.answer()), cancel_on_entering=cancel, resume=host)
    return Scenario(
        (kit.call(kit.tool(kit.pauses_in_act)), kit.answer()),
        cancel_on_entering=cancel,
        resume=1 + host,
    )


def _acted(kit: _Kit) -> Scenario:
    """The model calls a tool (the run may pause on it, which ends the witness)."""
    if kit.plain_tool is not None:
        return Scenario((kit.call(), kit.answer()))
    return Scenario((kit.call(kit.tool(kit.pauses_in_act)),))


_TOO_LONG = Fault(400, "prompt is too long: 250000 tokens > 200000 maximum")

RECIPES: Mapping[RowKey, Recipe] = {
    ("perceive", "prepared", "cancelled", ("cancel_requested",)): lambda k: Scenario(
        cancel_on_entering="start"
    ),
    ("perceive", "prepared", "budget_exhausted", ("budget_exceeded",)): lambda k: Scenario(
        (k.step(), *((_text("Found nothing yet."),) if k.agent.budget.salvage else ())),
        changes={"budget": dataclasses.replace(k.agent.budget, max_iterations=1)},
    ),
    ("perceive", "prepared", "reason", ()): lambda k: Scenario(_end(k)),
    ("perceive", "prepared", "perceive", ("steering_waiting",)): lambda k: Scenario(
        (k.step(), k.answer()), steer_on_entering="reason"
    ),
    ("reason", "replied", "cancelled", ("cancel_requested",)): lambda k: Scenario(
        _end(k), cancel_after_reply=1
    ),
    ("reason", "replied", "act", ("is_tool_use",)): _acted,
    ("reason", "replied", "failed", ("is_empty_reply",)): lambda k: Scenario(
        (replies.reply(stop_reason="end_turn"),)
    ),
    ("reason", "replied", "completed", ("is_end_turn",)): lambda k: Scenario(_end(k)),
    ("reason", "replied", "truncated", ("is_max_tokens", "output_below_limit")): lambda k: Scenario(
        _cuts(k, _usage(10))
    ),
    ("reason", "replied", "truncated", ("is_max_tokens",)): lambda k: Scenario(
        _cuts(k, _usage(k.agent.max_tokens))
    ),
    ("reason", "replied", "refused", ("is_refusal",)): lambda k: Scenario(
        (replies.reply(stop_reason="refusal"),)
    ),
    ("reason", "replied", "perceive", ("is_pause_turn",)): lambda k: Scenario(
        (replies.reply(replies.text_block("Working."), stop_reason="pause_turn"), k.answer())
    ),
    ("reason", "replied", "perceive", ("is_compaction",)): lambda k: Scenario(
        (
            replies.reply({"type": "compaction", "content": "Summary."}, stop_reason="compaction"),
            k.answer(),
        )
    ),
    ("reason", "replied", "compact", ("is_context_exceeded", "can_compact")): lambda k: Scenario(
        (replies.text("Cut", stop_reason="model_context_window_exceeded"), k.answer())
    ),
    ("reason", "replied", "context_overflow", ("is_context_exceeded",)): lambda k: Scenario(
        tuple(replies.text("Cut", stop_reason="model_context_window_exceeded") for _ in range(2))
        if k.setup.settings.context.retry_on_overflow
        else (replies.text("Cut", stop_reason="model_context_window_exceeded"),)
    ),
    ("reason", "replied", "failed", ()): lambda k: Scenario(
        (replies.reply(replies.text_block("No tools here."), stop_reason="tool_use"),)
    ),
    ("reason", "model_failed", "cancelled", ("cancel_requested",)): lambda k: Scenario(
        cancel_on_entering="reason"
    ),
    ("reason", "model_failed", "compact", ("is_context_error", "can_compact")): lambda k: Scenario(
        (_TOO_LONG, k.answer())
    ),
    ("reason", "model_failed", "context_overflow", ("is_context_error",)): lambda k: Scenario(
        (_TOO_LONG, _TOO_LONG) if k.setup.settings.context.retry_on_overflow else (_TOO_LONG,)
    ),
    ("reason", "model_failed", "failed", ()): lambda k: Scenario(
        (Fault(401, "invalid x-api-key"),)
    ),
    ("act", "tools_done", "cancelled", ("cancel_requested",)): lambda k: Scenario(
        _acted(k).replies[:1], cancel_on_entering="act"
    ),
    ("act", "tools_done", "failed", ("tool_failed_fatally",)): lambda k: Scenario(
        (k.call(k.tool(lambda t: t.on_error == "fail")),)
    ),
    ("act", "tools_done", "awaiting_approval", ("approval_pending",)): lambda k: Scenario(
        (k.call(k.tool(k.pauses_in_act)),)
    ),
    ("act", "tools_done", "observe", ()): _through,
    ("observe", "observed", "cancelled", ("cancel_requested",)): lambda k: dataclasses.replace(
        _through(k, cancel="observe"), replies=_through(k).replies[:1]
    ),
    ("observe", "observed", "perceive", ()): _through,
    ("observe", "observed", "stalled", ("stall_persists",)): lambda k: _stall(k, persists=True),
    ("observe", "observed", "intervene", ("stall_detected",)): lambda k: _stall(k, persists=False),
    ("intervene", "intervened", "perceive", ()): lambda k: _stall(k, persists=False),
    ("intervene", "intervened", "cancelled", ("cancel_requested",)): lambda k: _intervened(
        k, cancel_on_entering="intervene"
    ),
    ("cancelled", "resumed", "intervene", ("cancelled_in_intervene",)): lambda k: Scenario(
        _stall(k, persists=False).replies[:-1],
        after_resume=(k.answer(),),
        cancel_on_entering="intervene",
        resume=1,
    ),
    ("compact", "compacted", "cancelled", ("cancel_requested",)): lambda k: Scenario(
        (_TOO_LONG,), cancel_on_entering="compact"
    ),
    ("compact", "compacted", "perceive", ()): lambda k: Scenario((_TOO_LONG, k.answer())),
    ("awaiting_approval", "resumed", "act", ()): lambda k: (
        Scenario((k.call(k.tool(k.pauses_in_act)),), after_resume=(k.answer(),), resume=1)
        if any(k.pauses_in_act(t) for t in k.agent.tools)
        else _taint_paused(k, after_resume=(k.answer(),), resume=1)
    ),
    ("act", "tools_done", "awaiting_approval", ("taint_approval_pending",)): lambda k: (
        _taint_paused(k)
    ),
    ("cancelled", "resumed", "perceive", ("cancelled_before_reply",)): lambda k: Scenario(
        after_resume=_end(k), cancel_on_entering="start", resume=1
    ),
    ("cancelled", "resumed", "reason", ("cancelled_after_reply",)): lambda k: Scenario(
        _end(k), cancel_after_reply=1, resume=1
    ),
    ("cancelled", "resumed", "act", ("cancelled_in_act",)): lambda k: Scenario(
        _acted(k).replies[:1],
        after_resume=(k.answer(),) if k.plain_tool else (),
        cancel_on_entering="act",
        resume=1,
    ),
    ("cancelled", "resumed", "observe", ("cancelled_in_observe",)): lambda k: _through(
        k, host=1, cancel="observe"
    ),
    ("cancelled", "resumed", "compact", ("cancelled_in_compact",)): lambda k: Scenario(
        (_TOO_LONG,), after_resume=(k.answer(),), cancel_on_entering="compact", resume=1
    ),
    ("perceive", "prepared", "summarize", ("summary_due",)): lambda k: _summarized(k),
    ("summarize", "summarized", "perceive", ()): lambda k: _summarized(k),
    ("summarize", "summarized", "cancelled", ("cancel_requested",)): lambda k: _stopped(
        _summarized(k, cancel_after_side_reply="summary")
    ),
    ("summarize", "summary_failed", "compact", ()): lambda k: _summarized(
        k, summaries=(replies.reply(stop_reason="end_turn"),)
    ),
    ("summarize", "summary_failed", "cancelled", ("cancel_requested",)): lambda k: _stopped(
        _summarized(
            k,
            summaries=(replies.reply(stop_reason="end_turn"),),
            cancel_on_entering="summarize",
        )
    ),
    ("cancelled", "resumed", "perceive", ("cancelled_in_summarize",)): lambda k: _summarized(
        k, cancel_on_entering="summarize", resume=1
    ),
    (
        "reason",
        "replied",
        "perceive",
        ("is_end_turn", "output_expected", "output_retry_left"),
    ): lambda k: Scenario((_text(), k.answer())),
    ("reason", "replied", "failed", ("is_end_turn", "output_expected")): lambda k: Scenario(
        tuple(_text() for _ in range(k.setup.settings.output_retries + 1))
    ),
    ("act", "tools_done", "failed", ("answer_retries_exhausted",)): lambda k: Scenario(
        tuple(k.bad_answer() for _ in range(k.setup.settings.output_retries + 1))
    ),
    ("reason", "replied", "continue", ("is_max_tokens", "can_continue")): lambda k: _continued(k),
    ("continue", "continued", "perceive", ()): lambda k: _continued(k),
    ("continue", "continued", "cancelled", ("cancel_requested",)): lambda k: _stopped(
        dataclasses.replace(_continued(k), cancel_on_entering="continue")
    ),
    ("cancelled", "resumed", "continue", ("cancelled_in_continue",)): lambda k: dataclasses.replace(
        _continued(k), cancel_on_entering="continue", resume=1
    ),
    ("observe", "observed", "verify", ("finish_claims_success", "verifier_configured")): (
        lambda k: Scenario((k.finish("completed"),))
    ),
    ("observe", "observed", "finished", ("finish_called",)): lambda k: Scenario(
        (k.finish("failed"),)
    ),
    ("verify", "verified", "finished", ("verdict_passed", "finish_called")): lambda k: Scenario(
        (k.finish("completed"),)
    ),
    ("verify", "verified", "completed", ("verdict_passed",)): lambda k: Scenario((_text(),)),
    ("reason", "replied", "verify", ("is_end_turn", "verifier_configured")): lambda k: Scenario(
        (_text(),)
    ),
    ("verify", "verified", "perceive", ()): lambda k: Scenario(
        (k.claim(), k.claim()), verdicts=(False,)
    ),
    ("verify", "verified", "failed", ("rejections_exhausted",)): lambda k: Scenario(
        tuple(k.claim() for _ in range(k.setup.settings.max_rejections + 1)),
        verdicts=(False,) * (k.setup.settings.max_rejections + 1),
    ),
    ("verify", "verified", "cancelled", ("cancel_requested",)): lambda k: Scenario(
        (k.claim(),), cancel_on_entering="verify"
    ),
    ("cancelled", "resumed", "verify", ("cancelled_in_verify",)): lambda k: Scenario(
        (k.claim(),), cancel_on_entering="verify", resume=1
    ),
    ("observe", "observed", "reflect", ("reflection_due",)): lambda k: _reflected(k),
    ("reflect", "reflected", "perceive", ()): lambda k: _reflected(k),
    ("reflect", "reflected", "cancelled", ("cancel_requested",)): lambda k: _stopped(
        _reflected(k, cancel_on_entering="reflect")
    ),
    ("cancelled", "resumed", "reflect", ("cancelled_in_reflect",)): lambda k: _reflected(
        k, cancel_on_entering="reflect", resume=1
    ),
    ("reason", "replied", "commit", ("is_end_turn", "calls_staged")): lambda k: _committed(
        k, _text()
    ),
    ("commit", "committed", "completed", ()): lambda k: _committed(k, _text(), unstage=True),
    ("observe", "observed", "commit", ("finish_claims_success", "calls_staged")): (
        lambda k: _committed(k, k.finish("completed"))
    ),
    ("commit", "committed", "finished", ("finish_called",)): lambda k: _committed(
        k, k.finish("completed")
    ),
    ("verify", "verified", "commit", ("verdict_passed", "calls_staged")): lambda k: _committed(
        k, k.claim()
    ),
    ("commit", "committed", "cancelled", ("cancel_requested",)): lambda k: _committed(
        k, k.claim(), cancel_on_entering="commit", resume=0
    ),
    ("cancelled", "resumed", "commit", ("cancelled_in_commit",)): lambda k: _committed(
        k, k.claim(), cancel_on_entering="commit", resume=1 + k.staged().requires_approval
    ),
    ("commit", "committed", "failed", ("commit_failure_ends_run",)): lambda k: _commit_fails(k),
    ("commit", "committed", "perceive", ("commit_failed",)): lambda k: _commit_fails(
        k, then=(k.answer(),)
    ),
    ("commit", "committed", "awaiting_approval", ("approval_pending",)): lambda k: _commit_paused(
        k
    ),
    ("awaiting_approval", "resumed", "commit", ("committing",)): lambda k: _commit_paused(
        k, resume=1
    ),
}
"""The shortest scenario for each row, given what the agent offers."""


def _committed(kit: _Kit, end: JSON, *, unstage: bool = False, **host: Any) -> Scenario:
    """A write staged, then `end` (the turn's end, a finish, a claim): `commit` runs it.
    With `unstage`, two are staged and the first taken back, so one runs. A write needing
    approval pauses the commit: the host resumes approving it (unless `resume` is given)."""
    tool = kit.staged()
    if unstage:
        reference = replies.tool_use("unstage", {"reference": "S1"}, id=replies.new_id("toolu"))
        staging: tuple[JSON, ...] = (kit.stage(tool, "1"), kit.stage(tool, "2"), reference)
    else:
        staging = (kit.stage(tool),)
    host.setdefault("resume", 1 if tool.requires_approval else 0)
    return Scenario((*staging, end), **host)


def _commit_fails(kit: _Kit, then: tuple[Answer, ...] = ()) -> Scenario:
    """A write staged, then the claim: the write fails when committed (`then`: the model's
    answers after the failure came back to it, under `on_failure="retry"`)."""
    tool = kit.staged()
    resume = 1 if tool.requires_approval else 0
    return Scenario((kit.stage(tool), kit.claim(), *then), failing=(tool.name,), resume=resume)


def _commit_paused(kit: _Kit, **host: Any) -> Scenario:
    """A staged write waits for a person in `commit`: a deferrable tool needing approval,
    or (`TaintPolicy`) untrusted text read before the write was staged."""
    if any(kit.stages(t) and t.requires_approval for t in kit.agent.tools):
        return Scenario((kit.stage(kit.staged(approval=True)), kit.claim()), **host)
    untrusted = kit.tool(lambda t: t.untrusted)
    return Scenario((kit.call(untrusted), kit.stage(kit.staged()), kit.claim()), **host)


def _summarized(kit: _Kit, **host: Any) -> Scenario:
    """Two calls, then the answer: the witness summarizes whatever the prompt's size (the
    threshold down to one token, one exchange kept), so the second prompt has one to replace."""
    context = dataclasses.replace(kit.setup.settings.context, summarize_at_tokens=1, keep_last=1)
    return Scenario((*kit.calls(2), kit.answer()), changes={"context": context}, **host)


def _taint_pair(agent: Agent[Any]) -> tuple[Tool, Tool] | None:
    """An untrusted tool and a side-effect tool its `TaintPolicy` gates, if it has both."""
    policy = agent._parts.settings.taint
    trusted = set(policy.trusted_tools) if policy is not None else set()
    untrusted = [t for t in agent.tools if t.untrusted]
    gated = [t for t in agent.tools if t.side_effect and not t.ends_run and t.name not in trusted]
    return (untrusted[0], gated[0]) if untrusted and gated else None


def _taint_paused(kit: _Kit, **host: Any) -> Scenario:
    """Untrusted text comes in, then a side-effect call the taint policy sends for approval:
    the run's own two calls, or a sub-agent's (which pauses the run by its taint row)."""
    pair = _taint_pair(kit.agent)
    if pair is not None:
        return Scenario((kit.call(pair[0]), kit.call(pair[1])), **host)
    for tool in kit.agent.tools:
        delegate = _delegate(tool)
        child = getattr(delegate, "agent", None)
        inner = _taint_pair(child) if child is not None else None
        if child is not None and inner is not None:
            child_kit = _Kit(child, setup_of(child))
            said = (child_kit.call(inner[0]), child_kit.call(inner[1]), child_kit.answer())
            return Scenario((kit.call(tool),), child=said, **host)
    raise LookupError("no taint-gated pause in this agent (nor a sub-agent's own)")


def _stopped(scenario: Scenario) -> Scenario:
    """The scenario cancelled for good: its last answer (the one after) is never asked for."""
    return dataclasses.replace(scenario, replies=scenario.replies[:-1])


def _cuts(kit: _Kit, usage: dict[str, int]) -> tuple[Answer, ...]:
    """Text replies cut at `max_tokens`, one more than the continuations allowed."""
    count = kit.setup.settings.max_continuations + 1
    return tuple(replies.text("Cut", stop_reason="max_tokens", usage=usage) for _ in range(count))


def _continued(kit: _Kit) -> Scenario:
    """A text reply cut at `max_tokens`, continued; then the answer."""
    return Scenario((replies.text("Cut", stop_reason="max_tokens", usage=_usage(10)), kit.answer()))


def _reflected(kit: _Kit, **host: Any) -> Scenario:
    """As many different calls as the reflection interval, then the answer."""
    interval = kit.setup.settings.reflection_interval or 1
    return Scenario((*kit.calls(interval), kit.answer()), **host)


def _pauses(tool: Tool) -> bool:
    from statemachine_agent.agent.subagents import may_pause

    return may_pause(tool)


def _delegate(tool: Tool) -> object | None:
    from statemachine_agent.agent.subagents import delegate_of

    return delegate_of(tool)


# -- playing a scenario ------------------------------------------------------------------


def _sample(schema: Mapping[str, Any], salt: str = "") -> JSON:
    """A small input that fits `schema`: each required property with a plain value
    (strings carry `salt`, so calls with different salts differ)."""
    props = schema.get("properties") or {}
    return {name: _value(props.get(name) or {}, salt) for name in schema.get("required") or ()}


def _value(schema: Mapping[str, Any], salt: str = "") -> Any:
    if "enum" in schema:
        return schema["enum"][0]
    kind = schema.get("type")
    kind = kind[0] if isinstance(kind, list) else kind
    return {
        "string": "x" + salt,
        "integer": 1 + len(salt),
        "number": 1 + len(salt),
        "boolean": True,
        "array": [],
        "object": _sample(schema, salt),
        "null": None,
    }.get(str(kind), "x" + salt)


def _stub(tool: Tool, failing: Sequence[str] = ()) -> Tool:
    """The tool by name, its effect replaced: "ok", or a failure where it ends the run
    (or the scenario says it fails)."""
    if tool.ends_run or _delegate(tool) is not None:
        return tool

    def handler(**_: Any) -> str:
        if tool.on_error == "fail" or tool.name in failing:
            raise RuntimeError(f"{tool.name} failed (witness)")
        return "ok"

    return dataclasses.replace(tool, handler=handler, retries=0)


class _Loop:
    """The loop's model: the scenario's answers in order, the host's cancel among them."""

    def __init__(self, inner: Any, token: CancelToken, cancel_after: int | None) -> None:
        self.name = inner.name
        self._inner = inner
        self._token = token
        self._cancel_after = cancel_after
        self._calls = 0

    def complete(self, request: ModelRequest) -> ModelReply:
        return self._after(self._inner.complete(request))

    async def acomplete(self, request: ModelRequest) -> ModelReply:
        return self._after(await self._inner.acomplete(request))

    def _after(self, reply: ModelReply) -> ModelReply:
        self._calls += 1
        if self._calls == self._cancel_after:
            self._token.cancel()
        return reply


class _Scripted:
    """The answers in order, each request checked by the strict validator first (what
    `ScriptedModel` does; it imports `testing`, so this module cannot import it)."""

    def __init__(self, answers: Sequence[Answer], name: str) -> None:
        self.name = name
        self._answers = list(answers)

    def complete(self, request: ModelRequest) -> ModelReply:
        problems = validate_request(request.to_api())
        if problems:
            raise AssertionError("invalid request: " + "; ".join(problems))
        if not self._answers:
            raise ModelError("the witness has no reply left", error_type="ScriptExhausted")
        answer = self._answers.pop(0)
        if isinstance(answer, Fault):
            raise answer.as_exception()
        return ModelReply.from_api(answer)

    async def acomplete(self, request: ModelRequest) -> ModelReply:
        return self.complete(request)


_SIDE_DEFAULTS: Mapping[str, Answer] = {
    "critic": replies.text("Keep going."),
    "summary": replies.text("Summary: the task was set and one tool was called."),
}
_SIDE_SUPPLY = 12
"""Default answers a side model has (a witness calls it a few times at most)."""


class _Sides:
    """The models beside the loop's (critic, summary model, sub-agents'): each scripted
    with the scenario's answers, then its defaults; through the real SDK, each against a
    strict server of its own, so their order never mixes with the loop's."""

    def __init__(self, scenario: Scenario, through_sdk: bool, tokens: list[CancelToken]) -> None:
        self._scenario = scenario
        self._sdk = through_sdk
        self._tokens = tokens
        self._servers: list[FakeAnthropicServer] = []
        self.invalid: list[str] = []

    def __enter__(self) -> _Sides:
        return self

    def __exit__(self, *exc: object) -> None:
        for server in self._servers:
            self.invalid.extend(str(problem) for problem in server.invalid)
            server.__exit__(None, None, None)

    def model(self, purpose: str, name: str, answers: Sequence[Answer]) -> Any:
        if self._sdk:
            server = FakeAnthropicServer().__enter__()
            self._servers.append(server)
            server.add(*(_served(a) for a in answers))
            inner: Any = server.model(name, max_retries=0)
        else:
            inner = _Scripted(answers, name)
        cancel = self._scenario.cancel_after_side_reply == purpose
        return _Side(inner, self._tokens, cancel)

    def answers(self, purpose: str) -> tuple[Answer, ...]:
        given = self._scenario.critic if purpose == "critic" else self._scenario.summaries
        return (*given, *(_SIDE_DEFAULTS[purpose] for _ in range(_SIDE_SUPPLY)))


class _Side:
    """A side model; cancels the run (the latest token) after its first answer if asked."""

    def __init__(self, inner: Any, tokens: list[CancelToken], cancel: bool) -> None:
        self.name = inner.name
        self._inner = inner
        self._tokens = tokens
        self._cancel = cancel

    def complete(self, request: ModelRequest) -> ModelReply:
        return self._after(self._inner.complete(request))

    async def acomplete(self, request: ModelRequest) -> ModelReply:
        return self._after(await self._inner.acomplete(request))

    def _after(self, reply: ModelReply) -> ModelReply:
        if self._cancel:
            self._cancel = False
            self._tokens[-1].cancel()
        return reply


def _child_answers(agent: Agent[Any]) -> tuple[Answer, ...]:
    """A sub-agent's default: call its tool needing approval (if any), then answer."""
    kit = _Kit(agent, setup_of(agent))
    pausing = [t for t in agent.tools if _pauses(t)]
    more = tuple(kit.answer() for _ in range(_SIDE_SUPPLY))  # a child called again answers
    return (*((kit.call(pausing[0]),) if pausing else ()), kit.answer(), *more)


def _stubbed(
    agent: Agent[Any],
    scenario: Scenario,
    token: CancelToken,
    server: FakeAnthropicServer | None,
    sides: _Sides,
) -> Agent[Any]:
    answers: Sequence[Answer] = (*scenario.replies, *scenario.after_resume)
    if server is not None:
        server.add(*(_served(a) for a in answers))
        inner: Any = server.model(agent.model.name, max_retries=0)
    else:
        inner = _Scripted(answers, agent.model.name)
    changes: dict[str, Any] = {
        "model": _Loop(inner, token, scenario.cancel_after_reply),
        "tools": [_stub_in(t, scenario, sides) for t in _own_tools(agent)],
        "fallback_models": (),
    }
    parts = agent._parts
    if parts.settings.has_verifier:
        changes["verify"] = _verifier(scenario.verdicts, parts.settings.max_rejections)
    reflection = agent.reflection
    if reflection is not None and reflection.critic is not None:
        named = reflection.critic if isinstance(reflection.critic, str) else reflection.critic.name
        critic = sides.model("critic", named, sides.answers("critic"))
        changes["reflection"] = dataclasses.replace(reflection, critic=critic)
    if agent.context.summarize_at_tokens is not None or "context" in scenario.changes:
        name = (agent.summary_model or agent.model).name
        changes["summary_model"] = sides.model("summary", name, sides.answers("summary"))
    changes.update(scenario.changes)
    changes["checkpointer"] = MemoryCheckpointer()  # a resume needs one; each play its own
    return agent.replace(**changes)


def _own_tools(agent: Agent[Any]) -> list[Tool]:
    """The agent's tools without the `final_result` its `output_type` adds (made again)."""
    from statemachine_agent.tools.output import OUTPUT_TOOL

    typed = agent.output_type is not None
    return [t for t in agent.tools if not (typed and t.name == OUTPUT_TOOL)]


def _verifier(verdicts: Sequence[bool], max_rejections: int) -> Any:
    """The verifier, its verdicts scripted: the scenario's in order, then passes."""
    from statemachine_agent.policy.verify import Claim, Verdict, VerifyPolicy

    left = list(verdicts)

    def verdict(claim: Claim) -> Verdict:
        ok = left.pop(0) if left else True
        return Verdict(ok, "" if ok else "Not yet: check the figures again.")

    return VerifyPolicy(verdict, max_rejections=max_rejections)


def _stub_in(tool: Tool, scenario: Scenario, sides: _Sides) -> Tool:
    """`_stub`, and a sub-agent's tool rebuilt around its agent with its model scripted."""
    delegate = _delegate(tool)
    if delegate is None:
        return _stub(tool, scenario.failing)
    child: Agent[Any] = delegate.agent  # type: ignore[attr-defined]
    given = scenario.child if scenario.child is not None else _child_answers(child)
    model = sides.model("child", child.model.name, given)
    stubbed = child.replace(
        model=model,
        tools=[_stub_in(t, scenario, sides) for t in _own_tools(child)],
        fallback_models=(),
    )
    return stubbed.as_tool(name=tool.name, description=tool.description)


def _served(answer: Answer) -> JSON | FakeError:
    if isinstance(answer, Fault):
        kind = "invalid_request_error" if answer.status == 400 else None
        return FakeError(answer.status, answer.message, error_type=kind)
    return answer
