"""Keep secrets out of every event, whatever sink or logger receives it.

A redactor is a structlog processor, so a service can put the same one in its
own structlog pipeline; the engine applies it before any sink sees an event.
A secret is masked wherever it occurs: as a value, inside a longer text, as a
property name, at any depth, in any letter case, and in the text of a value JSON
cannot hold (a set, bytes, an exception), which is turned into text first
because that text is what a sink would write.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

REDACTED = "[REDACTED]"

DEFAULT_SECRET_KEYS = frozenset(
    {
        "api_key",
        "apikey",
        "x-api-key",
        "x_api_key",
        "anthropic_api_key",
        "openai_api_key",
        "authorization",
        "proxy-authorization",
        "password",
        "passwd",
        "secret",
        "client_secret",
        "token",
        "access_token",
        "refresh_token",
        "auth_token",
        "id_token",
        "session_token",
        "cookie",
        "set-cookie",
    }
)
"""Keys whose values are never written, compared case-insensitively ('-' and '_' alike)."""

SECRET_PATTERN = re.compile(
    r"sk-(?:ant|proj|svcacct|admin)-[A-Za-z0-9_\-]{6,}"  # Anthropic; OpenAI project, service, admin
    r"|sk-[A-Za-z0-9]{20,}"  # OpenAI's older keys
    r"|gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{20,}"  # GitHub tokens
    r"|(?:AKIA|ASIA)[A-Z0-9]{16}"  # AWS access key ids
    r"|xox[abposr]-[A-Za-z0-9\-]{8,}"  # Slack tokens
    r"|AIza[A-Za-z0-9_\-]{35}"  # Google API keys
    r"|eyJ[A-Za-z0-9_\-]{6,}\.eyJ[A-Za-z0-9_\-]{6,}\.[A-Za-z0-9_\-]*",  # JWTs (bearer tokens)
    re.IGNORECASE,
)
"""Shapes of API keys and tokens, caught even where no key name announces them. One
compiled pattern, and only run on text holding one of `_SHAPE_HINTS`, so a plain text
costs a few substring searches."""

_SHAPE_HINTS = ("-", "_", "AKIA", "ASIA", "AIza", "eyJ")
"""Substrings one of which every shape above holds, as issued (AWS and Google keys and
JWTs are written in exactly these letter cases)."""

_SHAPE_HINT = re.compile("|".join(re.escape(hint) for hint in _SHAPE_HINTS))
"""Any of `_SHAPE_HINTS`, looked for in one pass."""

_MEMBER = re.compile(
    r'"((?:[^"\\]|\\.){1,64})"(\s*:\s*)("(?:[^"\\]|\\.)*"|-?[0-9][0-9.eE+\-]*|true|false)'
)
"""A JSON member with a scalar value, as a structured tool result rendered to text (the
content the model reads) holds it: `"password": "hunter2"`."""

_OPENING = re.compile(r'"((?:[^"\\]|\\.){1,64})"(\s*:\s*)(?=[\[{])')
"""A JSON member whose value is an object or an array: `"credentials": {...}`. Its value
is found by bracket matching (`_closing`), which a regular expression cannot do."""

_PLAIN = (bool, int, float, type(None))

_NAMES_KEPT = 4096
"""How many property names a redactor remembers its verdict on (events repeat a few
dozen names; tool inputs may bring any, so the memory is capped)."""


class Redactor:
    """A structlog processor that masks secret keys, known secret values and key shapes."""

    def __init__(self, secrets: Iterable[str] = (), keys: Iterable[str] = ()) -> None:
        self._keys = frozenset(_key_form(k) for k in (*DEFAULT_SECRET_KEYS, *keys))
        values = sorted({s for s in secrets if s and len(s) >= 4}, key=len, reverse=True)
        self._count = len(values)
        self._secrets = tuple(values)
        self._values = (
            re.compile("|".join(re.escape(s) for s in values), re.IGNORECASE) if values else None
        )
        self._names: dict[str, tuple[str, bool]] = {}
        """Each property name seen: what it is written as, and whether its value is masked."""

    def joined(self, other: Redactor) -> Redactor:
        """A redactor that masks what this one and `other` mask (a sub-agent's events
        written to its parent's audit trail hide both agents' secrets)."""
        joined = Redactor(secrets=(*self._secrets, *other._secrets))
        joined._keys = self._keys | other._keys
        return joined

    def __repr__(self) -> str:
        return f"<Redactor {len(self._keys)} keys, {self._count} values>"

    def __call__(self, logger: Any, method: str, event_dict: Any) -> Any:
        return self.redact(event_dict)

    def redact(self, value: Any) -> Any:
        kind = type(value)
        if kind is str:
            return self._redact_text(value)
        if kind in _PLAIN:
            return value
        if kind is dict or isinstance(value, Mapping):
            # The busiest loop of an audited run (every member of every event): the name's
            # verdict and a plain or text value are handled here, not in a call each.
            out: dict[Any, Any] = {}
            names = self._names
            for key, item in value.items():
                if type(key) is str and key in names:
                    name, secret = names[key]
                elif isinstance(key, str):
                    name, secret = self._name(key)
                else:
                    name, secret = self.redact(key), False
                if name in out:  # two names masked alike: keep both values
                    name = f"{name}#{len(out)}"
                if secret:
                    out[name] = REDACTED
                elif type(item) in _PLAIN:
                    out[name] = item
                elif type(item) is str:
                    out[name] = self._redact_text(item)
                else:
                    out[name] = self.redact(item)
            return out
        if isinstance(value, str):  # a str subclass
            return self._redact_text(value)
        if isinstance(value, _PLAIN):
            return value
        if isinstance(value, list | tuple | set | frozenset):
            return [self.redact(item) for item in value]
        if isinstance(value, bytes | bytearray | memoryview):
            return self._redact_text(bytes(value).decode("utf-8", "replace"))
        text = str(value)  # what a sink writing JSON makes of it (`default=str`)
        masked = self._redact_text(text)
        return value if masked == text else masked

    def is_secret_key(self, key: Any) -> bool:
        """Whether a property of this name holds a secret."""
        return isinstance(key, str) and _key_form(key) in self._keys

    def _name(self, key: str) -> tuple[str, bool]:
        """A property name as written, and whether its value is a secret (remembered,
        since every event repeats the same few names)."""
        known = self._names.get(key)
        if known is None:
            known = (self._redact_text(key), _key_form(key) in self._keys)
            if len(self._names) < _NAMES_KEPT:
                self._names[key] = known
        return known

    def _redact_text(self, text: str) -> str:
        # Both patterns ignore case, so no lowered copy of the text is needed; a key
        # shape always holds one of a few substrings, far cheaper to look for than it.
        if self._values is not None and self._values.search(text) is not None:
            text = self._values.sub(REDACTED, text)
        if _SHAPE_HINT.search(text) is not None:
            text = SECRET_PATTERN.sub(REDACTED, text)
        if '":' in text or '" :' in text:
            text = _MEMBER.sub(self._mask_member, text)
            if "{" in text or "[" in text:
                text = self._mask_nested_members(text)
        return text

    def _mask_nested_members(self, text: str) -> str:
        """Secret-named members whose value is an object or array, masked whole: a token
        held as `{"token": {"value": "..."}}` is a secret though its inner keys are not."""
        parts: list[str] = []
        start = 0
        for match in _OPENING.finditer(text):
            if match.start() < start or _key_form(match.group(1)) not in self._keys:
                continue
            end = _closing(text, match.end())
            if end is None:  # cut off (a truncated result): mask to the end
                end = len(text)
            parts += [text[start : match.end()], f'"{REDACTED}"']
            start = end
        if not parts:
            return text
        return "".join([*parts, text[start:]])

    def _mask_member(self, match: re.Match[str]) -> str:
        """A secret-named member of JSON text with its value masked (a tool's structured
        result is JSON text by the time an event carries it, so its keys are no longer
        keys to `redact`)."""
        if _key_form(match.group(1)) not in self._keys:
            return match.group(0)
        return f'"{match.group(1)}"{match.group(2)}"{REDACTED}"'


def _closing(text: str, at: int) -> int | None:
    """The index just past the JSON object or array opening at `at` (strings skipped,
    brackets counted), or None when the text ends first."""
    depth = 0
    in_string = False
    i = at
    while i < len(text):
        char = text[i]
        if in_string:
            if char == "\\":
                i += 1
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
        elif char in "]}":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return None


def _key_form(key: str) -> str:
    return key.lower().replace("-", "_")
