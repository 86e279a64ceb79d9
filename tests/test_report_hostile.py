"""An edited audit file cannot restyle, navigate or forge the HTML report (issue 24).

The audit file handed to `statemachine-agent report` is untrusted: anyone can edit
it. Each test takes a real demo run's file, puts one hostile string from a corpus
into *every* string value of every event, writes it back either as edited (the
chain then says "NOT verified") or re-chained (a valid unkeyed chain, as a forger
would make), and checks the page the CLI writes: no tag the report does not
write itself, no element the corpus tries to inject (a meta refresh, a `<base>`, a
`<form>`, a second style sheet, a forged "intact" banner), and the one chain
banner is the genuine one for that file. The same pages are then opened in
headless Chromium, which is what a reviewer's browser makes of them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from selenium import webdriver
from selenium.webdriver.common.by import By

from statemachine_agent.audit.chain import Chain, verify_file
from statemachine_agent.cli import main
from tests.test_report import browser, last_audit_file, open_report

__all__ = ["browser"]  # the fixture, shared with test_report

HOSTILE = (
    '<meta http-equiv="refresh" content="0;url=https://example.invalid/">',
    "</title><meta http-equiv=refresh content=0;url=data:text/html,x>",
    "</style><style>.chain.broken{display:none}</style>",
    '<style>*{display:none}</style><div class="banner ok">intact</div>',
    '"><img src=x onerror=alert(1)>',
    "' onmouseover='alert(1)' x='",
    '<div class="chain ok">Audit chain: intact (9 lines, SHA-256 chain)</div>',
    '<base href="https://example.invalid/">',
    '<form action="https://example.invalid/"><button>go</button></form>',
    "<svg><foreignObject><div class=banner>x</div></foreignObject></svg>",
    "]]><svg onload=alert(1)><!--",
    "&lt;script&gt;alert(1)&lt;/script&gt; &#60;img src=x onerror=alert(1)&#62; &amp;lt;b&gt;",
    "</pre></code></td></tr></table></section><iframe src=data:,x></iframe>",
    "\ud800 lone \udfff surrogates \udbff",
    "\x00\x1b[31mred\x1b[0m\x07\x9b2J\u2028\u2029",
    "javascript:alert(1) <a href=javascript:alert(1)>click</a>",
)
"""Strings an attacker puts in an audit file, each aiming at a different way out of
the text a report shows: markup, attributes, the style block, the page's base or
navigation, SVG, entity decoding, and what is not text at all."""

KEEP = frozenset({"event", "prev", "digest"})
"""Values left as they are: the event's name (else nothing is recognised and little
is drawn) and the chain members (re-written anyway when re-chained)."""

STRUCTURAL = KEEP | {"type", "role"}
"""Also kept in the second variant, so content blocks stay text and tool_use blocks."""


def hostile_copy(value: Any, text: str, keep: frozenset[str], depth: int = 0) -> Any:
    """`value` with `text` appended to every string in it (and to the keys of nested
    objects, which tool inputs and data carry), except the values under `keep`."""
    if isinstance(value, str):
        return value + text
    if isinstance(value, list):
        return [hostile_copy(v, text, keep, depth + 1) for v in value]
    if isinstance(value, dict):
        return {
            (k if depth == 0 or k in keep else k + text): (
                v if k in keep else hostile_copy(v, text, keep, depth + 1)
            )
            for k, v in value.items()
        }
    return value


def write_events(path: Path, events: list[dict[str, Any]], rechain: bool) -> None:
    """The events as an audit file: re-sealed by a fresh (unkeyed) chain, or as edited
    (each line still carrying its old `prev`, so the chain no longer holds)."""
    if rechain:
        chain = Chain()
        lines = [chain.seal(event).line for event in events]
    else:
        lines = [json.dumps(event) for event in events]  # \ud800 stays a lone surrogate
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")


@dataclass(frozen=True)
class Case:
    """One hostile page: which demo, which string, how it was written."""

    scenario: str
    text: int
    rechain: bool

    @property
    def name(self) -> str:
        return f"{self.scenario}-{self.text}-{'rechained' if self.rechain else 'edited'}"


SCENARIOS = ("budget-salvage", "subagents")
"""A run with a salvage call (its `purpose` once reached the page unescaped) and one
with sub-agent runs nested in tool calls."""

CASES = [
    Case(scenario, index, rechain)
    for scenario in SCENARIOS
    for index in range(len(HOSTILE))
    for rechain in (False, True)
]


@dataclass(frozen=True)
class Page:
    html: Path
    audit: Path
    banner: str
    """The chain line the page must show: `verify_file`'s summary of the file."""
    ok: bool


@pytest.fixture(scope="module")
def pages(tmp_path_factory: pytest.TempPathFactory) -> Mapping[str, Page]:
    """The report the CLI writes for each case, and the chain banner it must show."""
    originals: dict[str, list[dict[str, Any]]] = {}
    for scenario in SCENARIOS:
        folder = tmp_path_factory.mktemp(scenario)
        assert main(["demo", "--scenario", scenario, "--audit-dir", str(folder)]) in (0, 3, 4)
        lines = last_audit_file(folder).read_text(encoding="utf-8").splitlines()
        originals[scenario] = [json.loads(line) for line in lines]
    built: dict[str, Page] = {}
    folder = tmp_path_factory.mktemp("hostile")
    for case in CASES:
        keep = KEEP if case.text % 2 == 0 else STRUCTURAL
        events = [hostile_copy(e, HOSTILE[case.text], keep) for e in originals[case.scenario]]
        audit = folder / f"{case.name}.jsonl"
        write_events(audit, events, case.rechain)
        target = folder / f"{case.name}.html"
        assert main(["report", str(audit), "-o", str(target)]) == 0, case.name
        verification = verify_file(audit)
        assert verification.ok is case.rechain, verification.summary
        built[case.name] = Page(target, audit, verification.summary, verification.ok)
    return built


REPORT_TAGS = frozenset(
    {"html", "head", "meta", "link", "title", "style", "body", "main", "header", "footer",
     "h1", "h2", "h3", "h4", "p", "span", "div", "code", "pre", "section", "article",
     "details", "summary", "dl", "dt", "dd", "ul", "li", "strong", "table", "thead", "tbody",
     "tr", "th", "td",
     # Graphviz's drawing and the budget chart
     "svg", "g", "polygon", "polyline", "path", "ellipse", "text", "a", "line",
     "circle"}
)  # fmt: skip
"""Every tag the report writes itself: anything else came from the file."""


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))


def tags_of(page: str) -> list[tuple[str, dict[str, str | None]]]:
    parser = _Tags()
    parser.feed(page)
    parser.close()
    return parser.tags


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
class TestHostileAuditFile:
    def test_page_holds_only_the_reports_own_markup(
        self, pages: Mapping[str, Page], case: Case
    ) -> None:
        """Every tag and attribute on the page is one the report writes; the chain
        banner is one, and the genuine one."""
        page = pages[case.name]
        text = page.html.read_text(encoding="utf-8")
        tags = tags_of(text)
        assert {tag for tag, _ in tags} <= REPORT_TAGS
        metas = [attrs for tag, attrs in tags if tag == "meta"]
        assert [a.get("http-equiv") for a in metas] == [None, "Content-Security-Policy", None]
        assert sum(1 for tag, _ in tags if tag == "style") == 1
        assert not any(a.get("style") for _, a in tags), "no style attribute (the CSP forbids)"
        assert not any(k.startswith("on") for _, a in tags for k in a), "no event handler"
        assert not any(str(a.get("href", "")).startswith("javascript") for _, a in tags)
        chains = [a for _, a in tags if "chain" in str(a.get("class", "")).split()]
        assert [a["class"] for a in chains] == ["chain ok" if page.ok else "chain broken"]
        assert f"Audit chain: {page.banner}</p>" in text

    def test_in_chromium_nothing_is_injected(
        self, browser: webdriver.Chrome, pages: Mapping[str, Page], case: Case
    ) -> None:
        """Chromium builds no injected element, keeps the page where it is, applies only
        the page's style sheet, and shows the genuine chain banner in its colour."""
        page = pages[case.name]
        assert open_report(browser, page.html) == []
        assert browser.current_url == page.html.as_uri()
        found = browser.execute_script(
            "return document.querySelectorAll("
            "'script, img, iframe, object, embed, form, button, input, base, foreignObject, "
            "meta[http-equiv=refresh], .banner, [style], [onerror], [onload], [onmouseover]'"
            ").length"
        )
        assert found == 0
        assert browser.execute_script("return document.styleSheets.length") == 1
        assert browser.execute_script("return document.baseURI") == page.html.as_uri()
        chains = browser.find_elements(By.CSS_SELECTOR, ".chain")
        assert len(chains) == 1
        banner = chains[0]
        assert banner.is_displayed()
        assert banner.get_attribute("class") == ("chain ok" if page.ok else "chain broken")
        assert banner.text == f"Audit chain: {page.banner}"
        colour = banner.value_of_css_property("color")
        assert colour == ("rgba(2, 122, 72, 1)" if page.ok else "rgba(180, 35, 24, 1)")


def test_a_clean_demo_page_uses_only_the_report_tags(tmp_path: Path) -> None:
    """The allow-list above is the report's own: a clean page of each demo fits it (so
    the hostile cases above test the file's text, not a stale list)."""
    for scenario in SCENARIOS:
        folder = tmp_path / scenario
        assert main(["demo", "--scenario", scenario, "--audit-dir", str(folder)]) in (0, 3, 4)
        target = folder / "clean.html"
        assert main(["report", str(last_audit_file(folder)), "-o", str(target)]) == 0
        assert {tag for tag, _ in tags_of(target.read_text(encoding="utf-8"))} <= REPORT_TAGS
