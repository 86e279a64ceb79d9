"""Files and folders the package creates are its user's alone: files 0600, folders 0700.

A checkpoint store holds every run's messages unredacted (a resume needs them) and an
audit file holds the run's whole trail, so a process umask of 022 (the usual one)
would leave both readable by every account on the machine. The mode is therefore
given at creation, to `os.open` and `os.mkdir`, never left to the umask, and never
applied afterwards with `chmod` (a window in which the file is open to others). What
already exists belongs to the user and is left as it is: a folder they made with other
modes is theirs to decide.

`unsafe_reason` says why an existing file should not be trusted with a run: another
account owns it, or it is writable by group or others, either of which lets someone
else rewrite what this process will read back and act on.

Stdlib only, and imports nothing of the package, so the audit, the stores and the CLI
all create their files through it.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

__all__ = ["DIR_MODE", "FILE_MODE", "make_private_dirs", "open_private", "unsafe_reason"]

FILE_MODE = 0o600
"""Files the package creates: read and write for their owner only."""

DIR_MODE = 0o700
"""Folders the package creates: their owner only."""


def make_private_dirs(folder: Path) -> None:
    """Create `folder` and any missing parents, each 0700; existing ones are left alone.

    `Path.mkdir(parents=True, mode=...)` and `os.makedirs` give the mode to the last
    folder only (the parents get the umask's), hence one `os.mkdir` per missing level.
    A folder made meanwhile by another process is fine; a file in the way is the
    `OSError` that `mkdir` raises (`FileExistsError`, `NotADirectoryError`).
    """
    missing: list[Path] = []
    current = folder
    while not current.exists() and current.parent != current:
        missing.append(current)
        current = current.parent
    for level in reversed(missing):
        try:
            os.mkdir(level, DIR_MODE)
        except FileExistsError:
            if not level.is_dir():
                raise
    if not folder.is_dir():
        os.mkdir(folder, DIR_MODE)  # raises the error that names what is in the way


def open_private(path: Path, flags: int) -> int:
    """`os.open(path, flags)`, creating the file 0600 if it is missing (an existing file
    keeps its mode); the caller owns the returned descriptor."""
    return os.open(path, flags | os.O_CREAT | os.O_CLOEXEC, FILE_MODE)


def unsafe_reason(path: Path, status: os.stat_result) -> tuple[str, str] | None:
    """Why the file at `path` with this status should not be trusted, and the command
    that fixes it; None when it is safe. Unsafe: it belongs to another account, or group
    or others may write it. Only on POSIX (other systems have no such modes)."""
    if os.name != "posix":
        return None
    me = os.geteuid()
    mode = f"mode {stat.S_IMODE(status.st_mode):04o} ({stat.filemode(status.st_mode)})"
    if status.st_uid != me:
        owner = f"owned by {_account(status.st_uid)}, not by this process's user"
        return f"{owner} ({_account(me)}), {mode}", f"chown {me} {path} && chmod 600 {path}"
    writers = [
        who
        for who, bit in (("group", stat.S_IWGRP), ("others", stat.S_IWOTH))
        if status.st_mode & bit
    ]
    if writers:
        return f"writable by {' and '.join(writers)}, {mode}", f"chmod 600 {path}"
    return None


def _account(uid: int) -> str:
    """`uid 65534 (nobody)`, or just the uid when the system has no name for it."""
    import pwd

    try:
        return f"uid {uid} ({pwd.getpwuid(uid).pw_name})"
    except KeyError:
        return f"uid {uid}"
