"""Tools for testing agents offline: scripted replies, a strict request validator, a fake API.

`replies` builds response bodies, `validate_request` applies the API's request
rules locally, and `FakeAnthropicServer` serves scripted replies to the real SDK.
"""

from __future__ import annotations

from statemachine_agent.testing import replies
from statemachine_agent.testing.assertions import (
    assert_end_state,
    assert_fired,
    assert_not_fired,
    assert_path,
    fired,
    path,
)
from statemachine_agent.testing.replies import (
    DEFAULT_USAGE,
    new_id,
    reply,
    text,
    text_block,
    thinking_block,
    tool_use,
    tool_use_block,
    tool_uses,
)
from statemachine_agent.testing.server import (
    ERROR_TYPES,
    FakeAnthropicServer,
    FakeError,
    ScriptItem,
)
from statemachine_agent.testing.validator import (
    MAX_CACHE_BREAKPOINTS,
    InvalidRequestError,
    assert_valid_request,
    describe_problems,
    error_body,
    known_request_params,
    validate_request,
)

__all__ = [
    "DEFAULT_USAGE",
    "ERROR_TYPES",
    "MAX_CACHE_BREAKPOINTS",
    "FakeAnthropicServer",
    "FakeError",
    "InvalidRequestError",
    "ScriptItem",
    "assert_end_state",
    "assert_fired",
    "assert_not_fired",
    "assert_path",
    "assert_valid_request",
    "describe_problems",
    "error_body",
    "fired",
    "known_request_params",
    "new_id",
    "path",
    "replies",
    "reply",
    "text",
    "text_block",
    "thinking_block",
    "tool_use",
    "tool_use_block",
    "tool_uses",
    "validate_request",
]
