"""Render a `Report` as one self-contained HTML page.

The page is opened from disk, attached to tickets and mailed around, so it
carries everything inline (CSS, the Graphviz SVG, the chart) and loads nothing:
its Content-Security-Policy forbids every fetch and every script. The audit file
holds model and tool text, which is untrusted, so every string taken from it
goes through `html.escape` on its way in (`_e`); nothing else builds markup.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from datetime import UTC, datetime
from html import escape
from typing import Any

from statemachine_agent.audit.chain import Verification
from statemachine_agent.report.build import (
    Iteration,
    ModelCall,
    Outcome,
    Report,
    SummaryStep,
    ToolRun,
    Transition,
)
from statemachine_agent.report.chart import budget_chart
from statemachine_agent.report.drawing import Drawing
from statemachine_agent.report.fmt import count, seconds, usd
from statemachine_agent.report.fold import left_out

CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"
"""Nothing may be fetched or run: the page is data, and works offline."""

_GROUP = re.compile(r'<g id="([^"]*)" class="(node|edge)">')
"""The opening tag of each node and edge Graphviz draws, with the id `diagrams` gave it."""


def _e(value: Any) -> str:
    """Any value from the audit file, as HTML text."""
    return escape(value if isinstance(value, str) else str(value), quote=True)


def _json(value: Any) -> str:
    return _e(json.dumps(value, indent=2, ensure_ascii=False, default=str))


def render(
    report: Report,
    diagram: Drawing | None,
    *,
    source: str = "",
    verification: Verification | None = None,
) -> str:
    """The whole page. `diagram` is the machine's picture (`report.drawing`), if any.

    `verification` is the audit file's hash-chain check, shown under the title: a
    reader should know whether the file was edited before believing the rest.
    """
    outcome = report.outcome
    status = outcome.end_state if outcome else "unfinished"
    body = [
        _header(report, source, verification),
        _outcome(report, outcome),
        _diagram(diagram),
        _budget(report),
        _timeline(report),
        f"<footer>Built by <code>statemachine-agent report</code> from {report.event_count} "
        f"audit events{' in <code>' + _e(source) + '</code>' if source else ''}.</footer>",
    ]
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        '<link rel="icon" href="data:,">\n'
        f"<title>{_e(report.run_id)}: {_e(status)}</title>\n"
        f"<style>{STYLE}</style>\n</head>\n<body>\n<main>\n"
        + "\n".join(body)
        + "\n</main>\n</body>\n</html>\n"
    )


# -- sections ------------------------------------------------------------------------


def _header(report: Report, source: str, verification: Verification | None) -> str:
    meta = []
    if report.model:
        meta.append(f"model <code>{_e(report.model)}</code>")
    if report.started_ts is not None:
        started = datetime.fromtimestamp(report.started_ts, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
        meta.append(f"started {_e(started)}")
    meta.append(f"{report.iteration_count} iterations, {report.transitions_fired} transitions")
    prompt = (
        f'<div class="prompt"><span class="label">Prompt</span>'
        f'<div class="text">{_e(report.prompt)}</div></div>'
        if report.prompt
        else ""
    )
    return (
        '<header class="run">'
        f"<h1>Run <code>{_e(report.run_id or '(no run id)')}</code></h1>"
        f'<p class="meta">{" · ".join(meta)}</p>{_chain(verification)}{prompt}</header>'
    )


def _chain(verification: Verification | None) -> str:
    if verification is None:
        return '<p class="chain unknown">Audit chain: not checked.</p>'
    kind = "ok" if verification.ok else "broken"
    return f'<p class="chain {kind}">Audit chain: {_e(verification.summary)}</p>'


def _outcome(report: Report, outcome: Outcome | None) -> str:
    if outcome is None:
        return (
            '<section id="outcome" class="outcome failure"><h2>Result</h2>'
            '<p><span class="badge end failure">no end state</span> The file has no '
            "<code>run.ended</code> event: the run did not finish, or the file is cut short."
            "</p></section>"
        )
    kind = "success" if outcome.success else "failure"
    data = (
        f'<details class="data" open><summary>Structured result (data)</summary>'
        f"<pre>{_json(outcome.data)}</pre></details>"
        if outcome.data is not None
        else ""
    )
    tokens = report.tokens
    failed = report.failed_tool_calls
    stats = [
        ("iterations", str(outcome.iterations)),
        ("tool calls", f"{report.tool_calls}" + (f" ({failed} failed)" if failed else "")),
        ("tokens", f"{count(tokens.total)}"),
        ("in / out", f"{count(tokens.input)} / {count(tokens.output)}"),
        ("cache read / write", f"{count(tokens.cache_read)} / {count(tokens.cache_write)}"),
        ("cost", usd(outcome.cost_usd)),
        ("wall time", seconds(outcome.elapsed_s)),
    ]
    grid = "".join(f"<div><dt>{_e(k)}</dt><dd>{_e(v)}</dd></div>" for k, v in stats)
    answer = (
        f'<div class="answer">{_e(outcome.text)}</div>'
        if outcome.text
        else '<p class="muted">(no text)</p>'
    )
    return (
        f'<section id="outcome" class="outcome {kind}"><h2>Result</h2>'
        f'<p class="end"><span class="badge end {kind}">{_e(outcome.end_state)}</span> '
        f'<span class="reason">{_e(outcome.reason)}</span></p>'
        f'{answer}{data}<dl class="stats">{grid}</dl></section>'
    )


def _diagram(diagram: Drawing | None) -> str:
    if diagram is None:
        inner = '<p class="muted">No diagram.</p>'
    elif diagram.svg is not None:
        svg = mark_diagram(diagram.svg, diagram.fired, diagram.visited)
        inner = f'<p class="muted">{_e(diagram.note)}</p><div class="diagram">{svg}</div>'
    else:
        inner = f'<p class="muted">{_e(diagram.note)}</p><pre>{_e(diagram.text or "")}</pre>'
    return (
        '<section id="diagram"><h2>State machine</h2>'
        '<p class="legend"><span class="key visited">visited state</span>'
        '<span class="key fired">fired transition (×count)</span>'
        '<span class="key end">end state</span></p>'
        f"{inner}</section>"
    )


def mark_diagram(
    svg: str, fired: Iterable[str], visited: Iterable[str], unfired: Iterable[str] = ()
) -> str:
    """Graphviz's SVG, made inline: no XML prolog, scalable, and with the run's path
    tagged (`class="edge fired"`, `class="node visited"`; `class="edge unfired"` on a
    transition-coverage diagram) so CSS and tests can find it.

    Nodes and edges are found by the SVG ids `diagrams` gives them, so the path can
    be marked on any rendering of the diagram, including one made before the run.
    """
    start = svg.find("<svg")
    svg = svg[start:] if start >= 0 else svg
    svg = re.sub(r'<svg width="([^"]*)" height="[^"]*"', _scalable, svg, count=1)
    marked = {"edge": set(fired), "node": set(visited)}
    tag = {"edge": "edge fired", "node": "node visited"}
    never = set(unfired)

    def mark(match: re.Match[str]) -> str:
        element, kind = match.group(1), match.group(2)
        if element in marked[kind]:
            return match.group(0).replace(f'class="{kind}"', f'class="{tag[kind]}"')
        if kind == "edge" and element in never:
            return match.group(0).replace('class="edge"', 'class="edge unfired"')
        return match.group(0)

    return _GROUP.sub(mark, svg)


def _scalable(match: re.Match[str]) -> str:
    """The `<svg` tag without a fixed size: the page's width, but never narrower than
    three quarters of the drawing's own size, so its 12 pt labels stay readable (the
    section scrolls sideways instead)."""
    size = re.fullmatch(r"([\d.]+)pt", match.group(1))
    if size is None:
        return '<svg class="machine"'
    return f'<svg class="machine" style="min-width: {float(size.group(1)):.0f}px"'


def _budget(report: Report) -> str:
    budget = report.budget
    limits = []
    if isinstance(budget.get("max_iterations"), int):
        limits.append(f"{budget['max_iterations']} iterations")
    cost_limit = budget.get("max_cost_usd")
    cost_limit = float(cost_limit) if isinstance(cost_limit, int | float) else None
    token_limit = budget.get("max_total_tokens")
    token_limit = int(token_limit) if isinstance(token_limit, int | float) else None
    if cost_limit is not None:
        limits.append(usd(cost_limit))
    if token_limit is not None:
        limits.append(f"{count(token_limit)} tokens")
    seconds_limit = budget.get("max_seconds")
    if isinstance(seconds_limit, int | float):
        limits.append(f"{seconds_limit:g} s")
    text = f"Limits: {', '.join(limits)}." if limits else "No limits recorded."
    chart = budget_chart(report.points, max_cost_usd=cost_limit, max_tokens=token_limit)
    return (
        f'<section id="budget"><h2>Budget</h2><p class="muted">{_e(text)} '
        "Each point is the run's total after a transition (x: its number); "
        "hover a point for its name.</p>"
        f'<div class="chart">{chart}</div></section>'
    )


def _timeline(report: Report) -> str:
    parts = ['<section id="timeline"><h2>Timeline</h2>']
    if report.preamble is not None:
        parts.append(_segment(report.preamble, "Before the first model call", "preamble"))
    if not report.iterations:
        parts.append('<p class="muted">No model call was made.</p>')
    shown: set[int] = set()
    gap = report.gap
    for index, iteration in enumerate(report.iterations):
        if gap is not None and index == gap.at:
            parts.append(f'<p class="left-out" id="left-out">{_e(gap.note)}</p>')
        parts.append(_segment(iteration, f"Iteration {iteration.number}", "iteration"))
        for index, step in enumerate(report.summaries):
            if step.after_iteration == iteration.number:
                parts.append(_summary(step, index))
                shown.add(index)
    parts += [_summary(s, i) for i, s in enumerate(report.summaries) if i not in shown]
    if report.summaries_left_out:
        note = left_out(report.summaries_left_out, "summaries")
        parts.append(f'<p class="left-out">{_e(note)}</p>')
    parts.append("</section>")
    return "\n".join(parts)


def _segment(iteration: Iteration, title: str, cls: str) -> str:
    flags = ' <span class="badge error">error</span>' if iteration.has_error else ""
    call = iteration.call
    stop = (
        f' <span class="badge stop">{_e(call.stop_reason)}</span>'
        if call is not None and call.stop_reason
        else ""
    )
    figures = (
        f'<span class="figures">{count(iteration.tokens.total)} tokens · '
        f"{usd(iteration.cost_usd)}</span>"
    )
    error_cls = " has-error" if iteration.has_error else ""
    # The loop's call first; salvage and critic calls come after the transitions that
    # led to them (a salvage call follows the move into the end state).
    body = [_call(c) for c in iteration.calls if c.purpose is None]
    if iteration.tools:
        body.append('<div class="tools">' + "".join(_tool(t) for t in iteration.tools) + "</div>")
    if iteration.notes:
        notes = "".join(
            f'<li class="note{" error" if n.error else ""}"><code>{_e(n.event)}</code> '
            f"{_e(n.text)}</li>"
            for n in iteration.notes
        )
        body.append(f'<ul class="notes">{notes}</ul>')
    if iteration.transitions:
        body.append(_transitions(iteration.transitions))
    body += [_call(c) for c in iteration.calls if c.purpose not in (None, "summary")]
    body += [f'<p class="left-out">{_e(line)}</p>' for line in iteration.left_out.lines()]
    return (
        f'<article class="{cls}{error_cls}" id="{cls}-{iteration.number}" '
        f'data-iteration="{iteration.number}">'
        f"<header><h3>{_e(title)}</h3>{stop}{flags}{figures}</header>"
        + "".join(body)
        + "</article>"
    )


def _summary(step: SummaryStep, index: int) -> str:
    """A summary as a step of its own, after the iteration it followed."""
    figures = (
        f'<span class="figures">{count(step.tokens_before)} → {count(step.tokens_after)} '
        "prompt tokens</span>"
    )
    facts = (
        f"{step.messages_replaced} earlier messages ({count(step.tokens_replaced)} tokens) "
        "replaced by one summary"
    )
    body = [f'<p class="facts">{_e(facts)}</p>', f'<div class="assistant">{_e(step.summary)}</div>']
    if step.call is not None:
        body.append(_call(step.call))
    return (
        f'<article class="summary" id="summary-{index}" '
        f'data-iteration="{step.after_iteration}">'
        f"<header><h3>Summary after iteration {step.after_iteration}</h3>{figures}</header>"
        + "".join(body)
        + "</article>"
    )


def _call(call: ModelCall) -> str:
    what = "Model call" if call.purpose is None else f"{call.purpose.capitalize()} call"
    cls = "call" if call.purpose is None else f"call extra {_e(call.purpose)}"
    facts = []
    if call.model:
        facts.append(f"<code>{_e(call.model)}</code>")
    if call.stop_reason:
        facts.append(f"stop_reason <code>{_e(call.stop_reason)}</code>")
    if call.error is None:
        facts.append(
            f"{count(call.tokens.input)} in / {count(call.tokens.output)} out"
            + (f" / {count(call.tokens.cache_read)} cache read" if call.tokens.cache_read else "")
        )
        if call.cost_usd is not None:
            facts.append(f"cost {usd(call.cost_usd)}")
    if call.request_id:
        facts.append(f"request <code>{_e(call.request_id)}</code>")
    head = f"<strong>{what}</strong> · {' · '.join(facts)}"
    parts = [f'<div class="{cls}"><p class="facts">{head}</p>']
    if call.error is not None:
        parts.append(f'<p class="error-text">failed: {_e(call.error)}</p>')
    if call.thinking:
        parts.append(
            f"<details><summary>thinking</summary><pre>{_e(call.thinking)}</pre></details>"
        )
    if call.text:
        parts.append(f'<div class="assistant">{_e(call.text)}</div>')
    for block in call.other_blocks:
        kind = block.get("type", "block") if isinstance(block, dict) else "block"
        parts.append(
            f"<details><summary>{_e(kind)} block</summary><pre>{_json(block)}</pre></details>"
        )
    parts.append("</div>")
    return "".join(parts)


def _tool(tool: ToolRun) -> str:
    if tool.output is None:
        state, cls = "no result recorded", "tool pending"
    elif tool.failed:
        state = f"failed ({tool.error_kind}{', fatal' if tool.fatal else ''})"
        cls = "tool failed"
    else:
        state, cls = "ok", "tool ok"
    took = f" · {seconds(tool.duration_s)}" if tool.duration_s is not None else ""
    preview = json.dumps(tool.input, ensure_ascii=False, default=str)
    if len(preview) > 60:
        preview = preview[:59] + "…"
    output = f"<h4>output</h4><pre>{_e(tool.output)}</pre>" if tool.output is not None else ""
    child = _child_run(tool.child) if tool.child is not None else ""
    return (
        f'<details class="{cls}"><summary><code>{_e(tool.tool)}</code>'
        f'<span class="preview">{_e(preview)}</span>'
        f'<span class="state">{_e(state)}{_e(took)}</span></summary>'
        f"<h4>input</h4><pre>{_json(tool.input)}</pre>{child}{output}</details>"
    )


def _child_run(child: Report) -> str:
    """A sub-agent's run, nested in the tool call that started it: its end, figures and
    iterations (and its own sub-agents, nested the same way)."""
    outcome = child.outcome
    end = outcome.end_state if outcome is not None else "unfinished"
    reason = f" ({_e(outcome.reason)})" if outcome is not None and outcome.reason else ""
    parts = [
        f'<section class="subrun" data-run-id="{_e(child.run_id)}">'
        f"<h4>sub-agent run <code>{_e(child.run_id)}</code>"
        f"{' · ' + _e(child.agent) if child.agent else ''}</h4>"
        f'<p class="facts">ended in <code>{_e(end)}</code>{reason} · '
        f"{count(child.tokens.total)} tokens · {usd(child.cost_usd)}</p>"
    ]
    if child.preamble is not None:
        parts.append(_segment(child.preamble, "Before the first model call", "subpreamble"))
    parts += [_segment(i, f"Iteration {i.number}", "subiteration") for i in child.iterations]
    parts.append("</section>")
    return "".join(parts)


def _transitions(transitions: tuple[Transition, ...]) -> str:
    rows = []
    for t in transitions:
        guards = "".join(
            f'<span class="guard {"pass" if verdict else "fail"}'
            f'{" via" if name in t.via else ""}">{_e(name)} {"✓" if verdict else "✗"}</span>'
            for name, verdict in t.guards
        )
        row_kind = "" if t.via else '<span class="fallback">fallback row</span>'
        rows.append(
            f'<tr class="transition" data-seq="{t.seq}"><td class="seq">#{t.seq}</td>'
            f'<td class="move"><code>{_e(t.source)}</code> → <code>{_e(t.dest)}</code></td>'
            f"<td><code>{_e(t.trigger)}</code></td>"
            f'<td class="guards">{guards}{row_kind}</td>'
            f'<td class="num">{seconds(t.elapsed_s)}</td>'
            f'<td class="num">{count(t.tokens.total)}</td>'
            f'<td class="num">{usd(t.cost_usd)}</td></tr>'
        )
    return (
        '<table class="transitions"><thead><tr><th>#</th><th>transition</th><th>trigger</th>'
        "<th>guards (✓ held, ✗ did not; bold: the row's own)</th><th>elapsed</th>"
        "<th>tokens so far</th><th>cost so far</th></tr></thead><tbody>"
        + "".join(rows)
        + "</tbody></table>"
    )


STYLE = """
:root { --ok: #027a48; --ok-bg: #d1fadf; --bad: #b42318; --bad-bg: #fde2e1;
  --muted: #667085; --line: #e4e7ec; --bg: #f9fafb; --ink: #101828; }
* { box-sizing: border-box; }
body { margin: 0; font: 14px/1.5 system-ui, -apple-system, "Segoe UI", Helvetica, Arial,
  sans-serif; color: var(--ink); background: var(--bg); }
main { max-width: 1200px; margin: 0 auto; padding: 24px; }
h1 { font-size: 22px; margin: 0 0 4px; } h2 { font-size: 18px; margin: 0 0 12px; }
h3 { font-size: 15px; margin: 0; display: inline; } h4 { margin: 8px 0 4px; font-size: 12px;
  text-transform: uppercase; color: var(--muted); }
section, header.run { background: #fff; border: 1px solid var(--line); border-radius: 8px;
  padding: 16px 20px; margin-bottom: 16px; }
code { font: 12.5px ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; }
pre { background: #f2f4f7; border-radius: 6px; padding: 8px 10px; overflow-x: auto;
  white-space: pre-wrap; word-break: break-word; margin: 0;
  font: 12.5px/1.45 ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; }
.meta, .muted { color: var(--muted); margin: 0; }
.chain { margin: 4px 0 0; font-size: 13px; } .chain.ok { color: var(--ok); }
.chain.broken { color: var(--bad); font-weight: 700; } .chain.unknown { color: var(--muted); }
.prompt { margin-top: 10px; } .label { font-size: 12px; color: var(--muted);
  text-transform: uppercase; }
.prompt .text, .answer, .assistant { white-space: pre-wrap; word-break: break-word; }
.answer { font-size: 15px; padding: 10px 12px; border-left: 3px solid var(--ok);
  background: #f6fef9; border-radius: 4px; margin: 8px 0; }
.outcome.failure .answer { border-left-color: var(--bad); background: #fffbfa; }
.outcome { border-top: 4px solid var(--ok); } .outcome.failure { border-top-color: var(--bad); }
.badge { display: inline-block; padding: 1px 8px; border-radius: 999px; font-size: 12px;
  font-weight: 600; margin-left: 6px; vertical-align: 1px; }
.badge.end { font-size: 14px; margin: 0 6px 0 0; }
.badge.success { background: var(--ok-bg); color: var(--ok); }
.badge.failure, .badge.error { background: var(--bad-bg); color: var(--bad); }
.badge.stop { background: #eef4ff; color: #3538cd; }
.stats { display: grid; grid-template-columns: repeat(auto-fill, minmax(150px, 1fr));
  gap: 8px 16px; margin: 12px 0 0; }
.stats dt { font-size: 12px; color: var(--muted); } .stats dd { margin: 0; font-weight: 600; }
.legend .key { display: inline-block; margin-right: 14px; font-size: 12px; }
.legend .key::before { content: ""; display: inline-block; width: 14px; height: 10px;
  margin-right: 5px; border-radius: 2px; vertical-align: -1px; }
.legend .visited::before { background: var(--ok-bg); border: 2px solid #000; }
.legend .fired::before { height: 3px; background: var(--ok); vertical-align: 3px; }
.legend .end::before { border: 2px solid var(--bad); }
.diagram { overflow: auto; max-height: 85vh; border: 1px solid var(--line); border-radius: 6px; }
svg.machine { display: block; width: 100%; height: auto; }
svg.machine g.edge:not(.fired) path, svg.machine g.edge:not(.fired) polygon { opacity: .45; }
svg.machine g.edge:not(.fired) text { fill: #475467; }
svg.machine g.edge.fired path { stroke: var(--ok); stroke-width: 2.5; }
svg.machine g.edge.fired polygon { stroke: var(--ok); fill: var(--ok); }
svg.machine g.edge.fired text { font-weight: 700; fill: var(--ok); }
svg.machine g.node.visited path, svg.machine g.node.visited polygon { fill: var(--ok-bg);
  stroke-width: 2; }
.chart { overflow-x: auto; }
.budget-chart .axis { stroke: #98a2b3; } .budget-chart .grid { stroke: var(--line); }
.budget-chart .limit { stroke: var(--bad); stroke-dasharray: 5 4; }
.budget-chart .line { fill: none; stroke-width: 2; }
.budget-chart .cost .line { stroke: #7f56d9; } .budget-chart .cost .dot { fill: #7f56d9; }
.budget-chart .tokens .line { stroke: #1570ef; } .budget-chart .tokens .dot { fill: #1570ef; }
.budget-chart text { font: 11px system-ui, sans-serif; fill: var(--muted); }
.budget-chart .panel-title { font-size: 12px; font-weight: 600; fill: var(--ink); }
article { border: 1px solid var(--line); border-left: 4px solid #98a2b3; border-radius: 6px;
  padding: 10px 14px; margin: 10px 0; background: #fff; }
article.has-error { border-left-color: var(--bad); }
article.summary { border-left-color: #7a5af8; }
article > header { display: flex; align-items: baseline; gap: 4px; margin-bottom: 6px; }
article .figures { margin-left: auto; color: var(--muted); font-size: 12.5px; }
.call { margin: 6px 0; } .call .facts { margin: 0 0 4px; color: var(--muted); font-size: 13px; }
.call .facts strong { color: var(--ink); }
.call.extra { border-top: 1px dashed var(--line); padding-top: 6px; }
.assistant { background: #f5f8ff; border-radius: 6px; padding: 8px 10px; }
.error-text { color: var(--bad); margin: 4px 0; }
.tools details { border: 1px solid var(--line); border-radius: 6px; margin: 6px 0;
  padding: 4px 10px; }
.tools summary { cursor: pointer; display: flex; gap: 10px; align-items: baseline; }
.tools .preview { color: var(--muted); font: 12px ui-monospace, Menlo, monospace;
  overflow: hidden; text-overflow: ellipsis; white-space: nowrap; flex: 1; }
.tools .state { font-size: 12px; color: var(--ok); white-space: nowrap; }
.tools .failed { border-color: #fda29b; background: #fffbfa; }
.tools .failed .state, .tools .pending .state { color: var(--bad); }
.tools details[open] { padding-bottom: 8px; }
.subrun { border-left: 3px solid var(--line); margin: 8px 0 8px 4px; padding-left: 10px; }
.notes { margin: 6px 0; padding-left: 18px; } .note { margin: 2px 0; }
.note.error { color: var(--bad); }
table.transitions { border-collapse: collapse; width: 100%; margin-top: 8px; font-size: 12.5px; }
.transitions th { text-align: left; font-weight: 600; color: var(--muted);
  border-bottom: 1px solid var(--line); padding: 3px 6px; }
.transitions td { border-bottom: 1px solid #f2f4f7; padding: 3px 6px; vertical-align: top; }
.transitions .num { text-align: right; white-space: nowrap; color: var(--muted); }
.transitions .seq { color: var(--muted); } .transitions .move { white-space: nowrap; }
.guard { display: inline-block; border-radius: 4px; padding: 0 5px; margin: 1px 3px 1px 0;
  font: 11.5px ui-monospace, Menlo, monospace; }
.guard.pass { background: var(--ok-bg); color: var(--ok); }
.guard.fail { background: #f2f4f7; color: var(--muted); }
.guard.via { font-weight: 700; outline: 1px solid currentColor; }
.fallback { font-size: 11.5px; color: var(--muted); font-style: italic; white-space: nowrap; }
.left-out { color: var(--muted); font-style: italic; margin: 6px 0; }
footer { color: var(--muted); font-size: 12px; text-align: center; padding: 8px; }
"""
