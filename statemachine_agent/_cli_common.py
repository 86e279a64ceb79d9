"""What the CLI's command modules share: the usage error and the helpers that raise it.

`cli.py` (the parser and the one-shot commands) and `cli_sessions.py` (`replay`,
`chat`) both import from here; this module imports neither, so `cli_sessions`
no longer needs `cli` and the two modules form no import cycle.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from statemachine_agent.models.anthropic import AnthropicModel
    from statemachine_agent.tools.base import Tool

MISSING_KEY = (
    "ANTHROPIC_API_KEY is not set: export ANTHROPIC_API_KEY=... with a key from the "
    "Anthropic Console (or try `statemachine-agent demo`, which needs none)"
)
"""What a CLI user is told without a key: the variable to set, not the library's `api_key=`."""

DEFAULT_SYSTEM = "You are a helpful assistant. Use tools when useful."
"""The system prompt of `run` and `chat` unless `--system` says otherwise."""

# Help texts that more than one command's flags share.
AUDIT_HELP = "a run's audit file (demo and run print its path)"
KEY_HELP = "the audit_key the run was written with (its chain is an HMAC)"
MODEL_HELP = "the Claude model (default: %(default)s)"
SYSTEM_HELP = "the system prompt (default: %(default)r)"


class UsageError(Exception):
    """Something the user got wrong; `main` prints it as one line and exits 2."""


def claude(name: str) -> AnthropicModel:
    """The Claude model `--model` names; without an API key, a usage error saying what to set."""
    from statemachine_agent.models.anthropic import AnthropicModel, MissingAPIKeyError

    try:
        return AnthropicModel(name)
    except MissingAPIKeyError as exc:
        raise UsageError(MISSING_KEY) from exc


def ensure_audit_dir(args: argparse.Namespace) -> Path:
    """The audit directory, created now so that an unusable one is a usage error
    before the run starts (and, for `run`, before any money is spent)."""
    directory = Path(args.audit_dir)
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot use --audit-dir {directory}: {exc.strerror or exc}") from exc
    return directory


def load_events(path: str) -> list[dict[str, Any]]:
    """An audit file's events; a missing, unreadable or malformed file is a usage error
    naming the file (and, for a malformed line, its number)."""
    from statemachine_agent.audit.sink import read_events

    try:
        events = read_events(Path(path))
    except OSError as exc:
        raise UsageError(f"cannot read audit file {path}: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise UsageError(f"{path}: not a UTF-8 text file (byte {exc.start})") from exc
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    if not events:
        raise UsageError(f"{path}: the audit file holds no events")
    return events


TOOL_SETS: tuple[str, ...] = ("builtin", "none")
"""What `run --tools` offers: the built-in tools, or none at all."""


def builtin_tools(name: str) -> list[Tool]:
    """The tools of a `--tools` choice."""
    from statemachine_agent.tools.builtin import calculate, finish, get_current_time

    return [get_current_time, calculate, finish] if name == "builtin" else []
