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

The chain is over the lines exactly as written. An encrypted file (a `cipher`,
`persistence/crypto.py`) holds one envelope a line, `{"prev": ..., "enc": "enc1:..."}`
(and `digest` on a sealed `run.ended`), the event sealed inside `enc` with AES-GCM: the
chain then links the envelopes, so `verify` checks it without the encryption key, while
AES-GCM authenticates each line's content for whoever opens it. Lines are compared as
bytes, exactly as written, so nothing is ever re-serialised to be checked. Files are
read as a stream: continuing or verifying a file of any size takes bounded memory.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from statemachine_agent.unicode import repair_text

if TYPE_CHECKING:
    from statemachine_agent.persistence.crypto import Cipher

PREV = "prev"
DIGEST = "digest"
ENCRYPTED = "enc"
"""The member of an encrypted line's envelope that holds the sealed event."""
AUDIT_CONTEXT = b"statemachine-agent audit line"
"""Associated data of an encrypted audit line (a checkpoint payload cannot pass for one)."""
SEALED_EVENT = "run.ended"
"""The event whose line carries the digest of the whole file so far."""

AuditKey = str | bytes
Status = Literal["intact", "broken", "unsealed"]

VERIFY_EXIT_CODES: Mapping[Status, int] = {"intact": 0, "broken": 1, "unsealed": 3}
"""Exit status of `statemachine-agent verify` per outcome (2 is a usage error)."""

_DIGEST_SUFFIX = f', "{DIGEST}": "'
_LINE_ENCODER = json.JSONEncoder(ensure_ascii=False, default=str)
"""The encoder of every line, made once: `json.dumps` with options other than its
defaults builds a new encoder per call (the same bytes; it holds no state between calls)."""


def encode(event: Mapping[str, Any]) -> str:
    """One event as the one JSON line an audit file holds (the bytes that are hashed).

    Text that is not valid Unicode (a lone surrogate) is repaired first, as
    everywhere text enters a run, so the line can always be written as UTF-8.
    """
    return repair_text(_LINE_ENCODER.encode(event))


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

    def __init__(self, key: AuditKey | None = None, cipher: Cipher | None = None) -> None:
        """`cipher` encrypts every line this chain seals (an envelope around the event)."""
        self._key = _key_bytes(key)
        self.cipher = cipher
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
        if self._key is None:  # `digest`, inlined: this runs for every event of a run
            self.head = hashlib.sha256(line).hexdigest()
        else:
            self.head = hmac.new(self._key, line, hashlib.sha256).hexdigest()
        self._whole.update(line)
        self._whole.update(b"\n")

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
        body = dict(event)
        if PREV in body or DIGEST in body:
            body.pop(PREV, None)
            body.pop(DIGEST, None)
        body[PREV] = self.head
        line = encode(body)
        if self.cipher is not None:
            line = encode({PREV: self.head, ENCRYPTED: self.cipher.seal(line, AUDIT_CONTEXT)})
        if body.get("event") == SEALED_EVENT:
            body[DIGEST] = self.whole_digest(line.encode("utf-8"))
            line = f"{line[:-1]}{_DIGEST_SUFFIX}{body[DIGEST]}" + '"}'
        self.advance(line.encode("utf-8"))
        return Sealed(body, line)

    @classmethod
    def of_lines(
        cls, lines: Iterable[bytes], key: AuditKey | None = None, cipher: Cipher | None = None
    ) -> Chain:
        """The chain state after `lines` (to continue a file that already has some)."""
        chain = cls(key, cipher)
        for line in lines:
            chain.advance(line)
        return chain


def file_lines(data: bytes) -> list[bytes]:
    """A file's lines as written: split at `\\n` only (JSON escapes every other break)."""
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    return lines


def iter_file_lines(path: Path) -> Iterator[bytes]:
    """`file_lines` of the file at `path`, read as a stream (one line in memory at a time)."""
    with path.open("rb") as handle:
        for raw in handle:
            yield raw[:-1] if raw.endswith(b"\n") else raw


def continue_file(path: Path, key: AuditKey | None = None, cipher: Cipher | None = None) -> Chain:
    """The chain of an existing file, so lines appended (a resumed run) extend it.

    Only the digest of the last line and the running digest of all bytes are kept,
    so this reads any file in bounded memory; what the lines hold (plain events or
    encrypted envelopes) does not matter, and `cipher` is only the one the new
    lines are sealed with.
    """
    try:
        lines = iter_file_lines(path)
        return Chain.of_lines(lines, key, cipher)
    except FileNotFoundError:
        return Chain(key, cipher)


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
    """The line's event, or its envelope when encrypted; None for anything else."""
    try:
        value = json.loads(line)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None
    if not isinstance(value, dict):
        return None
    return value if "event" in value or isinstance(value.get(ENCRYPTED), str) else None


@dataclass(frozen=True)
class _Line:
    """What the check needs of one line: its `prev`, and whether it claims to seal the file."""

    prev: Any
    sealing: bool
    event: dict[str, Any] | None
    problem: str | None = None
    """Why an encrypted line's content cannot be trusted (it does not authenticate)."""


def _line_of(raw: bytes, cipher: Cipher | None) -> _Line:
    """Read one line. Without a cipher an envelope is taken as it stands (a `digest`
    member marks the seal); with one, its content is opened and must agree with it.
    A key that is not the file's raises `KeyMismatchError`."""
    event = _parse(raw)
    if event is None:
        return _Line("(unreadable)", False, None)
    prev = event.get(PREV, "(none)")
    if not isinstance(event.get(ENCRYPTED), str) or "event" in event:
        return _Line(prev, event.get("event") == SEALED_EVENT, event)
    if cipher is None:
        return _Line(prev, DIGEST in event, event)
    from statemachine_agent.persistence.crypto import KeyMismatchError, PayloadAlteredError

    try:
        inner = json.loads(cipher.open(event[ENCRYPTED], AUDIT_CONTEXT))
    except PayloadAlteredError:
        return _Line(prev, DIGEST in event, event, "its encrypted content does not authenticate")
    except KeyMismatchError:
        raise
    except (ValueError, RecursionError):
        return _Line(prev, DIGEST in event, event, "its encrypted content is not an event")
    if not isinstance(inner, dict) or inner.get(PREV, "(none)") != prev:
        return _Line(prev, DIGEST in event, event, "its envelope and its content disagree")
    return _Line(prev, inner.get("event") == SEALED_EVENT, event)


def verify_lines(
    lines: Iterable[bytes], key: AuditKey | None = None, cipher: Cipher | None = None
) -> Verification:
    """Check a file's lines; the first break found is named by line number (from 1)."""
    listed = list(lines)
    return _verify(lambda: iter(listed), key, cipher)


def verify_file(
    path: Path, key: AuditKey | None = None, cipher: Cipher | None = None
) -> Verification:
    """Check the chain of the audit file at `path`, read as a stream (raises OSError when
    unreadable, and `KeyMismatchError` when `cipher` holds no key the file was written with).

    The file is read once, and a second time from the start only to name a break.
    """
    path.stat()  # an unreadable file raises here, before any line is judged
    return _verify(lambda: iter_file_lines(path), key, cipher)


def _verify(
    open_lines: Callable[[], Iterator[bytes]], key: AuditKey | None, cipher: Cipher | None
) -> Verification:
    chain = Chain(key)
    keyed = chain.keyed
    digests: list[str | None] = [None, None]
    """The digests of the two lines before the current one (oldest first)."""
    count = 0
    sealed = False

    def broken(number: int, problem: Problem, message: str, lines: int) -> Verification:
        if not keyed and number <= 2:
            message += " (a file written with audit_key= verifies only with --key)"
        return Verification("broken", lines, keyed, number, problem, message)

    for number, raw in enumerate(open_lines(), start=1):
        count = number
        line = _line_of(raw, cipher)
        if line.event is None or line.prev != digests[1]:
            return _diagnose(number, line, digests, open_lines, chain, broken)
        if line.problem is not None:
            message = f"line {number} was edited: {line.problem}"
            return broken(number, "edited", message, sum(1 for _ in open_lines()))
        if line.sealing:
            why = _check_digest(raw, chain)
            if why is not None:
                message = f"line {number} (run.ended) was edited: {why}"
                return broken(number, "edited", message, sum(1 for _ in open_lines()))
        chain.advance(raw)
        digests = [digests[1], chain.head]
        sealed = line.sealing
    if not count:
        return Verification("unsealed", 0, keyed, None, "unsealed", "the file is empty")
    if not sealed:
        return Verification(
            "unsealed",
            count,
            keyed,
            count,
            "unsealed",
            f"the chain holds to line {count}, but the file does not end with a sealed "
            "run.ended: lines were cut from its end, or the run has not finished",
        )
    return Verification("intact", count, keyed)


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
    line: _Line,
    digests: list[str | None],
    open_lines: Callable[[], Iterator[bytes]],
    chain: Chain,
    broken: Callable[[int, Problem, str, int], Verification],
) -> Verification:
    """Name what happened where the chain first breaks, at line `number`.

    The line's `prev` says which line it followed when written: a later line
    means lines were swapped; the line before the one before means the one
    between was inserted; the next line following the one before means this one
    was inserted; a digest found nowhere means the line before was edited, or a
    line after it deleted (the chain cannot tell these apart).

    What it needs of the lines after `number` (the next line's `prev`, whether a
    later line has the digest this one follows, how many lines there are) comes
    from a second pass over the file, so nothing but two digests is ever kept.
    """
    expected, before = digests[1], digests[0]
    prev = line.prev
    next_prev: Any = "(unreadable)"
    later: int | None = None
    count = 0
    for position, raw in enumerate(open_lines(), start=1):
        count = position
        if position == number + 1:
            next_prev = _line_of(raw, None).prev
        found = position > number and later is None and isinstance(prev, str)
        if found and chain.digest(raw) == prev:
            later = position

    def result(at: int, problem: Problem, message: str) -> Verification:
        return broken(at, problem, message, count)

    if line.event is None:
        if next_prev == expected:
            return result(number, "inserted", f"line {number} was inserted (not an audit event)")
        return result(number, "edited", f"line {number} was edited: it is not a JSON audit event")
    if later is not None:
        return result(
            number,
            "reordered",
            f"line {number} is out of order: it was written after what is now line {later}",
        )
    if number < count and next_prev == expected:
        return result(number, "inserted", f"line {number} was inserted: the next line skips it")
    if number >= 2 and prev == before:
        return result(
            number - 1, "inserted", f"line {number - 1} was inserted: line {number} skips it"
        )
    if number == 1 and PREV not in line.event:
        return result(1, "edited", "line 1 carries no prev: the file has no chain, or was edited")
    if number == 1:
        return result(1, "deleted", "a line before line 1 was deleted (line 1 follows another)")
    return result(
        number - 1,
        "edited_or_deleted",
        f"line {number - 1} was edited, or a line after it deleted "
        f"(line {number} does not follow it)",
    )
