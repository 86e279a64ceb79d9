"""Packed checkpoint rows: each body deflated against a fixed dictionary of the body format.

A checkpoint body is a few hundred bytes of JSON, and most of it is the same
words every time: `"state_name":"perceive"`, `"trail":[{"trigger":"observed"`,
`"state":{"$dict":{"elapsed_s":`. Deflate on its own gains little on text that
short; deflate primed with a dictionary of those words (zlib's preset
dictionary) stores each of them as a back-reference of two or three bytes. A
200-step run with one-word tool results then keeps about 1.4 times its final
transcript instead of about 6 (`tests/test_checkpoint_size.py`).

Why not compress the whole run, or against the previous row: every row stays
readable on its own (a store can verify and list without inflating its
neighbours), and a damaged row damages nothing after it.

The dictionary is part of the stored format: a packed row begins with the
number of the dictionary it was packed with, and a dictionary, once released,
never changes (a test pins each one's digest). A better one is added under the
next number; reading keeps every number it ever wrote.

Encrypted payloads are not packed: compressing text before encrypting it lets
the size of each sealed row tell an observer something about its content.
"""

from __future__ import annotations

import zlib

_FORMAT_1 = "".join(
    (
        # The first body of a run: its settings and every field at its start.
        '{"seq":0,"state_name":"perceive","messages":{"from":0,"items":[{"role":"user",'
        '"content":""}]},"state":{"$dict":{"run_id":{"$set":""},"settings":{"$set":{"budget":'
        '{"max_iterations":null,"max_cost_usd":null,"max_total_tokens":null,"max_seconds":null,'
        '"max_calls_per_tool":null,"end_after_blocked_calls":3,"salvage":true,'
        '"salvage_max_tokens":1024,"salvage_max_cost_usd":null},"stall":null,"context":'
        '{"max_tool_result_chars":50000,"compact_at_tokens":120000,"keep_tool_results":4,'
        '"count_tokens":false,"cache_tools":true,"cache_history":true,"retry_on_overflow":true,'
        '"server_edits":null,"summarize_at_tokens":null,"keep_last":4},'
        '"reflection_interval":null,"has_critic":false,"has_verifier":false,'
        '"max_rejections":2,"max_continuations":0,"output_retries":3}},"iteration":{"$set":0},'
        '"turn":{"$set":1},"usage":{"$set":{"input_tokens":0,"output_tokens":0,'
        '"cache_read_tokens":0,"cache_write_5m_tokens":0,"cache_write_1h_tokens":0}},'
        '"cost_usd":{"$set":0.0},"elapsed_s":{"$set":0.0},"last_reply":{"$set":null},'
        '"error":{"$set":null},"pending_calls":{"$set":[]},"outcomes":{"$set":[]},'
        '"calls_per_tool":{"$set":{}},"finish":{"$set":null},"cancel_requested":{"$set":false},'
        '"cancelled_at":{"$set":null},"blocked_calls":{"$set":0},"fatal_tool":{"$set":null},'
        '"invalid_answers":{"$set":0},"stall":{"$set":{"observations":{},"finding":null,'
        '"interventions":0}},"last_reflection":{"$set":0},"verification":{"$set":'
        '{"verdict":null,"rejections":0}},"continuation":{"$set":{"count":0,"partial_text":""}},'
        '"overflow_retried":{"$set":false},"summary":{"$set":{"prompt_tokens":0,"replaceable":0,'
        '"attempted_at":-1,"count":0,"failure":null}},"approval":{"$set":{"awaiting":[],'
        '"decisions":{}}},"chat_ended":{"$set":false},"audit_path":{"$set":null},'
        '"notes":{"$set":{}},"metadata":{"$set":{}},"parent":{"$set":null},'
        '"subagents":{"$set":{"runs":{},"limit_salvage":null}}}}}',
        # Guard names, the first time a trigger fires (later records refer to them).
        '{"seq":1,"source":"perceive","trigger":"prepared","guards":{"cancel_requested":false,'
        '"budget_exceeded":false,"summary_due":false}}{"trigger":"replied","guards":'
        '{"cancel_requested":false,"is_tool_use":false,"is_empty_reply":false,"is_end_turn":true,'
        '"verifier_configured":false},"via":["is_end_turn"]}{"trigger":"tools_done","guards":'
        '{"cancel_requested":false,"tool_failed_fatally":false,"answer_retries_exhausted":false,'
        '"approval_pending":false}}{"trigger":"observed","guards":{"cancel_requested":false,'
        '"finish_claims_success":false,"finish_called":false,"stall_persists":false,'
        '"stall_detected":false,"reflection_due":false}}',
        # End states and the last bodies of a run.
        '{"state_name":"completed"}{"state_name":"failed","state":{"$dict":{"error":{"$set":'
        '{"kind":"","message":""}}}}}{"state_name":"budget_exhausted"}'
        '{"state_name":"awaiting_approval"}{"state_name":"cancelled"}{"state_name":"finished"}'
        '{"state_name":"stalled"}{"state_name":"truncated"}{"state_name":"refused"}'
        '{"type":"text","text":""}"stop_reason":"end_turn","stop_reason":"tool_use",'
        '"model":"claude-","stop_details":null,"is_error":true,"error_kind":"',
        # One tool round trip, the bodies every step writes (the likeliest last).
        '{"seq":2,"state_name":"act","state":{"$dict":{"outcomes":{"$list":{"append":'
        '[{"content":"","duration_s":0.0}]}},"calls_per_tool":{"$dict":{"":1}}}}}'
        '{"seq":3,"state_name":"observe","trail":[{"trigger":"tools_done","guards":[2,0]}],'
        '"state":{"$dict":{"elapsed_s":0.0}}}'
        '{"seq":4,"state_name":"perceive","messages":{"from":2,"items":[{"role":"user",'
        '"content":[{"type":"tool_result","tool_use_id":"toolu_","content":{"$outcome":0}}]}]},'
        '"trail":[{"trigger":"observed","guards":[3,0]}],"state":{"$dict":{"elapsed_s":0.0,'
        '"pending_calls":{"$set":[]},"outcomes":{"$set":[]}}}}'
        '{"seq":5,"state_name":"reason","trail":[{"trigger":"prepared","guards":[0,0]}],'
        '"state":{"$dict":{"elapsed_s":0.0,"summary":{"$dict":{"prompt_tokens":0,'
        '"replaceable":0}}}}}'
        '{"seq":6,"state_name":"act","messages":{"from":3,"items":[{"role":"assistant",'
        '"content":[{"type":"tool_use","id":"toolu_","name":"","input":{}}]}]},"trail":'
        '[{"trigger":"replied","guards":[1,2],"via":["is_tool_use"]}],"state":{"$dict":'
        '{"iteration":1,"usage":{"$dict":{"input_tokens":0,"output_tokens":0}},"cost_usd":0.0,'
        '"elapsed_s":0.0,"last_reply":{"$dict":{"content":{"$dict":{"$message":3}},'
        '"id":"msg_","request_id":"req_"}},"pending_calls":{"$set":{"$calls":3}}}}}',
    )
).encode()
"""Dictionary 1: a run's first body, guard names, end states and one step's bodies,
values left empty. Frozen: rows packed with it must stay readable."""

DICTIONARIES: dict[int, bytes] = {1: _FORMAT_1}
"""Every dictionary a packed row may name (its first byte), by number."""

WRITES_WITH = 1
"""The dictionary new rows are packed with."""

_WINDOW = -15
"""Raw deflate, read with a 32 KiB window: no zlib header or checksum (the row's digest
covers it). Any row written with a window up to that inflates with it."""

_WRITE_WINDOW = -13
"""Rows are written with an 8 KiB window, which holds the dictionary (4 KiB) and a
typical body, and a compact match table (memory level 4): deflate's working memory
per row falls from ~300 KiB to ~80 KiB, at the same size for bodies of a few KiB
(a few percent larger for bodies of tens of KiB of incompressible text)."""
_WRITE_MEMORY = 4


class UnpackError(ValueError):
    """A packed row that does not inflate: damaged, or packed with an unknown dictionary."""


_PRIMED = zlib.compressobj(
    6, zlib.DEFLATED, _WRITE_WINDOW, _WRITE_MEMORY, zdict=DICTIONARIES[WRITES_WITH]
)
"""A compressor primed with the dictionary and never fed: each row deflates with a copy
of it, the bytes of a new primed compressor's (pinned by a property in
tests/test_packing.py), at a memory copy instead of priming the 4 KiB dictionary per row.
Never used itself, so threads sharing it only read it."""

_PREFIX = bytes((WRITES_WITH,))


def pack(text: str) -> bytes:
    """The packed form of a body's text: the dictionary's number, then the deflated text."""
    deflate = _PRIMED.copy()
    return _PREFIX + deflate.compress(text.encode("utf-8")) + deflate.flush()


def unpack(packed: bytes) -> str:
    """The text a packed row holds (`UnpackError` when it does not inflate)."""
    if not packed:
        raise UnpackError("the packed row is empty")
    dictionary = DICTIONARIES.get(packed[0])
    if dictionary is None:
        raise UnpackError(
            f"the row was packed with dictionary {packed[0]}, which this version lacks"
        )
    inflate = zlib.decompressobj(_WINDOW, zdict=dictionary)
    try:
        data = inflate.decompress(packed[1:]) + inflate.flush()
        if not inflate.eof:
            raise UnpackError("the packed row is truncated")
        return data.decode("utf-8")
    except (zlib.error, UnicodeDecodeError) as exc:
        raise UnpackError(f"the packed row does not inflate ({exc})") from None
