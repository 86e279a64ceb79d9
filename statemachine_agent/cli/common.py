"""What the CLI's command modules share: the usage error and the helpers that raise it.

`cli.py` (the parser and the one-shot commands) and `cli_sessions.py` (`replay`,
`chat`) both import from here; this module imports neither, so `cli_sessions`
no longer needs `cli` and the two modules form no import cycle.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from statemachine_agent.errors import Error

if TYPE_CHECKING:
    from statemachine_agent.models.anthropic import AnthropicModel
    from statemachine_agent.persistence.crypto import Cipher
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


T = TypeVar("T")


class UsageError(Error):
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
    before the run starts (and, for `run`, before any money is spent). Missing folders
    are made 0700, like the audit's own (`private_files`)."""
    from statemachine_agent.private_files import make_private_dirs

    directory = Path(args.audit_dir)
    try:
        make_private_dirs(directory)
    except OSError as exc:
        raise UsageError(f"cannot use --audit-dir {directory}: {exc.strerror or exc}") from exc
    return directory


KEY_ENV = "STATEMACHINE_AGENT_ENCRYPTION_KEY"
"""Where `--encryption-key` is read from when it is not given (keeps the key out of `ps`)."""


def add_key_option(command: argparse.ArgumentParser) -> None:
    """`--encryption-key`: the key of an encrypted store or audit file (not the chain's
    HMAC `--key`, which `report`, `inspect` and `verify` also take)."""
    command.add_argument(
        "--encryption-key",
        action="append",
        metavar="KEY",
        dest="encryption_key",
        help=f"encryption key (repeat for older keys; default: ${KEY_ENV}, comma-separated; "
        "a key starting with '-' goes as --encryption-key=KEY)",
    )


def encryption_keys(args: argparse.Namespace) -> list[str] | None:
    """The keys given with `--encryption-key` (repeatable: the first writes), else from the
    environment."""
    given = list(args.encryption_key or [])
    keys = given or [k for k in os.environ.get(KEY_ENV, "").split(",") if k]
    return keys or None


def cipher_of(args: argparse.Namespace) -> Cipher | None:
    """The cipher of the encryption keys given; an unusable key is a usage error."""
    from statemachine_agent.persistence.crypto import cipher_for

    try:
        return cipher_for(encryption_keys(args))
    except (ValueError, ImportError) as exc:
        raise UsageError(f"--encryption-key: {exc}") from exc


def load_events(path: str, keys: Cipher | list[str] | None = None) -> list[dict[str, Any]]:
    """An audit file's events; a missing, unreadable or malformed file is a usage error
    naming the file (and, for a malformed line, its number)."""
    return [event for _, event in stream_numbered(path, keys)]


def load_numbered(
    path: str, keys: Cipher | list[str] | None = None
) -> list[tuple[int, dict[str, Any]]]:
    """`load_events`, each event with its line number."""
    return list(stream_numbered(path, keys))


def stream_numbered(
    path: str, keys: Cipher | list[str] | None = None
) -> Iterator[tuple[int, dict[str, Any]]]:
    """The events of an audit file with their line numbers, read as a stream (one line
    in memory at a time); anything wrong with the file (missing, unreadable, a
    malformed line, no events at all) is a `UsageError` naming it, when it is reached."""
    from statemachine_agent.audit.sink import iter_numbered

    count = 0
    try:
        for number, event in iter_numbered(Path(path), keys):
            count += 1
            yield number, event
    except OSError as exc:
        raise UsageError(f"cannot read audit file {path}: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise UsageError(f"{path}: not a UTF-8 text file (byte {exc.start})") from exc
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    if not count:
        raise UsageError(f"{path}: the audit file holds no events")


EVENT_ERRORS = (
    KeyError, TypeError, ValueError, AttributeError, IndexError, RecursionError, OverflowError,
)  # fmt: skip
"""What code reading events raises when an event lacks a field or holds the wrong type."""


class _Read:
    """The line of the event read last."""

    line = 0


class _TrackedEvent(dict[str, Any]):
    """An event that notes its line whenever a field of it is read."""

    def __init__(self, event: dict[str, Any], line: int, read: _Read) -> None:
        super().__init__(event)
        self._line, self._read = line, read

    def __getitem__(self, key: str) -> Any:
        self._read.line = self._line
        return super().__getitem__(key)

    def get(self, key: str, default: Any = None) -> Any:
        self._read.line = self._line
        return super().get(key, default)


def use_events(
    path: str,
    numbered: Iterable[tuple[int, dict[str, Any]]],
    work: Callable[[Iterator[dict[str, Any]]], T],
    *,
    named: tuple[type[Exception], ...] = (),
    fold: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
) -> T:
    """`work(events)`, the events passed on one at a time as they are read (`numbered`
    may be a stream, `stream_numbered`); an event it cannot use is a usage error
    naming its line.

    The events note their line as they are read, so the one read last when the
    work fails (the one lacking a field, or holding the wrong type) is named.
    `fold` caps each event first (the report's `fold_event`). Errors in `named`
    are the command's own and pass through.
    """
    read = _Read()
    shape = fold or (lambda event: event)
    try:
        return work(_TrackedEvent(shape(event), line, read) for line, event in numbered)
    except named:
        raise
    except EVENT_ERRORS as exc:
        problem = f"{type(exc).__name__}: {exc}".replace("\n", " ")
        problem = problem if len(problem) <= 160 else problem[:159] + "…"
        where = f"{path}:{read.line}" if read.line else path
        raise UsageError(f"{where}: an event this command cannot use ({problem})") from None


TOOL_SETS: tuple[str, ...] = ("builtin", "none")
"""What `run --tools` offers: the built-in tools, or none at all."""


def builtin_tools(name: str) -> list[Tool]:
    """The tools of a `--tools` choice."""
    from statemachine_agent.tools.builtin import calculate, finish, get_current_time

    return [get_current_time, calculate, finish] if name == "builtin" else []
