"""The fleet view, `statemachine-agent stats` (issue 25, part C).

A folder of over a thousand audit files is made from a handful of real runs (scripted
ones, and approvals through the real anthropic SDK against the local server, decided
by a named person), each copied under new run ids and re-chained: one run is split
over two files, one file is an older one without the decision's new fields, one is
encrypted, and a few are edited or cut short. `stats` must give exactly what a plain
reading of the intact files gives, and what the runs' multiplicities say; terminal,
JSON and HTML show the same, hostile names stay text, and the page holds in a browser.
"""

from __future__ import annotations

import io
import json
import math
import re
import shutil
import statistics
import tempfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console
from selenium import webdriver
from selenium.webdriver.common.by import By

from benchmarks.stats_memory import copy_of, write_chained
from statemachine_agent import (
    Agent,
    Approve,
    Audit,
    Budget,
    Deny,
    ScriptedModel,
    calculate,
    diagrams,
    generate_key,
    tool,
)
from statemachine_agent.cli import main
from statemachine_agent.machine import table
from statemachine_agent.persistence.crypto import cipher_for
from statemachine_agent.policy.stall import StallPolicy
from statemachine_agent.report import FleetStats, ReportError, stats
from statemachine_agent.report.stats import _Sample
from statemachine_agent.report.stats_console import print_stats
from statemachine_agent.report.stats_page import STYLE, heat_level, heat_map, render_stats
from statemachine_agent.testing import FakeAnthropicServer, replies
from tests.test_report import browser, browser_log
from tests.test_review_surfaces import CORPUS

__all__ = ["browser"]  # the fixture, shared with test_report

Event = dict[str, Any]

COPIES = 115
"""Copies of each template; 10 templates (the split run is two files) make 1,150 files."""
BROKEN = 4
"""Copies of the completed run edited after the fact (their chains break)."""


@tool
def search(query: str) -> str:
    """Search the web (always finds nothing)."""
    return "no results"


@tool(requires_approval=True, side_effect=True)
def refund(amount: int) -> str:
    """Refund an amount to the customer."""
    return f"refunded {amount}"


def events_of(path: Path) -> list[Event]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def only_file(folder: Path) -> Path:
    (path,) = folder.glob("*.jsonl")
    return path


def scripted(folder: Path, script: list[Any], **options: Any) -> list[Event]:
    agent = Agent(ScriptedModel(script), audit=Audit(dir=folder), **options)
    agent.run("Go.")
    return events_of(only_file(folder))


def same_search(n: int) -> list[Any]:
    return [replies.tool_use("search", {"query": "weather tokyo"}) for _ in range(n)]


def approval_run(folder: Path, decision: Any) -> list[Event]:
    """A refund that pauses for a person, resumed by a fresh agent with their decision,
    through the real anthropic SDK against the local strict server."""
    script = [
        replies.reply(
            replies.tool_use_block("refund", {"amount": 12}, id="toolu_refund"),
            stop_reason="tool_use",
        ),
        replies.text("Done."),
    ]
    with FakeAnthropicServer(script) as server:

        def agent() -> Agent:
            return Agent(
                server.model(max_retries=0),
                tools=[refund],
                checkpointer=folder / "runs.sqlite3",
                audit=Audit(dir=folder / "audit"),
            )

        paused = agent().run("Refund 12 to the customer.")
        assert paused.end_state == "awaiting_approval"
        done = agent().resume(paused.run_id, decisions={"toolu_refund": decision})
        assert done.end_state == "completed"
        assert server.unexpected() == []
    return events_of(only_file(folder / "audit"))


def as_older_file(events: list[Event]) -> list[Event]:
    """The file as written before decisions named who and how long (issue 25, part A)."""
    gone = ("by", "decided_by", "note", "decided_at", "waited_s")
    return [
        {k: v for k, v in e.items() if e["event"] != "approval.decided" or k not in gone}
        for e in events
    ]


def templates(root: Path) -> dict[str, list[list[Event]]]:
    """Each template: the files one copy of it writes (a list of event lists)."""
    made: dict[str, list[list[Event]]] = {}

    def folder(name: str) -> Path:
        path = root / name
        path.mkdir(parents=True)
        return path

    made["completed"] = [scripted(folder("completed"), [replies.text("Hi.")])]
    made["budget"] = [
        scripted(
            folder("budget"),
            [replies.tool_use("calculate", {"expression": "1+1"}), replies.text("Salvage.")],
            tools=[calculate],
            budget=Budget(max_iterations=1),
        )
    ]
    made["stalled"] = [
        scripted(
            folder("stalled"),
            [*same_search(5), replies.text("Nothing found.")],
            tools=[search],
            stall=StallPolicy(max_interventions=2),
        )
    ]
    made["recovered"] = [
        scripted(folder("recovered"), [*same_search(3), replies.text("Found.")], tools=[search])
    ]
    made["failed"] = [scripted(folder("failed"), [replies.reply(stop_reason="end_turn")])]
    made["approved"] = [approval_run(folder("approved"), Approve(by="carol", note="within policy"))]
    denied = approval_run(folder("denied"), Deny("Over the limit.", by="dave"))
    made["denied"] = [denied]
    made["older"] = [as_older_file(denied)]
    split_at = next(i for i, e in enumerate(made["approved"][0]) if e["event"] == "run.resumed")
    # The resumed half first: the file read first is not the run's last end.
    made["split"] = [made["approved"][0][split_at:], made["approved"][0][:split_at]]
    subagents = folder("subagents")
    assert main(["demo", "--scenario", "subagents", "--audit-dir", str(subagents)]) == 0
    made["subagents"] = [events_of(only_file(subagents))]
    return made


class Fleet:
    """The generated folder, and which of its files are intact."""

    def __init__(self, root: Path) -> None:
        self.folder = root / "fleet"
        self.folder.mkdir()
        self.made = templates(root / "templates")
        self.intact: list[Path] = []
        self.key = generate_key()
        self.broken: list[Path] = []
        for t, (name, files) in enumerate(sorted(self.made.items())):
            for number in range(COPIES):
                for part, events in enumerate(copy_of(files, number, t)):
                    path = self.folder / f"{name}-{number:04d}-{part}.jsonl"
                    write_chained(path, events)
                    self.intact.append(path)
        for victim in sorted(self.folder.glob("completed-000*-0.jsonl"))[:BROKEN]:
            lines = victim.read_text(encoding="utf-8").splitlines()
            lines[1] = lines[1].replace('"seq": 1', '"seq": 7')
            victim.write_text("\n".join(lines) + "\n", encoding="utf-8")
            self.intact.remove(victim)
            self.broken.append(victim)
        cut = self.folder / "budget-0000-0.jsonl"
        cut.write_text(
            "".join(cut.read_text(encoding="utf-8").splitlines(keepends=True)[:-1]),
            encoding="utf-8",
        )
        self.intact.remove(cut)
        self.broken.append(cut)
        self.encrypted = self.folder / "sealed" / "completed-sealed.jsonl"
        self.encrypted.parent.mkdir()
        write_chained(
            self.encrypted, copy_of(self.made["completed"], 9999, 99)[0], cipher_for(self.key)
        )
        (self.folder / "notes.html").write_text("<p>not an audit file</p>", encoding="utf-8")


@pytest.fixture(scope="module")
def fleet() -> Iterator[Fleet]:
    root = Path(tempfile.mkdtemp(prefix="fleet-"))
    try:
        yield Fleet(root)
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def counted(fleet: Fleet) -> FleetStats:
    return stats([fleet.folder])


def plain_reading(paths: list[Path]) -> dict[str, Any]:
    """What the files say, read the obvious way (every event of every file in memory)."""
    rows: Counter[tuple[str, str, str, tuple[str, ...]]] = Counter()
    ends: dict[str, tuple[float, str]] = {}
    subs: set[str] = set()
    decisions: Counter[str] = Counter()
    reviewers: Counter[str] = Counter()
    interventions: Counter[str] = Counter()
    for path in paths:
        for event in events_of(path):
            rid = event["run_id"]
            if event.get("parent_run_id"):
                subs.add(rid)
            if event["event"] == "transition.fired":
                rows[(event["source"], event["trigger"], event["dest"], tuple(event["via"]))] += 1
            elif event["event"] == "run.ended" and event["ts"] >= ends.get(rid, (-1.0, ""))[0]:
                ends[rid] = (event["ts"], event["end_state"])
            elif event["event"] == "approval.decided":
                decisions[event["decision"]] += 1
                kind = event.get("decided_by") or {"resume": "person"}.get(
                    event["source"], event["source"]
                )
                reviewers[event.get("by") or f"({kind})"] += 1
            elif event["event"] == "stall.intervened":
                interventions[rid] += 1
    return {
        "rows": rows,
        "ends": Counter(state for rid, (_, state) in ends.items() if rid not in subs),
        "sub_ends": Counter(state for rid, (_, state) in ends.items() if rid in subs),
        "decisions": decisions,
        "reviewers": reviewers,
        "stalls": Counter(ends[rid][1] for rid in interventions),
        "interventions": sum(interventions.values()),
    }


class TestAFleetOfAuditFiles:
    def test_the_folder_is_large_enough(self, fleet: Fleet, counted: FleetStats) -> None:
        """Over a thousand files are read; the edited and cut ones are named, the encrypted
        one skipped (no key), the HTML file not taken for an audit file."""
        assert len(fleet.intact) >= 1_000
        assert counted.files_counted == len(fleet.intact)
        assert counted.not_verified_count == len(fleet.broken) == BROKEN + 1
        assert sorted(p.path for p in counted.not_verified) == sorted(map(str, fleet.broken))
        assert {p.problem.split(":")[0] for p in counted.not_verified} == {"broken", "unsealed"}
        assert counted.files_read == len(fleet.intact) + len(fleet.broken)
        assert [p.path for p in counted.skipped] == [str(fleet.encrypted)]
        assert "--encryption-key" in counted.skipped[0].problem

    def test_counts_equal_a_plain_reading_of_the_intact_files(
        self, fleet: Fleet, counted: FleetStats
    ) -> None:
        """Rows, end states, approvals and stalls are exactly what the intact files hold."""
        plain = plain_reading(fleet.intact)
        assert {(r.source, r.trigger, r.dest, r.guards): r.fired for r in counted.rows} == {
            row.key: plain["rows"][row.key] for row in table.ROWS
        }
        assert counted.unknown_rows == ()
        assert {e.end_state: e.runs for e in counted.end_states if e.runs} == plain["ends"]
        subs = {e.end_state: e.sub_agent_runs for e in counted.end_states if e.sub_agent_runs}
        assert subs == plain["sub_ends"]
        assert counted.approvals.by_decision == plain["decisions"]
        assert {r.reviewer: sum(r.decisions.values()) for r in counted.approvals.reviewers} == (
            plain["reviewers"]
        )
        assert counted.stalls.ended == plain["stalls"]
        assert counted.stalls.interventions == plain["interventions"]

    def test_counts_equal_what_the_copies_make(self, counted: FleetStats) -> None:
        """Each run once, by its last end: the split run and the paused-then-resumed runs
        are completed runs; sub-agent runs are counted apart."""
        n = COPIES
        ends = {e.end_state: e.runs for e in counted.end_states}
        # completed: the plain one (less the edited copies), the recovered stall, the
        # approved, denied, older, split and sub-agent lead runs.
        assert ends == {
            "completed": 7 * n - BROKEN,
            "budget_exhausted": n - 1,
            "stalled": n,
            "failed": n,
        }
        assert counted.runs == 10 * n - BROKEN - 1
        assert counted.sub_agent_runs == 2 * n
        assert counted.stalls.runs == 2 * n
        assert counted.stalls.interventions == 3 * n
        assert counted.stalls.ended == {"stalled": n, "completed": n}
        approvals = counted.approvals
        assert approvals.by_decision["approve"] == 2 * n + n  # approved, split, sub-agent
        assert approvals.by_decision["deny"] == 2 * n  # denied and the older file
        reviewers = {r.reviewer: r for r in approvals.reviewers}
        assert sum(reviewers["carol"].decisions.values()) == 2 * n
        assert reviewers["dave"].decisions == {"deny": n}
        assert reviewers["(person)"].decisions == {"deny": n, "approve": n}
        assert approvals.by_decider["person"] == 5 * n

    def test_figures_are_the_runs_median_p90_and_max(
        self, fleet: Fleet, counted: FleetStats
    ) -> None:
        """Per end state, the figures are those of the top-level runs' last run.ended (the
        end states whose runs each sit in one file)."""
        by_end: dict[str, list[float]] = {}
        for path in fleet.intact:
            events = events_of(path)
            own = [e for e in events if e["event"] == "run.ended" and not e.get("parent_run_id")]
            if own:
                by_end.setdefault(own[-1]["end_state"], []).append(own[-1]["iterations"])
        for end in counted.end_states:
            if end.end_state == "completed":
                continue  # the split runs' first halves end awaiting_approval
            values = sorted(by_end[end.end_state])
            assert end.iterations.median == statistics.median(values)
            assert end.iterations.max == max(values)
            assert end.iterations.p90 == values[math.ceil(0.9 * len(values)) - 1]
            assert end.iterations.exact
            assert end.iterations.count == end.runs

    def test_approval_waits_come_from_the_files(self, fleet: Fleet, counted: FleetStats) -> None:
        """Carol's waits are her decisions' waited_s; the older file's are timed from the
        pause (it has no waited_s)."""
        carol = sorted(
            e["waited_s"]
            for path in fleet.intact
            if path.name.startswith(("approved", "split"))
            for e in events_of(path)
            if e["event"] == "approval.decided" and e.get("by") == "carol"
        )
        figures = {r.reviewer: r.wait_s for r in counted.approvals.reviewers}["carol"]
        assert figures.count == len(carol) == 2 * COPIES
        assert figures.max == max(carol)
        assert figures.median == statistics.median(carol)
        older = {r.reviewer: r.wait_s for r in counted.approvals.reviewers}["(person)"]
        assert older.count == 2 * COPIES  # the sub-agent demo's, and the older file's
        assert older.max is not None
        assert older.max is not None
        assert older.max > 0

    def test_the_encrypted_file_counts_with_its_key(self, fleet: Fleet) -> None:
        """With --encryption-key the encrypted file is read like the others."""
        alone = stats(fleet.encrypted.parent, encryption_key=fleet.key)
        assert alone.files_counted == 1
        assert {e.end_state: e.runs for e in alone.end_states} == {"completed": 1}


class TestTheCommand:
    def test_json_is_the_figures(
        self, fleet: Fleet, counted: FleetStats, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """--json prints `FleetStats.as_dict()`, never-fired rows included."""
        capsys.readouterr()
        assert main(["stats", str(fleet.folder), "--json"]) == 0
        data = json.loads(capsys.readouterr().out)
        assert data == json.loads(json.dumps(counted.as_dict()))
        assert len(data["never_fired"]) == len(counted.never_fired) > 0
        assert data["files_read"] == counted.files_read

    def test_the_terminal_view_names_what_matters(
        self, fleet: Fleet, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """The table says how many files were read and skipped, the end states, the rows
        that never fired, the reviewers and the files that do not verify."""
        capsys.readouterr()
        assert main(["stats", str(fleet.folder)]) == 0
        out = capsys.readouterr().out
        assert f"Read {len(fleet.intact) + len(fleet.broken):,} audit files" in out
        assert "1 skipped" in out
        for word in ("completed", "stalled", "carol", "dave", "never", str(fleet.broken[0])):
            assert word in out

    def test_errors_are_one_line_exit_2(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """A missing path, a folder with no audit file, only unreadable files: one line, 2."""
        junk = tmp_path / "junk"
        junk.mkdir()
        (junk / "a.jsonl").write_bytes(b"\xff\xfe not text\n")
        sealed = tmp_path / "sealed"
        sealed.mkdir()
        write_chained(
            sealed / "s.jsonl", [{"event": "run.ended", "run_id": "r"}], cipher_for(generate_key())
        )
        for args in (
            [str(tmp_path / "missing")],
            [str(tmp_path / "empty_dir_none")],
            [str(sealed)],
        ):
            if args[0].endswith("none"):
                Path(args[0]).mkdir()
            capsys.readouterr()
            assert main(["stats", *args]) == 2
            err = capsys.readouterr().err
            assert err.count("\n") == 1
            assert err.startswith("statemachine-agent: error: ")
        with pytest.raises(ReportError, match="no such file"):
            stats(tmp_path / "missing")

    def test_html_never_replaces_an_audit_file(
        self, fleet: Fleet, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """--html naming a file read (or a .jsonl in a folder read) is refused before reading."""
        target = fleet.intact[0]
        before = target.read_bytes()
        assert main(["stats", str(fleet.folder), "--html", str(target)]) == 2
        assert main(["stats", str(target), "--html", str(target)]) == 2
        assert target.read_bytes() == before


class TestHostileNames:
    @pytest.mark.parametrize("text", range(len(CORPUS)))
    def test_names_from_a_file_stay_text(self, tmp_path: Path, text: int) -> None:
        """A reviewer, decision, end state or row named with markup or escape sequences is
        shown as text in the terminal and escaped in the page."""
        hostile = CORPUS[text]
        events: list[Event] = [
            {"event": "transition.fired", "run_id": "r", "source": hostile, "trigger": "x",
             "dest": "y", "via": [hostile]},
            {"event": "approval.decided", "run_id": "r", "decision": hostile, "by": hostile},
            {"event": "run.ended", "run_id": "r", "end_state": hostile, "ts": 1.0},
        ]  # fmt: skip
        write_chained(tmp_path / "h.jsonl", events)
        fleet = stats(tmp_path)
        stream = io.StringIO()
        print_stats(fleet, Console(file=stream, width=200, force_terminal=True))
        out = stream.getvalue()
        assert "\x1b]0;" not in out
        assert "\x9b" not in out
        assert "\x07" not in out
        if "[bold red]" in hostile:
            assert "[bold red]forged" in out
        page = render_stats(fleet)
        body = page.split("</style>", 1)[1]
        if "<" in hostile:
            assert hostile not in page
        assert re.search(r"\sstyle=", body) is None
        assert "<script" not in page


class TestBoundedFigures:
    @settings(max_examples=60, deadline=None)
    @given(st.lists(st.floats(0, 1e6, allow_nan=False), min_size=1, max_size=80))
    def test_exact_up_to_the_cap(self, values: list[float]) -> None:
        """Up to the cap, the median is statistics.median and p90 the nearest rank."""
        sample = _Sample(cap=100)
        for value in values:
            sample.add(value)
        figures = sample.figures()
        ordered = sorted(values)
        assert figures.exact
        assert figures.count == len(values)
        assert figures.median == statistics.median(values)
        assert figures.p90 == ordered[math.ceil(0.9 * len(values)) - 1]
        assert figures.max == max(values)

    @settings(max_examples=30, deadline=None)
    @given(st.lists(st.floats(0, 1e6, allow_nan=False), min_size=11, max_size=300))
    def test_past_the_cap_memory_stays_and_count_and_max_are_exact(
        self, values: list[float]
    ) -> None:
        """Past the cap, at most `cap` values are kept; count and max stay exact."""
        sample = _Sample(cap=10)
        for value in values:
            sample.add(value)
        figures = sample.figures()
        assert len(sample.values) == 10
        assert figures.count == len(values)
        assert figures.max == max(values)
        assert not figures.exact
        assert figures.median is not None
        assert min(values) <= figures.median <= max(values)

    @settings(max_examples=25, deadline=None)
    @given(
        order=st.permutations(range(4)),
        tss=st.lists(st.floats(1, 1e9), min_size=4, max_size=4, unique=True),
    )
    def test_a_run_over_files_counts_once_by_its_latest_end(
        self, tmp_path_factory: pytest.TempPathFactory, order: list[int], tss: list[float]
    ) -> None:
        """Whatever order its files are read in, a run counts once, by its latest run.ended."""
        folder = tmp_path_factory.mktemp("split")
        ends = ["awaiting_approval", "cancelled", "completed", "failed"]
        for position, index in enumerate(order):
            event = {
                "event": "run.ended",
                "run_id": "r",
                "end_state": ends[index],
                "ts": tss[index],
            }
            write_chained(folder / f"{position}.jsonl", [event])
        fleet = stats(folder)
        assert fleet.runs == 1
        latest = ends[max(range(4), key=lambda i: tss[i])]
        assert [(e.end_state, e.runs) for e in fleet.end_states] == [(latest, 1)]

    def test_heat_levels_rise_with_counts(self) -> None:
        """An edge fired more never gets a lighter level, and the busiest gets the top one."""
        levels = [heat_level(n, 10_000) for n in (1, 10, 100, 1_000, 10_000)]
        assert levels == sorted(levels)
        assert levels[-1] == 5
        assert levels[0] == 1
        assert STYLE.count("heat-5") >= 1


class TestThePageInABrowser:
    def test_heat_map_at_1280(
        self, fleet: Fleet, counted: FleetStats, browser: webdriver.Chrome, tmp_path: Path
    ) -> None:
        """The page loads with no console error (its CSP allows its own style), nothing is
        wider than a 1,280 px window, the busiest edges are drawn widest and the
        never-fired ones dashed, and the end states are in the first screen."""
        page = tmp_path / "fleet.html"
        assert main(["stats", str(fleet.folder), "--html", str(page)]) == 0
        browser.set_window_size(1280, 900)
        browser_log(browser)
        browser.get(page.as_uri())
        assert [e for e in browser_log(browser) if e["level"] == "SEVERE"] == []
        assert browser.execute_script("return document.scripts.length") == 0
        wide = browser.execute_script(
            "const el = [document.documentElement, document.body,"
            " ...document.querySelectorAll('.diagram, section, table, h1')];"
            "return el.filter(e => e.scrollWidth > e.clientWidth).map(e => e.id || e.tagName);"
        )
        assert wide == []
        width = browser.execute_script("return document.documentElement.clientWidth")
        svg = browser.find_element(By.CSS_SELECTOR, "#heat svg.machine").rect
        assert svg["x"] >= 0
        assert svg["x"] + svg["width"] <= width
        height = browser.execute_script("return window.innerHeight")
        badge = browser.find_element(By.CSS_SELECTOR, "#ends .badge.end").rect
        assert badge["y"] + badge["height"] <= height
        hottest = browser.find_elements(By.CSS_SELECTOR, "#heat g.edge.heat-5 path")
        coolest = browser.find_elements(By.CSS_SELECTOR, "#heat g.edge.fired:not(.heat-5) path")
        never = browser.find_elements(By.CSS_SELECTOR, "#heat g.edge.unfired path")
        assert hottest
        assert coolest
        assert never
        assert hottest[0].value_of_css_property("stroke-width") == "7px"
        assert all(p.value_of_css_property("stroke-width") != "7px" for p in coolest)
        assert never[0].value_of_css_property("stroke-dasharray") not in ("", "none")
        rows = browser.find_elements(By.CSS_SELECTOR, "table.rows tbody tr")
        assert len(rows) == len(table.ROWS)
        assert len(browser.find_elements(By.CSS_SELECTOR, "table.rows tr.never")) == len(
            counted.never_fired
        )

    def test_without_a_renderer_the_packaged_diagram_carries_the_heat(
        self, counted: FleetStats, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """With no Graphviz renderer the page still draws the heat, on the package's diagram
        (edges found by their ids), and says so."""
        monkeypatch.setattr(diagrams, "find_renderer", lambda: None)
        svg, note = heat_map(counted)
        assert note.startswith("The diagram shipped with the package")
        assert svg is not None
        assert 'class="edge fired heat-' in svg
        assert 'class="edge unfired"' in svg
