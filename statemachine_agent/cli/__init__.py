"""The `statemachine-agent` command line.

`app` holds the parser and the run, demo and review commands; `sessions` the
commands over stored runs and conversations (resume, chat, replay), `store` the
store's housekeeping (runs, prune), `common` what they share (one-line usage
errors, audit folders, keys), `chat` the interactive loop and `demos` the
offline scenarios. Only `app` is imported to start: every command imports
what it needs when it runs, so `--help` stays fast.
"""

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from statemachine_agent.cli.app import main, parser

__all__ = ["main", "parser"]


def __getattr__(name: str) -> object:
    """`main` and `parser` load the app on first use, so importing one command module
    (`cli.sessions` for a worker's `replay`) does not load the whole command line."""
    if name in __all__:
        from statemachine_agent.cli import app

        return getattr(app, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
