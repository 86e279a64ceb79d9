"""How a Messages API body becomes a call of the installed `anthropic` SDK.

The SDK's `messages.create` takes a fixed set of keywords, and that set changes
between releases (2.x dropped `temperature`); the beta surface
(`client.beta.messages.create`) takes the beta features (`context_management`,
`mcp_servers`, `betas`, ...). Both sets are read from the installed SDK's own
signatures, so this follows the SDK as it changes: a body with a beta-only
parameter goes to the beta surface, with the beta headers its features need; a
parameter neither takes goes in `extra_body`, sent as is.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Mapping
from typing import Any

from anthropic.resources.beta.messages import AsyncMessages as AsyncBetaMessages
from anthropic.resources.messages import AsyncMessages

__all__ = [
    "BETA_ONLY_PARAMS",
    "BETA_PARAMS",
    "COMPACTION_BETA",
    "CONTEXT_MANAGEMENT_BETA",
    "MCP_CLIENT_BETA",
    "PLAIN_PARAMS",
    "beta_family",
    "missing_betas",
    "required_betas",
    "sdk_arguments",
]

CONTEXT_MANAGEMENT_BETA = "context-management-2025-06-27"
"""Server-side context editing (`context_management` with clearing edits)."""
COMPACTION_BETA = "compact-2026-01-12"
"""Server-side compaction (a `compact_...` edit in `context_management`)."""
MCP_CLIENT_BETA = "mcp-client-2025-04-04"
"""The MCP connector (`mcp_servers`)."""


def _keywords(method: Any) -> frozenset[str]:
    return frozenset(inspect.signature(method).parameters) - {"self"}


PLAIN_PARAMS = _keywords(AsyncMessages.create)
BETA_PARAMS = _keywords(AsyncBetaMessages.create)
BETA_ONLY_PARAMS = BETA_PARAMS - PLAIN_PARAMS
"""Parameters only the beta surface takes: their presence picks it."""

_DATE = re.compile(r"-\d{4}-\d{2}-\d{2}$")


def beta_family(name: str) -> str:
    """A beta's name without its date (`context-management`): a newer version counts."""
    return _DATE.sub("", name)


def required_betas(body: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(parameter, `anthropic-beta` value) for each beta feature in `body` the API gates."""
    needed: list[tuple[str, str]] = []
    management = body.get("context_management")
    if isinstance(management, Mapping):
        edits = management.get("edits") or []
        kinds = [str(e.get("type", "")) for e in edits if isinstance(e, Mapping)]
        if any(kind.startswith("compact_") for kind in kinds):
            needed.append(("context_management", COMPACTION_BETA))
        if not kinds or any(not kind.startswith("compact_") for kind in kinds):
            needed.append(("context_management", CONTEXT_MANAGEMENT_BETA))
    if body.get("mcp_servers"):
        needed.append(("mcp_servers", MCP_CLIENT_BETA))
    return needed


def sdk_arguments(body: Mapping[str, Any]) -> tuple[bool, dict[str, Any]]:
    """Whether to call the beta surface, and the keyword arguments for `create`."""
    if PLAIN_PARAMS.issuperset(body):  # the usual body: every key a plain keyword
        return False, dict(body)
    beta = any(key in BETA_ONLY_PARAMS for key in body)
    accepted = BETA_PARAMS if beta else PLAIN_PARAMS
    kwargs = {k: v for k, v in body.items() if k in accepted}
    extra = {k: v for k, v in body.items() if k not in accepted}
    if beta:
        betas = [str(b) for b in kwargs.get("betas") or ()]
        for _, name in required_betas(body):
            if all(beta_family(given) != beta_family(name) for given in betas):
                betas.append(name)
        if betas:
            kwargs["betas"] = betas
    if extra:
        kwargs["extra_body"] = {**extra, **dict(kwargs.get("extra_body") or {})}
    return beta, kwargs


def missing_betas(body: Mapping[str, Any], header: str) -> list[tuple[str, str]]:
    """The gated features of `body` whose beta the `anthropic-beta` header does not name."""
    sent = [part.strip() for part in header.split(",") if part.strip()]
    return [
        (param, name)
        for param, name in required_betas(body)
        if all(beta_family(given) != beta_family(name) for given in sent)
    ]
