"""The chain's lines are a contract: sealing writes exactly the bytes it always wrote.

`Chain.seal` was cut for speed (issue 27: one encoder made once instead of one per
line, the line's digest taken without a method call per line). Files written before
must verify and files written now must be the same bytes, so a hypothesis property
seals any events, keyed or not, with chain members already on them or not, ending
with `run.ended` or not, and compares every line with the reference reading of the
format below (the code as it was), then verifies the file.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from pathlib import PurePosixPath
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from statemachine_agent.audit.chain import Chain, verify_lines
from statemachine_agent.unicode import repair_text


def _reference_lines(events: list[dict[str, Any]], key: bytes | None) -> list[str]:
    """The format as docs/audit.md states it, written the way the code first wrote it."""

    def digest(data: bytes) -> str:
        if key is None:
            return hashlib.sha256(data).hexdigest()
        return hmac.new(key, data, hashlib.sha256).hexdigest()

    whole = hashlib.sha256() if key is None else hmac.new(key, digestmod=hashlib.sha256)
    head: str | None = None
    lines = []
    for event in events:
        body = {k: v for k, v in event.items() if k not in ("prev", "digest")}
        body["prev"] = head
        line = repair_text(json.dumps(body, ensure_ascii=False, default=str))
        if body.get("event") == "run.ended":
            copy = whole.copy()
            copy.update(line.encode("utf-8"))
            line = f'{line[:-1]}, "digest": "{copy.hexdigest()}"' + "}"
        head = digest(line.encode("utf-8"))
        whole.update(line.encode("utf-8") + b"\n")
        lines.append(line)
    return lines


scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False),
    st.text(max_size=8),  # lone surrogates included: the line repairs them
    st.builds(PurePosixPath, st.text("ab/", max_size=4)),  # not JSON: written by `default=str`
)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=8,
)
events = st.fixed_dictionaries(
    {"event": st.sampled_from(["transition.fired", "tool.finished", "run.ended"])},
    optional={"prev": st.text(max_size=4), "digest": st.text(max_size=4)},
).flatmap(
    lambda head: st.dictionaries(st.text(max_size=6), values, max_size=4).map(
        lambda rest: {**head, **{k: v for k, v in rest.items() if k not in head}}
    )
)


class TestSealedLines:
    @settings(max_examples=120, deadline=None)
    @given(events=st.lists(events, min_size=1, max_size=6), key=st.sampled_from([None, b"k3y"]))
    def test_the_same_bytes_as_the_reference_and_the_file_verifies(
        self, events: list[dict[str, Any]], key: bytes | None
    ) -> None:
        """Any events, keyed or not: each sealed line is the reference's, and they verify."""
        chain = Chain(key)
        lines = [chain.seal(event).line for event in events]
        assert lines == _reference_lines(events, key)
        verdict = verify_lines([line.encode("utf-8") for line in lines], key)
        expected = "intact" if events[-1]["event"] == "run.ended" else "unsealed"
        assert verdict.status == expected, verdict.message
