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
from pathlib import Path

import pytest

from statemachine_agent.testing import _sdk_tables, validator

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

    def test_a_validated_scripted_run(self) -> None:
        """A scripted run whose every request goes through the strict validator (the
        default) loads no SDK: the validator's SDK rules are a committed table."""
        code = SCRIPTED_RUN.replace(
            "ScriptedModel(script, validate=False)", "ScriptedModel(script)"
        )
        assert "validate=False" not in code
        assert sdks_loaded_after(code) == []

    def test_validating_a_request(self) -> None:
        """Checking a request, valid or not, loads no SDK."""
        code = (
            "from statemachine_agent.testing import validate_request\n"
            "assert validate_request({'model': 'm', 'max_tokens': 1,"
            " 'messages': [{'role': 'user', 'content': 'hi'}]}) == []\n"
            "assert validate_request({'model': 'm', 'max_tokens': 1, 'nonsense': 1,"
            " 'messages': [{'role': 'user', 'content': [{'type': 'text', 'text': 'x',"
            " 'extra': 1}]}]})"
        )
        assert sdks_loaded_after(code) == []


class TestCommittedSdkTables:
    """The validator's committed copy of the SDK's rules is what the installed SDK says."""

    def test_the_copy_matches_the_installed_sdk(self) -> None:
        """Regenerate with `python scripts/docgen.py sdk` when this fails."""
        assert validator.committed_sdk_rules() == validator.read_sdk_rules(), (
            "statemachine_agent/testing/_sdk_tables.py is stale: run `python scripts/docgen.py sdk`"
        )

    def test_the_committed_module_is_what_the_generator_writes(self) -> None:
        """The file is the generator's output for the installed SDK's rules, byte for
        byte (the version it records aside: a newer SDK with the same rules is fine)."""
        committed = Path(_sdk_tables.__file__).read_text(encoding="utf-8")
        assert committed == validator.sdk_tables_source(
            validator.read_sdk_rules(), _sdk_tables.SDK_VERSION
        )
