"""The per-run settings guards read: plain, frozen data copied into every run record.

Guards may only read the record, so whatever a guard needs to know about the
agent's configuration (limits, which features are on) is carried here rather
than looked up on the agent.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from statemachine_agent.policy.budget import Budget
from statemachine_agent.policy.commit import CommitPolicy
from statemachine_agent.policy.context import ContextPolicy
from statemachine_agent.policy.stall import StallPolicy
from statemachine_agent.policy.taint import TaintPolicy


@dataclass(frozen=True, slots=True)
class RunSettings:
    budget: Budget = field(default_factory=Budget)
    stall: StallPolicy | None = field(default_factory=StallPolicy)
    """Stall detection; on by default, `None` switches it off."""
    context: ContextPolicy = field(default_factory=ContextPolicy)
    reflection_interval: int | None = None
    """Pass through `reflect` every N iterations."""
    has_critic: bool = False
    has_verifier: bool = False
    max_rejections: int = 2
    """Verifier rejections allowed before the run ends in `failed`."""
    max_continuations: int = 0
    """Times a text reply cut at max_tokens is continued before ending in `truncated`."""
    output_retries: int = 3
    """Invalid final answers (a run-ending tool's input rejected) before `failed`."""
    output_expected: bool = False
    """The answer must be a typed value given through `final_result` (the run has an
    `output_type`), so a plain text answer is no answer; set by the driver from the
    run's services, since a per-run `output_type=` decides it as much as the agent's."""
    commit: CommitPolicy | None = None
    """Side effects last: calls of deferrable tools are staged and run in `commit`
    (set when the agent has a deferrable tool, or `Agent(commit=...)`); None: off."""
    taint: TaintPolicy | None = None
    """What a side-effect call may do once untrusted text entered the run (`Agent(taint=)`;
    `None`: no gate, as for a record made without an agent)."""

    def __post_init__(self) -> None:
        if self.reflection_interval is not None and self.reflection_interval < 1:
            raise ValueError("reflection_interval must be at least 1 or None")
        if min(self.max_rejections, self.max_continuations, self.output_retries) < 0:
            raise ValueError("max_rejections, max_continuations and output_retries must be >= 0")
