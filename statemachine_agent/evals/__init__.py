"""Evaluate loop policies: the same cases under several agent configurations,
compared by how the runs end, what they cost and whether they succeed.

`evaluate(dataset, variants, scorers=...)` runs each `Case` of a `Dataset` under
each `Variant(name, agent)` and returns a `Report` (a terminal table, JSON, and an
HTML page via `write_html`). `statemachine-agent eval FILE.py` does the same from the
command line. See docs/evals.md.
"""

from statemachine_agent.evals.cases import Case, Dataset, cases_from_audit
from statemachine_agent.evals.errors import EvalError
from statemachine_agent.evals.html import render, write_html
from statemachine_agent.evals.report import VOLATILE, Comparison, Report, RunRecord, compare
from statemachine_agent.evals.running import Variant, aevaluate, evaluate, run_id_of
from statemachine_agent.evals.scorers import (
    AnswerMatch,
    LLMJudge,
    OutputFields,
    Predicate,
    Score,
    Scorer,
    ToolF1,
    Trajectory,
    answer_match,
    llm_judge,
    output_fields,
    predicate,
    tool_calls,
    tool_f1,
    trajectory,
)

__all__ = [
    "VOLATILE",
    "AnswerMatch",
    "Case",
    "Comparison",
    "Dataset",
    "EvalError",
    "LLMJudge",
    "OutputFields",
    "Predicate",
    "Report",
    "RunRecord",
    "Score",
    "Scorer",
    "ToolF1",
    "Trajectory",
    "Variant",
    "aevaluate",
    "answer_match",
    "cases_from_audit",
    "compare",
    "evaluate",
    "llm_judge",
    "output_fields",
    "predicate",
    "render",
    "run_id_of",
    "tool_calls",
    "tool_f1",
    "trajectory",
    "write_html",
]
