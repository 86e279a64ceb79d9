"""The `statemachine-agent` command: a thin shell over the library.

This is the only place that decides how events are shown (the library
configures no logging): a console view of the transitions as they fire, or one
JSON object a line.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

import structlog

from statemachine_agent import diagrams
from statemachine_agent.agent import Agent
from statemachine_agent.machine.result import RunResult

EXIT_CODES = {
    "completed": 0,
    "finished": 0,
    "budget_exhausted": 3,
    "stalled": 4,
    "truncated": 5,
    "refused": 6,
    "context_overflow": 7,
    "failed": 8,
    "cancelled": 9,
    "awaiting_approval": 10,
}
"""Exit status per end state: 0 only when the run reached its goal. 2 is a usage error."""


def console_renderer(_logger: Any, _method: str, event: dict[str, Any]) -> str:
    """Show transitions and tool calls as they happen; drop the rest."""
    name = event.get("event")
    if name == "transition.fired":
        via = event.get("via") or []
        guard = f" [{' & '.join(via)}]" if via else ""
        return (
            f"  #{event['seq']:<3} {event['source']:>9} --{event['trigger']}{guard}--> "
            f"{event['dest']}"
        )
    if name == "tool.finished":
        call = f"{event['tool']}({_short(event.get('input'), 40)})"
        return f"{'':13}tool {call} -> {_short(event['content'])}"
    if name == "tool.failed":
        failure = f"FAILED ({event['error_kind']}): {_short(event['content'])}"
        return f"{'':13}tool {event['tool']} {failure}"
    raise structlog.DropEvent


def _short(value: Any, limit: int = 80) -> str:
    text = value if isinstance(value, str) else repr(value)
    text = text.replace("\n", " ")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def make_logger(fmt: str, stream: TextIO) -> Any:
    """A logger for this command only: no global structlog configuration."""
    renderer: Any = (
        structlog.processors.JSONRenderer(sort_keys=False) if fmt == "json" else console_renderer
    )
    return structlog.wrap_logger(
        structlog.PrintLogger(stream),
        processors=[renderer],
    )


def _summary(result: RunResult, stream: TextIO) -> None:
    print(f"\nAnswer:     {result.text or '(none)'}", file=stream)
    print(f"End state:  {result.end_state} ({result.reason})", file=stream)
    print(
        f"Usage:      {result.iterations} model calls, {result.usage.total_tokens} tokens, "
        f"${result.cost_usd:.4f}",
        file=stream,
    )
    if result.audit_path:
        print(f"Audit file: {result.audit_path}", file=stream)


def _text_stream(args: argparse.Namespace) -> TextIO:
    """Where the human-readable lines go: stderr under `--log-format json`, so that
    stdout holds nothing but JSON lines and can be piped into a JSON tool."""
    return sys.stderr if args.log_format == "json" else sys.stdout


def cmd_demo(args: argparse.Namespace) -> int:
    from statemachine_agent.demos import SCENARIOS

    if args.list:
        for scenario in SCENARIOS.values():
            print(f"{scenario.name}  {scenario.title}")
        return 0
    if args.scenario not in SCENARIOS:
        return _usage_error(f"unknown scenario {args.scenario!r}; see `demo --list`")
    scenario = SCENARIOS[args.scenario]
    out = _text_stream(args)
    print(f"Scenario:   {scenario.title}", file=out)
    print(f"Prompt:     {scenario.prompt}\n", file=out)
    agent = Agent(
        scenario.model(),
        tools=scenario.tools(),
        system=scenario.system,
        audit_dir=args.audit_dir,
        logger=make_logger(args.log_format, sys.stdout),
        **scenario.options(),
    )
    result = agent.run(scenario.prompt)
    _summary(result, out)
    if result.audit_path:
        diagram = result.audit_path.with_suffix(".mmd")
        diagram.write_text(diagrams.mermaid(result.trail), encoding="utf-8")
        print(f"Diagram:    {diagram} (Mermaid, this run's path highlighted)", file=out)
    return EXIT_CODES[result.end_state]


def cmd_run(args: argparse.Namespace) -> int:
    from statemachine_agent.models.anthropic import AnthropicModel, MissingAPIKeyError
    from statemachine_agent.policy.budget import Budget
    from statemachine_agent.tools.builtin import calculate, finish, get_current_time

    try:
        model = AnthropicModel(args.model)
    except MissingAPIKeyError as exc:
        return _usage_error(str(exc))
    agent = Agent(
        model,
        tools=[get_current_time, calculate, finish],
        system=args.system,
        budget=Budget(max_iterations=args.max_iterations, max_cost_usd=args.max_cost),
        audit_dir=args.audit_dir,
        logger=make_logger(args.log_format, sys.stdout),
    )
    result = agent.run(args.prompt)
    _summary(result, _text_stream(args))
    return EXIT_CODES[result.end_state]


def cmd_diagram(args: argparse.Namespace) -> int:
    trail = None
    if args.run:
        from statemachine_agent.audit.sink import read_events

        try:
            events = read_events(Path(args.run))
        except OSError as exc:
            return _usage_error(f"cannot read audit file {args.run}: {exc.strerror or exc}")
        except ValueError as exc:
            return _usage_error(str(exc))
        trail = [e for e in events if e["event"] == "transition.fired"]
        if not trail:
            return _usage_error(f"{args.run} has no transition.fired events to highlight")
    try:
        text = diagrams.render(args.format, trail)
    except (diagrams.GraphvizNotFoundError, diagrams.GraphvizError) as exc:
        return _usage_error(str(exc))
    if args.output:
        try:
            Path(args.output).write_text(text, encoding="utf-8")
        except OSError as exc:
            return _usage_error(f"cannot write {args.output}: {exc.strerror or exc}")
    else:
        sys.stdout.write(text)
    return 0


def _usage_error(message: str) -> int:
    print(f"statemachine-agent: error: {message}", file=sys.stderr)
    return 2


def parser() -> argparse.ArgumentParser:
    from statemachine_agent.models.base import DEFAULT_MODEL

    top = argparse.ArgumentParser(
        prog="statemachine-agent", description="An auditable agent loop as a state machine."
    )
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--log-format", choices=("console", "json"), default="console")
    common.add_argument("--audit-dir", default="audit", help="where run audit files go")
    sub = top.add_subparsers(dest="command", required=True)

    demo = sub.add_parser("demo", parents=[common], help="run an offline scenario")
    demo.add_argument("--scenario", default="time-calculate")
    demo.add_argument("--list", action="store_true", help="list the scenarios")
    demo.set_defaults(func=cmd_demo)

    run = sub.add_parser("run", parents=[common], help="run a prompt against Claude")
    run.add_argument("prompt")
    run.add_argument("--model", default=DEFAULT_MODEL)
    run.add_argument("--system", default="You are a helpful assistant. Use tools when useful.")
    run.add_argument("--max-iterations", type=int, default=15)
    run.add_argument("--max-cost", type=float, default=None, metavar="USD")
    run.set_defaults(func=cmd_run)

    diagram = sub.add_parser("diagram", help="print the machine as a diagram")
    diagram.add_argument("--format", choices=diagrams.FORMATS, default="mermaid")
    diagram.add_argument("--run", metavar="AUDIT.jsonl", help="highlight the path of a run")
    diagram.add_argument("-o", "--output", metavar="FILE")
    diagram.set_defaults(func=cmd_diagram)
    return top


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
