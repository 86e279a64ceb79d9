"""Encryption at rest: AES-GCM over each stored payload (the `encryption` extra).

A payload is sealed as `enc1:<key id>:<base64 of nonce + ciphertext>`. The key
id (a short hash of the key) says which key wrote it, so reads can accept a list
of keys while writes use the first: rotation is "put the new key first, keep
the old ones until every payload they wrote is gone". The associated data binds
a payload to its place (run and checkpoint number), so a row moved elsewhere
fails to open just as an altered one does.
"""

from __future__ import annotations

import base64
import hashlib
import os
from collections.abc import Sequence
from typing import Any

from statemachine_agent.errors import Error

EncryptionKey = str | bytes
"""A key: 16, 24 or 32 raw bytes, or their URL-safe base64 text (what `generate_key` makes)."""

PREFIX = "enc1:"


class KeyMismatchError(Error, ValueError):
    """A payload cannot be opened with the keys given (or none was given)."""


class PayloadAlteredError(KeyMismatchError):
    """A payload written with one of the keys given fails to authenticate: it was altered
    (or moved to another place: the associated data differs)."""


def generate_key() -> str:
    """A new random 256-bit key, as URL-safe base64 text (keep it out of the store).

    Never one starting with "-": a command line would read it as an option
    (`--encryption-key -Qx...`). Drawing again costs a 64th of the keys, under 0.03 bits.
    """
    while True:
        key = base64.urlsafe_b64encode(os.urandom(32)).decode("ascii")
        if not key.startswith("-"):
            return key


def _raw(key: EncryptionKey) -> bytes:
    raw = key if isinstance(key, bytes) else _b64(key)
    if len(raw) not in (16, 24, 32):
        raise ValueError(
            f"an encryption key is 16, 24 or 32 bytes (or their base64), not {len(raw)} bytes; "
            "make one with statemachine_agent.generate_key()"
        )
    return raw


def _b64(text: str) -> bytes:
    try:
        return base64.urlsafe_b64decode(text.encode("ascii") + b"=" * (-len(text) % 4))
    except (ValueError, UnicodeEncodeError):
        raise ValueError("an encryption key given as text must be URL-safe base64") from None


def key_id(raw: bytes) -> str:
    return hashlib.sha256(b"statemachine-agent key id\0" + raw).hexdigest()[:8]


class Cipher:
    """Seals and opens payloads with a list of keys: the first writes, any reads."""

    def __init__(self, keys: EncryptionKey | Sequence[EncryptionKey]) -> None:
        try:
            from cryptography.hazmat.primitives.ciphers.aead import AESGCM
        except ImportError as exc:  # pragma: no cover - depends on the extra
            raise ImportError(
                "encryption needs cryptography: pip install 'statemachine-agent[encryption]'"
            ) from exc
        listed = [keys] if isinstance(keys, str | bytes) else list(keys)
        if not listed:
            raise ValueError("encryption_key: give at least one key")
        self._ciphers: dict[str, Any] = {}
        for key in listed:
            raw = _raw(key)
            self._ciphers.setdefault(key_id(raw), AESGCM(raw))
        self.write_id = key_id(_raw(listed[0]))

    def __repr__(self) -> str:  # never the keys themselves
        return f"<Cipher keys={list(self._ciphers)}>"

    def seal(self, text: str, context: bytes) -> str:
        nonce = os.urandom(12)
        sealed = self._ciphers[self.write_id].encrypt(nonce, text.encode("utf-8"), context)
        return f"{PREFIX}{self.write_id}:{base64.b64encode(nonce + sealed).decode('ascii')}"

    def open(self, stored: str, context: bytes) -> str:
        return open_payload(self, stored, context)


def is_sealed(stored: str) -> bool:
    return stored.startswith(PREFIX)


def open_payload(cipher: Cipher | None, stored: str, context: bytes) -> str:
    """The plain text of a stored payload (plain payloads pass through as they are)."""
    if not is_sealed(stored):
        return stored
    if cipher is None:
        raise KeyMismatchError("the payload is encrypted and no encryption key was given")
    from cryptography.exceptions import InvalidTag

    kid, _, data = stored[len(PREFIX) :].partition(":")
    aead = cipher._ciphers.get(kid)
    if aead is None:
        raise KeyMismatchError(
            f"the encryption key does not match (the payload was written with key id {kid}; "
            f"given: {', '.join(cipher._ciphers)})"
        )
    try:
        blob = base64.b64decode(data.encode("ascii"), validate=True)
        return str(aead.decrypt(blob[:12], blob[12:], context).decode("utf-8"))
    except (InvalidTag, ValueError, UnicodeError):
        raise PayloadAlteredError(
            "the encryption key does not match the payload, or the payload was altered"
        ) from None


def cipher_for(keys: EncryptionKey | Sequence[EncryptionKey] | None) -> Cipher | None:
    return None if keys is None else Cipher(keys)
