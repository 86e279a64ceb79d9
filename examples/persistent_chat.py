"""A chat that outlives its process: `Conversation.open(agent, conversation_id)` carries on.

A stored conversation keeps its history in the agent's store (here a SQLite
file; a `PostgresCheckpointer` works the same), one entry a turn under its id.
Any process that opens the same store and id picks the chat up where it
stopped: the history, the turn count, a turn waiting for approval, an
`end_chat`. `statemachine-agent chat --conversation ID` does the same in the
terminal.

Run it: `python examples/persistent_chat.py` (offline: scripted models, no key).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from statemachine_agent import Agent, Conversation, Model, RunResult, ScriptedModel
from statemachine_agent.testing import replies


def make_model(answer: str) -> Model:
    """The model that answers. Swap the script for a real model to run it live:

    from statemachine_agent import AnthropicModel
    return AnthropicModel("claude-sonnet-5")  # reads ANTHROPIC_API_KEY
    """
    return ScriptedModel([replies.text(answer)])


def first_process(store: Path) -> RunResult:
    """Starts the conversation and stops (as a process that exits would)."""
    agent = Agent(make_model("Nice to meet you, Ada."), checkpointer=store)
    chat = Conversation(agent, conversation_id="ada-support")
    return chat.send("Hi, my name is Ada.")


def second_process(store: Path) -> RunResult:
    """Any later process with the same store: the chat goes on with its history."""
    agent = Agent(make_model("Your name is Ada."), checkpointer=store)
    chat = Conversation.open(agent, "ada-support")
    print(f"carrying on after {chat.turns} turn(s)")
    return chat.send("What is my name?")


def main() -> RunResult:
    with tempfile.TemporaryDirectory() as folder:
        store = Path(folder) / "chats.sqlite3"
        first = first_process(store)
        print(f"[{first.end_state}] {first.text}")
        second = second_process(store)
        print(f"[{second.end_state}] turn {second.turn}: {second.text}")
        return second


if __name__ == "__main__":
    main()
