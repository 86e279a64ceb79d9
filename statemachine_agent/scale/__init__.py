"""Moved to `statemachine_agent.durable`; this name keeps working."""

from statemachine_agent.durable import *  # noqa: F403
from statemachine_agent.durable import __all__ as __all__
