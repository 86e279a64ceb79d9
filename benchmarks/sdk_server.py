"""The Messages API server of the real-SDK benchmark, run in a process of its own.

It is the test suite's `FakeAnthropicServer` (keep-alive HTTP/1.1 on 127.0.0.1),
answering every request by its length instead of from a queue, so runs can be
repeated without scripting them: the first user message says how many tool
calls the run makes (`"go 50"`); request k (k = len(messages) // 2) asks for
`lookup(k)` while k < 50, then answers with text. The validator is off: the
test suite checks the engine's requests; here the server's CPU should stay low,
since it shares the machine with the client being measured.

Run as `python -m benchmarks.sdk_server`: prints its base URL, serves until
stdin closes.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

from statemachine_agent.testing import FakeAnthropicServer, FakeError, replies


def calls_asked(body: dict[str, Any]) -> int:
    first = body["messages"][0]["content"]
    text = first if isinstance(first, str) else first[0]["text"]
    return int(text.split()[-1])


class LengthServer(FakeAnthropicServer):
    """Answers each request by the length of its history (see the module docstring)."""

    def __init__(self) -> None:
        super().__init__(validate=False)

    def _record(self, body: dict[str, Any], headers: dict[str, str]) -> None:
        """Keep nothing: a benchmark sends hundreds of thousands of requests."""

    def _answer(
        self, body: dict[str, Any], headers: Mapping[str, str] | None = None
    ) -> dict[str, Any] | FakeError:
        k = len(body["messages"]) // 2
        if k < calls_asked(body):
            return replies.tool_use("lookup", {"n": k})
        return replies.text("done")


def main() -> None:
    server = LengthServer()
    print(server.base_url, flush=True)
    sys.stdin.read()
    server.close()


if __name__ == "__main__":
    main()
