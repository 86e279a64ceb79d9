"""Keep secrets out of every event, whatever sink or logger receives it.

A redactor is a structlog processor, so a service can put the same one in its
own structlog pipeline; the engine applies it before any sink sees an event.
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
        "secret",
        "client_secret",
        "access_token",
        "refresh_token",
        "auth_token",
        "cookie",
        "set-cookie",
    }
)
"""Keys whose values are never written, compared case-insensitively."""

SECRET_PATTERN = re.compile(r"sk-ant-[A-Za-z0-9_\-]{6,}|sk-[A-Za-z0-9]{20,}")
"""Shapes of API keys, caught even where no key name announces them."""


class Redactor:
    """A structlog processor that masks secret keys, known secret values and key shapes."""

    def __init__(self, secrets: Iterable[str] = (), keys: Iterable[str] = ()) -> None:
        self._keys = DEFAULT_SECRET_KEYS | {k.lower() for k in keys}
        self._secrets = tuple(sorted({s for s in secrets if s and len(s) >= 4}, key=len)[::-1])

    def __repr__(self) -> str:
        return f"<Redactor {len(self._keys)} keys, {len(self._secrets)} values>"

    def __call__(self, logger: Any, method: str, event_dict: Any) -> Any:
        return self.redact(event_dict)

    def redact(self, value: Any) -> Any:
        if isinstance(value, str):
            return self._redact_text(value)
        if isinstance(value, Mapping):
            return {
                key: REDACTED if str(key).lower() in self._keys else self.redact(item)
                for key, item in value.items()
            }
        if isinstance(value, list | tuple):
            return [self.redact(item) for item in value]
        return value

    def _redact_text(self, text: str) -> str:
        for secret in self._secrets:
            if secret in text:
                text = text.replace(secret, REDACTED)
        if "sk-" in text:
            text = SECRET_PATTERN.sub(REDACTED, text)
        return text
