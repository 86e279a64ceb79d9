"""What a run id and a conversation id may be, declared once.

A leaf module (standard library only). A run id names a file (`<audit dir>/<run_id>.jsonl`)
and a key in the checkpoint store, so it is checked where a run starts or resumes: a
`/`, a `..`, an absolute path or a newline would put a file outside the audit folder
or give it an unreadable name, and a key under a reserved prefix (`conversation:`)
would take over a stored conversation. The character set leaves out every path
separator and `:` by construction, so an accepted id is one plain file name.
"""

from __future__ import annotations

import re

from statemachine_agent.errors import Error


class InvalidIdError(Error, ValueError):
    """A run id or conversation id breaks the rule for ids (the message names it)."""


RUN_ID = re.compile(r"[A-Za-z0-9_.-]{1,200}")
"""A run id: 1-200 letters, digits, `_`, `-` or `.` (not `.` or `..` alone). A
conversation's turns (`<conversation id>.turn-N-...`) and a sub-agent's runs
(`<parent run id>.<tool_use id>`) fit it."""

CONVERSATION_ID = re.compile(r"[A-Za-z0-9_-]{1,100}")
"""A conversation id: 1-100 letters, digits, `_` or `-`; it names the store key and
the turns' run ids."""

RESERVED_PREFIXES = ("conversation:",)
"""Store keys that are not runs: a run id may not start with one."""


def check_run_id(run_id: object) -> str:
    """`run_id` if it is a valid run id; else an `InvalidIdError` naming the rule it breaks."""
    if not isinstance(run_id, str):
        raise InvalidIdError(f"run_id must be a string, got {type(run_id).__name__}")
    for prefix in RESERVED_PREFIXES:
        if run_id.startswith(prefix):
            raise InvalidIdError(
                f"run_id {run_id!r} starts with {prefix!r}, a prefix reserved for the store"
            )
    if not RUN_ID.fullmatch(run_id) or run_id in (".", ".."):
        raise InvalidIdError(
            f"run_id {run_id!r} is not 1-200 letters, digits, '_', '-' or '.' "
            "(no path separators, not '.' or '..')"
        )
    return run_id


def check_conversation_id(conversation_id: object) -> str:
    """`conversation_id` if it is valid; else an `InvalidIdError` naming the rule."""
    if not isinstance(conversation_id, str) or not CONVERSATION_ID.fullmatch(conversation_id):
        raise InvalidIdError(
            f"conversation_id {conversation_id!r} is not 1-100 letters, digits, '_' or '-'"
        )
    return conversation_id
