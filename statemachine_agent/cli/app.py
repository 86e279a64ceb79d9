"""The `statemachine-agent` command: a thin shell over the library.

This is the only place that decides how events are shown (the library
configures no logging): a console view of the transitions as they fire, or one
JSON object a line. Every mistake a user can make (a bad flag, a missing or
malformed file, no API key) ends in one line on stderr and exit status 2, never
a traceback: commands raise `UsageError` and `main` prints it.

What only some commands need (the engine, structlog, rich, the SDKs) is imported
inside them, so `statemachine-agent --help` loads none of it.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TextIO

import statemachine_agent
from statemachine_agent import diagrams
from statemachine_agent.cli.common import (
    AUDIT_HELP,
    DEFAULT_SYSTEM,
    KEY_HELP,
    MODEL_HELP,
    SYSTEM_HELP,
    TOOL_SETS,
    UsageError,
    add_key_option,
    builtin_tools,
    cipher_of,
    claude,
    ensure_audit_dir,
    load_events,
    stream_numbered,
    use_events,
)
from statemachine_agent.machine.ends import EXIT_CODES

if TYPE_CHECKING:
    from rich.console import Console

    from statemachine_agent.audit.chain import Verification
    from statemachine_agent.cli.demos import Scenario
    from statemachine_agent.machine.result import RunResult


def console_renderer(_logger: Any, _method: str, event: dict[str, Any]) -> str:
    """Show transitions and tool calls as they happen (a sub-agent's indented under its
    parent's, with its run id); drop the rest. Tool names, inputs and results come from
    the model and the tools: no control character of theirs reaches the terminal."""
    from statemachine_agent.report.fmt import printable

    if event.get("parent_run_id") is None:
        return printable(_console_line(event))
    if event.get("event") in ("run.started", "run.resumed"):
        return printable(f"{'':13}↳ sub-agent run {event['run_id']}")
    return printable("    " + _console_line(event))


def _console_line(event: dict[str, Any]) -> str:
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
    import structlog

    raise structlog.DropEvent


def _short(value: Any, limit: int = 80) -> str:
    text = value if isinstance(value, str) else repr(value)
    text = text.replace("\n", " ")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def make_logger(fmt: str, stream: TextIO) -> Any:
    """A logger for this command only: no global structlog configuration."""
    import structlog

    renderer: Any = (
        structlog.processors.JSONRenderer(sort_keys=False) if fmt == "json" else console_renderer
    )
    return structlog.wrap_logger(
        structlog.PrintLogger(stream),
        processors=[renderer],
    )


def _summary(result: RunResult, stream: TextIO, redact: Callable[[Any], Any]) -> None:
    """The run's outcome for the terminal, with the agent's secrets masked as in its audit
    (and the model's control characters replaced: its text is shown, never obeyed)."""
    from statemachine_agent.report.fmt import printable

    print(f"\nAnswer:     {printable(redact(result.text) or '(none)')}", file=stream)
    print(f"End state:  {result.end_state} ({printable(redact(result.reason))})", file=stream)
    print(
        f"Usage:      {_calls(result)}, {result.usage.total_tokens} tokens, ${result.cost_usd:.4f}",
        file=stream,
    )
    if result.audit_path:
        print(f"Audit file: {result.audit_path}", file=stream)


def _calls(result: RunResult) -> str:
    """The model calls as the audit file counts them (a salvage or critic call is one too,
    and was paid for), so this line and `inspect` agree."""
    from statemachine_agent.audit.sink import iter_numbered
    from statemachine_agent.report.build import describe_calls, model_calls

    if result.audit_path is None or not result.audit_path.exists():
        return describe_calls(Counter(loop=result.iterations))
    events = (event for _, event in iter_numbered(result.audit_path))
    return describe_calls(model_calls(events))


def _text_stream(args: argparse.Namespace) -> TextIO:
    """Where the human-readable lines go: stderr under `--log-format json`, so that
    stdout holds nothing but JSON lines and can be piped into a JSON tool."""
    return sys.stderr if args.log_format == "json" else sys.stdout


def _usage_error(message: str) -> int:
    from statemachine_agent.report.fmt import printable

    print(f"statemachine-agent: error: {printable(message)}", file=sys.stderr)
    return 2


def _write(path: str, data: bytes, *, source: str | None, default: bool = False) -> None:
    """Write an output file without ever destroying evidence.

    The output may not be the input (`report run.html`, `report A -o A`, or a link to
    it), a default name (one the user did not type) that is a symbolic link is
    refused rather than followed, and the bytes go to a temporary file in the same
    folder that `os.replace` moves into place: a failed write leaves what was there,
    and a link given as `-o` is replaced, never written through.
    """
    target = Path(path)
    if source is not None and _same_file(target, Path(source)):
        raise UsageError(f"{path} is the input file {source}: give -o another file")
    if default and target.is_symlink():
        raise UsageError(f"{path} is a symbolic link, not followed for a default output: give -o")
    try:
        handle, temporary = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
        try:
            with os.fdopen(handle, "wb") as out:
                out.write(data)
            os.replace(temporary, target)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror or exc}") from exc


def _same_file(one: Path, other: Path) -> bool:
    """Whether two paths name one file (resolved through links, or the same inode)."""
    if one.resolve() == other.resolve():
        return True
    try:
        return os.path.samefile(one, other)
    except OSError:
        return False


def _whole_transitions(events: Iterator[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """The events, a `transition.fired` lacking its source, trigger or destination
    being an error (named with its line by `use_events`) instead of drawn blank."""
    for event in events:
        if event.get("event") == "transition.fired":
            for key in ("source", "trigger", "dest"):
                value = event.get(key)
                if not isinstance(value, str) or not value:
                    raise ValueError(f"a transition.fired event without its {key}")
        yield event


def cmd_demo(args: argparse.Namespace) -> int:
    from statemachine_agent.agent import Agent
    from statemachine_agent.audit.config import Audit
    from statemachine_agent.cli.demos import SCENARIOS

    if args.list:
        width = max(len(name) for name in SCENARIOS)
        for scenario in SCENARIOS.values():
            print(f"{scenario.name:<{width}}  {scenario.title}")
        return 0
    if args.scenario not in SCENARIOS:
        raise UsageError(f"unknown scenario {args.scenario!r}; see `demo --list`")
    scenario = SCENARIOS[args.scenario]
    out = _text_stream(args)
    audit_dir = ensure_audit_dir(args)
    print(f"Scenario:   {scenario.title}", file=out)
    if scenario.follow_ups:
        return _demo_conversation(args, scenario, out, audit_dir)
    print(f"Prompt:     {scenario.prompt}\n", file=out)
    agent = Agent(
        scenario.model(),
        tools=scenario.tools(),
        system=scenario.system,
        audit=Audit(dir=audit_dir, logger=make_logger(args.log_format, sys.stdout)),
        **scenario.options(),
    )
    result = agent.run(scenario.prompt)
    _summary(result, out, agent.redact)
    if result.end_state == "awaiting_approval" and scenario.decide is not None:
        pending = list((result.details or {}).get("pending", []))
        decisions = scenario.decide(pending)
        for call in pending:
            decision = type(decisions[call["tool_use_id"]]).__name__
            print(f"Reviewer:   {decision} {call['name']}({call['input']})", file=out)
        print("Resuming the run from its checkpoint...\n", file=out)
        result = agent.resume(result.run_id, decisions=decisions)
        _summary(result, out, agent.redact)
    if result.audit_path:
        diagram = result.audit_path.with_suffix(".mmd")
        diagram.write_text(diagrams.mermaid(result.trail), encoding="utf-8")
        print(f"Diagram:    {diagram} (Mermaid, this run's path highlighted)", file=out)
    return EXIT_CODES[result.end_state]


def _demo_conversation(
    args: argparse.Namespace, scenario: Scenario, out: TextIO, audit_dir: Path
) -> int:
    """A scenario of several turns: each opens the stored conversation with a fresh agent
    and store connection (as a new process would), then sends its line."""
    import tempfile

    from statemachine_agent.agent import Agent
    from statemachine_agent.agent.conversation import Conversation
    from statemachine_agent.audit.config import Audit

    model = scenario.model()
    logger = make_logger(args.log_format, sys.stdout)
    with tempfile.TemporaryDirectory() as folder:
        store = Path(folder) / "conversations.sqlite3"
        for prompt in (scenario.prompt, *scenario.follow_ups):
            agent = Agent(model, tools=scenario.tools(), system=scenario.system,
                          audit=Audit(dir=audit_dir, logger=logger), checkpointer=store,
                          **scenario.options())  # fmt: skip
            chat = Conversation.open(agent, "demo")
            print(f"Opened:     conversation 'demo' in {store.name}: {chat.turns} earlier "
                  f"turn(s), {len(chat.history)} messages of history", file=out)  # fmt: skip
            print(f"Prompt:     {prompt}\n", file=out)
            result = chat.send(prompt)
            _summary(result, out, agent.redact)
            print(file=out)
    return EXIT_CODES[result.end_state]


def cmd_run(args: argparse.Namespace) -> int:
    """A real run against the Messages API, with a live status line on stderr."""
    from statemachine_agent.agent import Agent
    from statemachine_agent.audit.config import Audit
    from statemachine_agent.policy.budget import Budget
    from statemachine_agent.policy.pricing import UnknownModelPriceError
    from statemachine_agent.report.live import RunProgress, live_status

    model = claude(args.model)
    try:
        budget = Budget(max_iterations=args.max_iterations, max_cost_usd=args.max_cost)
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    audit_dir = ensure_audit_dir(args)
    progress = RunProgress()
    with live_status(progress, status_console()):
        # Made inside the block: on a terminal, stdout is routed above the status line.
        logger = make_logger(args.log_format, sys.stdout)
        try:
            agent = Agent(
                model,
                tools=builtin_tools(args.tools),
                system=args.system,
                budget=budget,
                audit=Audit(dir=audit_dir, sinks=[progress], logger=logger),
            )
        except UnknownModelPriceError as exc:
            raise UsageError(f"--max-cost: {exc.args[0]}") from exc
        result = agent.run(args.prompt)
    _summary(result, _text_stream(args), agent.redact)
    return EXIT_CODES[result.end_state]


def status_console() -> Console:
    """Where `run` draws its status line: stderr, so stdout keeps only the transitions
    (or JSON lines). Shown only when stderr is a terminal."""
    from rich.console import Console

    return Console(stderr=True)


def cmd_report(args: argparse.Namespace) -> int:
    """Write the self-contained HTML report of one audit file."""
    from statemachine_agent import report
    from statemachine_agent.report.fold import fold_event

    verification = _verify(args)
    try:
        page = use_events(
            args.audit,
            stream_numbered(args.audit, cipher_of(args)),
            lambda events: report.html(
                _whole_transitions(events), source=args.audit, verification=verification
            ),
            named=(report.ReportError,),
            fold=fold_event,
        )
    except report.ReportError as exc:
        raise UsageError(f"{args.audit}: {exc}") from exc
    output = args.output or str(Path(args.audit).with_suffix(".html"))
    _write(output, page.encode("utf-8"), source=args.audit, default=not args.output)
    print(f"Report:     {output}")
    return 0


def cmd_inspect(args: argparse.Namespace) -> int:
    """Print one run's transitions, tool calls, tokens and cost per iteration, then totals."""
    from statemachine_agent import report
    from statemachine_agent.report.console import console_for
    from statemachine_agent.report.fold import fold_event
    from statemachine_agent.report.reviews import Reviews

    def show(events: Iterator[dict[str, Any]], stream: TextIO) -> None:
        reviews = Reviews()  # approvals, pauses and resumes, read off the same stream
        built = report.build(reviews.tap(_whole_transitions(events)))
        report.print_inspect(built, console_for(stream), _verify(args), reviews)

    try:
        use_events(
            args.audit,
            stream_numbered(args.audit, cipher_of(args)),
            lambda events: show(events, sys.stdout),
            named=(report.ReportError,),
            fold=fold_event,
        )
    except report.ReportError as exc:
        raise UsageError(f"{args.audit}: {exc}") from exc
    return 0


def _verify(args: argparse.Namespace) -> Verification:
    """The hash-chain check of `args.audit` (with `--key`, if given; with the encryption
    key, if given, each encrypted line is opened too)."""
    from statemachine_agent.audit.chain import verify_file
    from statemachine_agent.persistence.crypto import KeyMismatchError

    cipher = cipher_of(args)
    try:
        return verify_file(Path(args.audit), args.key, cipher)
    except OSError as exc:
        raise UsageError(f"cannot read audit file {args.audit}: {exc.strerror or exc}") from exc
    except KeyMismatchError as exc:
        raise UsageError(f"{args.audit}: --encryption-key: {exc}") from exc
    except ValueError as exc:
        raise UsageError(f"--key: {exc}") from exc


def cmd_verify(args: argparse.Namespace) -> int:
    """Check an audit file's hash chain: exit 0 when intact, else name the first break."""
    from statemachine_agent.report.fmt import printable

    verification = _verify(args)
    print(printable(f"{args.audit}: {verification.summary}"))
    return verification.exit_code


def cmd_stats(args: argparse.Namespace) -> int:
    """The fleet view over many audit files: tables on stdout (or JSON), an HTML page."""
    import json

    from statemachine_agent import report
    from statemachine_agent.persistence.crypto import KeyMismatchError
    from statemachine_agent.report.console import console_for
    from statemachine_agent.report.stats_console import print_stats

    if args.html:
        _refuse_input_as_output(args.html, args.paths)
    try:
        fleet = report.stats(args.paths, encryption_key=cipher_of(args), audit_key=args.key)
    except report.ReportError as exc:
        raise UsageError(str(exc)) from exc
    except (KeyMismatchError, ValueError) as exc:  # an unusable --key
        raise UsageError(f"--key: {exc}") from exc
    if args.json:
        print(json.dumps(fleet.as_dict(), indent=2, ensure_ascii=False))
    else:
        print_stats(fleet, console_for(sys.stdout))
    if args.html:
        from statemachine_agent.report.stats_page import render_stats

        _write(args.html, render_stats(fleet).encode("utf-8"), source=None)
        print(f"Page:       {args.html}", file=sys.stderr if args.json else sys.stdout)
    return 0


def _refuse_input_as_output(output: str, paths: Sequence[str]) -> None:
    """`--html` may not be one of the audit files read: a file given, or a `.jsonl` file
    in a folder given (the page would replace the evidence it was built from)."""
    target = Path(output)
    for given in map(Path, paths):
        inside = given.is_dir() and target.resolve().is_relative_to(given.resolve())
        if _same_file(target, given) or (inside and target.suffix == ".jsonl"):
            raise UsageError(f"--html {output} is an audit file read: give another file")


def _diagram_format(given: str | None, output: str | None) -> str:
    """The format `-o FILE` asks for by its suffix, else `--format`, else Mermaid; a
    suffix that contradicts `--format` is a usage error (`run.svg` holding Mermaid
    text helps nobody)."""
    implied = diagrams.SUFFIXES.get(Path(output).suffix.lower()) if output else None
    if given is not None and implied is not None and given != implied:
        raise UsageError(
            f"-o {output} asks for {implied} by its suffix, but --format is {given}: "
            f"drop --format, or give -o a {_suffix_of(given)} name"
        )
    return given or implied or "mermaid"


def _suffix_of(fmt: str) -> str:
    return next(suffix for suffix, name in diagrams.SUFFIXES.items() if name == fmt)


def cmd_diagram(args: argparse.Namespace) -> int:
    trail = None
    if args.run_id and not args.run:
        raise UsageError("--run-id picks a run of the --run audit file: give --run AUDIT.jsonl")
    if args.run:
        events = load_events(args.run)
        chosen = args.run_id or (str(events[0].get("run_id", "")) if events else "")
        trail = [
            e for e in events if e["event"] == "transition.fired" and e.get("run_id") == chosen
        ]
        if not trail:
            runs = sorted({str(e.get("run_id")) for e in events if "run_id" in e})
            known = f" (its runs: {', '.join(runs)})" if args.run_id and runs else ""
            raise UsageError(
                f"{args.run} has no transition.fired events of run {chosen!r} to highlight{known}"
            )
    args.format = _diagram_format(args.format, args.output)
    if args.format == "png" and not args.output:
        raise UsageError("--format png writes a binary image: give -o FILE.png")
    try:
        if args.agent:
            data = _agent_diagram(args, trail)
        elif args.format in ("svg", "png"):
            rendering = diagrams.rendered(args.format, trail, full=args.full)
            print(f"Rendered by {rendering.renderer.name}.", file=sys.stderr)
            data = rendering.data
        else:
            data = diagrams.render(args.format, trail, full=args.full).encode("utf-8")
    except diagrams.GraphvizNotFoundError as exc:
        raise UsageError(f"{exc}; or use --format mermaid or --format dot") from exc
    except diagrams.GraphvizError as exc:
        raise UsageError(str(exc)) from exc
    if args.output:
        _write(args.output, data, source=args.run)
    else:
        sys.stdout.write(data.decode("utf-8"))
    return 0


def _agent_diagram(args: argparse.Namespace, trail: Any) -> bytes:
    """The rows the agent `--agent MODULE:ATTR` can reach, drawn alone."""
    from statemachine_agent.agent.reachability import reachable_rows
    from statemachine_agent.cli.testgen import load_agent

    agent, _ = load_agent(args.agent, command="diagram")
    title = f"The rows {args.agent} can reach"
    rows = reachable_rows(agent).reachable
    drawn = diagrams.subset_diagram(args.format, rows, full=args.full, title=title, trail=trail)
    return drawn if isinstance(drawn, bytes) else drawn.encode("utf-8")


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def _positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be more than 0, not {text}")
    return value


class OneLineParser(argparse.ArgumentParser):
    """Bad flags get one line naming the problem (and where to look), not the usage dump."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def parser() -> argparse.ArgumentParser:
    from statemachine_agent.models.base import DEFAULT_MODEL

    top = OneLineParser(
        prog="statemachine-agent", description="An auditable agent loop as a state machine."
    )
    top.add_argument(
        "--version", action="version", version=f"%(prog)s {statemachine_agent.__version__}"
    )
    common = OneLineParser(add_help=False)
    common.add_argument(
        "--log-format",
        choices=("console", "json"),
        default="console",
        help="console: each transition and tool call as it happens; json: every event as a "
        "JSON line on stdout, the summary on stderr (default: console)",
    )
    common.add_argument(
        "--audit-dir", default="audit", help="where run audit files go (default: audit)"
    )
    sub = top.add_subparsers(dest="command", required=True)

    demo = sub.add_parser("demo", parents=[common], help="run an offline scenario")
    demo.add_argument(
        "--scenario",
        default="time-calculate",
        metavar="NAME",
        help="which offline scenario to run, from `demo --list` (default: time-calculate)",
    )
    demo.add_argument("--list", action="store_true", help="list the scenarios")
    demo.set_defaults(func=cmd_demo)

    run = sub.add_parser("run", parents=[common], help="run a prompt against Claude")
    run.add_argument("prompt", help="what to ask Claude")
    run.add_argument("--model", default=DEFAULT_MODEL, help=MODEL_HELP)
    run.add_argument("--system", default=DEFAULT_SYSTEM, help=SYSTEM_HELP)
    run.add_argument(
        "--max-iterations",
        type=_positive_int,
        default=15,
        metavar="N",
        help="at most N model calls of the loop, then budget_exhausted (default: 15)",
    )
    run.add_argument(
        "--max-cost",
        type=_positive_float,
        default=None,
        metavar="USD",
        help="stop once the run has cost this much (default: no limit)",
    )
    run.add_argument(
        "--tools",
        choices=TOOL_SETS,
        default="builtin",
        help="builtin: get_current_time, calculate, finish; none: no tools (default: builtin)",
    )
    run.set_defaults(func=cmd_run)

    diagram = sub.add_parser("diagram", help="print the machine as a diagram")
    diagram.add_argument(
        "--format",
        choices=diagrams.FORMATS,
        help="mermaid and dot are text; svg and png are rendered by Graphviz (default: "
        "taken from -o's suffix, .mmd .dot .svg .png; else mermaid)",
    )
    diagram.add_argument("--run", metavar="AUDIT.jsonl", help="highlight the path of a run")
    diagram.add_argument(
        "--run-id",
        metavar="ID",
        help="the run of the --run file to highlight, e.g. a sub-agent's (default: the "
        "file's first run)",
    )
    diagram.add_argument(
        "--full",
        action="store_true",
        help="draw every row as its own edge (default: the review diagram, where rows "
        "that say one thing are drawn once)",
    )
    diagram.add_argument(
        "--agent",
        metavar="MODULE:ATTR",
        help="draw only the rows this agent (an Agent, or a function of no arguments "
        "returning one) can reach",
    )
    diagram.add_argument("-o", "--output", metavar="FILE", help="default: stdout")
    diagram.set_defaults(func=cmd_diagram)

    report = sub.add_parser("report", help="write a run's audit file as one HTML page")
    report.add_argument("audit", metavar="AUDIT.jsonl", help=AUDIT_HELP)
    report.add_argument("-o", "--output", metavar="FILE", help="default: AUDIT.html")
    report.add_argument("--key", help=KEY_HELP)
    add_key_option(report)
    report.set_defaults(func=cmd_report)

    inspect = sub.add_parser("inspect", help="print a run's iterations as a table")
    inspect.add_argument("audit", metavar="AUDIT.jsonl", help=AUDIT_HELP)
    inspect.add_argument("--key", help=KEY_HELP)
    add_key_option(inspect)
    inspect.set_defaults(func=cmd_inspect)

    verify = sub.add_parser(
        "verify",
        help="check that an audit file was not edited since the run wrote it",
        description="Exit 0 when the hash chain holds and run.ended seals the file, 1 when a "
        "line was edited, deleted, inserted or reordered (the first is named), 3 when the "
        "chain holds but the file does not end with run.ended (cut short, or unfinished).",
    )
    verify.add_argument("audit", metavar="AUDIT.jsonl", help=AUDIT_HELP)
    verify.add_argument("--key", help=KEY_HELP)
    add_key_option(verify)
    verify.set_defaults(func=cmd_verify)

    stats = sub.add_parser(
        "stats",
        help="what many runs did: rows fired and never fired, end states, approvals, stalls",
        description="Read audit files (a folder: its *.jsonl files, recursively) and show per "
        "row how often it fired, how runs ended (iterations, cost and wall time per end "
        "state), approvals, stalls, and the files that do not verify (named, not counted).",
    )
    stats.add_argument("paths", nargs="+", metavar="PATH", help="audit files or folders")
    stats.add_argument("--json", action="store_true", help="print the figures as JSON")
    stats.add_argument(
        "--html", metavar="FILE", help="also write an HTML page with the diagram as a heat map"
    )
    stats.add_argument("--key", help="the audit_key the runs were written with")
    add_key_option(stats)
    stats.set_defaults(func=cmd_stats)

    from statemachine_agent.cli.sessions import add_commands
    from statemachine_agent.cli.store import add_commands as add_store_commands

    add_commands(sub, common)
    add_store_commands(sub)
    from statemachine_agent.cli.evals import add_command as add_eval_command

    add_eval_command(sub)
    from statemachine_agent.cli.fork import add_command as add_fork_command

    add_fork_command(sub)
    from statemachine_agent.cli.testgen import add_command as add_testgen_command

    add_testgen_command(sub)
    return top


def main(argv: Sequence[str] | None = None) -> int:
    from statemachine_agent.persistence import CheckpointCorruptError, RunLockedError

    args = parser().parse_args(argv)
    try:
        return int(args.func(args))
    except (UsageError, CheckpointCorruptError, RunLockedError) as exc:
        return _usage_error(str(exc))


if __name__ == "__main__":
    sys.exit(main())
