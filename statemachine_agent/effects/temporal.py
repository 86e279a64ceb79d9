"""Moved to `statemachine_agent.durable.temporal`; this name keeps working (the same module)."""

import sys

from statemachine_agent.durable import temporal
from statemachine_agent.durable.temporal import *  # noqa: F403

sys.modules[__name__] = temporal
