"""Moved to `statemachine_agent.durable.dbos`; this name keeps working (the same module)."""

import sys

from statemachine_agent.durable import dbos
from statemachine_agent.durable.dbos import *  # noqa: F403

sys.modules[__name__] = dbos
