"""Render a `Report` as one self-contained HTML page.

The page is opened from disk, attached to tickets and mailed around, so it
carries everything inline (CSS, the Graphviz SVG, the chart) and loads nothing:
its Content-Security-Policy forbids every fetch, every script, every form and
`<base>`, and allows only the page's own style block (by its hash), so no style
attribute can restyle it either.

The audit file is untrusted: anyone can edit it, and it holds model and tool text.
So markup is built by construction, not by care: every piece of the page is a
`markupsafe.Markup`, made only from the literal templates written here
(`Markup("<p>{}</p>").format(value)`, `_join(parts)`), and every value that is not
already `Markup` (anything from the file, any figure) is escaped as it is put in.
A new field that forgets to escape cannot exist: an `f`-string or a plain `str`
joined into the page is shown as text. The last step (`_clean`) replaces what is
not Unicode text (lone surrogates, control characters), so the page can always be
written as UTF-8.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from markupsafe import Markup

from statemachine_agent.audit.chain import Verification
from statemachine_agent.report._reading import REVIEW_EVENTS
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
from statemachine_agent.report.fmt import count, duration, seconds, usd
from statemachine_agent.report.fold import left_out

_GROUP = re.compile(r'<g id="([^"]*)" class="(node|edge)">')
"""The opening tag of each node and edge Graphviz draws, with the id `diagrams` gave it."""

_NOT_TEXT = re.compile("[\ud800-\udfff\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
"""Lone surrogates (a JSON file may hold them; UTF-8 cannot) and C0/C1 controls
other than tab and line ends: replaced, so the page is always valid text."""


def _join(parts: Iterable[Markup | str], sep: Markup | None = None) -> Markup:
    """`parts` one after another (separated by `sep`), each one not `Markup` escaped."""
    return (sep if sep is not None else Markup("")).join(parts)


def _json(value: Any) -> str:
    """A value from the file as indented JSON text (escaped where it is put in)."""
    return json.dumps(value, indent=2, ensure_ascii=False, default=str)


def _clean(page: str) -> str:
    return _NOT_TEXT.sub("\ufffd", page)


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
    where = Markup(" in <code>{}</code>").format(source) if source else ""
    body = [
        _header(report, source, verification),
        _outcome(report, outcome),
        _timeline(report),
        _diagram(diagram),
        _budget(report),
        Markup(
            "<footer>Built by <code>statemachine-agent report</code> from {} audit events{}."
            "</footer>"
        ).format(report.event_count, where),
    ]
    page = Markup(
        "<!DOCTYPE html>\n"
        '<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta http-equiv="Content-Security-Policy" content="{csp}">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        '<link rel="icon" href="data:,">\n'
        "<title>{run_id}: {status}</title>\n"
        "<style>{style}</style>\n</head>\n<body>\n<main>\n{body}\n</main>\n</body>\n</html>\n"
    ).format(
        csp=Markup(CSP),  # ours, and free of quotes: kept verbatim for readers of the source
        run_id=report.run_id,
        status=status,
        style=Markup(STYLE),
        body=_join(body, Markup("\n")),
    )
    return _clean(str(page))


# -- sections ------------------------------------------------------------------------


def _header(report: Report, source: str, verification: Verification | None) -> Markup:
    meta: list[Markup | str] = []
    if report.model:
        meta.append(Markup("model <code>{}</code>").format(report.model))
    if report.started_ts is not None:
        started = datetime.fromtimestamp(report.started_ts, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
        meta.append(f"started {started}")
    if report.wall_s is not None:
        meta.append(f"wall time {duration(report.wall_s)}")
    if report.pauses:
        paused = f"{report.pauses} pause{'s' if report.pauses != 1 else ''}"
        meta.append(
            Markup('<span class="waited">waiting for people {} ({})</span>').format(
                duration(report.waited_s), paused
            )
        )
    meta.append(f"{report.iteration_count} iterations, {report.transitions_fired} transitions")
    if report.forked_from is not None:
        meta.append(
            Markup("forked from <code>{}</code> at transition {}").format(
                report.forked_from, report.forked_at
            )
        )
    prompt = (
        Markup(
            '<div class="prompt"><span class="label">Prompt</span><div class="text">{}</div></div>'
        ).format(report.prompt)
        if report.prompt
        else ""
    )
    return Markup(
        '<header class="run"><h1>Run <code>{}</code></h1><p class="meta">{}</p>{}{}</header>'
    ).format(
        report.run_id or "(no run id)", _join(meta, Markup(" · ")), _chain(verification), prompt
    )


def _chain(verification: Verification | None) -> Markup:
    if verification is None:
        return Markup('<p class="chain unknown">Audit chain: not checked.</p>')
    kind = "ok" if verification.ok else "broken"
    return Markup('<p class="chain {}">Audit chain: {}</p>').format(kind, verification.summary)


def _outcome(report: Report, outcome: Outcome | None) -> Markup:
    if outcome is None:
        return Markup(
            '<section id="outcome" class="outcome failure"><h2>Result</h2>'
            '<p><span class="badge end failure">no end state</span> The file has no '
            "<code>run.ended</code> event: the run did not finish, or the file is cut short."
            "</p></section>"
        )
    kind = "success" if outcome.success else "failure"
    typed = _typed_output(outcome.data)
    data = (
        Markup(
            '<details class="data"{}><summary>Structured result (data)</summary>'
            "<pre>{}</pre></details>"
        ).format(Markup("") if typed else Markup(" open"), _json(outcome.data))
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
    grid = _join(Markup("<div><dt>{}</dt><dd>{}</dd></div>").format(k, v) for k, v in stats)
    if typed:
        answer = typed
    elif outcome.text:
        answer = Markup('<div class="answer">{}</div>').format(outcome.text)
    else:
        answer = Markup('<p class="muted">(no text)</p>')
    return Markup(
        '<section id="outcome" class="outcome {kind}"><h2>Result</h2>'
        '<p class="end"><span class="badge end {kind}">{end}</span> '
        '<span class="reason">{reason}</span></p>'
        '{answer}{data}<dl class="stats">{grid}</dl></section>'
    ).format(
        kind=kind,
        end=outcome.end_state,
        reason=outcome.reason,
        answer=answer,
        data=data,
        grid=grid,
    )


def _typed_output(data: Any) -> Markup | None:
    """The typed answer of a run with an output type: the `result` of the final-answer
    envelope (`{"status", "summary", "result"}`), a mapping shown field by field."""
    if not (isinstance(data, dict) and "result" in data and "status" in data):
        return None
    result = data["result"]
    if isinstance(result, dict) and result:
        rows = _join(
            Markup("<tr><th>{}</th><td>{}</td></tr>").format(
                key, value if isinstance(value, str) else _json(value)
            )
            for key, value in result.items()
        )
        body = Markup('<table class="typed">{}</table>').format(rows)
    else:
        body = Markup("<pre>{}</pre>").format(result if isinstance(result, str) else _json(result))
    return Markup('<div class="answer output"><h3>Typed output</h3>{}</div>').format(body)


def _diagram(diagram: Drawing | None) -> Markup:
    # The SVGs are Graphviz's own output: every label in them was escaped by Graphviz.
    if diagram is None:
        inner = Markup('<p class="muted">No diagram.</p>')
    elif diagram.svg is not None:
        svg = mark_diagram(diagram.svg, diagram.fired, diagram.visited)
        inner = Markup('<p class="muted">{}</p><div class="diagram" id="path">{}</div>').format(
            diagram.note, Markup(svg)
        )
    else:
        inner = Markup('<p class="muted">{}</p><pre>{}</pre>').format(
            diagram.note, diagram.text or ""
        )
    if diagram is not None and diagram.machine_svg is not None:
        machine = mark_diagram(diagram.machine_svg, diagram.machine_fired, diagram.visited)
        inner += Markup(
            '<details class="machine"><summary>The whole machine, this path marked</summary>'
            '<div class="diagram" id="machine">{}</div></details>'
        ).format(Markup(machine))
    return Markup(
        '<section id="diagram"><h2>The path this run took</h2>'
        '<p class="legend"><span class="key visited">visited state</span>'
        '<span class="key fired">fired transition (×count)</span>'
        '<span class="key end">end state</span></p>'
        "{}</section>"
    ).format(inner)


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
    """The `<svg` tag without a fixed size: it is scaled by its `viewBox` to the page's
    width (CSS `width: 100%`), never wider than its own size (`max-width`, in px where
    Graphviz gave pt), so nothing scrolls sideways. An attribute, not a style: the
    page's CSP allows no style attribute."""
    size = re.fullmatch(r"([\d.]+)pt", match.group(1))
    if size is None:
        return '<svg class="machine"'
    return f'<svg class="machine" width="{float(size.group(1)) * 4 / 3:.0f}"'


def _budget(report: Report) -> Markup:
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
    return Markup(
        '<section id="budget"><h2>Budget</h2><p class="muted">{} '
        "Each point is the run's total after a transition (x: its number); "
        'hover a point for its name.</p><div class="chart">{}</div></section>'
    ).format(text, chart)


def _timeline(report: Report) -> Markup:
    parts = [Markup('<section id="timeline"><h2>Timeline</h2>')]
    if report.preamble is not None:
        parts.append(_segment(report.preamble, "Before the first model call", "preamble"))
    if not report.iterations:
        parts.append(Markup('<p class="muted">No model call was made.</p>'))
    shown: set[int] = set()
    gap = report.gap
    for index, iteration in enumerate(report.iterations):
        if gap is not None and index == gap.at:
            parts.append(Markup('<p class="left-out" id="left-out">{}</p>').format(gap.note))
        parts.append(_segment(iteration, f"Iteration {iteration.number}", "iteration"))
        for index, step in enumerate(report.summaries):
            if step.after_iteration == iteration.number:
                parts.append(_summary(step, index))
                shown.add(index)
    parts += [_summary(s, i) for i, s in enumerate(report.summaries) if i not in shown]
    if report.summaries_left_out:
        note = left_out(report.summaries_left_out, "summaries")
        parts.append(Markup('<p class="left-out">{}</p>').format(note))
    parts.append(Markup("</section>"))
    return _join(parts, Markup("\n"))


def _segment(iteration: Iteration, title: str, cls: str) -> Markup:
    flags = Markup(' <span class="badge error">error</span>') if iteration.has_error else ""
    call = iteration.call
    stop = (
        Markup(' <span class="badge stop">{}</span>').format(call.stop_reason)
        if call is not None and call.stop_reason
        else ""
    )
    figures = Markup('<span class="figures">{} tokens · {}</span>').format(
        count(iteration.tokens.total), usd(iteration.cost_usd)
    )
    error_cls = " has-error" if iteration.has_error else ""
    # The loop's call first; salvage and critic calls come after the transitions that
    # led to them (a salvage call follows the move into the end state).
    body = [_call(c) for c in iteration.calls if c.purpose is None]
    if iteration.tools:
        body.append(
            Markup('<div class="tools">{}</div>').format(_join(map(_tool, iteration.tools)))
        )
    if iteration.notes:
        notes = _join(
            Markup('<li class="note{}{}"><code>{}</code> {}</li>').format(
                " error" if n.error else "",
                " review" if n.event in REVIEW_EVENTS else "",
                n.event,
                n.text,
            )
            for n in iteration.notes
        )
        body.append(Markup('<ul class="notes">{}</ul>').format(notes))
    if iteration.transitions:
        body.append(_transitions(iteration.transitions))
    body += [_call(c) for c in iteration.calls if c.purpose not in (None, "summary")]
    body += [
        Markup('<p class="left-out">{}</p>').format(line) for line in iteration.left_out.lines()
    ]
    return Markup(
        '<article class="{cls}{error_cls}" id="{cls}-{number}" data-iteration="{number}">'
        "<header><h3>{title}</h3>{stop}{flags}{figures}</header>{body}</article>"
    ).format(
        cls=cls,
        error_cls=error_cls,
        number=iteration.number,
        title=title,
        stop=stop,
        flags=flags,
        figures=figures,
        body=_join(body),
    )


def _summary(step: SummaryStep, index: int) -> Markup:
    """A summary as a step of its own, after the iteration it followed."""
    facts = (
        f"{step.messages_replaced} earlier messages ({count(step.tokens_replaced)} tokens) "
        "replaced by one summary"
    )
    call = _call(step.call) if step.call is not None else ""
    return Markup(
        '<article class="summary" id="summary-{index}" data-iteration="{after}">'
        "<header><h3>Summary after iteration {after}</h3>"
        '<span class="figures">{before} → {now} prompt tokens</span></header>'
        '<p class="facts">{facts}</p><div class="assistant">{summary}</div>{call}</article>'
    ).format(
        index=index,
        after=step.after_iteration,
        before=count(step.tokens_before),
        now=count(step.tokens_after),
        facts=facts,
        summary=step.summary,
        call=call,
    )


def _call(call: ModelCall) -> Markup:
    what = "Model call" if call.purpose is None else f"{call.purpose.capitalize()} call"
    cls = "call" if call.purpose is None else "call extra"
    facts: list[Markup | str] = []
    if call.model:
        facts.append(Markup("<code>{}</code>").format(call.model))
    if call.stop_reason:
        facts.append(Markup("stop_reason <code>{}</code>").format(call.stop_reason))
    if call.error is None:
        facts.append(
            f"{count(call.tokens.input)} in / {count(call.tokens.output)} out"
            + (f" / {count(call.tokens.cache_read)} cache read" if call.tokens.cache_read else "")
        )
        if call.cost_usd is not None:
            facts.append(f"cost {usd(call.cost_usd)}")
    if call.request_id:
        facts.append(Markup("request <code>{}</code>").format(call.request_id))
    parts = [
        Markup(
            '<div class="{}" data-purpose="{}"><p class="facts"><strong>{}</strong> · {}</p>'
        ).format(cls, call.purpose or "", what, _join(facts, Markup(" · ")))
    ]
    if call.error is not None:
        parts.append(Markup('<p class="error-text">failed: {}</p>').format(call.error))
    if call.thinking:
        parts.append(
            Markup("<details><summary>thinking</summary><pre>{}</pre></details>").format(
                call.thinking
            )
        )
    if call.text:
        parts.append(Markup('<div class="assistant">{}</div>').format(call.text))
    for block in call.other_blocks:
        kind = block.get("type", "block") if isinstance(block, dict) else "block"
        parts.append(
            Markup("<details><summary>{} block</summary><pre>{}</pre></details>").format(
                kind, _json(block)
            )
        )
    parts.append(Markup("</div>"))
    return _join(parts)


def _tool(tool: ToolRun) -> Markup:
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
    output = (
        Markup("<h4>output</h4><pre>{}</pre>").format(tool.output)
        if tool.output is not None
        else ""
    )
    child = _child_run(tool.child) if tool.child is not None else ""
    return Markup(
        '<details class="{cls}"><summary><code>{name}</code>'
        '<span class="preview">{preview}</span><span class="state">{state}{took}</span>'
        "</summary><h4>input</h4><pre>{input}</pre>{child}{output}</details>"
    ).format(
        cls=cls,
        name=tool.tool,
        preview=preview,
        state=state,
        took=took,
        input=_json(tool.input),
        child=child,
        output=output,
    )


def _child_run(child: Report) -> Markup:
    """A sub-agent's run, nested in the tool call that started it: its end, figures and
    iterations (and its own sub-agents, nested the same way)."""
    outcome = child.outcome
    end = outcome.end_state if outcome is not None else "unfinished"
    reason = (
        Markup(" ({})").format(outcome.reason) if outcome is not None and outcome.reason else ""
    )
    agent = Markup(" · {}").format(child.agent) if child.agent else ""
    parts = [
        Markup(
            '<section class="subrun" data-run-id="{id}"><h4>sub-agent run <code>{id}</code>'
            '{agent}</h4><p class="facts">ended in <code>{end}</code>{reason} · '
            "{tokens} tokens · {cost}</p>"
        ).format(
            id=child.run_id,
            agent=agent,
            end=end,
            reason=reason,
            tokens=count(child.tokens.total),
            cost=usd(child.cost_usd),
        )
    ]
    if child.preamble is not None:
        parts.append(_segment(child.preamble, "Before the first model call", "subpreamble"))
    parts += [_segment(i, f"Iteration {i.number}", "subiteration") for i in child.iterations]
    parts.append(Markup("</section>"))
    return _join(parts)


def _transitions(transitions: tuple[Transition, ...]) -> Markup:
    rows = []
    for t in transitions:
        guards = _join(
            Markup('<span class="guard {}{}">{} {}</span>').format(
                "pass" if verdict else "fail",
                " via" if name in t.via else "",
                name,
                "✓" if verdict else "✗",
            )
            for name, verdict in t.guards
        )
        row_kind = "" if t.via else Markup('<span class="fallback">fallback row</span>')
        rows.append(
            Markup(
                '<tr class="transition" data-seq="{seq}"><td class="seq">#{seq}</td>'
                '<td class="move"><code>{source}</code> → <code>{dest}</code></td>'
                "<td><code>{trigger}</code></td>"
                '<td class="guards">{guards}{row_kind}</td>'
                '<td class="num">{elapsed}</td><td class="num">{tokens}</td>'
                '<td class="num">{cost}</td></tr>'
            ).format(
                seq=t.seq,
                source=t.source,
                dest=t.dest,
                trigger=t.trigger,
                guards=guards,
                row_kind=row_kind,
                elapsed=seconds(t.elapsed_s),
                tokens=count(t.tokens.total),
                cost=usd(t.cost_usd),
            )
        )
    return Markup(
        '<table class="transitions"><thead><tr><th>#</th><th>transition</th><th>trigger</th>'
        "<th>guards (✓ held, ✗ did not; bold: the row's own)</th><th>elapsed</th>"
        "<th>tokens so far</th><th>cost so far</th></tr></thead><tbody>{}</tbody></table>"
    ).format(_join(rows))


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
.diagram { overflow: hidden; border: 1px solid var(--line); border-radius: 6px; }
svg.machine { display: block; max-width: 100%; height: auto; margin: 0 auto; }
details.machine { margin-top: 10px; } details.machine summary { cursor: pointer; }
h1 code { overflow-wrap: anywhere; } h1 { overflow-wrap: anywhere; }
.waited { color: var(--ink); font-weight: 600; }
.note.review { list-style: none; margin: 4px 0 4px -18px; padding: 4px 8px;
  border-left: 3px solid #7a5af8; background: #f4f3ff; border-radius: 4px; }
.note.review.error { border-left-color: var(--bad); background: #fffbfa; }
.answer.output h3 { display: block; font-size: 12px; color: var(--muted);
  text-transform: uppercase; margin-bottom: 4px; }
table.typed { border-collapse: collapse; } table.typed th { text-align: left;
  padding: 2px 12px 2px 0; color: var(--muted); font-weight: 600; vertical-align: top; }
table.typed td { white-space: pre-wrap; word-break: break-word; padding: 2px 0; }

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


def csp(style: str) -> str:
    """The Content-Security-Policy of a page whose one style block is `style`.

    Nothing may be fetched, run, submitted or re-based: the page is data, and works
    offline. Styles come only from that block, allowed by its hash, so neither a
    style attribute nor a `<style>` element smuggled in could restyle the page."""
    digest = base64.b64encode(hashlib.sha256(style.encode("utf-8")).digest()).decode("ascii")
    return (
        f"default-src 'none'; style-src 'sha256-{digest}'; img-src data:; "
        "form-action 'none'; base-uri 'none'"
    )


CSP = csp(STYLE)
"""The report's policy (`csp` of its `STYLE`)."""
