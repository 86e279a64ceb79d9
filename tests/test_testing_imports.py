"""Scripting a run loads no model SDK (issue 26).

`anthropic` and `openai` are big imports (hundreds of modules), and a test that
only scripts replies, or a demo that runs offline, should not pay for them, nor
need them installed to start. Each check runs in a fresh interpreter, since this
test session has imported both SDKs long ago.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

SDKS = ("anthropic", "openai")

SCRIPTED_RUN = """
from statemachine_agent import Agent
from statemachine_agent.models.scripted import ScriptedModel
from statemachine_agent.testing import replies

def add(a: int, b: int) -> int:
    '''Add two numbers.'''
    return a + b

script = [replies.tool_use("add", {"a": 2, "b": 3}), replies.text("5")]
result = Agent(ScriptedModel(script, validate=False), tools=[add]).run("2+3?")
assert result.end_state == "completed", result
"""


def sdks_loaded_after(code: str) -> list[str]:
    """The SDK packages in `sys.modules` after running `code` in a new interpreter."""
    report = f"print(json.dumps(sorted(m for m in {SDKS!r} if m in sys.modules)))"
    probe = f"{code}\nimport json, sys\n{report}"
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    loaded: list[str] = json.loads(done.stdout.strip().splitlines()[-1])
    return loaded


class TestNoSdkImported:
    @pytest.mark.parametrize(
        "code",
        [
            "from statemachine_agent.testing import replies",
            "import statemachine_agent.testing",
            "from statemachine_agent.testing import validator",
            "from statemachine_agent.testing import openai_replies, openai_validator",
        ],
    )
    def test_importing_the_testing_helpers(self, code: str) -> None:
        """Importing the reply builders, the package or the validators loads no SDK."""
        assert sdks_loaded_after(code) == []

    def test_a_scripted_run(self) -> None:
        """A scripted run with tools, end to end, loads no SDK."""
        assert sdks_loaded_after(SCRIPTED_RUN) == []

    def test_the_validators_read_the_sdk_when_used(self) -> None:
        """Checking a request reads the installed SDK's parameter names (so the check
        follows the SDK): that, and only that, loads it."""
        code = (
            "from statemachine_agent.testing import validate_request\n"
            "assert validate_request({'model': 'm', 'max_tokens': 1,"
            " 'messages': [{'role': 'user', 'content': 'hi'}]}) == []"
        )
        assert sdks_loaded_after(code) == ["anthropic"]
