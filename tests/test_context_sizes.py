"""The prompt's size is measured incrementally, and always says what a full measure says.

`SizeCache` measures only what is new since its last estimate (the last message, which
phases extend in place, and the ones after it), a history the run starts with in one
pass, and keeps the total; compaction tells it where it rewrote. Whatever happens to the
history between estimates, the estimate must equal measuring every message afresh.
"""

from __future__ import annotations

import json
from typing import Any
from unittest import mock

from hypothesis import given, settings
from hypothesis import strategies as st

from statemachine_agent.context import compaction
from statemachine_agent.context.compaction import CHARS_PER_TOKEN, SizeCache, compact_tool_results

TEXTS = st.text(alphabet='ab é"\\\n✓', max_size=12)


def message(text: str, index: int) -> dict[str, Any]:
    if index % 2:
        return {"role": "assistant", "content": [{"type": "text", "text": text}]}
    result = {"type": "tool_result", "tool_use_id": f"t{index}", "content": text}
    return {"role": "user", "content": [result]}


def full_measure(messages: list[dict[str, Any]]) -> int:
    chars = sum(len(json.dumps(m, ensure_ascii=False, default=str)) for m in messages)
    return chars // CHARS_PER_TOKEN


OPS = st.lists(
    st.tuples(st.sampled_from(["append", "extend_last", "rewrite", "compact", "shrink"]), TEXTS),
    max_size=12,
)


class TestSizeCache:
    @settings(max_examples=150, deadline=None)
    @given(st.lists(TEXTS, max_size=8), OPS, st.integers(0, 10))
    def test_the_estimate_is_a_full_measure_after_any_changes(
        self, start: list[str], ops: list[tuple[str, str]], at: int
    ) -> None:
        """Appends, the last message extended in place, a message rewritten (compaction
        says from where), tool results compacted, messages dropped: after each, the
        estimate is what measuring every message gives."""
        messages = [message(text, i) for i, text in enumerate(start)]
        sizes = SizeCache()
        assert sizes.estimate(messages) == full_measure(messages)
        for op, text in ops:
            if op == "append":
                messages.append(message(text, len(messages)))
            elif op == "extend_last" and messages:
                messages[-1]["content"].append({"type": "text", "text": text})
            elif op == "rewrite" and messages:
                index = at % len(messages)
                messages[index]["content"] = [{"type": "text", "text": text * 3}]
                sizes.forget_from(index)
            elif op == "compact":
                _, first = compact_tool_results(messages, keep_last=1)
                if first is not None:
                    sizes.forget_from(first)
            elif op == "shrink":
                del messages[at % (len(messages) + 1) :]
                sizes.forget_from(len(messages))
            assert sizes.estimate(messages) == full_measure(messages)

    def test_a_long_starting_history_is_measured_in_one_pass(self) -> None:
        """The history a run starts with is encoded once as a list, not message by message."""
        messages = [message(f"item {i}", i) for i in range(400)]
        sizes = SizeCache()
        with mock.patch.object(compaction, "_ENCODE", wraps=compaction._ENCODE) as encode:
            estimate = sizes.estimate(messages)
        assert estimate == full_measure(messages)
        assert encode.call_count == 2  # the first 399 together, then the last (it may grow)
