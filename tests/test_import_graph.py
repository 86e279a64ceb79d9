"""The package's import graph: no cycles, and no module outside `agent/` reaching into
`Agent`'s private attributes.

A cycle of imports works only by the order modules happen to load in, and the usual
way to keep one alive, an import moved into a function, hides it from readers and from
tools. So the graph is read from the source with `ast`, imports inside functions
included (only those under `if TYPE_CHECKING:` are left out: they never run), and it
must have no cycle. Modules are the nodes and edges are the imports as written: `from
pkg import name` is an edge to `pkg.name` when that is a module, else to `pkg`.
Importing `pkg.sub.mod` also runs `pkg/sub/__init__`, so it is an edge to `pkg.sub`
too, except from a module inside `pkg.sub` (whose package is loaded before it):
that is how `phases.act` importing `agent.subagents` closed a loop through
`agent/__init__` -> `agent.core` -> `machine.engine` -> `phases.act`.
"""

from __future__ import annotations

import ast
import itertools
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import statemachine_agent

PACKAGE = "statemachine_agent"
ROOT = Path(statemachine_agent.__file__).parent
AGENT_ROOM = f"{PACKAGE}.agent"
AGENT_PRIVATES = frozenset({"_deps", "_redactor", "_engine", "_settings", "_deps_for"})
"""`Agent`'s private attributes: its helpers in `agent/` may read them, nobody else."""


def _modules(root: Path = ROOT, package: str = PACKAGE) -> dict[str, Path]:
    """Every module of the package by dotted name (a package by its `__init__`)."""
    found: dict[str, Path] = {}
    for path in sorted(root.rglob("*.py")):
        parts = [package, *path.relative_to(root).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _running_nodes(node: ast.AST) -> Iterator[ast.AST]:
    """Every node under `node`, except the bodies of `if TYPE_CHECKING:` blocks."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and _is_type_checking(child.test):
            for kept in child.orelse:
                yield kept
                yield from _running_nodes(kept)
            continue
        yield child
        yield from _running_nodes(child)


def _edges(name: str, is_package: bool, source: str, modules: Mapping[str, Path]) -> set[str]:
    """The package's modules that module `name` imports when it runs."""
    found: set[str] = set()
    here = name.split(".") if is_package else name.split(".")[:-1]
    for node in _running_nodes(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                target = alias.name
                while target and target not in modules:  # `import a.b.X` where X is a name
                    target = target.rpartition(".")[0]
                if target:
                    found.add(target)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here[: len(here) - (node.level - 1)]
                target = ".".join([*base, *([node.module] if node.module else [])])
            else:
                target = node.module or ""
            for alias in node.names:
                if f"{target}.{alias.name}" in modules:
                    found.add(f"{target}.{alias.name}")
                elif target in modules:
                    found.add(target)
    loaded = set(found)
    for target in found:  # importing `a.b.c` first runs `a.b`, unless the importer is in it
        parts = target.split(".")
        for depth in range(1, len(parts)):
            package = ".".join(parts[:depth])
            if package in modules and not f"{name}.".startswith(f"{package}."):
                loaded.add(package)
    loaded.discard(name)
    return loaded


def import_graph(modules: Mapping[str, Path]) -> dict[str, set[str]]:
    """Each module and the package modules it imports."""
    return {
        name: _edges(name, path.name == "__init__.py", path.read_text(encoding="utf-8"), modules)
        for name, path in modules.items()
    }


def find_cycle(graph: Mapping[str, set[str]]) -> list[str] | None:
    """One cycle of `graph` as a path that ends where it starts, or None if it has none."""
    white, grey, black = 0, 1, 2
    colour = dict.fromkeys(graph, white)
    for start in sorted(graph):
        if colour[start] != white:
            continue
        path = [start]
        colour[start] = grey
        stack = [iter(sorted(graph[start]))]
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                stack.pop()
                colour[path.pop()] = black
                continue
            state = colour.get(nxt, black)  # an edge out of the graph cannot close a cycle
            if state == grey:
                return [*path[path.index(nxt) :], nxt]
            if state == white:
                colour[nxt] = grey
                path.append(nxt)
                stack.append(iter(sorted(graph[nxt])))
    return None


def private_reads(source: str) -> list[tuple[int, str]]:
    """Where `source` reads one of `Agent`'s private attributes (line, attribute), on
    anything but `self` or `cls` (a class's own attribute of the same name is its own)."""
    hits = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Attribute) or node.attr not in AGENT_PRIVATES:
            continue
        if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
            continue
        hits.append((node.lineno, node.attr))
    return sorted(hits)


class TestImportGraph:
    def test_the_package_imports_no_cycle(self) -> None:
        """No chain of imports, at the top or inside a function, leads a module back to itself."""
        cycle = find_cycle(import_graph(_modules()))
        assert cycle is None, "import cycle: " + " -> ".join(cycle or [])

    def test_no_module_outside_agent_reads_agent_privates(self) -> None:
        """`Agent`'s private attributes are read only by the modules of `agent/`."""
        offenders = [
            f"{path.relative_to(ROOT.parent)}:{line}: .{attr}"
            for name, path in _modules().items()
            if name != AGENT_ROOM and not name.startswith(f"{AGENT_ROOM}.")
            for line, attr in private_reads(path.read_text(encoding="utf-8"))
        ]
        assert offenders == []

    def test_the_graph_sees_the_package(self) -> None:
        """The graph knows the modules this test is about, and the edges between them."""
        graph = import_graph(_modules())
        assert f"{PACKAGE}.phases.act" in graph
        assert f"{PACKAGE}.phases.act" in graph[f"{PACKAGE}.machine.engine"]
        assert not any(m.startswith(AGENT_ROOM) for m in graph[f"{PACKAGE}.phases.act"])


class TestReadingImports:
    """The reader of imports, on small packages written for the purpose."""

    @staticmethod
    def _graph(tmp_path: Path, files: Mapping[str, str]) -> dict[str, set[str]]:
        for rel, text in files.items():
            path = tmp_path / "pkg" / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        return import_graph(_modules(tmp_path / "pkg", "pkg"))

    def test_function_level_imports_count(self, tmp_path: Path) -> None:
        """An import inside a function is an edge: moving it there does not hide a cycle."""
        graph = self._graph(
            tmp_path,
            {"__init__.py": "", "a.py": "import pkg.b\n", "b.py": "def f():\n    import pkg.a\n"},
        )
        assert find_cycle(graph) == ["pkg.a", "pkg.b", "pkg.a"]

    def test_type_checking_imports_do_not_count(self, tmp_path: Path) -> None:
        """Imports under `if TYPE_CHECKING:` never run, so they are no edge; its `else` is."""
        graph = self._graph(
            tmp_path,
            {
                "__init__.py": "",
                "a.py": "from pkg import b\n",
                "b.py": "from typing import TYPE_CHECKING\n"
                "if TYPE_CHECKING:\n    from pkg import a\nelse:\n    from pkg import c\n",
                "c.py": "",
            },
        )
        assert graph["pkg.b"] == {"pkg.c"}
        assert find_cycle(graph) is None

    def test_relative_imports_resolve(self, tmp_path: Path) -> None:
        """`from . import x` and `from ..y import z` name the modules they load."""
        graph = self._graph(
            tmp_path,
            {
                "__init__.py": "from .sub import inner\n",
                "sub/__init__.py": "from . import inner\n",
                "sub/inner.py": "from ..top import NAME\nfrom .. import top\n",
                "top.py": "NAME = 1\n",
            },
        )
        assert graph["pkg"] == {"pkg.sub", "pkg.sub.inner"}
        assert graph["pkg.sub"] == {"pkg.sub.inner"}
        assert graph["pkg.sub.inner"] == {"pkg.top"}

    def test_from_package_import_name_is_an_edge_to_the_package(self, tmp_path: Path) -> None:
        """`from pkg.sub import thing` where `thing` is no module is an edge to `pkg.sub`."""
        graph = self._graph(
            tmp_path,
            {
                "__init__.py": "",
                "sub/__init__.py": "thing = 1\n",
                "user.py": "from pkg.sub import thing\nimport pkg.sub.thing\n",
            },
        )
        assert graph["pkg.user"] == {"pkg.sub"}

    def test_importing_a_module_runs_its_packages(self, tmp_path: Path) -> None:
        """Importing `pkg.room.mod` from outside `pkg.room` runs `pkg/room/__init__`, so a
        loop through a package's `__init__` is a cycle; from inside the room it is not."""
        graph = self._graph(
            tmp_path,
            {
                "__init__.py": "",
                "room/__init__.py": "from pkg.room.core import X\n",
                "room/core.py": "from pkg.room.helper import Y\nfrom pkg.engine import Z\n",
                "room/helper.py": "",
                "engine.py": "from pkg.phase import W\n",
                "phase.py": "from pkg.room.helper import Y\n",
            },
        )
        assert graph["pkg.room.core"] == {"pkg.room.helper", "pkg.engine"}
        assert graph["pkg.phase"] == {"pkg.room", "pkg.room.helper"}
        assert find_cycle(graph) == ["pkg.engine", "pkg.phase", "pkg.room", "pkg.room.core",
                                     "pkg.engine"]  # fmt: skip

    def test_private_reads_spare_self(self) -> None:
        """A class reading its own `_settings` is no reach into an `Agent`; `agent._deps` is."""
        source = "def f(self, agent):\n    self._settings\n    return agent._deps\n"
        assert private_reads(source) == [(3, "_deps")]


@st.composite
def _graphs(draw: st.DrawFn) -> dict[str, set[str]]:
    names = [f"m{i}" for i in range(draw(st.integers(1, 8)))]
    return {n: set(draw(st.lists(st.sampled_from(names), max_size=4))) for n in names}


def _has_cycle(graph: Mapping[str, set[str]]) -> bool:
    """The reference answer: some node reaches itself (a plain closure, slow and obvious)."""
    for start in graph:
        seen: set[str] = set()
        todo = list(graph[start])
        while todo:
            node = todo.pop()
            if node == start:
                return True
            if node not in seen:
                seen.add(node)
                todo.extend(graph.get(node, ()))
    return False


class TestFindCycle:
    @given(_graphs())
    def test_finds_a_cycle_exactly_when_there_is_one(self, graph: dict[str, set[str]]) -> None:
        """A cycle is reported iff one exists, and the one reported is a real path back."""
        cycle = find_cycle(graph)
        assert (cycle is not None) == _has_cycle(graph)
        if cycle is not None:
            assert cycle[0] == cycle[-1]
            assert len(set(cycle[:-1])) == len(cycle) - 1
            assert all(b in graph[a] for a, b in itertools.pairwise(cycle))

    @pytest.mark.parametrize("size", [1, 2, 5])
    def test_a_ring_is_reported_whole(self, size: int) -> None:
        """A ring of `size` modules is reported as the ring."""
        names = [f"m{i}" for i in range(size)]
        graph = {n: {names[(i + 1) % size]} for i, n in enumerate(names)}
        assert find_cycle(graph) == [*names, names[0]]
