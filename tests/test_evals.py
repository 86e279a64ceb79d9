"""Evaluating loop policies (issue 30): scorers, the paired comparison, the store that
makes an evaluation resumable after a real SIGKILL, the cost limit, reproducible JSON,
the CLI's exit codes, the offline example and its HTML page in a real Chromium."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from statemachine_agent import AnthropicModel, Error, RunResult
from statemachine_agent.cli.app import main
from statemachine_agent.evals import (
    Case,
    Dataset,
    EvalError,
    RunRecord,
    Score,
    answer_match,
    cases_from_audit,
    compare,
    llm_judge,
    output_fields,
    predicate,
    tool_f1,
    trajectory,
)
from statemachine_agent.evals.scorers import normalize
from statemachine_agent.models.base import Usage
from statemachine_agent.testing import FakeAnthropicServer, replies

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "eval_policies.py"


def load_example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("example_eval_policies", EXAMPLE)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def result(calls: list[dict[str, Any]] = (), text: str = "", output: Any = None) -> RunResult:  # type: ignore[assignment]
    """A finished run whose history holds `calls` (one assistant message each)."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": "q"}]
    for i, call in enumerate(calls):
        block = {"type": "tool_use", "id": f"t{i}", "name": call["name"], "input": call["input"]}
        messages.append({"role": "assistant", "content": [block]})
    return RunResult(
        end_state="completed",
        text=text,
        reason="",
        run_id="r",
        iterations=1,
        turn=1,
        usage=Usage(),
        cost_usd=0.0,
        elapsed_s=0.0,
        messages=messages,
        trail=(),
        output=output,
    )


def score(scorer: Any, case: Case, run: RunResult) -> Score:
    got: Score = asyncio.run(scorer.score(case, run))
    return got


def call(name: str, **args: Any) -> dict[str, Any]:
    return {"name": name, "input": args}


class TestAnswerMatch:
    @given(st.text(max_size=30))
    @settings(max_examples=50)
    def test_normalize_is_idempotent_and_ignores_case_and_spacing(self, text: str) -> None:
        """Normalizing twice changes nothing; case and surrounding space never count."""
        assert normalize(normalize(text)) == normalize(text)
        assert normalize(f"  {text.upper()}  ") == normalize(f"{text.upper()}")

    def test_normalized_and_exact(self) -> None:
        """The normalized match forgives case, spacing and a final full stop; exact does not."""
        case = Case("c", "q", expected="The answer is 42")
        assert score(answer_match(), case, result(text="  the answer  is 42. ")).passed
        exact = score(answer_match(normalized=False), case, result(text="the answer is 42"))
        assert exact.passed is False
        assert "expected" in exact.detail

    def test_no_expected_answer_is_not_applicable(self) -> None:
        """A case without an expected text is left out (passed None), not failed."""
        assert score(answer_match(), Case("c", "q"), result(text="x")).passed is None


class TestOtherScorers:
    def test_predicate(self) -> None:
        """A predicate on the RunResult, named after the function."""

        def cheap(run: RunResult) -> bool:
            return run.cost_usd < 1

        scorer = predicate(cheap)
        assert scorer.name == "cheap"
        assert score(scorer, Case("c", "q"), result()).passed is True

    def test_output_fields_names_the_first_difference(self) -> None:
        """Field by field: the share that match, and the first that does not, named."""
        case = Case("c", "q", expected={"city": "Oslo", "days": 3, "ok": True})
        got = score(output_fields(), case, result(output={"city": "Oslo", "days": 4, "ok": False}))
        assert got.passed is False
        assert got.value == pytest.approx(1 / 3)
        assert got.detail.startswith("field 'days': expected 3, got 4")
        assert score(output_fields(["city"]), case, result(output={"city": "Oslo"})).passed

    def test_llm_judge_through_the_real_sdk(self) -> None:
        """The judge is any Model: here the real anthropic SDK against the strict local
        server; its verdict is the first word, and its cost is on the score."""
        with FakeAnthropicServer() as server:
            server.add(replies.text("PASS: it names the capital."))
            server.add(replies.text("I think so"))
            model = AnthropicModel(api_key="sk-ant-test", base_url=server.base_url)
            judge = llm_judge(model, "Names the capital.")
            case = Case("c", "Capital of Norway?", expected="Oslo")
            good = score(judge, case, result(text="Oslo"))
            vague = score(judge, case, result(text="Bergen?"))
        assert good.passed is True
        assert good.cost_usd > 0
        assert vague.passed is False
        assert "neither PASS nor FAIL" in vague.detail


class TestTrajectory:
    REF = (call("search", q="a"), call("open", id=1))

    @pytest.mark.parametrize(
        ("mode", "calls", "passed"),
        [
            ("exact", [call("search", q="a"), call("open", id=1)], True),
            ("exact", [call("open", id=1), call("search", q="a")], False),
            ("unordered", [call("open", id=1), call("search", q="a")], True),
            ("ordered", [call("search", q="a"), call("x"), call("open", id=1)], True),
            ("ordered", [call("open", id=1), call("search", q="a")], False),
            ("subset", [call("open", id=1)], True),
            ("subset", [call("open", id=1), call("x")], False),
            ("superset", [call("x"), call("search", q="a"), call("open", id=1)], True),
            ("superset", [call("search", q="a")], False),
            ("unordered", [call("search", q="b"), call("open", id=1)], False),
        ],
    )
    def test_modes(self, mode: Any, calls: list[dict[str, Any]], passed: bool) -> None:
        """Each mode on a passing and a failing run."""
        case = Case("c", "q", trajectory=self.REF)
        assert score(trajectory(mode), case, result(calls)).passed is passed

    def test_repeated_names_are_matched_optimally(self) -> None:
        """A bare name must not take the one call an exact reference needed (greedy would)."""
        case = Case("c", "q", trajectory=("search", call("search", q="a")))
        run = result([call("search", q="a"), call("search", q="b")])
        assert score(trajectory("superset"), case, run).passed
        assert score(tool_f1(args=True), case, run).value == 1.0

    def test_f1_names_the_first_miss(self) -> None:
        """Precision, recall and the first reference call the run never made."""
        case = Case("c", "q", trajectory=(call("a"), call("b"), call("c")))
        got = score(tool_f1(), case, result([call("a"), call("z")]))
        assert got.value == pytest.approx(2 * 0.5 * (1 / 3) / (0.5 + 1 / 3))
        assert "first miss: b" in got.detail

    def test_empty_and_missing_references(self) -> None:
        """No calls against an empty reference is perfect; no reference: not applicable."""
        assert score(tool_f1(), Case("c", "q", trajectory=()), result()).value == 1.0
        assert score(trajectory(), Case("c", "q"), result()).passed is None

    @given(st.lists(st.sampled_from(["a", "b", "c"]), max_size=6), st.randoms())
    @settings(max_examples=40)
    def test_any_run_against_itself(self, names: list[str], rng: Any) -> None:
        """A run's own calls, shuffled, are a perfect unordered match and F1 1; in their
        order, an ordered and exact one."""
        calls = [call(n, i=i % 2) for i, n in enumerate(names)]
        shuffled = list(calls)
        rng.shuffle(shuffled)
        case = Case("c", "q", trajectory=tuple(shuffled))
        run = result(calls)
        assert score(trajectory("unordered"), case, run).passed
        assert score(tool_f1(args=True), case, run).value == 1.0
        ordered = Case("c", "q", trajectory=tuple(calls))
        assert score(trajectory("exact"), ordered, run).passed


class TestCasesAndDatasets:
    def test_bad_input_is_named(self, tmp_path: Path) -> None:
        """Duplicate ids, bad ids and bad JSONL lines are EvalErrors (a ValueError)."""
        with pytest.raises(EvalError, match="two cases with id 'a'"):
            Dataset([Case("a", "q"), Case("a", "r")])
        with pytest.raises(EvalError, match="is not 1-80"):
            Case("a/b", "q")
        bad = tmp_path / "d.jsonl"
        bad.write_text('{"prompt": "q"}\n{oops\n')
        with pytest.raises(EvalError, match=r"d.jsonl:2: not JSON"):
            Dataset.from_jsonl(bad)
        assert issubclass(EvalError, Error)
        assert issubclass(EvalError, ValueError)

    def test_jsonl_round_trip(self, tmp_path: Path) -> None:
        """Cases load from JSONL, ids defaulted by line."""
        path = tmp_path / "cases.jsonl"
        path.write_text(json.dumps({"prompt": "q", "expected": "a", "trajectory": ["t"]}) + "\n")
        (case,) = Dataset.from_jsonl(path)
        assert (case.id, case.expected, case.trajectory) == ("case-1", "a", ("t",))


class TestComparison:
    def test_a_known_difference(self) -> None:
        """b passes 20 of 20 pairs, a 10: the difference is +0.5 with a bootstrap CI
        around it (reproducible, from a fixed seed), and the 10 changed cases are named."""

        def record(variant: str, case: int, ok: bool) -> RunRecord:
            return RunRecord(
                variant,
                f"c{case}",
                0,
                "r",
                "completed",
                "",
                (Score("answer", ok, float(ok)),),
                0.0,
                0,
                1,
                0.0,
                0,
                0,
                0,
            )

        runs = [record("a", i, i % 2 == 0) for i in range(20)]
        runs += [record("b", i, True) for i in range(20)]
        got = compare("a", "b", runs)
        assert (got.pairs, got.rate_a, got.rate_b, got.difference) == (20, 0.5, 1.0, 0.5)
        assert 0.2 < got.low < 0.5 < got.high <= 0.8
        assert compare("a", "b", runs) == got
        assert sorted(c["case"] for c in got.changed) == sorted(f"c{i}" for i in range(1, 20, 2))


# -- whole evaluations -----------------------------------------------------------------


EVAL_FILE = '''
import os, time
from pathlib import Path
from statemachine_agent import Agent
from statemachine_agent.evals import Case, Dataset, Variant
from statemachine_agent.models.base import ModelReply, Usage

LOG = Path(os.environ["EVAL_CALL_LOG"])
HANG_AT = int(os.environ.get("EVAL_HANG_AT", "0"))

class CountingModel:
    """Answers every prompt at once; logs each call; hangs at call HANG_AT if set."""
    name = "claude-sonnet-5"
    async def acomplete(self, request):
        with LOG.open("a") as log:
            log.write("call\\n")
        calls = len(LOG.read_text().splitlines())
        if HANG_AT and calls >= HANG_AT:
            Path(str(LOG) + ".hung").write_text("yes")
            time.sleep(600)
        return ModelReply(content=({"type": "text", "text": "ok"},), stop_reason="end_turn",
                          usage=Usage(input_tokens=1000, output_tokens=100), model=self.name)

dataset = Dataset([Case(f"c{i}", f"prompt {i}", expected="ok") for i in range(6)])
agent = Agent(CountingModel(), stall=None)
variants = [Variant("one", agent), Variant("two", agent.replace(max_tokens=1000))]
'''


@pytest.fixture
def eval_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "my_eval.py"
    path.write_text(EVAL_FILE)
    monkeypatch.setenv("EVAL_CALL_LOG", str(tmp_path / "calls.log"))
    return path


class TestCommand:
    def test_resumes_after_sigkill_without_rerunning(self, eval_file: Path, tmp_path: Path) -> None:
        """A real SIGKILL mid-evaluation, then the same command: it finishes, and every
        run finished before the kill is neither run nor paid for again."""
        log, out = tmp_path / "calls.log", tmp_path / "out"
        command = [
            sys.executable,
            "-m",
            "statemachine_agent.cli",
            "eval",
            str(eval_file),
            "--out",
            str(out),
            "--concurrency",
            "1",
        ]
        env = {**os.environ, "EVAL_HANG_AT": "5"}
        process = subprocess.Popen(
            command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        try:
            for _ in range(600):  # the model says when it hangs; no timing is asserted
                if Path(f"{log}.hung").exists() or process.poll() is not None:
                    break
                time.sleep(0.1)
            assert Path(f"{log}.hung").exists(), "the evaluation never reached call 5"
        finally:
            process.send_signal(signal.SIGKILL)
            process.wait()
        assert process.returncode == -signal.SIGKILL
        assert len(log.read_text().splitlines()) == 5  # 4 runs finished, the 5th was cut
        done = subprocess.run(command, capture_output=True, text=True, check=False, timeout=120)
        assert done.returncode == 0, done.stderr
        calls = log.read_text().splitlines()
        assert len(calls) == 5 + 8  # the cut run again, then the 7 never started
        report = json.loads((out / "report.json").read_text())
        assert report["complete"]
        assert report["finished_runs"] == 12
        assert (out / "runs" / "one" / "one.c0.r0.jsonl").exists()

    def test_stops_at_the_cost_limit(self, eval_file: Path, tmp_path: Path) -> None:
        """--max-cost-usd: no run starts past the limit; exit 3; the report says so."""
        out = tmp_path / "out"
        code = main(
            [
                "eval",
                str(eval_file),
                "--out",
                str(out),
                "--max-cost-usd",
                "0.01",
                "--concurrency",
                "1",
                "--json",
            ]
        )
        report = json.loads((out / "report.json").read_text())
        assert code == 3
        assert report["stopped"] == "cost_limit"
        assert not report["complete"]
        assert 0 < report["finished_runs"] < report["planned_runs"]
        assert report["cost_usd"] >= 0.01

    @pytest.mark.parametrize(
        ("args", "message"),
        [
            (["missing.py"], "no such eval file"),
            (["--repeats", "0"], "must be at least 1"),
        ],
    )
    def test_bad_input_exits_2(
        self, args: list[str], message: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
    ) -> None:
        """One line naming the problem, exit 2."""
        if args[0] != "missing.py":
            args = [str(tmp_path / "x.py"), *args]
        try:
            code = main(["eval", *args])
        except SystemExit as exited:  # the parser's own errors
            code = int(str(exited.code))
        assert code == 2
        assert message in capsys.readouterr().err

    def test_a_file_without_variants_exits_2(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """A file that defines no variants is a usage error naming what is missing."""
        path = tmp_path / "empty.py"
        path.write_text("dataset = []\n")
        assert main(["eval", str(path), "--out", str(tmp_path / "o")]) == 2
        assert "defines no variants" in capsys.readouterr().err


@pytest.fixture(scope="module")
def runs() -> Iterator[tuple[Any, Any, Path, Path]]:
    """The example evaluated twice, into two folders."""
    example = load_example()
    first, second = Path(tempfile.mkdtemp()), Path(tempfile.mkdtemp())
    yield example.main(first), example.main(second), first, second
    shutil.rmtree(first, ignore_errors=True)
    shutil.rmtree(second, ignore_errors=True)


class TestExample:
    def test_policies_show_their_worth(self, runs: tuple[Any, Any, Path, Path]) -> None:
        """On 24 cases the stall policy cuts the cost of the looping runs, and the
        verifier raises the success rate."""
        report = runs[0]
        assert len(report.cases) >= 20
        data = {v["name"]: v for v in report.to_dict()["variants"]}
        loops = {
            r.case
            for r in report.runs
            if r.variant == "baseline" and r.end_state == "budget_exhausted"
        }
        assert loops

        def cost(variant: str) -> float:
            return float(
                sum(r.cost_usd for r in report.runs if r.variant == variant and r.case in loops)
            )

        assert cost("stall") < cost("baseline") / 2
        assert data["verifier"]["success_rate"] > data["baseline"]["success_rate"]
        assert data["verifier"]["rejections"] > 0
        assert data["stall"]["interventions"] > 0

    def test_same_evaluation_same_json(self, runs: tuple[Any, Any, Path, Path]) -> None:
        """Twice, concurrently run: equal JSON apart from the documented volatile fields."""
        assert runs[0].to_json(volatile=False) == runs[1].to_json(volatile=False)

    def test_cases_from_its_audit_files(self, runs: tuple[Any, Any, Path, Path]) -> None:
        """Recorded runs become cases: prompt, answer as expected, calls as reference."""
        report, folder = runs[0], runs[2]
        record = next(r for r in report.runs if r.variant == "both")
        (case,) = cases_from_audit([folder / record.audit])
        original = next(c for c in load_example().dataset if c.id == record.case)
        assert case.prompt == original.prompt
        assert case.expected == original.expected
        assert case.trajectory is not None
        assert len(case.trajectory) >= 2

    def test_html_opens_in_chromium_without_console_errors(
        self, runs: tuple[Any, Any, Path, Path]
    ) -> None:
        """The page loads in headless Chromium with no SEVERE console message, runs
        no script, and shows one stacked bar group per variant."""
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
        from selenium.webdriver.common.by import By

        from tests.test_report import CHROMIUM_FLAGS

        chromium, driver_binary = shutil.which("chromium"), shutil.which("chromedriver")
        assert chromium, "run `make system-deps`"
        assert driver_binary, "run `make system-deps`"
        profile = tempfile.mkdtemp(prefix="evals-chromium-")
        options = webdriver.ChromeOptions()
        options.binary_location = chromium
        for flag in (*CHROMIUM_FLAGS, f"--user-data-dir={profile}"):
            options.add_argument(flag)
        options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
        driver = webdriver.Chrome(service=Service(driver_binary), options=options)
        try:
            driver.get((runs[2] / "report.html").as_uri())
            assert driver.execute_script("return document.readyState") == "complete"
            log = driver.get_log("browser")  # type: ignore[no-untyped-call]
            assert [e for e in log if e["level"] == "SEVERE"] == []
            assert driver.find_elements(By.TAG_NAME, "script") == []
            assert len(driver.find_elements(By.CSS_SELECTOR, "svg rect title")) >= 4
            assert driver.find_elements(By.CSS_SELECTOR, "td a[href$='.jsonl']")
        finally:
            driver.quit()
            shutil.rmtree(profile, ignore_errors=True)


HOSTILE_TEXTS = [
    "<script>alert(1)</script>",
    '"><img src=x onerror=alert(1)>',
    "</style><style>body{display:none}</style>",
    '<meta http-equiv="refresh" content="0;url=https://example.invalid">',
    "<svg><foreignObject><div>forged</div></foreignObject></svg>",
    "&lt;b&gt;entity&lt;/b&gt; \ud800 lone surrogate",
]
"""What a model's answer, a case's prompt and expected value, or a dataset's name (from a
JSONL file, or cases built from audit files) may hold."""


def _tags(page: str) -> list[str]:
    from html.parser import HTMLParser

    found: list[str] = []

    class Tags(HTMLParser):
        def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
            found.append(tag)
            assert not any(name.startswith("on") or name == "style" for name, _ in attrs), attrs

    Tags().feed(page)
    return found


class TestHostileText:
    @pytest.mark.parametrize("text", HOSTILE_TEXTS)
    def test_the_html_report_shows_it_as_text(self, text: str) -> None:
        """A hostile answer, prompt, expected value and dataset name add no element to the
        page: it has exactly the tags the same report of plain text has."""
        from statemachine_agent import Agent, ScriptedModel
        from statemachine_agent.evals import Variant, evaluate
        from statemachine_agent.evals.html import render

        def page(said: str) -> str:
            dataset = Dataset([Case("c1", said, expected=said)], name=said)
            agent = Agent(ScriptedModel([replies.text(said)]))
            return render(evaluate(dataset, [Variant("v", agent)], [answer_match()]))

        plain, hostile = page("plain words"), page(text)
        assert _tags(hostile) == _tags(plain)
        assert "<script>" not in hostile
