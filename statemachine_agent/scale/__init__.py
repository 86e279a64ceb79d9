"""Running the same machine on a durable execution engine.

The machine and its guards do no I/O; everything that touches the world goes
through `Effects`. An engine adapter (`statemachine_agent.effects.dbos`,
`statemachine_agent.effects.temporal`) supplies effects that record each model
and tool call as a step or an activity, and rebuilds agents by name in its
workers from the factories registered here. This package holds what the
adapters share and needs neither engine installed.
"""

from statemachine_agent.scale.progress import ProgressModel
from statemachine_agent.scale.registry import (
    AgentCache,
    AgentFactory,
    UnknownAgentError,
    WaitsForApproval,
    agent_factory,
    build_agent,
    register_agent,
    registered_agents,
    unregister_agent,
)

__all__ = [
    "AgentCache",
    "AgentFactory",
    "ProgressModel",
    "UnknownAgentError",
    "WaitsForApproval",
    "agent_factory",
    "build_agent",
    "register_agent",
    "registered_agents",
    "unregister_agent",
]
