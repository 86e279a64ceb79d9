"""`python -m statemachine_agent.cli`: the console script, for a venv without it on PATH."""

import sys

from statemachine_agent.cli.app import main

sys.exit(main())
