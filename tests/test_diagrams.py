"""The diagrams: generated from the table, committed fresh, and faithful to every row.

The committed files under `diagrams/` are what reviewers read, so a test fails as
soon as they differ from what the table generates now (`make diagrams` fixes it).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path
from typing import Any
from unittest.mock import patch

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from statemachine_agent import Agent, ScriptedModel, calculate, diagrams
from statemachine_agent.machine import table
from statemachine_agent.machine.result import RunResult
from statemachine_agent.testing import replies

ROOT = Path(__file__).resolve().parents[1]
STALE = "is stale: run `make diagrams` and commit the result"

MERMAID_EDGE = re.compile(r"^    (\S+) --> (\S+?)(?:: (.*))?$")
DOT_EDGE = re.compile(
    r'^    "([^"]+)" -> "([^"]+)" \[id="[^"]*", label="((?:[^"\\]|\\.)*)"(.*)\];$'
)
DOT_NODE = re.compile(r'^    "([^"]+)" \[(.*)\];$')


def run_seed() -> RunResult:
    """The seed demo: two tool round trips, then an answer."""
    model = ScriptedModel(
        [
            replies.tool_use("calculate", {"expression": "1 + 1"}),
            replies.tool_use("calculate", {"expression": "2 + 2"}),
            replies.text("2 and 4."),
        ]
    )
    return Agent(model, tools=[calculate]).run("Add things.")


def mermaid_edges(text: str) -> list[tuple[str, str, str]]:
    """(source, dest, label) of every transition line, labels decoded."""
    edges = []
    for line in text.splitlines():
        match = MERMAID_EDGE.match(line)
        if match:
            label = diagrams.mermaid_unescape(match.group(3) or "")
            edges.append((match.group(1), match.group(2), label))
    return edges


def drawn_rows(drawn: list[diagrams.Edge]) -> Counter[diagrams.RowKey]:
    """How often each row is drawn, counting both ways of a two-way edge."""
    return Counter(
        key for edge in drawn for part in (edge, edge.back) if part is not None for key in part.rows
    )


def mermaid_classes(text: str) -> dict[str, set[str]]:
    """Class name -> states, from the `class a,b name` lines."""
    classes: dict[str, set[str]] = {}
    for line in text.splitlines():
        match = re.match(r"^    class (\S+) (\w+)$", line)
        if match:
            classes.setdefault(match.group(2), set()).update(match.group(1).split(","))
    return classes


def dot_edges(text: str) -> list[tuple[str, str, str, str]]:
    """(source, dest, label, other attributes) of every edge between states."""
    edges = []
    for line in text.splitlines():
        match = DOT_EDGE.match(line)
        if match:
            label = match.group(3).replace('\\"', '"').replace("\\\\", "\\")
            edges.append((match.group(1), match.group(2), label, match.group(4)))
    return edges


def dot_nodes(text: str) -> dict[str, str]:
    nodes = {}
    for line in text.splitlines():
        match = DOT_NODE.match(line)
        if match:
            nodes[match.group(1)] = match.group(2)
    return nodes


def svg_structure(text: str) -> list[tuple[str, str, tuple[str, ...]]]:
    """What an SVG draws, without coordinates or comments: each node and edge with its text.

    Graphviz versions differ in layout and in their header comments, not in what
    they draw, so this is what a committed SVG is compared on.
    """
    ns = {"svg": "http://www.w3.org/2000/svg"}
    root = ET.fromstring(text)
    shapes = []
    for group in root.iter("{http://www.w3.org/2000/svg}g"):
        kind = group.get("class")
        if kind not in ("node", "edge"):
            continue
        title = group.findtext("svg:title", default="", namespaces=ns)
        texts = tuple(t.text or "" for t in group.iter("{http://www.w3.org/2000/svg}text"))
        shapes.append((kind, title, texts))
    return sorted(shapes)


class TestCommittedFiles:
    def test_full_diagrams_are_fresh(self) -> None:
        """diagrams/machine-full.{mmd,dot,svg} are the full drawing as generated now."""
        for name, text in (("mmd", diagrams.mermaid(full=True)), ("dot", diagrams.dot(full=True))):
            committed = (ROOT / "diagrams" / f"machine-full.{name}").read_text(encoding="utf-8")
            assert committed == text, f"diagrams/machine-full.{name} {STALE}"
        committed = (ROOT / "diagrams" / "machine-full.svg").read_text(encoding="utf-8")
        assert svg_structure(committed) == svg_structure(diagrams.svg(full=True))

    def test_packaged_svg_is_the_committed_one(self) -> None:
        """The SVG shipped in the package (for reports without a renderer) is the committed
        review diagram, byte for byte, and is what `packaged_svg` reads."""
        committed = (ROOT / "diagrams" / "machine.svg").read_text(encoding="utf-8")
        packaged = ROOT / "statemachine_agent" / diagrams.PACKAGED_SVG
        assert packaged.read_text(encoding="utf-8") == committed, f"{packaged} {STALE}"
        assert diagrams.packaged_svg() == committed

    def test_mermaid_is_fresh(self) -> None:
        """diagrams/machine.mmd is exactly what the table generates now."""
        committed = (ROOT / "diagrams" / "machine.mmd").read_text(encoding="utf-8")
        assert committed == diagrams.mermaid(), f"diagrams/machine.mmd {STALE}"

    def test_dot_is_fresh(self) -> None:
        """diagrams/machine.dot is exactly what the table generates now."""
        committed = (ROOT / "diagrams" / "machine.dot").read_text(encoding="utf-8")
        assert committed == diagrams.dot(), f"diagrams/machine.dot {STALE}"

    def test_svg_draws_what_the_table_says(self) -> None:
        """diagrams/machine.svg draws the same nodes, edges and labels as a fresh render."""
        committed = (ROOT / "diagrams" / "machine.svg").read_text(encoding="utf-8")
        assert svg_structure(committed) == svg_structure(diagrams.svg()), (
            f"diagrams/machine.svg {STALE}"
        )


class TestMermaid:
    def test_starts_as_a_state_diagram(self) -> None:
        """The text is a stateDiagram-v2 entering the initial state from [*]."""
        lines = diagrams.mermaid().splitlines()
        assert lines[0] == "stateDiagram-v2"
        assert f"    [*] --> {table.INITIAL_STATE}" in lines

    def test_every_row_is_an_edge(self) -> None:
        """In the full drawing each table row is one edge with its trigger and guards."""
        edges = Counter(mermaid_edges(diagrams.mermaid(full=True)))
        wanted = Counter((row.source, row.dest, row.label) for row in table.ROWS)
        assert wanted - edges == Counter()
        between_states = [e for e in edges.elements() if "[*]" not in (e[0], e[1])]
        assert len(between_states) == len(table.ROWS)

    def test_every_state_is_declared(self) -> None:
        """A state no row reaches yet still appears, so the picture shows the whole contract."""
        declared = {line.strip().split(":")[0] for line in diagrams.mermaid().splitlines()}
        assert set(table.STATES) <= declared

    def test_labels_survive_the_mermaid_grammar(self) -> None:
        """After entity codes, no label holds a character Mermaid's grammar would misread."""
        for line in diagrams.mermaid().splitlines():
            if ": " not in line or line.lstrip().startswith(("%%", "classDef")):
                continue
            label = line.split(": ", 1)[1]
            assert re.fullmatch(r"[^:;#%<>&\[\]{}\"|`\n]*", re.sub(r"#\d+;", "", label)), line

    def test_guard_brackets_are_entity_codes(self) -> None:
        """`[`, `&` and `]` are written as #91;, #38; and #93;, which Mermaid decodes."""
        assert diagrams.mermaid_text("a [b & c]") == "a #91;b #38; c#93;"
        assert diagrams.mermaid_unescape("a #91;b #38; c#93;") == "a [b & c]"

    def test_every_end_state_is_marked(self) -> None:
        """In the full drawing every end state leads to [*]; in the review drawing (which
        spares the reader ten arrows into one dot) each carries an end-state class."""
        edges = mermaid_edges(diagrams.mermaid(full=True))
        assert {s for s, d, _ in edges if d == "[*]"} == set(table.END_STATES)
        classes = mermaid_classes(diagrams.mermaid())
        assert set(table.END_STATES) <= classes.get("endState", set()) | classes.get(
            "reserved", set()
        )

    def test_reserved_states_are_marked(self) -> None:
        """Reserved states get the dashed `reserved` class and say so in their description."""
        text = diagrams.mermaid()
        assert mermaid_classes(text).get("reserved", set()) == set(table.RESERVED_STATES)
        for name in table.RESERVED_STATES:
            assert f"    {name}: reserved, not reachable yet" in text.splitlines()

    def test_no_reserved_states_leaves_no_empty_class(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """With nothing reserved, no `class` line is left without states (invalid Mermaid)."""
        monkeypatch.setattr(table, "RESERVED_STATES", {})
        text = diagrams.mermaid()
        assert "reserved" not in text
        assert all(
            re.match(r"^    class \S+ \w+$", ln) for ln in text.splitlines() if "class " in ln
        )

    def test_end_states_outside_reserved_are_styled(self) -> None:
        """Reachable end states carry the `endState` class."""
        classes = mermaid_classes(diagrams.mermaid())
        reachable_ends = set(table.END_STATES) - set(table.RESERVED_STATES)
        assert classes["endState"] == reachable_ends


class TestHighlight:
    def test_visited_states_and_fired_counts(self) -> None:
        """A run's visited states are classed and fired rows' labels end in their count."""
        result = run_seed()
        text = diagrams.mermaid(result.trail)
        classes = mermaid_classes(text)
        visited = set(result.path)
        assert classes["visited"] | classes["reached"] == visited
        assert classes["reached"] == {result.end_state}
        fired = Counter(step.key for step in result.trail)
        labels = {(s, d, lbl) for s, d, lbl in mermaid_edges(text)}
        for (source, trigger, dest, via), count in fired.items():
            row = next(r for r in table.ROWS if r.key == (source, trigger, dest, via))
            assert (source, dest, f"{row.label} (×{count})") in labels

    def test_visit_counts(self) -> None:
        """Each visited state says how often it was entered."""
        result = run_seed()
        text = diagrams.mermaid(result.trail)
        visits = Counter(result.path)
        for state, count in visits.items():
            assert f"    {state}: visited ×{count}" in text.splitlines()

    def test_unfired_rows_have_no_count(self) -> None:
        """Rows the run did not take keep their plain label."""
        text = diagrams.mermaid(run_seed().trail)
        assert ("observe", "stalled", "observed [stall_persists]") in mermaid_edges(text)
        full = diagrams.mermaid(run_seed().trail, full=True)
        cancel = next(r for r in table.ROWS if r.dest == "cancelled")
        assert (cancel.source, cancel.dest, cancel.label) in mermaid_edges(full)

    def test_audit_dicts_highlight_like_records(self) -> None:
        """The `transition.fired` dicts of an audit file highlight exactly like the records."""
        result = run_seed()
        as_events: list[dict[str, Any]] = [step.to_dict() for step in result.trail]
        assert diagrams.mermaid(as_events) == diagrams.mermaid(result.trail)
        assert diagrams.dot(as_events) == diagrams.dot(result.trail)

    def test_rows_missing_from_the_table_are_flagged(self) -> None:
        """A trail from an older table still shows its rows, marked as not in the table."""
        old = {"source": "perceive", "trigger": "gone", "dest": "reason", "via": ["old_guard"]}
        edges = mermaid_edges(diagrams.mermaid([old]))
        assert ("perceive", "reason", "gone [old_guard] (not in the table) (×1)") in edges
        assert "gone [old_guard] (not in the table) (×1)" in diagrams.dot([old])

    def test_no_trail_means_no_highlight(self) -> None:
        """An empty trail draws the plain machine."""
        assert diagrams.mermaid([]) == diagrams.mermaid()
        assert diagrams.dot(None) == diagrams.dot()


class TestDot:
    def test_every_row_is_an_edge(self) -> None:
        """In the full drawing each table row is one DOT edge labelled with its trigger and
        guards."""
        edges = Counter((s, d, lbl) for s, d, lbl, _ in dot_edges(diagrams.dot(full=True)))
        assert edges == Counter((row.source, row.dest, row.label) for row in table.ROWS)

    def test_end_and_reserved_states_are_marked(self) -> None:
        """End states are double octagons; reserved states are dashed and say why."""
        nodes = dot_nodes(diagrams.dot())
        for name in table.END_STATES:
            assert 'shape="doubleoctagon"' in nodes[name]
        for name, why in table.RESERVED_STATES.items():
            assert "dashed" in nodes[name]
            assert why in nodes[name]
        assert set(table.STATES) <= set(nodes)

    def test_highlight_thickens_fired_edges(self) -> None:
        """Fired edges are drawn thick with counts; visited nodes are filled with counts."""
        result = run_seed()
        text = diagrams.dot(result.trail)
        fired = Counter(step.key for step in result.trail)
        counted = [(lbl, attrs) for _s, _d, lbl, attrs in dot_edges(text) if "(×" in lbl]
        assert len(counted) == len(fired)
        assert all('penwidth="2.5"' in attrs for _lbl, attrs in counted)
        nodes = dot_nodes(text)
        for state, count in Counter(result.path).items():
            assert "filled" in nodes[state]
            assert f"\\n×{count}" in nodes[state]

    def test_quotes_and_backslashes_cannot_break_out(self) -> None:
        """A fired row named with quotes is left out (not a name), so it cannot break out of
        its DOT string; the table's own labels are quoted."""
        odd = {"source": "act", "trigger": 'say "hi"\\', "dest": "observe", "via": []}
        assert "say" not in diagrams.dot([odd])
        assert 'label="replied [is_tool_use]"' in diagrams.dot(None)


class TestSvg:
    def test_missing_graphviz_names_the_install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Without any renderer, SVG fails naming both ways to install one."""
        monkeypatch.setattr(diagrams, "find_renderer", lambda: None)
        with pytest.raises(diagrams.GraphvizNotFoundError, match="pip install graphviz-pure"):
            diagrams.svg()
        with pytest.raises(diagrams.GraphvizNotFoundError, match="apt-get install graphviz"):
            diagrams.png()

    def test_graphviz_pure_is_preferred_then_the_system_dot(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The wheel's renderer is found without PATH; the system `dot` is the fallback."""
        monkeypatch.setenv("PATH", "")
        found = diagrams.find_renderer()
        assert found is not None
        assert found.name.startswith("graphviz-pure ")
        system = shutil.which("dot", path="/usr/bin:/usr/local/bin")
        assert system, "run `make system-deps` (Debian package graphviz)"
        monkeypatch.setenv("PATH", str(Path(system).parent))
        monkeypatch.setattr(diagrams, "_graphviz_pure", lambda: None)
        fallback = diagrams.find_renderer()
        assert fallback == diagrams.Renderer("the system Graphviz dot", system)
        assert "<svg" in diagrams.svg()

    def test_graphviz_pure_draws_what_the_system_dot_draws(self) -> None:
        """On the committed diagrams, graphviz-pure and the system Graphviz draw the same
        nodes, edges and labels (layouts differ by version and font metrics)."""
        pure = diagrams.find_renderer()
        system = shutil.which("dot")
        assert pure is not None
        assert system, "run `make system-deps` (Debian package graphviz)"
        for name in ("machine.dot", "machine-full.dot"):
            source = (ROOT / "diagrams" / name).read_bytes()
            drawn = [
                subprocess.run(
                    [program, "-Tsvg"], input=source, capture_output=True, check=True
                ).stdout.decode("utf-8")
                for program in (pure.path, system)
            ]
            assert svg_structure(drawn[0]) == svg_structure(drawn[1]), name

    def test_png_is_a_png(self) -> None:
        assert diagrams.png().startswith(b"\x89PNG\r\n\x1a\n")

    def test_renders_every_row(self) -> None:
        """The full SVG has one edge per row plus the start arrow, and a node per state."""
        shapes = svg_structure(diagrams.svg(full=True))
        assert sum(1 for kind, *_ in shapes if kind == "edge") == len(table.ROWS) + 1
        titles = {title for kind, title, _ in shapes if kind == "node"}
        assert set(table.STATES) <= titles

    def test_every_node_and_edge_has_its_id(self) -> None:
        """Each state and each drawn edge carries its stable SVG id, for marking a path on
        an SVG rendered before the run."""
        text = diagrams.svg(full=True)
        ids = set(re.findall(r'<g id="([^"]+)" class="(?:node|edge)">', text))
        assert {diagrams.state_id(name) for name in table.STATES} <= ids
        assert {diagrams.row_id(row.key) for row in table.ROWS} <= ids

    def test_render_knows_every_format(self) -> None:
        """`render` accepts each listed format and rejects others by name."""
        assert diagrams.render("mermaid") == diagrams.mermaid()
        assert diagrams.render("dot") == diagrams.dot()
        with pytest.raises(ValueError, match="unknown diagram format 'png'"):
            diagrams.render("png")


class TestReviewDrawing:
    """The default drawing: the rows every working state shares are drawn once."""

    def test_the_shared_rows_are_cancel_and_crash(self) -> None:
        groups = {group.label: group for group in diagrams.common_edges()}
        assert set(groups) == {"crashed", "any trigger [cancel_requested]"}
        working = set(table.WORKING_STATES + table.HELPER_STATES)
        for group in groups.values():
            assert set(group.sources) == working
        assert {r.dest for r in groups["crashed"].rows} == {"failed"}
        cancel_rows = [r for r in table.ROWS if "cancel_requested" in r.guards]
        assert groups["any trigger [cancel_requested]"].rows == tuple(cancel_rows)

    def test_every_row_is_an_edge_or_in_one_group(self) -> None:
        """Nothing is lost: each row is drawn by exactly one edge (one way of it)."""
        assert drawn_rows(diagrams.edges(diagrams.highlight(None))) == Counter(
            row.key for row in table.ROWS
        )

    def test_at_most_30_edges_in_every_format(self) -> None:
        """The review diagram reads at a glance: at most 30 edges, counted as drawn in DOT
        (the start marker aside) and in Mermaid (a resume is a note there)."""
        assert len(diagrams.edges(diagrams.highlight(None))) <= 30
        dot_arrows = [ln for ln in diagrams.dot().splitlines() if " -> " in ln]
        assert len([ln for ln in dot_arrows if "__start" not in ln]) <= 30
        between = [e for e in mermaid_edges(diagrams.mermaid()) if "[*]" not in e[:2]]
        assert len(between) <= 30
        full = [e for e in mermaid_edges(diagrams.mermaid(full=True)) if "[*]" not in e[:2]]
        assert len(full) == len(table.ROWS)

    def test_rows_from_several_states_of_a_box_are_one_edge_naming_each(self) -> None:
        """Every helper state goes back to `perceive` by one edge from the helper box, a
        line per row naming its state; the other rows into `failed` join the crash edge."""
        drawn = {edge.id: edge for edge in diagrams.edges(diagrams.highlight(None))}
        back = drawn["helpers.perceive"]
        into = [row for row in table.ROWS if row.dest == "perceive" and row.source in
                table.HELPER_STATES]  # fmt: skip
        assert (back.source, set(back.rows)) == (diagrams.ANY_HELPER, {r.key for r in into})
        assert back.label.splitlines() == [f"{r.source}: {r.label}" for r in into]
        failed = drawn["group.failed"]
        assert set(failed.rows) == {row.key for row in table.ROWS if row.dest == "failed"}
        assert 'lhead="cluster_loop"' not in diagrams.dot()
        assert 'ltail="cluster_loop"' in diagrams.dot()

    def test_resumes_out_of_cancelled_are_one_edge_back(self) -> None:
        """All `resumed` rows out of `cancelled` are one edge, drawn as the way back of the
        grouped cancel edge, with the words a reviewer reads."""
        drawn = diagrams.edges(diagrams.highlight(None))
        cancel = next(e for e in drawn if e.id == "group.cancelled.cancel_requested")
        assert cancel.back is not None
        assert cancel.back.label == "resumed: carry on where it stopped"
        resumes = {r.key for r in table.ROWS if r.source == "cancelled"}
        assert set(cancel.back.rows) == resumes
        text = diagrams.dot()
        assert 'dir="both"' in text
        assert "back: resumed: carry on where it stopped" in text.replace("\\n", "\n")
        assert "note right of cancelled" in diagrams.mermaid()

    def test_the_loop_helpers_and_ends_are_boxes(self) -> None:
        """The four phases are one box, the helper states another beside them, the end
        states a third: a person finds the loop and every end state in the picture."""
        text = diagrams.dot()
        for box, names in (
            ("cluster_loop", table.WORKING_STATES),
            ("cluster_helpers", table.HELPER_STATES),
            ("cluster_ends", table.END_STATES),
        ):
            line = next(ln for ln in text.splitlines() if f"subgraph {box} " in ln)
            assert all(f'"{name}";' in line for name in names), box

    @settings(max_examples=40, deadline=None)
    @given(st.data())
    def test_grouping_is_by_shape_not_by_row_list(self, data: st.DataObject) -> None:
        """Any subset of the table, in any order, plus a new resume row: every row is drawn
        by exactly one edge, and never more edges than rows."""
        rows = data.draw(st.permutations(table.ROWS))
        rows = rows[: data.draw(st.integers(min_value=1, max_value=len(rows)))]
        extra = table.Row("cancelled", "resumed", "observe", ("cancelled_somewhere_new",))
        rows = [*rows, extra]
        with patch.object(table, "ROWS", tuple(rows)):
            drawn = diagrams.edges(diagrams.highlight(None))
            assert drawn_rows(drawn) == Counter(row.key for row in rows)
            assert len(drawn) <= len(rows)
            diagrams.mermaid()
            diagrams.dot()

    def test_a_resumed_run_lights_the_two_way_edge(self) -> None:
        """A run cancelled in act and resumed there fires both ways of the cancel edge."""
        trail = [
            {"source": "act", "trigger": "tools_done", "dest": "cancelled",
             "via": ["cancel_requested"]},
            {"source": "cancelled", "trigger": "resumed", "dest": "act",
             "via": ["cancelled_in_act"]},
        ]  # fmt: skip
        fired, _ = diagrams.marked_ids(trail)
        assert "group.cancelled.cancel_requested" in fired
        assert "back: resumed: carry on where it stopped (×1)" in diagrams.dot(trail).replace(
            "\\n", "\n"
        )

    def test_a_fired_shared_row_counts_on_its_group(self) -> None:
        """A run cancelled in `act` lights the grouped cancel edge, with its count."""
        trail = [
            {"source": "perceive", "trigger": "prepared", "dest": "reason", "via": []},
            {"source": "reason", "trigger": "replied", "dest": "act", "via": ["is_tool_use"]},
            {
                "source": "act",
                "trigger": "tools_done",
                "dest": "cancelled",
                "via": ["cancel_requested"],
            },
        ]
        edges = mermaid_edges(diagrams.mermaid(trail))
        assert (diagrams.ANY_STATE, "cancelled", "any trigger [cancel_requested] (×1)") in edges
        fired, visited = diagrams.marked_ids(trail)
        assert "group.cancelled.cancel_requested" in fired
        assert diagrams.state_id("cancelled") in visited
        full_fired, _ = diagrams.marked_ids(trail, full=True)
        assert "row.act.tools_done.cancelled.cancel_requested" in full_fired


class TestOutputSuffix:
    """`diagram -o FILE` takes its format from the suffix; a contradicting --format is a
    one-line usage error."""

    @pytest.mark.parametrize(
        ("suffix", "starts"),
        [(".mmd", b"stateDiagram-v2"), (".dot", b"digraph"), (".svg", b"<?xml"),
         (".png", b"\x89PNG")],
    )  # fmt: skip
    def test_the_suffix_picks_the_format(self, tmp_path: Path, suffix: str, starts: bytes) -> None:
        from statemachine_agent.cli import main

        target = tmp_path / f"machine{suffix}"
        assert main(["diagram", "-o", str(target)]) == 0
        assert target.read_bytes().startswith(starts)

    def test_a_contradicting_format_is_refused(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        from statemachine_agent.cli import main

        target = tmp_path / "run.svg"
        assert main(["diagram", "--format", "mermaid", "-o", str(target)]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1
        assert "asks for svg" in err
        assert not target.exists()
