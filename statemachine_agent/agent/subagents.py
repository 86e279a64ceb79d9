"""Sub-agents: an agent as a tool of another (`Agent.as_tool`).

Calling the tool starts a child run: a run of the other agent with its own record,
machine and trail, linked to the parent (`parent_run_id` and the tool_use id on its
record, its checkpoints and every one of its events). The child is part of the
parent's run, not a world of its own:

- its events go where the parent's go (the same audit file and hash chain, the same
  sinks), each stamped with the link, so a report shows it under its tool call;
- it is checkpointed in the parent's store, so a parent resumed in another process
  finds it;
- what the parent has left of its cost, token and time limits caps the child's own,
  and what the child spends is charged to the parent when the tool returns;
- cancelling the parent (its `CancelToken`) cancels the child;
- a child that pauses for approval pauses the parent: its pending calls are listed
  as the parent's, keyed `<parent tool_use id>/<child tool_use id>`, and resuming
  the parent with decisions for them resumes the child.

The handler here only starts or resumes the child and reports a `SubRun`. What
that means for the parent is settled when the parent's `act` records it: the
`SubRun` is a `Settling` result, so `SubRun.settle` (here, with the rest of the
feature) notes the child under the parent's `subagents` and names the charge, the
pause and the tool result, which `act` applies as it would for any tool. The parent
reaches the handler as the calling run of its tool scope (`calling_run`), and the
agent hands the handler what it needs to start and drive a child (`Agent.as_tool`),
so neither `act` nor this module imports the other's side of the loop.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from statemachine_agent.agent._records import new_record
from statemachine_agent.machine.ends import END_STATES, RESUMABLE_STATES, SUCCESS_STATES
from statemachine_agent.machine.resume import prepare_resume
from statemachine_agent.models.base import Usage
from statemachine_agent.models.streaming import muted
from statemachine_agent.persistence.base import load_record
from statemachine_agent.persistence.delta import CheckpointWriter
from statemachine_agent.policy.approval import Decision, decision_from_plain
from statemachine_agent.policy.budget import Budget
from statemachine_agent.policy.taint import DEFAULT_TAINT, TaintPolicy, carries_free_text
from statemachine_agent.tools.base import Tool, ToolCall, ToolOutcome
from statemachine_agent.tools.output import OUTPUT_TOOL
from statemachine_agent.tools.registry import ToolError
from statemachine_agent.tools.scope import RunContext, calling_run
from statemachine_agent.tools.settling import Settlement, Settling

if TYPE_CHECKING:
    from statemachine_agent.agent import Agent
    from statemachine_agent.agent._parts import AgentParts
    from statemachine_agent.machine.cancel import CancelToken
    from statemachine_agent.machine.phase_env import AgentDeps, PhaseEnv
    from statemachine_agent.machine.result import RunResult
    from statemachine_agent.machine.run import RunRecord

KEY_SEPARATOR = "/"
"""Joins the parent's tool_use id and the child's in the parent's pending keys."""

TASK_SCHEMA: Mapping[str, Any] = {
    "type": "object",
    "properties": {
        "task": {
            "type": "string",
            "description": "The task for the sub-agent, with everything it needs to know: "
            "it sees nothing of this conversation but this text.",
        }
    },
    "required": ["task"],
    "additionalProperties": False,
}


class DriveChild(Protocol):
    """Drives a child's record to its end: `Agent.as_tool` hands over the driver of every
    run (`_driving.drive`), which imports the engine and so the phases; this module,
    which `act` runs, never imports it."""

    def __call__(
        self,
        parts: AgentParts,
        record: RunRecord,
        *,
        cancel: CancelToken | None,
        writer: CheckpointWriter | None,
        deps: AgentDeps,
        host_deps: Any,
        parent: PhaseEnv,
    ) -> Awaitable[RunResult]: ...


@dataclass(frozen=True, slots=True)
class SubRun(Settling):
    """How a child run came back, as the parent's `act` records it."""

    run_id: str
    agent: str
    end_state: str
    text: str
    reason: str
    usage: Usage
    cost_usd: float
    """The child's totals so far (the parent is charged what it was not charged yet)."""
    pending: tuple[dict[str, Any], ...] = ()
    """The child's calls waiting for approval, keyed as the child names them."""
    salvaged: bool = False
    """A salvage call was made for the child (or for one of its own sub-agents)."""
    data: Any = None
    """The child's structured result (`finish`'s input, or its typed answer's JSON form)."""
    answer: tuple[str, bool] | None = None
    """The tool result as recorded (content, is_error): a replay gives it back as it was."""
    tainted: bool = False
    """The child's run was tainted (untrusted text entered it, or its parent's had)."""
    declassified: bool = False
    """The child answered with a typed value whose type carries no free text (enums,
    booleans, numbers, bounded strings): the quarantined-reader pattern, so even a
    tainted child's answer does not taint the parent."""

    def settle(self, env: PhaseEnv, call: ToolCall) -> Settlement:
        """Note the child under the parent's `subagents`, charge the parent what the child
        spent since it was last charged, and answer the call, or (the child paused for
        approval, or was cancelled with the parent) leave it open for the parent's
        resume to carry on, its pending calls the parent's under child keys."""
        run = env.state
        link = dict(run.subagents.runs.get(call.id) or {"run_id": self.run_id, "agent": self.agent})
        usage = minus(self.usage, Usage.from_dict(link.get("usage") or {}))
        cost = self.cost_usd - float(link.get("cost_usd") or 0.0)
        link.update(end_state=self.end_state, usage=self.usage.to_dict(), cost_usd=self.cost_usd)
        link.pop("pending", None)
        parent_cancelled = env.cancel is not None and env.cancel.cancelled
        with_parent = self.end_state == "cancelled" and parent_cancelled
        paused = self.end_state == "awaiting_approval" or with_parent
        awaiting: tuple[str, ...] = ()
        if self.end_state == "awaiting_approval":
            pending = [
                {**p, "tool_use_id": child_key(call.id, str(p["tool_use_id"])),
                 "run_id": p.get("run_id", self.run_id), "agent": p.get("agent", self.agent)}
                for p in self.pending
            ]  # fmt: skip
            link["pending"] = pending
            awaiting = tuple(p["tool_use_id"] for p in pending)
            policy = run.settings.taint
            if policy is not None and policy.side_effects == "approve":
                # the child's taint-gated calls pause the parent by its taint row too
                gated = [p["tool_use_id"] for p in pending if p.get("tainted_by")]
                run.taint.gated += [k for k in gated if k not in run.taint.gated]
        run.subagents.runs = {**run.subagents.runs, call.id: link}
        elapsed = env.deps.effects.monotonic() - env.started_at
        over = run.budget.exhausted(
            iterations=0, cost_usd=run.cost_usd + cost,
            total_tokens=(run.usage + usage).total_tokens, elapsed_s=elapsed,
        )  # fmt: skip
        if self.salvaged and over is not None and run.subagents.limit_salvage is None:
            run.subagents.limit_salvage = {"run_id": self.run_id, "text": self.text}
        tainted = not paused and self.tainted and not self.declassified
        env.emitter.emit("subagent.ended", iteration=run.iteration, tool_use_id=call.id,
                         child_run_id=self.run_id, agent=self.agent, end_state=self.end_state,
                         usage=usage.to_dict(), cost_usd=cost, paused=paused,
                         salvaged=self.salvaged, taints_parent=tainted)  # fmt: skip
        answer = None
        if not paused:
            content, is_error = outcome_text(self)
            answer = ToolOutcome(
                tool_use_id=call.id, name=call.name, content=content, is_error=is_error,
                error_kind="raised" if is_error else None,
            )  # fmt: skip
        return Settlement(answer, charge=usage, cost_usd=cost, awaiting=awaiting, tainted=tainted)


def child_run_id(parent_run_id: str, tool_use_id: str) -> str:
    """The child's run id: derived from its call, so a parent resumed after a crash
    finds the child it had started."""
    return f"{parent_run_id}.{tool_use_id}"


def child_key(tool_use_id: str, key: str) -> str:
    """The parent's name for a child's pending call."""
    return f"{tool_use_id}{KEY_SEPARATOR}{key}"


def take_decisions(decisions: dict[str, dict[str, Any]], tool_use_id: str) -> dict[str, Decision]:
    """Remove from the parent's stored decisions those meant for the child started by
    `tool_use_id`, and return them keyed as the child names its calls."""
    prefix = child_key(tool_use_id, "")
    mine = [key for key in decisions if key.startswith(prefix)]
    taken: dict[str, Decision] = {}
    for key in mine:
        answer = decision_from_plain(decisions.pop(key))
        if not isinstance(answer, Decision):  # pragma: no cover - stored decisions never defer
            continue
        taken[key[len(prefix) :]] = answer
    return taken


class Delegate:
    """The handler of an `as_tool` tool: starts or resumes a run of `agent` (made with
    `parts`), driven by `drive`."""

    def __init__(self, agent: Agent, parts: AgentParts, drive: DriveChild) -> None:
        self.agent = agent
        self.parts = parts
        self.drive = drive

    async def run(self, task: str, run_context: RunContext[Any]) -> Any:
        parent = calling_run()
        if parent is None:  # no parent run (a direct `registry.execute`): a plain run
            result = await self.agent.arun(
                task, deps=run_context.deps, metadata=dict(run_context.metadata)
            )
            return result.text or result.reason
        call_id = run_context.tool_call_id
        decisions = take_decisions(parent.state.approval.decisions, call_id)
        return await drive_child(self, parent, call_id, task, decisions)


def agent_tool(
    agent: Agent, parts: AgentParts, drive: DriveChild, *, name: str, description: str
) -> Tool:
    """The tool that runs `agent` as a sub-agent (see `Agent.as_tool`)."""
    return Tool(
        name=name,
        description=description,
        input_schema=TASK_SCHEMA,
        handler=Delegate(agent, parts, drive).run,
        timeout=None,  # the child's time is capped by the budget, not by a tool timeout
        sequential=True,  # each child is capped by what the ones before it left
    )


def delegate_of(tool: Tool) -> Delegate | None:
    """The sub-agent behind a tool made by `as_tool`, if it is one."""
    owner = getattr(tool.handler, "__self__", None)
    return owner if isinstance(owner, Delegate) else None


def may_pause(tool: Tool) -> bool:
    """Whether a call of `tool` may end its run in `awaiting_approval`: it needs approval,
    or it is a sub-agent with such a tool (at any depth)."""
    if tool.requires_approval:
        return True
    delegate = delegate_of(tool)
    return delegate is not None and any(may_pause(t) for t in delegate.agent.tools)


def may_pause_for_taint(tools: Iterable[Tool], taint: TaintPolicy | None) -> bool:
    """Whether `taint` can pause a run of these tools: it sends gated calls for approval,
    something may bring untrusted text (an `untrusted` tool or toolset, here or inside a
    sub-agent) and something has side effects (a tool marked so, or a toolset, whose
    tools are only known when a run lists them; here or inside a sub-agent)."""
    if taint is None or taint.side_effects != "approve":
        return False
    return _reaches(tools, lambda t: t.untrusted, "untrusted") and _reaches(
        tools, lambda t: t.side_effect and t.name not in taint.trusted_tools, None
    )


def _reaches(tools: Iterable[Tool], test: Callable[[Tool], bool], toolset_flag: str | None) -> bool:
    """Some tool passes `test`, here or in a sub-agent at any depth; a toolset counts when
    it has `toolset_flag` set (any toolset when the flag is None)."""
    for t in tools:
        delegate = delegate_of(t)
        if test(t) or (delegate is not None and _reaches(delegate.agent.tools, test, toolset_flag)):
            return True
    toolsets = getattr(tools, "toolsets", ())
    return any(toolset_flag is None or getattr(ts, toolset_flag, False) for ts in toolsets)


async def drive_child(
    child: Delegate,
    parent: PhaseEnv,
    tool_use_id: str,
    task: str,
    decisions: Mapping[str, Decision],
) -> SubRun:
    """Start the child of one call, or resume it (paused, cancelled or interrupted by a
    crash of the parent), capped by what the parent has left; return how it ended."""
    agent, parts = child.agent, child.parts
    prun = parent.state
    link = prun.subagents.runs.get(tool_use_id) or {}
    run_id = str(link.get("run_id") or child_run_id(prun.run_id, tool_use_id))
    store = parent.deps.checkpointer or agent.checkpointer
    deps = dataclasses.replace(parts.deps, checkpointer=store)
    writer: CheckpointWriter | None = None
    if store is not None and any(True for _ in store.bodies(run_id)):
        record = load_record(store, run_id)
        if record.state in END_STATES and record.state not in RESUMABLE_STATES:
            return _ended(record, agent.name)  # it ended, but the parent crashed before noting it
        writer = CheckpointWriter.resumed(record)
        prepare_resume(record, decisions)
    else:
        record = new_record(parts, task, (), run_id, prun.metadata)
        record.parent = {"run_id": prun.run_id, "tool_use_id": tool_use_id}
        inherit_taint(record, prun)
    charged = Usage.from_dict(link.get("usage") or {}), float(link.get("cost_usd") or 0.0)
    budget = capped(agent.budget, parent, record, charged)
    record.settings = dataclasses.replace(record.settings, budget=budget)
    parent.emitter.emit(
        "subagent.started", iteration=prun.iteration, tool_use_id=tool_use_id,
        child_run_id=run_id, agent=agent.name, resumed=writer is not None,
        budget={"max_iterations": budget.max_iterations, "max_cost_usd": budget.max_cost_usd,
                "max_total_tokens": budget.max_total_tokens, "max_seconds": budget.max_seconds},
    )  # fmt: skip
    with muted():  # the child's replies are not the reply a watcher of the parent reads
        result = await child.drive(
            parts, record, cancel=parent.cancel, writer=writer, deps=deps,
            host_deps=parent.host_deps, parent=parent,
        )  # fmt: skip
    details = result.details or {}
    salvage = details.get("salvage")
    spec = deps.output
    typed = (
        spec is not None
        and result.end_state in SUCCESS_STATES
        and record.notes.get("finish_tool") == OUTPUT_TOOL
        and not carries_free_text(spec.schema, extras_dropped=spec.adapter is not None)
    )
    return SubRun(
        run_id=result.run_id,
        agent=agent.name,
        end_state=result.end_state,
        text=result.text,
        reason=result.reason,
        usage=result.usage,
        cost_usd=result.cost_usd,
        pending=tuple(details.get("pending") or ()),
        salvaged=isinstance(salvage, Mapping) and ("usage" in salvage or "run_id" in salvage),
        data=result.data,
        tainted=record.taint.tainted,
        declassified=typed,
    )


def inherit_taint(record: RunRecord, parent: RunRecord) -> None:
    """A child starts with its parent's taint (its task was written by a model that may
    have read untrusted text), and with its parent's `TaintPolicy` unless its agent was
    given one of its own."""
    record.taint.sources = [dict(s) for s in parent.taint.sources]
    if record.settings.taint is DEFAULT_TAINT:
        record.settings = dataclasses.replace(record.settings, taint=parent.settings.taint)


def capped(
    own: Budget, parent: PhaseEnv, record: RunRecord, charged: tuple[Usage, float]
) -> Budget:
    """The child's budget: its own, with each cost, token and time limit lowered to what
    the parent has left (plus what the child had already spent and been charged for).

    Raises `ToolError` (an answer to the parent's model) when the parent has nothing
    left under one of those limits: a child started then could only overspend.
    """
    prun = parent.state
    limits = prun.budget
    usage, cost = charged
    changes: dict[str, Any] = {}
    if limits.max_cost_usd is not None:
        left = limits.max_cost_usd - prun.cost_usd
        if left <= 0:
            raise ToolError(_spent(f"cost ${prun.cost_usd:.4f} of ${limits.max_cost_usd:.4f}"))
        changes["max_cost_usd"] = _lower(own.max_cost_usd, cost + left)
    if limits.max_total_tokens is not None:
        used = prun.usage.total_tokens
        left_tokens = limits.max_total_tokens - used
        if left_tokens <= 0:
            raise ToolError(_spent(f"{used} of {limits.max_total_tokens} tokens"))
        cap = usage.total_tokens + left_tokens
        changes["max_total_tokens"] = int(_lower(own.max_total_tokens, cap))
    if limits.max_seconds is not None:
        elapsed = parent.deps.effects.monotonic() - parent.started_at
        left_s = limits.max_seconds - elapsed
        if left_s <= 0:
            raise ToolError(_spent(f"{elapsed:.1f} s of {limits.max_seconds:.1f} s"))
        changes["max_seconds"] = _lower(own.max_seconds, record.elapsed_s + left_s)
    return dataclasses.replace(own, **changes) if changes else own


def _lower(own: float | None, cap: float) -> float:
    return cap if own is None else min(own, cap)


def _spent(figures: str) -> str:
    return (
        f"Not run: this run's budget is spent ({figures}); a sub-agent started now could "
        "only overspend it. Answer with what you have."
    )


def _ended(record: RunRecord, agent: str) -> SubRun:
    """A child that had ended, told from its record (its last assistant text)."""
    text = ""
    for message in reversed(record.messages):
        if message.get("role") == "assistant":
            content = message.get("content")
            blocks = content if isinstance(content, list) else [{"type": "text", "text": content}]
            text = "".join(str(b.get("text", "")) for b in blocks if b.get("type") == "text")
            break
    return SubRun(
        run_id=record.run_id,
        agent=agent,
        end_state=record.state,
        text=text,
        reason=f"the sub-agent's run had already ended ({record.state})",
        usage=record.usage,
        cost_usd=record.cost_usd,
        tainted=record.taint.tainted,
    )


def outcome_text(sub: SubRun) -> tuple[str, bool]:
    """What the parent's model reads of a child that ended, and whether it is an error."""
    if sub.answer is not None:
        return sub.answer
    if sub.end_state in SUCCESS_STATES:
        if isinstance(sub.data, Mapping) and not sub.text:  # a typed answer, or finish's input
            answer = sub.data.get("result", sub.data)
            return json.dumps(answer, ensure_ascii=False, default=str), False
        return sub.text or sub.reason, False
    head = f"The sub-agent {sub.agent!r} stopped early ({sub.end_state}): {sub.reason}."
    if sub.text:
        return f"{head}\nIts summary of what it found:\n{sub.text}", False
    return head, True


def minus(total: Usage, part: Usage) -> Usage:
    """`total - part`, field by field (what a child spent since it was last charged)."""
    return Usage(
        total.input_tokens - part.input_tokens,
        total.output_tokens - part.output_tokens,
        total.cache_read_tokens - part.cache_read_tokens,
        total.cache_write_5m_tokens - part.cache_write_5m_tokens,
        total.cache_write_1h_tokens - part.cache_write_1h_tokens,
    )
