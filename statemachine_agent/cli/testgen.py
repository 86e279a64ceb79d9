"""The `testgen` command: a pytest file with one test per row an agent can reach.

Teams that test every transition used to write each scenario by hand. `testgen`
writes them from the table: for each row the agent's configuration allows
(`testing.reachable_rows`), a test that plays the row's witness (the shortest
scripted scenario that fires it, `testing.witnesses`) and asserts the row fired and
the state the run ended in. The file is plain code meant to be committed and edited:
it names the agent by import, each test after its row, and says in its docstring what
the scenario does. With `--through-sdk` each test goes through the real `anthropic`
SDK against the plugin's `anthropic_server` fixture instead of `ScriptedModel`.

The end state each test expects is the one its witness reaches when the file is
written (witnesses are deterministic), so a file that no longer passes says the agent
or the table changed: write it again.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from statemachine_agent.cli.common import UsageError

if TYPE_CHECKING:
    from statemachine_agent.agent.core import Agent
    from statemachine_agent.testing.witnesses import Witness


def load_agent(target: str, *, command: str = "testgen") -> tuple[Agent[Any], str]:
    """The agent `MODULE:ATTR` names (an `Agent`, or a function of no arguments that
    returns one), and the expression the generated file rebuilds it with; a mistake is
    a `UsageError` naming `command`."""
    from statemachine_agent.agent.core import Agent

    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr.isidentifier():
        raise UsageError(f"{command}: {target!r} is not MODULE:ATTR (e.g. examples.shop:agent)")
    if "" not in sys.path and str(Path.cwd()) not in sys.path:
        sys.path.insert(0, "")  # as `python -m` does: modules of the current folder
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise UsageError(f"{command}: cannot import {module_name!r}: {exc}") from None
    except Exception as exc:  # the module's own code failed: say so in one line
        raise UsageError(
            f"{command}: importing {module_name!r} raised {type(exc).__name__}: {exc}"
        ) from None
    value = getattr(module, attr, None)
    if value is None:
        raise UsageError(f"{command}: {module_name!r} has no attribute {attr!r}")
    if isinstance(value, Agent):
        return value, attr
    if callable(value):
        try:
            made = value()
        except TypeError as exc:
            raise UsageError(
                f"{command}: {target} is a function that needs arguments: {exc}"
            ) from None
        if isinstance(made, Agent):
            return made, f"{attr}()"
    raise UsageError(
        f"{command}: {target} is a {type(value).__name__}, not an Agent (nor a function "
        "of no arguments returning one)"
    )


def generate(target: str, *, through_sdk: bool = False, command: str | None = None) -> str:
    """The pytest file's text for the agent `target` names (see the module's docstring)."""
    from statemachine_agent.testing import FakeAnthropicServer
    from statemachine_agent.testing.witnesses import witnesses

    agent, expression = load_agent(target)
    module_name, _, attr = target.partition(":")
    tests = []
    for witness in witnesses(agent):
        if through_sdk:
            with FakeAnthropicServer() as server:
                end = witness.run(server=server).end_state
        else:
            end = witness.run().end_state
        tests.append(_test(witness, end, through_sdk))
    flag = " --through-sdk" if through_sdk else ""
    made_by = command or f"statemachine-agent testgen {target} -o FILE{flag}"
    how = (
        "the real `anthropic` SDK against the plugin's strict local server (`anthropic_server`)"
        if through_sdk
        else "`ScriptedModel`-style scripted replies, each request checked by the strict validator"
    )
    about = "\n".join(
        _wrap(
            f"Written by `{made_by}`. Each test plays its row's witness "
            "(`statemachine_agent.testing.witnesses`): the shortest scenario that fires the "
            f"row, through {how}, with the agent's tools stubbed by name. `run` raises "
            "`AssertionError` unless the row fired; the test then checks the end state. "
            "Write the file again when the agent or the table changes."
        )
    )
    names = "FakeAnthropicServer, witnesses" if through_sdk else "witnesses"
    imports = "\n".join(
        sorted(
            [
                f"from statemachine_agent.testing import {names}",
                f"from {module_name} import {attr}",
            ]
        )
    )
    head = f'''"""Every row `{target}` can reach, one test each (generated; edit freely).

{about}
"""

from __future__ import annotations

{imports}

WITNESSES = {{witness.name: witness for witness in witnesses({expression})}}
'''
    return head + "".join(tests)


def _test(witness: Witness, end: str, through_sdk: bool) -> str:
    row = witness.row
    via = f" [{' & '.join(row.guards)}]" if row.guards else ""
    lines = [f"{row.source} --{row.trigger}{via}--> {row.dest}.", ""]
    lines += _wrap(row.description)
    lines += ["", *_wrap(f"Scenario: {witness.scenario.describe()}")]
    doc = "\n".join(f"    {line}" if line else "" for line in lines).lstrip() + "\n    "
    if through_sdk:
        return f'''

def test_{witness.name}(anthropic_server: FakeAnthropicServer) -> None:
    """{doc}"""
    result = WITNESSES["{witness.name}"].run(server=anthropic_server)
    assert result.end_state == "{end}"
    assert anthropic_server.invalid == []
'''
    return f'''

def test_{witness.name}() -> None:
    """{doc}"""
    result = WITNESSES["{witness.name}"].run()
    assert result.end_state == "{end}"
'''


def _wrap(text: str, width: int = 92) -> list[str]:
    import textwrap

    return textwrap.wrap(text, width, break_on_hyphens=False) or [""]


def cmd_testgen(args: argparse.Namespace) -> int:
    """Write the file; name on stderr any reachable row no witness covers yet."""
    from statemachine_agent.testing.witnesses import unwitnessed

    flag = " --through-sdk" if args.through_sdk else ""
    command = f"statemachine-agent testgen {args.target} -o {args.output}{flag}"
    text = generate(args.target, through_sdk=args.through_sdk, command=command)
    agent, _ = load_agent(args.target)
    for row in unwitnessed(agent):
        print(f"testgen: no witness for {row.source} --{row.trigger}--> {row.dest} "
              f"{list(row.guards)} yet: it has no test", file=sys.stderr)  # fmt: skip
    try:
        Path(args.output).write_text(text, encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"testgen: cannot write {args.output}: {exc.strerror}") from None
    print(f"wrote {text.count(chr(10) + 'def test_')} tests to {args.output}")
    return 0


def add_command(sub: Any) -> None:
    """Register `testgen` on the CLI's subcommand parser."""
    testgen = sub.add_parser(
        "testgen",
        help="write a pytest file with one test per row an agent can reach",
        description="MODULE:ATTR names an Agent (or a function of no arguments returning "
        "one), importable from the current folder. Each test plays its row's witness and "
        "asserts the row fired and the end state.",
    )
    testgen.add_argument(
        "target", metavar="MODULE:ATTR", help="the agent, e.g. examples.shop:agent"
    )
    testgen.add_argument("-o", "--output", required=True, metavar="FILE", help="the file to write")
    testgen.add_argument(
        "--through-sdk",
        action="store_true",
        help="through the real anthropic SDK and the anthropic_server fixture",
    )
    testgen.set_defaults(func=cmd_testgen)
