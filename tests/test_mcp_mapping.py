"""What an MCP server's list and results become for the model, and what is sent again.

Against the project's own MCP server (`statemachine_agent.testing.mcp_server`, started
by each test as a stdio subprocess), which adds what servers in the wild do: an image
sent twice, a task-only tool, a dotted name, tools that kill the server mid-call (the
calls each counted in a file, so the server side says how often it was called),
progress reports. The image case goes through the real `anthropic` SDK against the
strict local Messages API.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import importlib.metadata
import json
import sys
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from statemachine_agent import Agent, AnthropicModel, Audit, MCPToolset, ScriptedModel
from statemachine_agent.audit.sink import MemorySink
from statemachine_agent.machine.result import RunResult
from statemachine_agent.testing import FakeAnthropicServer, replies
from statemachine_agent.testing.mcp_server import PNG
from statemachine_agent.tools._mcp_catalog import catalog, safe_to_resend
from statemachine_agent.tools.decorator import TOOL_NAME_PATTERN
from statemachine_agent.tools.mcp import result_content

SERVER = ["-m", "statemachine_agent.testing.mcp_server", "stdio"]
PNG_B64 = base64.b64encode(PNG).decode()


def stdio(**options: Any) -> MCPToolset:
    options.setdefault("name", "test")
    return MCPToolset.stdio(sys.executable, SERVER, **options)


def results(result: RunResult) -> list[dict[str, Any]]:
    return [
        block
        for message in result.messages
        if message["role"] == "user" and isinstance(message["content"], list)
        for block in message["content"]
        if block.get("type") == "tool_result"
    ]


def run(agent: Agent, prompt: str = "Go.") -> RunResult:
    async def main() -> RunResult:
        async with agent:
            return await agent.arun(prompt)

    return asyncio.run(main())


def calls(*uses: tuple[str, dict[str, Any]]) -> ScriptedModel:
    script = [replies.tool_use(name, args, id=f"toolu_{i}") for i, (name, args) in enumerate(uses)]
    return ScriptedModel([*script, replies.text("done")])


class TestResultsMappedOnce:
    def test_an_image_with_structured_content_is_one_image_block(self) -> None:
        """`read_media_file`'s shape: the model gets one image block and no base64 text;
        the audit file says an image went (kind, type, size, digest), not its bytes.
        A `text/plain` blob is shown as its text."""
        sink = MemorySink()
        with FakeAnthropicServer() as api:
            api.add(replies.tool_uses(("photo", {}), ("note_blob", {})), replies.text("Seen."))
            model = AnthropicModel(api_key="sk-test", base_url=api.base_url)
            agent = Agent(model, tools=[stdio()], audit=Audit(sinks=[sink]))
            result = run(agent, "Look.")
            assert result.end_state == "completed", result.reason
            assert api.invalid_requests == []
            photo, blob = api.requests[1]["messages"][2]["content"]
        assert blob["content"] == "[resource memo://blob]\nplain words"
        sent = photo["content"]
        images = [block for block in sent if block["type"] == "image"]
        assert len(images) == 1
        assert images[0]["source"]["data"] == PNG_B64
        texts = " ".join(block.get("text", "") for block in sent if block["type"] == "text")
        assert PNG_B64 not in texts
        assert PNG_B64[:40] not in texts
        finished, _ = [e for e in sink.events if e["event"] == "tool.finished"]
        assert finished["blocks"] == [
            {
                "type": "image",
                "media_type": "image/png",
                "bytes": len(PNG),
                "sha256": hashlib.sha256(PNG).hexdigest(),
            }
        ]
        assert PNG_B64[:40] not in json.dumps(sink.events, default=str)

    def test_structured_content_is_the_text_only_without_other_content(self) -> None:
        both = types.CallToolResult(
            content=[types.TextContent(type="text", text="5")], structured_content={"total": 5}
        )
        alone = types.CallToolResult(content=[], structured_content={"total": 5})
        assert result_content(both).text == "5"
        assert result_content(alone).text == '{"total": 5}'
        assert result_content(both).data == {"total": 5}

    @settings(max_examples=40, deadline=None)
    @given(
        data=st.binary(min_size=1, max_size=2048),
        key=st.sampled_from(["data", "blob", "payload"]),
        mime=st.sampled_from(["image/png", "audio/wav", "application/octet-stream"]),
        depth=st.integers(min_value=0, max_value=3),
    )
    def test_binary_fields_never_reach_the_model_as_text(
        self, data: bytes, key: str, mime: str, depth: int
    ) -> None:
        """Binary in structured content shown as text is named: as an MCP content item
        (`data`/`blob` beside a media type), a `data:` URI, or a long base64 string."""
        encoded = base64.b64encode(data).decode()
        value: Any = {
            "item": {key: encoded, "mimeType": mime},
            "uri": f"data:{mime};base64,{encoded}",
            "raw": base64.b64encode(data * (1 + 512 // len(data))).decode(),
        }
        for _ in range(depth):
            value = {"nested": [value]}
        content = result_content(types.CallToolResult(content=[], structured_content=value))
        if key != "payload" or len(encoded) >= 512:
            assert encoded not in content.text
        assert f"data:{mime};base64," not in content.text
        assert "not shown]" in content.text
        assert content.data == value  # the raw value stays the outcome's data


class TestDiscovery:
    def test_task_only_tools_are_left_out_and_dotted_names_mapped(self, tmp_path: Path) -> None:
        """`long_job` is not offered; `files.read` is offered as `fs_files_read` and
        called as `files.read`; one `toolset.listed` event says both. (The server also
        says how the client introduced itself: as this package, with its version.)"""
        note = tmp_path / "note.txt"
        note.write_text("from the file", encoding="utf-8")
        sink = MemorySink()
        model = calls(("fs_files_read", {"path": str(note)}), ("fs_client", {}))
        agent = Agent(model, tools=[stdio(prefix="fs_")], audit=Audit(sinks=[sink]))
        result = run(agent)
        assert result.end_state == "completed", result.reason
        offered = [tool["name"] for tool in model.requests[0].tools]
        assert "fs_files_read" in offered
        assert "fs_long_job" not in offered
        assert all(TOOL_NAME_PATTERN.fullmatch(name) for name in offered)
        read, client = results(result)
        assert read["content"] == "from the file"
        version = importlib.metadata.version("statemachine-agent")
        assert client["content"] == f"statemachine-agent {version}"
        (listed,) = [e for e in sink.events if e["event"] == "toolset.listed"]
        assert listed["toolset"] == "test"
        assert listed["renamed"] == {"fs_files_read": "files.read"}
        assert "MCP tasks" in listed["left_out"]["long_job"]
        assert not [e for e in sink.events if e["event"] == "toolset.failed"]

    @settings(max_examples=60, deadline=None)
    @given(
        names=st.lists(st.text(min_size=1, max_size=80), max_size=8),
        prefix=st.sampled_from(["", "fs_", "x-"]),
    )
    def test_every_name_is_offered_once_valid_and_maps_back(
        self, names: list[str], prefix: str
    ) -> None:
        specs = [types.Tool(name=name, input_schema={"type": "object"}) for name in names]
        listing = catalog(specs, prefix=prefix, offered=lambda name: True)
        offered = [name for name, _ in listing.offered]
        assert len(offered) == len(set(offered)) == len(specs)
        assert all(TOOL_NAME_PATTERN.fullmatch(name) for name in offered)
        for name, spec in listing.offered:
            expected = listing.renamed.get(name, f"{prefix}{spec.name}")
            assert expected in (spec.name, f"{prefix}{spec.name}")
            if name not in listing.renamed:
                assert name == f"{prefix}{spec.name}"

    def test_a_valid_name_keeps_its_name_when_a_dotted_one_maps_onto_it(self) -> None:
        specs = [
            types.Tool(name="files.read", input_schema={"type": "object"}),
            types.Tool(name="files_read", input_schema={"type": "object"}),
        ]
        listing = catalog(specs, prefix="", offered=lambda name: True)
        assert [name for name, _ in listing.offered] == ["files_read_2", "files_read"]
        assert listing.renamed == {"files_read_2": "files.read"}

    def test_task_support_is_read_raw_too(self) -> None:
        """A server on a revision whose typed model leaves `execution` out still says so."""
        raw = types.Tool.model_validate(
            {"name": "job", "inputSchema": {"type": "object"},
             "execution": {"taskSupport": "required"}}
        )  # fmt: skip
        listing = catalog([raw], prefix="", offered=lambda name: True)
        assert listing.offered == ()
        assert "job" in listing.left_out


class TestResend:
    @pytest.mark.parametrize(
        ("tool", "host", "server_calls"),
        [("charge", {}, 1), ("store", {}, 2), ("charge", {"charge": True}, 2)],
    )
    def test_only_a_call_safe_to_repeat_is_sent_again(
        self, tmp_path: Path, tool: str, host: dict[str, bool], server_calls: int
    ) -> None:
        """The server dies in the first call; the destructive `charge` is answered, not
        sent again (unless the host says it may be), the idempotent `store` is. The model
        hears the toolset's name (by default the program's), never its install path."""
        log = tmp_path / "calls.log"
        toolset = MCPToolset.stdio(sys.executable, SERVER, resend=host)
        result = run(Agent(calls((tool, {"log": str(log)})), tools=[toolset]))
        assert result.end_state == "completed", result.reason
        assert log.read_text().count("call") == server_calls
        (answer,) = results(result)
        if server_calls == 1:
            assert answer["is_error"] is True
            assert "stopped during the call" in answer["content"]
            assert "it may have acted" in answer["content"]
            assert f"MCP server {toolset.name!r}" in answer["content"]
            assert sys.executable not in answer["content"]
            assert "/" not in toolset.name
        else:
            assert answer["content"] == "call 2"

    def test_annotations_decide_without_a_host_word(self) -> None:
        def spec(**hints: bool) -> types.Tool:
            return types.Tool(
                name="t",
                input_schema={"type": "object"},
                annotations=types.ToolAnnotations.model_validate(hints, by_name=True),
            )

        assert safe_to_resend(spec(read_only_hint=True), {})
        assert safe_to_resend(spec(idempotent_hint=True, destructive_hint=True), {})
        assert not safe_to_resend(spec(destructive_hint=False), {})
        assert not safe_to_resend(types.Tool(name="t", input_schema={"type": "object"}), {})
        assert not safe_to_resend(spec(read_only_hint=True), {"t": False})


class TestProgressAndIdentity:
    def test_progress_extends_the_timeout(self) -> None:
        """Three steps of 1 s each, 3 s in all, under a 2 s timeout renewed by each report."""
        model = calls(("progress", {"steps": 3, "every": 1.0}))
        result = run(Agent(model, tools=[stdio(timeout=2.0)]))
        (answer,) = results(result)
        assert answer["content"] == "done 3 steps"

    def test_progress_does_not_extend_past_max_call_seconds(self) -> None:
        model = calls(("progress", {"steps": 200, "every": 0.2}), ("echo", {"text": "on"}))
        result = run(Agent(model, tools=[stdio(timeout=1.0, max_call_seconds=1.5)]))
        capped, echo = results(result)
        assert capped["is_error"] is True
        assert "did not finish within 1.5 s" in capped["content"]
        assert echo["content"] == "on"

    def test_bad_options_are_named(self) -> None:
        with pytest.raises(ValueError, match="max_call_seconds"):
            stdio(timeout=60, max_call_seconds=30)
        with pytest.raises(ValueError, match="prefix"):
            stdio(prefix="fs.")
        with pytest.raises(TypeError, match="resend"):
            stdio(resend={"charge": "yes"})


EVERYTHING = (
    Path(__file__).resolve().parent.parent
    / "build/mcp-servers/node_modules/@modelcontextprotocol/server-everything/dist/index.js"
)


class TestServerEverything:
    def test_the_reference_server_through_the_real_sdk(self) -> None:
        """npm's `server-everything` (installed by `make mcp-servers`): its image reaches the
        model as one block with no base64 text, its structured content is not said twice,
        its task-only tool is not offered, and its progress reports renew the timeout."""
        assert EVERYTHING.is_file(), "server-everything is not installed: run `make mcp-servers`"
        sink = MemorySink()
        toolset = MCPToolset.stdio("node", [str(EVERYTHING), "stdio"], name="everything",
                                   timeout=2.0)  # fmt: skip
        with FakeAnthropicServer() as api:
            api.add(
                replies.tool_uses(
                    ("get-tiny-image", {}),
                    ("get-structured-content", {"location": "Chicago"}),
                    ("trigger-long-running-operation", {"duration": 3, "steps": 3}),
                ),
                replies.text("Seen."),
            )
            model = AnthropicModel(api_key="sk-test", base_url=api.base_url)
            result = run(Agent(model, tools=[toolset], audit=Audit(sinks=[sink])), "Look.")
            assert result.end_state == "completed", result.reason
            assert api.invalid_requests == []
            offered = {tool["name"] for tool in api.requests[0]["tools"]}
            image, weather, job = api.requests[1]["messages"][2]["content"]
        assert "simulate-research-query" not in offered
        (listed,) = [e for e in sink.events if e["event"] == "toolset.listed"]
        assert "simulate-research-query" in listed["left_out"]
        blocks = [block for block in image["content"] if block["type"] == "image"]
        assert len(blocks) == 1
        data = blocks[0]["source"]["data"]
        assert all(data[:40] not in b.get("text", "") for b in image["content"])
        assert weather["content"].count("temperature") == 1  # the text, not again as JSON
        assert "is_error" not in job
