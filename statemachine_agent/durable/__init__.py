"""Running the same machine on a durable execution engine.

The machine and its guards do no I/O; everything that touches the world goes
through `Effects`. An engine adapter (`statemachine_agent.durable.dbos`,
`statemachine_agent.durable.temporal`) supplies effects that record each model
and tool call as a step or an activity, and rebuilds agents by name in its
workers from the factories registered here. This package holds the two
adapters and what they share (`registry`: agents by name; `codec`: plain
records across the engine boundary; `audit`: each run's audit file from a
worker; `batches`: tool calls in order-keeping batches; `devserver`: a local
Temporal server for tests and demos); the shared helpers need neither engine
installed. The effects port itself stays in `statemachine_agent.effects`.
"""

from statemachine_agent.durable.registry import (
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
from statemachine_agent.models.progress import ProgressModel

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
