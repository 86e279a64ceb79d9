"""What a configuration lets a guard be: the reachability rule each guard declares.

A guard answers for one run record; the rule beside it answers for a whole
configuration: can any run of an agent set up like this make the guard true? A
rule returns `None` when it can, or the reason it cannot, naming the setting that
rules it out ("`stall=None`"). `agent.reachability` folds the rules over the
table to say which rows an agent can take, so the rule lives next to its guard
(`@requires(...)` in `machine/guards.py`) and cannot drift from it; a test fails
for a guard without one.

The rules assume a model that honours the request: it calls only the tools it is
offered, and answers a forced tool choice with that tool. They read `Setup`, plain
data the analysis builds from an agent, so this module imports nothing of the agent.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from statemachine_agent.machine.settings import RunSettings


@dataclass(frozen=True, slots=True)
class Setup:
    """What the rules may read of an agent's configuration (and of the analysis so far)."""

    settings: RunSettings = field(default_factory=RunSettings)
    """The settings every run record of the agent carries."""
    offers_tools: bool = False
    """The model is offered at least one tool (the final-answer tool included)."""
    may_pause: bool = False
    """A call may pause the run in `act`: a tool needs approval (and is not staged, as a
    deferrable one is when the agent commits), or a sub-agent may pause (at any depth)."""
    commit_pauses: bool = False
    """A staged call may wait for a person in `commit`: a deferrable tool needs approval,
    or `TaintPolicy` gates one (asked when the batch is committed, not when staged)."""
    staged_approval: bool = False
    """Some deferrable tool needs approval (staged, so asked for in `commit`, not `act`)."""
    fatal_tools: bool = False
    """Some tool is configured with `on_error="fail"`."""
    ends_run: bool = False
    """Some tool ends the run with its input (`finish`, or `final_result` of an output type)."""
    may_taint: bool = False
    """Some tool returns untrusted text (`untrusted=True`), itself or inside a sub-agent."""
    taint_gates: bool = False
    """A call `TaintPolicy` would gate may come: a `side_effect=True` tool outside its
    `trusted_tools`, or a sub-agent whose own taint-gated call pauses it."""
    states: frozenset[str] = frozenset()
    """The states the analysis has found reachable so far (for rules about where a run was)."""
    source: str | None = None
    """The state of the row being judged: a guard some states share (`approval_pending`,
    in `act` and in `commit`) may be possible in one and not the other."""


Rule = Callable[[Setup], "str | None"]
"""`None` when the configuration can make the guard true, else the reason it cannot."""

G = TypeVar("G", bound=Callable[..., bool])

RULE_ATTRIBUTE = "requires"
"""The attribute `@requires` sets on a guard (read by the analysis and its test)."""

CONSTANT_ATTRIBUTE = "constant"
"""Set on a guard whose verdict only reads the settings: true in every run it can be."""


def requires(rule: Rule, *, constant: bool = False) -> Callable[[G], G]:
    """Declare which configurations can make the decorated guard true.

    `constant=True` says the guard reads only the settings, so where its rule allows
    it, it holds for every run: a row below one guarded by it can be shadowed.
    """

    def mark(guard: G) -> G:
        setattr(guard, RULE_ATTRIBUTE, rule)
        setattr(guard, CONSTANT_ATTRIBUTE, constant)
        return guard

    return mark


def rule_of(guard: Callable[..., bool]) -> Rule | None:
    """The guard's declared rule, or `None` when it declares none (a test refuses that)."""
    rule = getattr(guard, RULE_ATTRIBUTE, None)
    return rule if callable(rule) else None


def is_constant(guard: Callable[..., bool]) -> bool:
    return bool(getattr(guard, CONSTANT_ATTRIBUTE, False))


# -- the rules the guards share ------------------------------------------------------


def always(setup: Setup) -> str | None:
    """Any configuration: a host action (a cancel), a model's stop, an API fault."""
    return None


def tools_offered(setup: Setup) -> str | None:
    return None if setup.offers_tools else "no tool is offered to the model"


def verifier(setup: Setup) -> str | None:
    return None if setup.settings.has_verifier else "no verifier configured (`verify=None`)"


def continuations(setup: Setup) -> str | None:
    if setup.settings.max_continuations > 0:
        return None
    return "`max_continuations=0`"


def compaction_retry(setup: Setup) -> str | None:
    if setup.settings.context.retry_on_overflow:
        return None
    return "`ContextPolicy.retry_on_overflow=False`"


def summarizing(setup: Setup) -> str | None:
    if setup.settings.context.summarize_at_tokens is not None:
        return None
    return "`ContextPolicy.summarize_at_tokens` is not set"


def fatal_tool(setup: Setup) -> str | None:
    return None if setup.fatal_tools else "no tool has `on_error='fail'`"


def run_ending_tool(setup: Setup) -> str | None:
    if setup.ends_run:
        return None
    return "no tool ends the run (no `finish` tool, no `output_type`)"


def typed_output(setup: Setup) -> str | None:
    return None if setup.settings.output_expected else "no `output_type`"


def output_retry(setup: Setup) -> str | None:
    if not setup.settings.output_expected:
        return "no `output_type`"
    return None if setup.settings.output_retries > 0 else "`output_retries=0`"


def approval(setup: Setup) -> str | None:
    """Calls wait for a person: in `commit`, staged ones; elsewhere, calls `act` ran."""
    if setup.source == "commit":
        if setup.commit_pauses:
            return None
        return (
            "no staged call waits for approval (no deferrable tool has "
            "`requires_approval=True`, nor does `TaintPolicy` gate one)"
        )
    if setup.may_pause:
        return None
    if setup.staged_approval:
        return (
            "every tool requiring approval is deferrable: its calls are staged, and approval "
            "is asked in `commit`"
        )
    return "no tool requires approval (nor does any sub-agent's)"


def stall_policy(setup: Setup) -> str | None:
    return None if setup.settings.stall is not None else "`stall=None`"


def stall_interventions(setup: Setup) -> str | None:
    policy = setup.settings.stall
    if policy is None:
        return "`stall=None`"
    return None if policy.max_interventions > 0 else "`StallPolicy.max_interventions=0`"


def reflection(setup: Setup) -> str | None:
    if setup.settings.reflection_interval is not None:
        return None
    return "no reflection interval (`reflection=None`)"


def commits(setup: Setup) -> str | None:
    """Calls can be staged (side effects last), so the commit rows can fire."""
    return None if setup.settings.commit is not None else "no deferrable tool (`commit=None`)"


def commit_pause(setup: Setup) -> str | None:
    """A run paused in `commit` (a staged call waiting for a person) resumes there."""
    why = commits(setup)
    if why is not None or setup.commit_pauses:
        return why
    return (
        "no staged call waits for approval (no deferrable tool has `requires_approval=True`, "
        "nor does `TaintPolicy` gate one)"
    )


def commit_failure_fails(setup: Setup) -> str | None:
    """A staged call that fails when committed ends the run (`on_failure="fail"`)."""
    policy = setup.settings.commit
    if policy is None:
        return "no deferrable tool (`commit=None`)"
    return None if policy.on_failure == "fail" else "`CommitPolicy(on_failure='retry')`"


def commit_failure_retries(setup: Setup) -> str | None:
    """A staged call that fails when committed goes back to the model (`on_failure="retry"`);
    under "fail" the row above ends the run at every such failure."""
    policy = setup.settings.commit
    if policy is None:
        return "no deferrable tool (`commit=None`)"
    if policy.on_failure == "retry":
        return None
    return (
        "`CommitPolicy(on_failure='fail')`: a failed staged call ends the run (the row "
        "above), none goes back to the model"
    )


def taint_pause(setup: Setup) -> str | None:
    """A taint-gated pause: approval asked for, untrusted text able to enter, and a
    side-effect call for the policy to gate."""
    policy = setup.settings.taint
    if policy is None:
        return "`taint=None`"
    if policy.side_effects != "approve":
        return f"`TaintPolicy(side_effects={policy.side_effects!r})`"
    if not setup.may_taint:
        return "no tool returns untrusted text (`untrusted=True`), nor does any sub-agent's"
    if not setup.taint_gates:
        return (
            "no `side_effect=True` tool outside `TaintPolicy.trusted_tools`, nor a sub-agent "
            "that pauses on one"
        )
    return None


def entered(state: str) -> Rule:
    """The run was somewhere: `state` must itself be reachable."""

    def rule(setup: Setup) -> str | None:
        return None if state in setup.states else f"`{state}` is unreachable"

    rule.__name__ = f"entered_{state}"
    return rule
