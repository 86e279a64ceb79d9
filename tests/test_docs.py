"""The docs stay true: generated parts are fresh, examples run, every event is documented.

Documentation rots silently; these tests make each kind of rot a failure: a stale
generated file, an example that no longer runs, an event the code emits that the
schema does not mention, a link to a file that moved.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from scripts import docgen
from statemachine_agent.durable.registry import registered_agents, unregister_agent
from statemachine_agent.machine import table
from statemachine_agent.machine.ends import EXIT_CODES

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
README = ROOT / "README.md"
PLUGIN_EXAMPLE = ROOT / "examples" / "test_refund_agent.py"
STALE = "is stale: run `make docs` and commit the result"

EMIT = re.compile(r"""\.emit\(\s*["']([\w.]+)["']""")
"""An event name at an emit call, also when the call is spread over several lines."""


def python_blocks(path: Path) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", path.read_text(encoding="utf-8"), re.M | re.S)


def section(text: str, heading: str) -> str:
    """The text under a markdown heading, up to the next heading of its level or above
    (a `#` line inside a code block is code, not a heading)."""
    level = len(heading.split(" ", 1)[0])
    lines: list[str] = []
    fenced = False
    for line in text.split(heading + "\n", 1)[1].splitlines(keepends=True):
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and re.match(rf"#{{1,{level}}} ", line):
            break
        lines.append(line)
    return "".join(lines)


EXECUTED_DOCS = (
    "configuration.md",
    "durability.md",
    "errors.md",
    "subagents.md",
    "troubleshooting.md",
)
"""Guides that must have runnable examples."""

RUN_ON_THEIR_OWN = ("testing.md", "events.md")
"""Docs whose blocks `TestExamples` runs with checks of its own."""

EXECUTED_BLOCKS = [
    (path.name, i)
    for path in sorted(DOCS.glob("*.md"))
    if path.name not in RUN_ON_THEIR_OWN
    for i in range(len(python_blocks(path)))
]
"""Every other python block of docs/: each runs, or says on its first line why not."""

NOT_RUN = re.compile(r"# not run: (?P<why>\S.*)\n")
"""A block that cannot run here says so where a reader sees it: what it needs."""
QUOTED = re.compile(r"# quoted from (?P<file>examples/[\w/]+\.py)(?: .*)?\n")
"""A block quoting an example (which tests/test_examples.py and friends run): the
rest of the block must be in that file verbatim, so the quote cannot drift."""


def emitted_events() -> set[str]:
    names: set[str] = set()
    for source in (ROOT / "statemachine_agent").rglob("*.py"):
        names.update(EMIT.findall(source.read_text(encoding="utf-8")))
    return names


def run_block(code: str, name: str) -> dict[str, Any]:
    """Execute a doc's code block, then every `test_*` function it defines.

    The block runs as a module of its own, registered while it runs as an imported
    file is: pydantic and dataclasses look a class's module up to resolve its
    annotations. Agents a block registers for the durable engines (docs/scaling.md's
    `@register_agent`) are forgotten after it: a worker started by a later test builds
    every registered agent, and the docs' ones need a real API key."""
    module = types.ModuleType(name)
    namespace: dict[str, Any] = module.__dict__
    sys.modules[name] = module
    registered = set(registered_agents())
    try:
        exec(compile(code, name, "exec"), namespace)
        for key, value in list(namespace.items()):
            if key.startswith("test_") and callable(value):
                value()
    finally:
        del sys.modules[name]
        for added in set(registered_agents()) - registered:
            unregister_agent(added)
    return namespace


class TestGeneratedDocs:
    def test_state_reference_is_fresh(self) -> None:
        """docs/states.md is exactly what the table, guards and handlers generate now."""
        committed = (DOCS / "states.md").read_text(encoding="utf-8")
        assert committed == docgen.states_markdown(), f"docs/states.md {STALE}"

    def test_readme_generated_blocks_are_fresh(self) -> None:
        """The README's diagram and end-state blocks are what the code generates now."""
        committed = README.read_text(encoding="utf-8")
        assert committed == docgen.refresh_blocks(committed), f"README.md {STALE}"

    def test_state_reference_covers_every_state_row_and_guard(self) -> None:
        """Every state has a section, every row a line and every guard an entry."""
        from statemachine_agent.machine.guards import GUARDS

        text = docgen.states_markdown()
        for state in table.STATES:
            assert f"### `{state}`" in text
        for row in table.ROWS:
            assert row.description in text
        for name, guard in GUARDS.items():
            assert f"### `{name}`" in text
            if guard.__doc__:
                assert guard.__doc__.strip().splitlines()[0] in text

    def test_end_states_show_their_handler_and_exit_code(self) -> None:
        """Each end state's section quotes its handler's docstring and its exit code."""
        from statemachine_agent.machine.endings import ENDINGS

        text = docgen.states_markdown()
        for state in table.END_STATES:
            section = text.split(f"### `{state}`", 1)[1].split("\n### ", 1)[0]
            assert f"**{EXIT_CODES[state]}**" in section
            doc = ENDINGS[state].__doc__
            assert doc is not None
            assert doc.strip().splitlines()[0] in section

    def test_readme_lists_every_end_state_with_its_exit_code(self) -> None:
        """The README's end-state table has a row per end state with the CLI's exit code."""
        text = README.read_text(encoding="utf-8")
        for state in table.END_STATES:
            assert re.search(rf"\[`{state}`\]\([^)]*\)[^|]* \| {EXIT_CODES[state]} \|", text)

    def test_readme_diagram_is_the_mermaid_diagram(self) -> None:
        """The README embeds exactly the generated Mermaid, fenced for rendering."""
        from statemachine_agent import diagrams

        assert "```mermaid\n" + diagrams.mermaid() + "```" in README.read_text(encoding="utf-8")


class TestDocgen:
    def make_root(self, tmp_path: Path) -> Path:
        (tmp_path / "README.md").write_text(README.read_text(encoding="utf-8"), encoding="utf-8")
        return tmp_path

    def test_writes_then_reports_up_to_date(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """A first run writes the generated files; `--check` then finds nothing stale."""
        root = self.make_root(tmp_path)
        assert docgen.main(["--root", str(root), "docs", "diagrams"]) == 0
        assert (root / "docs" / "states.md").read_text(encoding="utf-8").startswith("# State")
        assert (root / "diagrams" / "machine.mmd").exists()
        assert (root / "diagrams" / "machine.svg").exists() == bool(shutil.which("dot"))
        assert docgen.main(["--root", str(root), "--check"]) == 0
        assert "wrote" in capsys.readouterr().out

    def test_check_names_stale_files(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """`--check` exits 1 and names each stale file, and writes nothing."""
        root = self.make_root(tmp_path)
        assert docgen.main(["--root", str(root), "--check", "docs"]) == 1
        assert "docs/states.md" in capsys.readouterr().err
        assert not (root / "docs" / "states.md").exists()

    def test_readme_without_markers_is_an_error(self) -> None:
        """A README that lost a block's markers fails loudly instead of going stale."""
        with pytest.raises(ValueError, match="diagram:start"):
            docgen.refresh_blocks("# A README without markers\n")

    def test_refresh_keeps_the_text_around_blocks(self) -> None:
        """Only the text between the markers is replaced."""
        text = "before\n<!-- x:start -->\nold\n<!-- x:end -->\nafter\n"
        assert docgen.refresh_blocks(text, {"x": lambda: "new"}) == (
            "before\n<!-- x:start -->\nnew\n<!-- x:end -->\nafter\n"
        )

    def test_unknown_target_is_a_usage_error(self, capsys: pytest.CaptureFixture[str]) -> None:
        """A misspelt target exits 2 naming the valid ones."""
        with pytest.raises(SystemExit) as exit_info:
            docgen.main(["diagram"])
        assert exit_info.value.code == 2
        assert "diagrams, docs" in capsys.readouterr().err


class TestEventSchema:
    def test_the_scan_finds_the_core_events(self) -> None:
        """The source scan works (it would otherwise pass vacuously)."""
        assert {"transition.fired", "run.started", "run.ended"} <= emitted_events()

    def test_every_emitted_event_is_documented(self) -> None:
        """Each event name the code emits has a section in docs/events.md."""
        text = (DOCS / "events.md").read_text(encoding="utf-8")
        missing = sorted(name for name in emitted_events() if f"### `{name}`" not in text)
        assert missing == [], f"document these events in docs/events.md: {missing}"

    def test_every_documented_event_is_emitted(self) -> None:
        """docs/events.md describes no event the code no longer emits."""
        text = (DOCS / "events.md").read_text(encoding="utf-8")
        documented = set(re.findall(r"^### `([\w.]+)`$", text, re.M))
        assert documented - emitted_events() == set()

    def test_transition_keys_are_documented(self) -> None:
        """Every key of a `transition.fired` event appears in its section."""
        from statemachine_agent.machine.run import TransitionRecord

        text = (DOCS / "events.md").read_text(encoding="utf-8")
        section = text.split("### `transition.fired`", 1)[1].split("\n### ", 1)[0]
        for key in TransitionRecord.__dataclass_fields__:
            assert f"`{key}`" in section


class TestExamples:
    @pytest.mark.parametrize(
        "index", range(len(python_blocks(DOCS / "testing.md"))), ids=lambda i: f"block{i}"
    )
    def test_testing_guide_examples_pass(self, index: int) -> None:
        """Each code block of docs/testing.md runs, and every test it defines passes; a
        block quoting the plugin example is verbatim (tests/test_examples.py runs that)."""
        code = python_blocks(DOCS / "testing.md")[index]
        if code in PLUGIN_EXAMPLE.read_text(encoding="utf-8"):
            return
        run_block(code, f"docs/testing.md[{index}]")

    def test_testing_guide_quotes_the_whole_plugin_example(self) -> None:
        example = PLUGIN_EXAMPLE.read_text(encoding="utf-8")
        assert example in python_blocks(DOCS / "testing.md")

    def test_testing_guide_has_examples(self) -> None:
        """The guide's examples exist, so the parametrized test above cannot pass empty."""
        blocks = python_blocks(DOCS / "testing.md")
        assert len(blocks) >= 5
        assert any("FakeAnthropicServer" in block for block in blocks)
        assert any("ScriptedModel" in block for block in blocks)

    def test_readme_example_runs(self, capsys: pytest.CaptureFixture[str]) -> None:
        """The README's library example runs offline and reads every documented field."""
        text = README.read_text(encoding="utf-8")
        (code,) = re.findall(
            r"^```python\n(.*?)^```", section(text, "## Use it as a library"), re.M | re.S
        )
        namespace = run_block(code, "README.md")
        assert namespace["result"].end_state == "completed"
        for field in ("text", "data", "reason", "iterations", "usage", "cost_usd", "messages"):
            assert f"result.{field}" in code
        assert "the model ended its turn" in capsys.readouterr().out

    def test_events_example_reads_an_audit_file(self, tmp_path: Path) -> None:
        """The audit-reading example of docs/events.md works on a real audit file."""
        from statemachine_agent import Agent, ScriptedModel
        from statemachine_agent.testing import replies

        result = Agent(ScriptedModel([replies.text("Hi.")]), audit=tmp_path).run("Hello")
        (code,) = python_blocks(DOCS / "events.md")
        namespace = run_block(code, "docs/events.md")
        assert result.audit_path is not None
        assert namespace["transitions"](result.audit_path)[-1] == "reason --replied--> completed"


class TestIndex:
    text = (DOCS / "index.md").read_text(encoding="utf-8")

    def test_every_result_field_has_one_row(self) -> None:
        """`RunResult`'s fields and properties are each one row of the index's table, and
        the table names nothing else, so a new field cannot go undocumented."""
        from statemachine_agent import RunResult

        public = {f for f in RunResult.__dataclass_fields__ if not f.startswith("_")}
        public |= {n for n, v in vars(RunResult).items() if isinstance(v, property)}
        rows = re.findall(r"^\| `(\w+)` \|", section(self.text, "## What a run gives back"), re.M)
        assert sorted(rows) == sorted(public)

    def test_the_reading_path_reaches_every_guide(self) -> None:
        """Every page of docs/ is on the reading path."""
        path = section(self.text, "## A reading path")
        for page in DOCS.glob("*.md"):
            if page.name != "index.md":
                assert f"]({page.name}" in path, page.name


class TestGuides:
    @pytest.mark.parametrize(("doc", "index"), EXECUTED_BLOCKS, ids=lambda v: str(v))
    def test_guide_examples_run(self, doc: str, index: int) -> None:
        """Each python block of docs/ runs; one that cannot run here says why on its
        first line, and one quoting an example is that example's text verbatim."""
        code = python_blocks(DOCS / doc)[index]
        quoted = QUOTED.match(code)
        if quoted is not None:
            example = (ROOT / quoted["file"]).read_text(encoding="utf-8")
            assert code[quoted.end() :] in example, f"docs/{doc}[{index}] drifted from the file"
        elif NOT_RUN.match(code) is None:
            run_block(code, f"docs/{doc}[{index}]")

    def test_every_readme_block_is_run(self) -> None:
        """The README's python blocks are exactly the two the tests above run by section."""
        text = README.read_text(encoding="utf-8")
        run = [
            block
            for heading in ("## Use it as a library", "## Durable runs")
            for block in re.findall(r"^```python\n(.*?)^```", section(text, heading), re.M | re.S)
        ]
        assert sorted(python_blocks(README)) == sorted(run)

    def test_the_markers_are_rare(self) -> None:
        """Most blocks run: a marker is for what needs a server or a cluster."""
        codes = [python_blocks(DOCS / doc)[i] for doc, i in EXECUTED_BLOCKS]
        marked = [c for c in codes if NOT_RUN.match(c) or QUOTED.match(c)]
        assert len(codes) >= 30
        assert len(marked) * 2 < len(codes)

    def test_guides_have_examples(self) -> None:
        """The parametrized test above cannot pass empty: every guide has runnable blocks."""
        for name in EXECUTED_DOCS:
            assert python_blocks(DOCS / name), f"docs/{name} has no python block"

    def test_readme_durable_example_runs(self, capsys: pytest.CaptureFixture[str]) -> None:
        """The README's durable-run example pauses for approval, then resumes to completed."""
        text = README.read_text(encoding="utf-8")
        (code,) = re.findall(
            r"^```python\n(.*?)^```", section(text, "## Durable runs"), re.M | re.S
        )
        namespace = run_block(code, "README.md#durable-runs")
        assert namespace["done"].end_state == "completed"
        assert "toolu_invoice" in capsys.readouterr().out

    def test_troubleshooting_has_a_section_per_end_state(self) -> None:
        """Every end state has a section in docs/troubleshooting.md naming its exit code."""
        text = (DOCS / "troubleshooting.md").read_text(encoding="utf-8")
        for state in table.END_STATES:
            assert f"\n## `{state}`\n" in text, f"docs/troubleshooting.md lacks `{state}`"
            body = section(text, f"## `{state}`")
            assert f"**Exit code {EXIT_CODES[state]}.**" in body
            assert "audit file" in body


class TestConfigurationReference:
    """docs/configuration.md names every knob the code has, so a new one cannot go undocumented."""

    text = (DOCS / "configuration.md").read_text(encoding="utf-8")

    def rows(self, heading: str) -> set[str]:
        return set(re.findall(r"^\| `([\w-]+)`", section(self.text, heading), re.M))

    def test_every_agent_parameter_has_a_row(self) -> None:
        """Each parameter of `Agent.__init__` is a row of the Agent table, with its default."""
        import inspect

        from statemachine_agent import Agent

        params = inspect.signature(Agent.__init__).parameters
        names = [name for name in params if name != "self"]
        assert set(names) - self.rows("## `Agent`") == set()
        for name in names:
            default = params[name].default
            if default is inspect.Parameter.empty or hasattr(default, "__dataclass_fields__"):
                continue
            shown = json.dumps(default) if isinstance(default, str) else repr(default)
            row = re.search(rf"^\| `{name}` \|.*$", self.text, re.M)
            assert row is not None
            assert f"`{shown}`" in row.group(0), f"{name}: default {shown} not shown"

    @pytest.mark.parametrize(
        ("heading", "cls"),
        [
            ("## `Budget`", "statemachine_agent.policy.budget.Budget"),
            ("## `StallPolicy`", "statemachine_agent.policy.stall.StallPolicy"),
            ("## `ContextPolicy`", "statemachine_agent.policy.context.ContextPolicy"),
            ("## `ReflectionPolicy`", "statemachine_agent.policy.reflection.ReflectionPolicy"),
            ("## `VerifyPolicy`", "statemachine_agent.policy.verify.VerifyPolicy"),
            ("## `Audit`", "statemachine_agent.audit.config.Audit"),
            ("## Pricing", "statemachine_agent.policy.pricing.Price"),
            ("## Tools", "statemachine_agent.tools.base.Tool"),
        ],
    )
    def test_every_field_has_a_row(self, heading: str, cls: str) -> None:
        """Each init field of the policy and tool dataclasses is a row of its section."""
        import dataclasses
        import importlib

        module, name = cls.rsplit(".", 1)
        fields = dataclasses.fields(getattr(importlib.import_module(module), name))
        assert {f.name for f in fields if f.init} - self.rows(heading) == set()

    def test_default_prices_are_listed(self) -> None:
        """Each default price appears with its input and output rates."""
        from statemachine_agent.policy.pricing import DEFAULT_PRICES

        for model, price in DEFAULT_PRICES.items():
            assert f"| `{model}` | {price.input} | {price.output} |" in self.text

    def test_every_cli_flag_is_documented_under_its_command(self) -> None:
        """Each option of each subcommand appears in that command's section."""
        import argparse

        from statemachine_agent.cli import parser

        (sub,) = [a for a in parser()._actions if isinstance(a, argparse._SubParsersAction)]
        for command, subparser in sub.choices.items():
            body = section(self.text, f"### `statemachine-agent {command}`")
            for action in subparser._actions:
                for option in action.option_strings:
                    if option not in ("-h", "--help"):
                        assert f"`{option}" in body, f"{command} {option} is undocumented"

    def test_environment_variables_are_listed(self) -> None:
        """The variables the models read are in the table."""
        body = section(self.text, "## Environment variables")
        for name in (
            "ANTHROPIC_API_KEY",
            "ANTHROPIC_BASE_URL",
            "OPENAI_API_KEY",
            "OPENAI_BASE_URL",
        ):
            assert f"| `{name}` |" in body


class TestQuickStartAndLinks:
    def test_quick_start_is_two_make_commands(self) -> None:
        """The README's quick start is exactly `make demo` and `make test`."""
        text = README.read_text(encoding="utf-8")
        section = text.split("## Quick start", 1)[1].split("\n## ", 1)[0]
        (commands,) = re.findall(r"```sh\n(.*?)```", section, re.S)
        assert commands.split("\n")[:-1] == ["make demo", "make test"]

    @pytest.mark.parametrize(
        "path",
        [README, *sorted(DOCS.glob("*.md"))],
        ids=lambda p: str(p.relative_to(ROOT)),
    )
    def test_relative_links_resolve(self, path: Path) -> None:
        """Every relative link in the README and the docs points at a file that exists."""
        text = path.read_text(encoding="utf-8")
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
            if re.match(r"^[a-z]+:", target):
                continue
            assert (path.parent / target).exists(), f"{path.name} links to missing {target}"
