"""A hash chain over an audit file's lines, so an edit made after the run shows.

Every line carries `prev`, the SHA-256 digest of the line before it (`null` on a
file's first line), and each `run.ended` line carries `digest`, the digest of the
whole file up to and including itself (less its own `digest` member). Changing,
deleting, inserting or reordering a line therefore breaks the chain at that
place, and `verify` names it. With a key (`audit_key=`), every digest is an
HMAC-SHA256 instead, so only a holder of the key can write a chain that verifies.

What it does not do: stop anyone. A writer who holds the key (or, for an unkeyed
file, anyone) can rewrite the file and every digest after the edit; a file cut
short after a crash looks like one whose last lines were deleted. docs/audit.md
says what the chain proves.

This module only seals and checks lines; which sink writes them (a file, a
batching writer, an encrypted one) is the sinks' business. Lines are compared as
bytes, exactly as written, so nothing is ever re-serialised to be checked.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from statemachine_agent.unicode import repair_text

PREV = "prev"
DIGEST = "digest"
SEALED_EVENT = "run.ended"
"""The event whose line carries the digest of the whole file so far."""

AuditKey = str | bytes
Status = Literal["intact", "broken", "unsealed"]

VERIFY_EXIT_CODES: Mapping[Status, int] = {"intact": 0, "broken": 1, "unsealed": 3}
"""Exit status of `statemachine-agent verify` per outcome (2 is a usage error)."""

_DIGEST_SUFFIX = f', "{DIGEST}": "'


def encode(event: Mapping[str, Any]) -> str:
    """One event as the one JSON line an audit file holds (the bytes that are hashed).

    Text that is not valid Unicode (a lone surrogate) is repaired first, as
    everywhere text enters a run, so the line can always be written as UTF-8.
    """
    return repair_text(json.dumps(event, ensure_ascii=False, default=str))


def _key_bytes(key: AuditKey | None) -> bytes | None:
    if key is None:
        return None
    raw = key.encode("utf-8") if isinstance(key, str) else bytes(key)
    if not raw:
        raise ValueError("audit_key must not be empty")
    return raw


def _hasher(key: bytes | None) -> Any:
    return hashlib.sha256() if key is None else hmac.new(key, digestmod=hashlib.sha256)


@dataclass(frozen=True)
class Sealed:
    """An event with its chain members, and the exact line that goes into the file."""

    event: dict[str, Any]
    line: str


class Chain:
    """The state of one chain: the digest of its last line and of all its bytes."""

    def __init__(self, key: AuditKey | None = None) -> None:
        self._key = _key_bytes(key)
        self.head: str | None = None
        """The digest of the last line, which the next line carries as `prev`."""
        self._whole = _hasher(self._key)

    @property
    def keyed(self) -> bool:
        return self._key is not None

    def digest(self, line: bytes) -> str:
        """The digest of one line (HMAC-SHA256 when keyed)."""
        if self._key is None:
            return hashlib.sha256(line).hexdigest()
        return hmac.new(self._key, line, hashlib.sha256).hexdigest()

    def advance(self, line: bytes) -> None:
        """Take one line (without its newline) as the chain's next."""
        self.head = self.digest(line)
        self._whole.update(line + b"\n")

    def whole_digest(self, tail: bytes) -> str:
        """The digest of every line so far followed by `tail`, without taking it in."""
        whole = self._whole.copy()
        whole.update(tail)
        return str(whole.hexdigest())

    def seal(self, event: Mapping[str, Any]) -> Sealed:
        """Add `prev` (and on `run.ended`, `digest`) to an event and take its line.

        Chain members an event already carries (one sealed by an earlier chain)
        are replaced, so a sink that re-seals always writes its own chain.
        """
        body = {k: v for k, v in event.items() if k not in (PREV, DIGEST)}
        body[PREV] = self.head
        line = encode(body)
        if body.get("event") == SEALED_EVENT:
            body[DIGEST] = self.whole_digest(line.encode("utf-8"))
            line = f"{line[:-1]}{_DIGEST_SUFFIX}{body[DIGEST]}" + '"}'
        self.advance(line.encode("utf-8"))
        return Sealed(body, line)

    @classmethod
    def of_lines(cls, lines: Iterable[bytes], key: AuditKey | None = None) -> Chain:
        """The chain state after `lines` (to continue a file that already has some)."""
        chain = cls(key)
        for line in lines:
            chain.advance(line)
        return chain


def file_lines(data: bytes) -> list[bytes]:
    """A file's lines as written: split at `\\n` only (JSON escapes every other break)."""
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    return lines


def continue_file(path: Path, key: AuditKey | None = None) -> Chain:
    """The chain of an existing file, so lines appended (a resumed run) extend it."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return Chain(key)
    return Chain.of_lines(file_lines(data), key)


# -- checking ------------------------------------------------------------------------

Problem = Literal["edited", "edited_or_deleted", "deleted", "inserted", "reordered", "unsealed"]


@dataclass(frozen=True)
class Verification:
    """Whether a file's chain holds, and if not, the first line where it does not."""

    status: Status
    lines: int
    keyed: bool
    line: int | None = None
    """The first line found edited, inserted or out of order (or after which one is missing)."""
    problem: Problem | None = None
    message: str = ""

    @property
    def ok(self) -> bool:
        return self.status == "intact"

    @property
    def exit_code(self) -> int:
        return VERIFY_EXIT_CODES[self.status]

    @property
    def summary(self) -> str:
        """One line for a person: what was checked and what was found."""
        how = "HMAC-SHA256 chain" if self.keyed else "SHA-256 chain"
        if self.ok:
            return f"intact ({self.lines} lines, {how}, sealed by run.ended)"
        return f"NOT verified ({how}): {self.message}"


def _parse(line: bytes) -> dict[str, Any] | None:
    try:
        value = json.loads(line)
    except (ValueError, UnicodeDecodeError):
        return None
    return value if isinstance(value, dict) and "event" in value else None


def verify_lines(lines: list[bytes], key: AuditKey | None = None) -> Verification:
    """Check a file's lines; the first break found is named by line number (from 1)."""
    chain = Chain(key)
    keyed = chain.keyed
    digests = [chain.digest(line) for line in lines]
    events = [_parse(line) for line in lines]
    positions: dict[str, list[int]] = {}
    for number, value in enumerate(digests, start=1):
        positions.setdefault(value, []).append(number)

    def expected(number: int) -> str | None:
        """The `prev` line `number` must carry: the digest of the line before it."""
        return digests[number - 2] if number >= 2 else None

    def prev_of(number: int) -> Any:
        event = events[number - 1] if 1 <= number <= len(events) else None
        return event.get(PREV, "(none)") if event is not None else "(unreadable)"

    def broken(number: int, problem: Problem, message: str) -> Verification:
        if not keyed and number <= 2:
            message += " (a file written with audit_key= verifies only with --key)"
        return Verification("broken", len(lines), keyed, number, problem, message)

    for number, raw in enumerate(lines, start=1):
        event = events[number - 1]
        prev = prev_of(number)
        if event is None or prev != expected(number):
            return _diagnose(number, len(lines), event, prev, expected, prev_of, positions, broken)
        if event.get("event") == SEALED_EVENT:
            sealed = _check_digest(raw, chain)
            if sealed is not None:
                return broken(number, "edited", f"line {number} (run.ended) was edited: {sealed}")
        chain.advance(raw)
    if not lines:
        return Verification("unsealed", 0, keyed, None, "unsealed", "the file is empty")
    last = events[-1] or {}
    if last.get("event") != SEALED_EVENT:
        return Verification(
            "unsealed",
            len(lines),
            keyed,
            len(lines),
            "unsealed",
            f"the chain holds to line {len(lines)}, but the file does not end with a sealed "
            "run.ended: lines were cut from its end, or the run has not finished",
        )
    return Verification("intact", len(lines), keyed)


def _check_digest(raw: bytes, chain: Chain) -> str | None:
    """Why a `run.ended` line's digest does not match, or None when it does."""
    text = raw.decode("utf-8")
    cut = text.rfind(_DIGEST_SUFFIX)
    if cut < 0 or not text.endswith('"}'):
        return "it carries no digest"
    claimed = text[cut + len(_DIGEST_SUFFIX) : -2]
    actual = chain.whole_digest((text[:cut] + "}").encode("utf-8"))
    if not hmac.compare_digest(claimed, actual):
        return "its digest does not match the file up to it"
    return None


def _diagnose(
    number: int,
    count: int,
    event: dict[str, Any] | None,
    prev: Any,
    expected: Callable[[int], str | None],
    prev_of: Callable[[int], Any],
    positions: Mapping[str, list[int]],
    broken: Callable[[int, Problem, str], Verification],
) -> Verification:
    """Name what happened where the chain first breaks, at line `number`.

    The line's `prev` says which line it followed when written: a later line
    means lines were swapped; the line before the one before means the one
    between was inserted; the next line following the one before means this one
    was inserted; a digest found nowhere means the line before was edited, or a
    line after it deleted (the chain cannot tell these apart).
    """
    if event is None:
        if prev_of(number + 1) == expected(number):
            return broken(number, "inserted", f"line {number} was inserted (not an audit event)")
        return broken(number, "edited", f"line {number} was edited: it is not a JSON audit event")
    later = [p for p in positions.get(prev, []) if p > number] if isinstance(prev, str) else []
    if later:
        return broken(
            number,
            "reordered",
            f"line {number} is out of order: it was written after what is now line {later[0]}",
        )
    if number < count and prev_of(number + 1) == expected(number):
        return broken(number, "inserted", f"line {number} was inserted: the next line skips it")
    if number >= 2 and prev == expected(number - 1):
        return broken(
            number - 1, "inserted", f"line {number - 1} was inserted: line {number} skips it"
        )
    if number == 1 and PREV not in event:
        return broken(1, "edited", "line 1 carries no prev: the file has no chain, or was edited")
    if number == 1:
        return broken(1, "deleted", "a line before line 1 was deleted (line 1 follows another)")
    return broken(
        number - 1,
        "edited_or_deleted",
        f"line {number - 1} was edited, or a line after it deleted "
        f"(line {number} does not follow it)",
    )


def verify_file(path: Path, key: AuditKey | None = None) -> Verification:
    """Check the chain of the audit file at `path` (raises OSError when unreadable)."""
    return verify_lines(file_lines(path.read_bytes()), key)
