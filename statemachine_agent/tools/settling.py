"""Tool results with accounts to settle with the run that called them.

Most tools return a value and are done. A few are part of the run themselves (a
sub-agent is the one today): what they did costs the calling run tokens and money,
and may leave it waiting for approvals. `act` records every outcome, so it must
apply those too, but it should not know which feature a tool belongs to: such a
result subclasses `Settling`, and `act` asks it for a `Settlement` (what to charge,
what the run now waits for, and the call's answer, if any) and applies it the same
way for any tool. The feature keeps its own bookkeeping in its `settle`; `act`
stays the one writer of the run's usage and cost besides the model calls.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from statemachine_agent.models.base import Usage
from statemachine_agent.tools.base import ToolCall, ToolOutcome

if TYPE_CHECKING:
    from statemachine_agent.machine.phase_env import PhaseEnv


@dataclass(frozen=True, slots=True)
class Settlement:
    """What `act` applies to the run for one call whose result was `Settling`."""

    answer: ToolOutcome | None
    """The call's answer; None leaves the call open: the run is checkpointed and pauses,
    and its resume carries the call on."""
    charge: Usage = field(default_factory=Usage)
    """Tokens the call spent on the run's behalf, added to the run's usage."""
    cost_usd: float = 0.0
    """Money the call spent on the run's behalf, added to the run's cost."""
    awaiting: tuple[str, ...] = ()
    """Further keys the run now waits for approval decisions on (`approval.awaiting`)."""
    tainted: bool = False
    """The answer carries untrusted text (a tainted sub-agent's free-text answer): the run
    notes the call as an untrusted source (see `TaintPolicy`)."""


class Settling(abc.ABC):
    """A tool result (`ToolOutcome.data`) that settles with its run before it is recorded.

    Nominal, not a protocol: a host's own result that happens to have a `settle`
    method is an ordinary value, never called by `act`.
    """

    __slots__ = ()

    @abc.abstractmethod
    def settle(self, env: PhaseEnv, call: ToolCall) -> Settlement:
        """Do this result's own bookkeeping on `env`'s run and say what `act` applies.

        Called once per recorded result, in the run's `act` phase; must not write the
        run's usage, cost or awaiting list itself (that is what it returns).
        """
