"""The real-SDK benchmark's server keeps speaking the test server's protocol.

`make bench` is not part of `make test`, so a change to `FakeAnthropicServer`'s
hooks could break the benchmark unnoticed; one real SDK call through it here
catches that.
"""

from __future__ import annotations

import anthropic

from benchmarks.sdk_server import LengthServer


def test_the_length_server_answers_the_real_sdk() -> None:
    server = LengthServer()
    try:
        client = anthropic.Anthropic(api_key="sk-test", base_url=server.base_url, max_retries=0)
        history = [{"role": "user", "content": "go 2"}]
        first = client.messages.create(model="claude-sonnet-5", max_tokens=64, messages=history)
        assert first.stop_reason == "tool_use"
        assert [b.type for b in first.content] == ["tool_use"]
        client.close()
    finally:
        server.close()
