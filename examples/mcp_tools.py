"""Tools from an MCP server, next to an ordinary tool: listed at run time, called like any.

`MCPToolset.stdio(...)` starts a Model Context Protocol server as a subprocess
(here the package's test server; any server works, e.g. `npx -y
@modelcontextprotocol/server-filesystem /tmp`), lists its tools with their own
input schemas and offers them to the model. `allow=` picks the tools, `prefix=`
keeps their names apart from other servers', `requires_approval=` holds chosen
ones for a person. `async with agent:` shares one session (one server process)
between the runs inside it and closes it on the way out.

Run it: `python examples/mcp_tools.py` (offline: a scripted model, no key; needs
the `mcp` extra, `pip install 'statemachine-agent[mcp]'`).
"""

from __future__ import annotations

import asyncio
import sys

from statemachine_agent import Agent, MCPToolset, Model, RunResult, ScriptedModel, calculate
from statemachine_agent.testing import replies

SERVER = [sys.executable, "-m", "statemachine_agent.testing.mcp_server", "stdio"]
"""The command that starts the server; `MCPToolset.http(url, headers=...)` reaches a remote one."""


def make_model() -> Model:
    """The model that answers. Swap the script for a real model to run it live:

    from statemachine_agent import AnthropicModel
    return AnthropicModel("claude-sonnet-5")  # reads ANTHROPIC_API_KEY
    """
    return ScriptedModel(
        [
            replies.tool_use("notes_add", {"a": 17, "b": 25}),
            replies.tool_use("calculate", {"expression": "42 * 2"}),
            replies.text("17 + 25 = 42, and twice that is 84."),
            replies.tool_use("notes_document", {}),
            replies.text("The memo says: memo body."),
        ]
    )


def notes_server() -> MCPToolset:
    command, *args = SERVER
    return MCPToolset.stdio(command, args, allow={"add", "document"}, prefix="notes_", timeout=10)


async def amain() -> list[RunResult]:
    agent = Agent(
        make_model(),
        tools=[notes_server(), calculate],
        system="Use the notes server's tools, and calculate for arithmetic.",
    )
    async with agent:  # one server process for both runs, stopped on leaving
        first = await agent.arun("Add 17 and 25 with the notes server, then double it.")
        second = await agent.arun("Read me the memo.", history=first.messages)
    return [first, second]


def main() -> RunResult:
    first, second = asyncio.run(amain())
    for result in (first, second):
        print(f"[{result.end_state}] {result.text}")
    return second


if __name__ == "__main__":
    main()
