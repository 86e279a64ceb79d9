"""The `replay` and `chat` commands: checking a recorded run, and talking to an agent.

Kept apart from `cli.py` (which holds the shared parser and the one-shot
commands) so each file stays small; both are wired in by `add_commands`.
"""

from __future__ import annotations

import argparse
import sqlite3
import sys
from pathlib import Path
from typing import Any

from statemachine_agent.cli.common import (
    AUDIT_HELP,
    DEFAULT_SYSTEM,
    MODEL_HELP,
    SYSTEM_HELP,
    TOOL_SETS,
    UsageError,
    add_key_option,
    builtin_tools,
    cipher_of,
    claude,
    ensure_audit_dir,
    stream_numbered,
    use_events,
)


def cmd_replay(args: argparse.Namespace) -> int:
    """Re-run the recorded run offline; exit 0 when it took the identical path, else 1."""
    from statemachine_agent.replay import ReplayError, replay_events
    from statemachine_agent.report.fmt import printable

    try:
        report = use_events(
            args.audit,
            stream_numbered(args.audit, cipher_of(args)),  # malformed: names the line
            lambda events: replay_events(events, args.audit),
            named=(ReplayError,),
        )
    except ReplayError as exc:
        raise UsageError(str(exc)) from exc
    for index, (source, trigger, dest, guards) in enumerate(report.replayed, start=1):
        verdicts = " ".join(f"{name}={'T' if value else 'F'}" for name, value in guards)
        print(printable(f"  #{index:<3} {source:>9} --{trigger}--> {dest}  {verdicts}"))
    print(printable(f"\nEnd state:  {report.result.end_state} ({report.result.reason})"))
    if report.matched:
        print(f"Replay:     matched ({len(report.recorded)} transitions, identical guards)")
        return 0
    print(printable(f"Replay:     DIVERGED at {report.difference}"))
    return 1


def cmd_chat(args: argparse.Namespace) -> int:
    """An interactive chat with Claude: one line a turn, /exit to leave."""
    from statemachine_agent.agent import Agent
    from statemachine_agent.agent.conversation import Conversation
    from statemachine_agent.cli.chat import repl
    from statemachine_agent.tools.builtin import end_chat

    model = claude(args.model)
    store = _conversation_store(args) if args.conversation is not None else None
    agent = Agent(
        model,
        tools=[*builtin_tools(args.tools), end_chat],
        system=args.system,
        audit=ensure_audit_dir(args),
        checkpointer=store,
    )
    conversation = Conversation(agent)
    if args.conversation is not None:
        try:
            conversation = Conversation.open(agent, args.conversation)
        except ValueError as exc:
            raise UsageError(str(exc)) from exc
        print(f"Conversation {args.conversation}: {conversation.turns} earlier turns.")
    print("Chat with the agent. /exit leaves; Ctrl-C cancels the current answer.")
    return repl(conversation, _read_line, sys.stdout)


def _conversation_store(args: argparse.Namespace) -> Any:
    """The `--store` SQLite file, opened now so an unusable path is a usage error."""
    from statemachine_agent.persistence.sqlite import SQLiteCheckpointer

    path = Path(args.store)
    if path.is_dir():
        raise UsageError(f"--store {path} is a folder; name the SQLite file")
    try:
        return SQLiteCheckpointer(path)
    except (OSError, sqlite3.Error) as exc:
        raise UsageError(f"cannot use --store {path}: {exc}") from exc


def _read_line(prompt: str) -> str:
    return input(prompt)


def add_commands(sub: Any, common: argparse.ArgumentParser) -> None:
    """Register `replay` and `chat` on the CLI's subcommand parser."""
    from statemachine_agent.models.base import DEFAULT_MODEL

    replay = sub.add_parser("replay", help="re-run a recorded run offline and compare")
    replay.add_argument("audit", metavar="AUDIT.jsonl", help=AUDIT_HELP)
    add_key_option(replay)
    replay.set_defaults(func=cmd_replay)

    chat = sub.add_parser("chat", help="chat with Claude in the terminal")
    chat.add_argument(
        "--audit-dir",
        default="audit",
        help="where each turn's audit file goes (default: audit)",
    )
    chat.add_argument("--model", default=DEFAULT_MODEL, help=MODEL_HELP)
    chat.add_argument("--system", default=DEFAULT_SYSTEM, help=SYSTEM_HELP)
    chat.add_argument(
        "--tools",
        choices=TOOL_SETS,
        default="builtin",
        help="builtin: get_current_time, calculate, finish (with end_chat); "
        "none: end_chat only (default: builtin)",
    )
    chat.add_argument(
        "--conversation",
        metavar="ID",
        help="keep the chat in --store under this id; an id stored before carries on "
        "with its history (letters, digits, _ or -)",
    )
    chat.add_argument(
        "--store",
        metavar="FILE",
        default="state/conversations.sqlite3",
        help="the SQLite file that keeps --conversation chats "
        "(default: state/conversations.sqlite3)",
    )
    chat.set_defaults(func=cmd_chat)
