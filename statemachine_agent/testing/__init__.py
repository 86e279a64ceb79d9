"""Tools for testing agents offline: scripted replies, a strict request validator, a fake API.

`replies` builds response bodies, `validate_request` applies the API's request
rules locally, `FakeAnthropicServer` serves scripted replies to the real SDK, and
`assert_trail_matches` compares a run with its golden trail. The pytest plugin
(`pytest_statemachine_agent`, loaded by installing the package) turns these into
fixtures and adds transition coverage; see docs/testing.md.
"""

from __future__ import annotations

from statemachine_agent.audit.events import capture_events
from statemachine_agent.testing import replies
from statemachine_agent.testing.assertions import (
    assert_end_state,
    assert_fired,
    assert_not_fired,
    assert_path,
    fired,
    path,
)
from statemachine_agent.testing.coverage import TransitionCoverage
from statemachine_agent.testing.golden import (
    GoldenFileError,
    assert_trail_matches,
    trail_snapshot,
    updating_golden,
)
from statemachine_agent.testing.reachability import Reachability, reachable_rows
from statemachine_agent.testing.replies import (
    DEFAULT_USAGE,
    IdSequence,
    deterministic_ids,
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
    PausedStream,
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
from statemachine_agent.testing.witnesses import (
    Witness,
    defect_witnesses,
    inject_defect,
    unwitnessed,
    witnesses,
)

__all__ = [
    "DEFAULT_USAGE",
    "ERROR_TYPES",
    "MAX_CACHE_BREAKPOINTS",
    "FakeAnthropicServer",
    "FakeError",
    "GoldenFileError",
    "IdSequence",
    "InvalidRequestError",
    "PausedStream",
    "Reachability",
    "ScriptItem",
    "TransitionCoverage",
    "Witness",
    "assert_end_state",
    "assert_fired",
    "assert_not_fired",
    "assert_path",
    "assert_trail_matches",
    "assert_valid_request",
    "capture_events",
    "defect_witnesses",
    "describe_problems",
    "deterministic_ids",
    "error_body",
    "fired",
    "inject_defect",
    "known_request_params",
    "new_id",
    "path",
    "reachable_rows",
    "replies",
    "reply",
    "text",
    "text_block",
    "thinking_block",
    "tool_use",
    "tool_use_block",
    "tool_uses",
    "trail_snapshot",
    "unwitnessed",
    "updating_golden",
    "validate_request",
    "witnesses",
]
