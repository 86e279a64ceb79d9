"""The SDK request path's shortcuts give what the long way gives.

`sdk_arguments` hands a body of plain keywords straight through; `LoopClients.current`
answers without an await once the loop has its client; `ModelReply.from_api` keeps
the content it repaired nothing in.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from statemachine_agent.context.caching import cache_last_tool
from statemachine_agent.models.base import ModelReply
from statemachine_agent.models.loop_clients import LoopClients
from statemachine_agent.models.sdk_args import (
    BETA_ONLY_PARAMS,
    BETA_PARAMS,
    PLAIN_PARAMS,
    beta_family,
    required_betas,
    sdk_arguments,
)


def reference(body: Mapping[str, Any]) -> tuple[bool, dict[str, Any]]:
    """`sdk_arguments` before its shortcut for plain bodies."""
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


keys = st.sampled_from(
    sorted(PLAIN_PARAMS) + sorted(BETA_ONLY_PARAMS) + ["temperature", "top_k", "custom"]
)
values = st.one_of(st.integers(), st.text(max_size=3), st.none(), st.just({"a": 1}))


class TestSdkArguments:
    @settings(max_examples=150, deadline=None)
    @given(body=st.dictionaries(keys, values, max_size=6))
    def test_the_same_call_as_the_long_way(self, body: dict[str, Any]) -> None:
        """Same surface, same keywords (in the same order), never the caller's dict; and
        a body the long way cannot shape fails the same way."""
        try:
            expected = reference(body)
        except (TypeError, ValueError) as exc:
            failure: type[Exception] = type(exc)
            try:
                sdk_arguments(body)
            except failure:
                return
            raise AssertionError(f"the long way raised {failure.__name__}") from exc
        got = sdk_arguments(body)
        assert got == expected
        assert list(got[1]) == list(expected[1])
        assert got[1] is not body


class TestLoopClients:
    def test_current_is_the_client_get_made_for_this_loop(self) -> None:
        """None before the loop's first `get`, then that client; another loop has its own."""
        made: list[object] = []

        def make() -> object:
            made.append(object())
            return made[-1]

        async def close(client: object) -> None:
            return None

        clients: LoopClients[object] = LoopClients(make, close)

        async def use() -> tuple[object | None, object, object | None]:
            before = clients.current()
            client = await clients.get()
            return before, client, clients.current()

        for _ in range(2):
            before, client, after = asyncio.run(use())
            assert before is None
            assert after is client is made[-1]
        assert len(made) == 2
        assert len(clients) == 0


class TestFromApi:
    def test_sound_content_is_kept_and_copied_once(self) -> None:
        """Each block is copied from the body; the reply keeps those copies as they are."""
        body: dict[str, Any] = {
            "content": [{"type": "text", "text": "héllo"}, {"type": "tool_use", "id": "t",
                        "name": "n", "input": {"q": "x"}}],
            "stop_reason": "tool_use",
            "usage": {"input_tokens": 3, "output_tokens": 2},
            "stop_details": None,
        }  # fmt: skip
        reply = ModelReply.from_api(body)
        assert reply.content == tuple(body["content"])
        assert all(a is not b for a, b in zip(reply.content, body["content"], strict=True))
        assert reply.stop_details is None
        assert ModelReply.from_api({**body, "stop_details": {"type": "refusal"}}).stop_details == {
            "type": "refusal"
        }


class TestCacheLastTool:
    def test_only_the_last_definition_is_copied_and_marked(self) -> None:
        """The caller's definitions are untouched; the earlier ones are shared, the last
        is a marked copy with its keys in order."""
        tools = [{"name": "a", "input_schema": {}}, {"name": "b", "input_schema": {}}]
        before = [dict(t) for t in tools]
        marked = cache_last_tool(tools)
        assert tools == before
        assert marked[0] is tools[0]
        assert marked[1] == {**before[1], "cache_control": {"type": "ephemeral"}}
        assert list(marked[1]) == ["name", "input_schema", "cache_control"]
        assert cache_last_tool([]) == []
