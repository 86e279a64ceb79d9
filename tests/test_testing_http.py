"""The HTTP plumbing both fake servers share (`testing/_http.py`), driven over 127.0.0.1.

The SDK tests (test_testing_server.py, test_openai_model.py) cover what a client
sends; these send what no SDK would (chunked bodies, GETs, bytes that are not
JSON) and check that each fake answers in its own API's spelling and never fails
itself: a fake that turned bad input into a crash would hide the bug it is for.
"""

from __future__ import annotations

import http.client
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from statemachine_agent.testing import FakeAnthropicServer, replies
from statemachine_agent.testing._http import ScriptedServer
from statemachine_agent.testing.openai_server import FakeOpenAIServer, chat_text

JSON = dict[str, Any]


@dataclass(frozen=True)
class Api:
    """One fake API: how to start it, where to post, what a valid call looks like."""

    name: str
    start: Callable[[], ScriptedServer[Any]]
    path: str
    headers: dict[str, str]
    body: JSON
    answer: JSON
    request_id_header: str

    def is_error_envelope(self, body: Any, status: int) -> bool:
        """Whether `body` is the error body this API sends with `status`."""
        if self.name == "anthropic":
            expected = "not_found_error" if status == 404 else "invalid_request_error"
            return (
                body.get("type") == "error"
                and body["error"]["type"] == expected
                and isinstance(body["error"]["message"], str)
                and str(body.get("request_id", "")).startswith("req_")
            )
        error = body.get("error") or {}
        return set(error) == {"message", "type", "param", "code"} and (
            error["type"] == "invalid_request_error"
        )


ANTHROPIC = Api(
    name="anthropic",
    start=FakeAnthropicServer,
    path="/v1/messages",
    headers={"x-api-key": "test-key", "anthropic-version": "2023-06-01"},
    body={
        "model": "claude-sonnet-5",
        "max_tokens": 10,
        "messages": [{"role": "user", "content": "Hi"}],
    },
    answer=replies.text("Hello."),
    request_id_header="request-id",
)
OPENAI = Api(
    name="openai",
    start=FakeOpenAIServer,
    path="/v1/chat/completions",
    headers={"authorization": "Bearer sk-test"},
    body={"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "Hi"}]},
    answer=chat_text("Hello."),
    request_id_header="x-request-id",
)
APIS = [pytest.param(ANTHROPIC, id="anthropic"), pytest.param(OPENAI, id="openai")]


def send(
    server: ScriptedServer[Any],
    method: str,
    path: str,
    body: bytes | Iterator[bytes] | None,
    headers: dict[str, str],
) -> tuple[int, JSON, http.client.HTTPMessage]:
    """One raw request to the server's host (not `base_url`: OpenAI's ends in /v1)."""
    address = urlsplit(server.base_url)
    connection = http.client.HTTPConnection(address.hostname or "", address.port, timeout=5)
    try:
        connection.request(
            method, path, body=body, headers=headers, encode_chunked=not isinstance(body, bytes)
        )
        response = connection.getresponse()
        return response.status, json.loads(response.read()), response.headers
    finally:
        connection.close()


@pytest.fixture(params=APIS, scope="module")
def api_server(request: pytest.FixtureRequest) -> Iterator[tuple[Api, ScriptedServer[Any]]]:
    """One server per API for the module (hypothesis reuses it across examples)."""
    api: Api = request.param
    with api.start() as server:
        yield api, server


class TestSharedPlumbing:
    def test_chunked_body_is_read_whole(self, api_server: tuple[Api, ScriptedServer[Any]]) -> None:
        """A body sent in chunks is joined, parsed and answered like a plain one."""
        api, server = api_server
        server.add(api.answer)
        raw = json.dumps(api.body).encode()
        pieces = iter([raw[:7], raw[7:20], raw[20:]])
        headers = {**api.headers, "content-type": "application/json"}
        status, answer, response_headers = send(server, "POST", api.path, pieces, headers)
        assert status == 200
        assert server.requests[-1] == api.body
        assert answer["id"] == api.answer["id"]
        assert response_headers[api.request_id_header].startswith("req_")

    def test_get_is_a_404_in_the_api_spelling(
        self, api_server: tuple[Api, ScriptedServer[Any]]
    ) -> None:
        """Any GET is a 404 with the API's own error body and request-id header."""
        api, server = api_server
        status, body, headers = send(server, "GET", api.path, None, api.headers)
        assert status == 404
        assert api.is_error_envelope(body, 404)
        assert headers[api.request_id_header].startswith("req_")

    def test_unknown_path_is_a_404_and_not_recorded(
        self, api_server: tuple[Api, ScriptedServer[Any]]
    ) -> None:
        """A POST elsewhere is a 404; only the API's endpoints record requests."""
        api, server = api_server
        before = len(server.requests)
        status, body, _ = send(server, "POST", "/v1/complete", b"{}", api.headers)
        assert status == 404
        assert api.is_error_envelope(body, 404)
        assert len(server.requests) == before


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=10),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)
BODIES = st.binary(max_size=120) | JSON_VALUES.map(lambda value: json.dumps(value).encode())


@given(raw=BODIES)
@settings(max_examples=60, deadline=None)
def test_any_body_gets_a_400_in_the_api_spelling(
    api_server: tuple[Api, ScriptedServer[Any]], raw: bytes
) -> None:
    """Whatever bytes are posted (not JSON, not an object, an object the API rejects),
    the answer is a 400 error body of that API, and the fake itself never fails."""
    api, server = api_server
    server.expect_invalid()
    status, body, headers = send(server, "POST", api.path, raw, api.headers)
    assert status == 400
    assert api.is_error_envelope(body, status)
    assert headers[api.request_id_header].startswith("req_")
    assert server.errors == []
