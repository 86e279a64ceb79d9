"""Redaction at the tool boundary: structured results, key shapes, MCP header values.

What the audit promises to mask must be masked whatever form it takes when it
reaches an event: a tool's dict or pydantic result is JSON text by then, a key may
have any provider's shape, and an MCP server's credentials come as headers.
"""

from __future__ import annotations

import json
from typing import Any

import pydantic
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from statemachine_agent import Agent, MCPToolset, ScriptedModel, tool
from statemachine_agent.audit.events import capture_events
from statemachine_agent.audit.redact import DEFAULT_SECRET_KEYS, Redactor
from statemachine_agent.testing import replies

SHAPES = [
    "sk-proj-" + "Ab3_x-" * 8,
    "sk-svcacct-" + "Zz9" * 10,
    "sk-admin-" + "q1W2" * 6,
    "sk-ant-api03-" + "k" * 30,
    "ghp_" + "a1B2" * 9,
    "gho_" + "Z" * 36,
    "github_pat_11ABCDEFG0" + "x_Y1" * 10,
    "AKIAIOSFODNN7EXAMPLE",
    "ASIAY34FZKBOKMUTVV7A",
    "xoxb-123456789012-1234567890123-AbCdEfGhIjKl",
    "xoxp-1111-2222-3333-abcd",
    "AIzaSyD" + "a" * 32,
    "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
]
"""One key of each shape the redactor knows, as providers issue them."""

secret_keys = st.sampled_from(sorted(DEFAULT_SECRET_KEYS)).flatmap(
    lambda key: st.sampled_from([key, key.upper(), key.title(), key.replace("_", "-")])
)
secret_values = st.text(
    alphabet=st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")), min_size=1, max_size=12
).map(lambda tail: f"S3CRET{tail}")
plain_keys = st.sampled_from(["user", "id", "note", "items"])


@st.composite
def structured_results(draw: st.DrawFn) -> tuple[dict[str, Any], list[str]]:
    """A nested dict holding secret-named members, and the secret values in it."""
    secrets: list[str] = []

    def level(depth: int) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for _ in range(draw(st.integers(1, 3))):
            if depth < 2 and draw(st.booleans()):
                out[draw(plain_keys)] = level(depth + 1)
            else:
                value = draw(secret_values)
                out[draw(secret_keys)] = value
                secrets.append(value)
        out["user"] = "bob"
        return out

    return level(0), secrets


def run_returning(value: Any) -> tuple[list[dict[str, Any]], str]:
    """Run an agent whose tool returns `value`: its events, and the tool text the model read."""

    @tool
    def account() -> Any:
        """Fetches the account."""
        return value

    model = ScriptedModel([replies.tool_use("account"), replies.text("ok")])
    with capture_events() as events:
        Agent(model, tools=[account]).run("q")
    return events, str(model.requests[1].messages[2]["content"][0]["content"])


class TestStructuredResults:
    @settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(structured_results())
    def test_secret_members_never_reach_the_audit(
        self, case: tuple[dict[str, Any], list[str]]
    ) -> None:
        """A dict result's secret-named members are masked in every event, at any depth and
        in any case, while the model still reads what the tool returned."""
        value, secrets = case
        events, seen = run_returning(value)
        written = json.dumps(events, ensure_ascii=False)
        for secret in secrets:
            assert json.dumps(secret, ensure_ascii=False)[1:-1] not in written
        assert json.loads(seen) == value
        (finished,) = [e for e in events if e["event"] == "tool.finished"]
        assert '"user": "bob"' in finished["content"]

    def test_pydantic_result(self) -> None:
        """A pydantic model's secret fields are masked too; its other fields are kept."""

        class Login(pydantic.BaseModel):
            user: str
            password: str
            access_token: str

        events, seen = run_returning(Login(user="bob", password="hunter22", access_token="tk-123"))
        written = json.dumps(events)
        assert "hunter22" not in written
        assert "tk-123" not in written
        assert '\\"user\\": \\"bob\\"' in written
        assert json.loads(seen)["password"] == "hunter22"


class TestKeyShapes:
    @given(
        st.sampled_from(SHAPES),
        st.text(alphabet=" .,:;()[]{}\n\"'", max_size=5),
        st.text(alphabet=" .,:;()[]{}\n\"'", max_size=5),
    )
    def test_every_shape_is_masked_in_any_text(self, key: str, before: str, after: str) -> None:
        """Each provider's key shape is masked wherever it sits in a text."""
        masked = Redactor().redact(f"config{before}{key}{after}end")
        assert key not in masked
        assert "[REDACTED]" in masked

    def test_plain_text_is_untouched(self) -> None:
        """Words and ids that only resemble keys stay as they are."""
        text = "ask-me about skiing; the_tool ran; AKIA is short; eyJ alone; xoxo"
        assert Redactor().redact(text) == text


class TestMcpHeaders:
    def test_header_values_are_masked_in_the_agents_events(self) -> None:
        """The values of `MCPToolset.http(headers=...)`, and the token after "Bearer", are
        registered as secrets of the agent that uses the toolset."""
        token = "mcp-session-0123456789"
        toolset = MCPToolset.http(
            "http://127.0.0.1:9/mcp", headers={"Authorization": f"Bearer {token}", "X-Org": "ab"}
        )
        assert token in toolset.secrets
        agent = Agent(ScriptedModel([replies.text("ok")]), tools=[toolset])
        assert agent.redact(f"sent {token}") == "sent [REDACTED]"
        assert agent.redact("Bearer tokens are used") == "Bearer tokens are used"


class TestNestedSecretValues:
    @settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(
        key=secret_keys,
        inner=st.recursive(
            secret_values | st.integers(),
            lambda kids: (
                st.lists(kids, min_size=1, max_size=3)
                | st.dictionaries(plain_keys, kids, min_size=1, max_size=3)
            ),
            max_leaves=6,
        ).filter(lambda v: isinstance(v, list | dict)),
    )
    def test_an_object_or_array_under_a_secret_name_is_masked_whole(
        self, key: str, inner: Any
    ) -> None:
        """`{"token": {"value": "..."}}`: the secret is the whole value, though no key
        inside it is secret-named; the text the model reads is what the tool returned."""
        value = {"user": "bob", key: inner, "items": ["x", {"note": '["]{'}]}
        events, seen = run_returning(value)
        (finished,) = [e for e in events if e["event"] == "tool.finished"]
        masked = json.loads(finished["content"])
        assert masked == {**value, key: "[REDACTED]"}
        assert json.loads(seen) == value

    def test_a_cut_off_result_is_masked_to_its_end(self) -> None:
        redactor = Redactor()
        text = '{"user": "bob", "token": {"key": "S3CRET", "more": ['
        assert redactor.redact(text) == '{"user": "bob", "token": "[REDACTED]"'
