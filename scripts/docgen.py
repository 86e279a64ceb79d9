"""Generate the reference docs and diagrams from the code, so they cannot drift.

The state reference (`docs/states.md`), the committed diagrams (`diagrams/`) and
the generated blocks of `README.md` are all derived from the transition table,
the guards, the end-state handlers and the CLI's exit codes; the error reference
(`docs/errors.md`) from the exception classes themselves. A hand-written
reference would be wrong the day a row is added; a generated one is checked by
`tests/test_docs.py` and `tests/test_diagrams.py`, which fail when a committed
file differs from what this module produces now.

Run `python scripts/docgen.py` (what `make diagrams` and `make docs` do);
`--check` only reports stale files, for CI. It lives outside the package because
it reads and writes the repository (README.md, docs/, diagrams/): an installed
wheel has none of them, so shipping it would only ship a command that crashes.
The target `sdk` rewrites `statemachine_agent/testing/_sdk_tables.py`, the
request validator's copy of the `anthropic` SDK's rules.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import pkgutil
import re
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from types import ModuleType

import statemachine_agent
from statemachine_agent import diagrams
from statemachine_agent.errors import Error
from statemachine_agent.machine import ends, table
from statemachine_agent.machine.table import Row

TARGETS: tuple[str, ...] = ("diagrams", "docs", "sdk")
DEFAULT_TARGETS: tuple[str, ...] = ("diagrams", "docs")
"""What a bare run (and `--check`) covers: `sdk` follows the installed SDK, not the
repository, so it is regenerated on purpose (tests/test_testing_imports.py says when)."""

DIAGRAM_FILES: Mapping[str, str] = {
    "mermaid": "diagrams/machine.mmd",
    "dot": "diagrams/machine.dot",
    "svg": "diagrams/machine.svg",
}
"""The review diagram (rows shared by every working state drawn once)."""

FULL_DIAGRAM_FILES: Mapping[str, str] = {
    "mermaid": "diagrams/machine-full.mmd",
    "dot": "diagrams/machine-full.dot",
    "svg": "diagrams/machine-full.svg",
}
"""The full diagram: every row its own edge."""

PACKAGED_SVG = f"statemachine_agent/{diagrams.PACKAGED_SVG}"
"""The review SVG again, inside the package, for reports made without a renderer."""
STATES_DOC = "docs/states.md"
ERRORS_DOC = "docs/errors.md"
SDK_TABLES = "statemachine_agent/testing/_sdk_tables.py"
README = "README.md"

_GENERATED_NOTE = (
    "<!-- Generated from statemachine_agent/machine/table.py by `make docs`; "
    "do not edit by hand. -->"
)


# -- the state reference -------------------------------------------------------------


def _doc(obj: object) -> str:
    """An object's docstring, or an honest marker when it has none."""
    text = inspect.getdoc(obj)
    return text.strip() if text else "_(no docstring)_"


def _cell(text: str) -> str:
    """Text made safe for one Markdown table cell."""
    return text.replace("|", "\\|").replace("\n", " ").strip()


def _code(names: Iterable[str]) -> str:
    return ", ".join(f"`{n}`" for n in names)


def _kind(name: str) -> str:
    if name in table.END_STATES:
        return "end"
    if name in table.HELPER_STATES:
        return "helper"
    return "working"


def _exit_codes() -> Mapping[str, int]:
    return ends.EXIT_CODES


def _phase_doc(name: str) -> str | None:
    """The docstring of the phase that runs a working state, if the engine has one."""
    from statemachine_agent.machine.engine import PHASES

    phase = PHASES.get(name)
    return _doc(type(phase)) if phase is not None else None


def _ending_doc(name: str) -> str | None:
    from statemachine_agent.machine.endings import ENDINGS

    handler = ENDINGS.get(name)
    return _doc(handler) if handler is not None else None


def _arrow(row: Row) -> str:
    guards = f" [{' & '.join(row.guards)}]" if row.guards else ""
    return f"`{row.source} --{row.trigger}{guards}--> {row.dest}`"


def _rows_table(rows: Sequence[Row], *, outgoing: bool) -> list[str]:
    """Rows as a Markdown table, numbered by the order they are tried in their group."""
    if outgoing:
        lines = ["| order | trigger | guards | dest | description |", "|---|---|---|---|---|"]
    else:
        lines = ["| from | trigger | guards | description | reason |", "|---|---|---|---|---|"]
    for row in rows:
        order = table.rows_from(row.source, row.trigger).index(row) + 1
        description = row.description
        if row.arrival:
            description += f" (tells `{row.dest}`: `{row.arrival}`)"
        if row.carry_on:
            description += f" (then fires `{row.carry_on}` without running `{row.dest}` again)"
        guards = " & ".join(f"`{g}`" for g in row.guards) if row.guards else "_(none: fallback)_"
        if outgoing:
            cells = [str(order), f"`{row.trigger}`", guards, _link(row.dest), description]
        else:
            reason = f"`{row.end_reason}`"  # the run's `reason`, `{figures}` from the record
            cells = [_link(row.source), f"`{row.trigger}`", guards, description, reason]
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return lines


def _link(state: str) -> str:
    return f"[`{state}`](#{state})" if state in table.STATES else f"`{state}`"


def states_markdown() -> str:
    """The whole of `docs/states.md`: every state, its rows, and every guard."""
    exit_codes = _exit_codes()
    out: list[str] = [
        "# State reference",
        "",
        _GENERATED_NOTE,
        "",
        "Every state of the agent loop, the rows that leave it (the phase names a trigger;",
        "of the rows with that source and trigger, the **first** whose guards all pass fires),",
        "and every guard. The [concepts](concepts.md) page explains the model; this page is",
        "the contract, generated from the transition table.",
        "",
        "## States",
        "",
        "| state | kind | exit code | note |",
        "|---|---|---|---|",
    ]
    for name in table.STATES:
        kind = _kind(name) + (" (initial)" if name == table.INITIAL_STATE else "")
        code = str(exit_codes[name]) if name in exit_codes else ""
        note = f"reserved: {table.RESERVED_STATES[name]}" if name in table.RESERVED_STATES else ""
        out.append(f"| {_link(name)} | {kind} | {code} | {_cell(note)} |")
    sections = (
        ("Working states", table.WORKING_STATES),
        ("Helper states", table.HELPER_STATES),
        ("End states", table.END_STATES),
    )
    for title, names in sections:
        if not names:
            continue
        out += ["", f"## {title}"]
        for name in names:
            out += _state_section(name, exit_codes)
    out += _guard_reference()
    return "\n".join(out).rstrip("\n") + "\n"


def _state_section(name: str, exit_codes: Mapping[str, int]) -> list[str]:
    out = ["", f"### `{name}`", ""]
    if name in table.RESERVED_STATES:
        out += [f"> **Reserved**, not reachable yet: {table.RESERVED_STATES[name]}.", ""]
    if name in table.END_STATES:
        end = ends.END_BY_NAME[name]
        traits = [t for t, on in (("success", end.success), ("resumable", end.resumable)) if on]
        out += [end.description, ""]
        out += [f"Exit code of `statemachine-agent`: **{end.exit_code}**."
                + (f" {', '.join(traits).capitalize()}." if traits else ""), ""]  # fmt: skip
        handler_doc = _ending_doc(name)
        if handler_doc is not None:
            out += ["Its handler:", "", *(f"> {line}".rstrip() for line in handler_doc.split("\n"))]
            out.append("")
        incoming = [row for row in table.ROWS if row.dest == name]
        if incoming:
            out += ["Entered from (the row that fired gives the run's `reason`; each `{figure}`",
                    "in it is filled in from the record):", "",
                    *_rows_table(incoming, outgoing=False)]  # fmt: skip
        else:
            out.append("No row enters it yet.")
        leaving = [row for row in table.ROWS if row.source == name]
        if leaving:
            out += ["", "Resumed by:", "", *_rows_table(leaving, outgoing=True)]
        return out
    phase_doc = _phase_doc(name)
    if phase_doc is not None:
        out += [*(f"> {line}".rstrip() for line in phase_doc.split("\n")), ""]
    outgoing = [row for row in table.ROWS if row.source == name]
    if outgoing:
        out += ["Leaves by:", "", *_rows_table(outgoing, outgoing=True)]
    else:
        out.append("No row leaves it yet.")
    return out


def _guard_reference() -> list[str]:
    from statemachine_agent.machine.guards import GUARDS

    out = [
        "",
        "## Guards",
        "",
        "Guards are pure predicates over the run record: they read it and answer, with no",
        "I/O, so a transition is deterministic and a recorded run replays to the same path.",
    ]
    for name, guard in GUARDS.items():
        out += ["", f"### `{name}`", "", _doc(guard), ""]
        users = [row for row in table.ROWS if name in row.guards]
        if users:
            out.append("Used by:")
            out.append("")
            out += [f"- {_arrow(row)}" for row in users]
        else:
            out.append("Not used by any row yet.")
    unknown = [name for name in table.guard_names() if name not in GUARDS]
    if unknown:
        out += ["", f"Named by the table but not defined: {_code(unknown)}."]
    return out


# -- the error reference -------------------------------------------------------------


def package_modules() -> dict[str, ModuleType]:
    """Every module of the package, imported, by dotted name.

    The error tree is read off `Error.__subclasses__()`, which only knows the
    classes of modules already imported; importing them all is what makes the
    tree complete. The CLI's `__main__` is left out: importing it runs the CLI.
    An optional extra that is not installed fails here, loudly, rather than
    leaving its errors out of the reference.
    """
    modules = {statemachine_agent.__name__: statemachine_agent}
    for info in pkgutil.walk_packages(statemachine_agent.__path__, "statemachine_agent."):
        if info.name.rsplit(".", 1)[-1] != "__main__":
            modules[info.name] = importlib.import_module(info.name)
    return modules


def _children(cls: type[Error]) -> list[type[Error]]:
    """The package's direct subclasses of `cls`, by name; a subclass a user (or a
    test) defines elsewhere is theirs to document, not ours."""
    ours = (c for c in cls.__subclasses__() if c.__module__.startswith("statemachine_agent."))
    return sorted(ours, key=lambda c: c.__name__)


def error_classes() -> list[type[Error]]:
    """`Error` and every public subclass of it in the package, depth first, siblings by
    name (a private one, raised and caught inside a module, is no part of the tree)."""
    package_modules()

    def walk(cls: type[Error]) -> list[type[Error]]:
        own = [] if cls.__name__.startswith("_") else [cls]
        return [*own, *(c for child in _children(cls) for c in walk(child))]

    return walk(Error)


def builtin_base(cls: type[BaseException]) -> type[BaseException]:
    """The built-in exception `cls` is also a kind of, the one `except` caught before
    `Error` existed (the nearest built-in in its method resolution order)."""
    return next(
        base
        for base in cls.__mro__
        if base.__module__ == "builtins" and issubclass(base, BaseException)
    )


def import_home(cls: type, modules: Mapping[str, ModuleType]) -> str:
    """Where users import `cls` from: the shortest module that exports it in `__all__`,
    else the module that defines it."""
    homes = [
        name
        for name, module in modules.items()
        if cls.__name__ in getattr(module, "__all__", ())
        and getattr(module, cls.__name__, None) is cls
    ]
    return min(homes, key=lambda name: (name.count("."), name)) if homes else cls.__module__


def error_tree() -> str:
    """`Error` and its subclasses drawn as a tree, each with its built-in base."""
    lines: list[str] = []

    def draw(cls: type[Error], prefix: str, last: bool, root: bool) -> None:
        label = f"{cls.__name__} ({builtin_base(cls).__name__})"
        lines.append(label if root else f"{prefix}{'└── ' if last else '├── '}{label}")
        inner = "" if root else prefix + ("    " if last else "│   ")
        children = _children(cls)
        for i, child in enumerate(children):
            draw(child, inner, i == len(children) - 1, False)

    package_modules()
    draw(Error, "", True, True)
    return "\n".join(lines)


def _summary(cls: type) -> str:
    """The first paragraph of a class's own docstring (not an inherited one)."""
    own = inspect.cleandoc(cls.__doc__) if cls.__doc__ else "_(no docstring)_"
    return " ".join(own.split("\n\n", 1)[0].split())


_ERRORS_INTRO = """\
# Errors

<!-- Generated from the exception classes by `make docs`; do not edit by hand. -->

Everything statemachine-agent raises on purpose derives from
`statemachine_agent.Error`, so a service needs one `except` for all of them, and
that `except` still lets its own bugs and the SDKs' own exceptions through.
Each class also keeps the built-in base it always had (in brackets below), so an
`except KeyError` or `except ValueError` written before `Error` existed still
catches it.

```python
from statemachine_agent import Agent, Error, MemoryCheckpointer, RunNotFoundError, ScriptedModel
from statemachine_agent.testing import replies

agent = Agent(ScriptedModel([replies.text("never sent")]), checkpointer=MemoryCheckpointer())
try:
    agent.resume("no-such-run")
except Error as exc:  # anything the library raised on purpose
    caught = exc
assert isinstance(caught, RunNotFoundError)
assert isinstance(caught, KeyError)  # what callers caught before `Error` existed
```

A run itself does not raise for what goes wrong inside it: a refused request,
a spent budget or a failing tool end it in a named end state (see
[troubleshooting](troubleshooting.md)). These exceptions are for what the call
itself cannot do: bad arguments, a missing key, an unknown or locked run, a
store that cannot be read.

Left outside on purpose are a few internal signals that never reach a caller
(each one is named, with the reason, in `statemachine_agent/errors.py`).
"""


def errors_markdown() -> str:
    """The error reference: the tree, then each class with where to import it and
    when it is raised (the first paragraph of its docstring)."""
    modules = package_modules()
    lines = [_ERRORS_INTRO, "## The tree", "", "```text", error_tree(), "```", ""]
    lines += ["## When each is raised", ""]
    lines += ["| error | also a | import from | raised when |", "|---|---|---|---|"]
    for cls in error_classes():
        lines.append(
            f"| `{cls.__name__}` | `{builtin_base(cls).__name__}` "
            f"| `{import_home(cls, modules)}` | {_cell(_summary(cls))} |"
        )
    return "\n".join(lines) + "\n"


# -- README blocks -------------------------------------------------------------------


def readme_diagram() -> str:
    """The README's diagram block: the Mermaid diagram, fenced for GitHub to draw."""
    return "```mermaid\n" + diagrams.mermaid() + "```"


def readme_end_states() -> str:
    """The README's end-state table: each state's exit code and its one-line description."""
    lines = ["| end state | exit code | when |", "|---|---|---|"]
    for end in ends.ENDS:
        mark = " (success)" if end.success else ""
        mark += " (resumable)" if end.resumable else ""
        lines.append(
            f"| [`{end.name}`](docs/states.md#{end.name}){mark} | {end.exit_code} "
            f"| {_cell(end.description)} |"
        )
    lines.append("| _usage error_ | 2 | bad arguments, unknown scenario, unreadable audit file |")
    return "\n".join(lines)


README_BLOCKS: Mapping[str, Callable[[], str]] = {
    "diagram": readme_diagram,
    "end-states": readme_end_states,
}
"""The README's generated blocks, each between `<!-- NAME:start -->` and `<!-- NAME:end -->`."""


def refresh_blocks(text: str, blocks: Mapping[str, Callable[[], str]] = README_BLOCKS) -> str:
    """`text` with every generated block replaced by what the code produces now.

    Raises `ValueError` when a block's markers are missing, so a README edit that
    drops them is caught rather than silently leaving a stale copy.
    """
    for name, produce in blocks.items():
        start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
        found = re.search(re.escape(start) + r".*?" + re.escape(end), text, re.DOTALL)
        if found is None:
            raise ValueError(f"README has no {start} ... {end} block")
        text = f"{text[: found.start()]}{start}\n{produce()}\n{end}{text[found.end() :]}"
    return text


# -- writing and checking ------------------------------------------------------------


def generate(
    root: Path, targets: Iterable[str] = DEFAULT_TARGETS
) -> tuple[dict[Path, str], list[str]]:
    """Every generated file for `targets` with its content, and what was skipped, and why.

    SVG is skipped (with a note) when no Graphviz renderer is installed: it is the
    one output that needs a binary, and the text formats carry the same graph.
    """
    files: dict[Path, str] = {}
    skipped: list[str] = []
    wanted = set(targets)
    unknown = wanted - set(TARGETS)
    if unknown:
        raise ValueError(f"unknown target(s) {sorted(unknown)}; choose from {list(TARGETS)}")
    if "diagrams" in wanted:
        renderer = diagrams.find_renderer()
        for full, names in ((False, DIAGRAM_FILES), (True, FULL_DIAGRAM_FILES)):
            for fmt in diagrams.TEXT_FORMATS:
                files[root / names[fmt]] = diagrams.render(fmt, full=full)
            if renderer is not None:
                files[root / names["svg"]] = diagrams.svg(full=full)
            else:
                skipped.append(
                    f"{names['svg']} not regenerated: no Graphviz renderer "
                    f"({diagrams.GRAPHVIZ_HINT})"
                )
        if renderer is not None:
            files[root / PACKAGED_SVG] = files[root / DIAGRAM_FILES["svg"]]
    if "docs" in wanted:
        files[root / STATES_DOC] = states_markdown()
        files[root / ERRORS_DOC] = errors_markdown()
        readme = root / README
        files[readme] = refresh_blocks(readme.read_text(encoding="utf-8"))
    if "sdk" in wanted:
        import anthropic

        from statemachine_agent.testing import validator

        rules = validator.read_sdk_rules()
        files[root / SDK_TABLES] = validator.sdk_tables_source(rules, anthropic.__version__)
    return files, skipped


def stale(files: Mapping[Path, str]) -> list[Path]:
    """The files whose committed content differs from `files` (missing ones included)."""
    return [
        path
        for path, content in files.items()
        if not path.exists() or path.read_text(encoding="utf-8") != content
    ]


def main(argv: Sequence[str] | None = None) -> int:
    """Regenerate (or, with `--check`, verify) the generated docs and diagrams."""
    parser = argparse.ArgumentParser(
        prog="python scripts/docgen.py",
        description="Regenerate the diagrams and docs derived from the transition table.",
    )
    parser.add_argument(
        "targets",
        nargs="*",
        metavar="TARGET",
        help=f"any of {', '.join(TARGETS)} (default: {' '.join(DEFAULT_TARGETS)})",
    )
    parser.add_argument("--root", type=Path, default=Path.cwd(), help="the repository root")
    parser.add_argument("--check", action="store_true", help="only report stale files")
    args = parser.parse_args(argv)
    unknown = [t for t in args.targets if t not in TARGETS]
    if unknown:
        parser.error(f"unknown target(s) {', '.join(unknown)}; choose from {', '.join(TARGETS)}")
    files, skipped = generate(args.root, args.targets or DEFAULT_TARGETS)
    for note in skipped:
        print(f"docgen: warning: {note}", file=sys.stderr)
    outdated = stale(files)
    if args.check:
        for path in outdated:
            print(f"docgen: stale: {path} (run `make diagrams`)", file=sys.stderr)
        return 1 if outdated else 0
    for path in outdated:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(files[path], encoding="utf-8")
        print(f"docgen: wrote {path}")
    if not outdated:
        print("docgen: everything is up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
