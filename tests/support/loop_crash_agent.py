"""A general loop run (four model turns, four effectful calls) that dies at a chosen
transition boundary.

Usage: python -m tests.support.loop_crash_agent run|resume STORE FOLDER RUN_ID [KILL]

STORE is a SQLite file or a PostgreSQL URL; FOLDER holds what the test reads
back: `audit/RUN_ID.jsonl`, `ledger` (one line per effect made: a repeated
idempotency key makes none), `ledger.calls` (one line each time the tool was
called) and `model.calls.run` / `model.calls.resume` (one line per reply the
process of that mode requested, naming its turn). The
model answers by how far the conversation has got, so a resumed process gets the
same replies as the one that died. KILL is `run_started`, `before_write:K` (at
the `transition.fired` event with seq K, which the audit hands its sinks before
the engine writes anything for that transition) or `after_write:K` (at the first
event after it, when whatever the engine writes for transition K is written).
The sink kills before the event reaches the audit file, as a real death between
two lines would.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from statemachine_agent import (
    Agent,
    Audit,
    Model,
    ModelRequest,
    RunNotFoundError,
    RunResult,
    tool,
)
from statemachine_agent.models.progress import ProgressModel
from statemachine_agent.testing import replies
from tests.support.crashing import LEASE_SECONDS, store

CALL_IDS = ("toolu_note1", "toolu_note2a", "toolu_note2b", "toolu_note3")
"""Every effectful call of the script, in the order the model asks for them."""

PROMPT = "Note one, two, three and four."
ANSWER = "Noted four lines: one, two, three, four."


def script() -> list[dict[str, Any]]:
    """One call, two calls in one reply (run concurrently), one call, the answer."""
    return [
        replies.tool_uses(("note", {"line": "one"}), ids=("toolu_note1",)),
        replies.tool_uses(
            ("note", {"line": "two"}),
            ("note", {"line": "three"}),
            ids=("toolu_note2a", "toolu_note2b"),
        ),
        replies.tool_uses(("note", {"line": "four"}), ids=("toolu_note3",)),
        replies.text(ANSWER),
    ]


def counted(turn: int, reply: dict[str, Any], calls: Path) -> Callable[[ModelRequest], Any]:
    """The script entry for `turn`, appending the turn to `calls` each time it is asked."""

    def answer(request: ModelRequest) -> dict[str, Any]:
        with calls.open("a") as out:
            out.write(f"{turn}\n")
        return reply

    return answer


class KillAt:
    """An audit sink that SIGKILLs the process at a kill point (see the module doc)."""

    def __init__(self, kill: str, mark: Path) -> None:
        self.kind, _, seq = kill.partition(":")
        self.seq = int(seq) if seq else None
        self.mark = mark
        self.armed = False
        """Set once transition `seq` fired, for `after_write`: the next event kills."""

    def write(self, event: Mapping[str, Any]) -> None:
        if self.mark.exists():
            return
        name = event.get("event")
        fired = name == "transition.fired" and event.get("seq") == self.seq
        if (
            (self.kind == "run_started" and name == "run.started")
            or (self.kind == "before_write" and fired)
            or (self.kind == "after_write" and self.armed)
        ):
            self.mark.write_text(f"{self.kind}:{self.seq} at {name}")
            os.kill(os.getpid(), signal.SIGKILL)
        self.armed = self.kind == "after_write" and fired

    def close(self) -> None:
        return None


def build(
    where: str, folder: Path, mode: str, kill: str | None, model: Model | None = None
) -> Agent:
    """The agent; its default policies (stall included), nothing exotic. `model`
    replaces the counting progress model (the test drives the script through the SDK)."""
    ledger = folder / "ledger"

    @tool(side_effect=True)
    def note(line: str, idempotency_key: str) -> str:
        """Append a line; a repeated key answers as the first call did, writing nothing."""
        with ledger.with_suffix(".calls").open("a") as calls:
            calls.write(f"{idempotency_key}\n")
        made = ledger.read_text().splitlines() if ledger.exists() else []
        if not any(entry.startswith(idempotency_key + " ") for entry in made):
            with ledger.open("a") as out:
                out.write(f"{idempotency_key} {line}\n")
        return f"noted {line}"

    model_calls = folder / f"model.calls.{mode}"
    model = model or ProgressModel(
        [counted(turn, reply, model_calls) for turn, reply in enumerate(script())]
    )
    sinks = [KillAt(kill, folder / "killed")] if kill is not None else []
    return Agent(
        model,
        tools=[note],
        checkpointer=store(where),
        audit=Audit(dir=folder / "audit", sinks=sinks),
    )


def finish(agent: Agent, run_id: str) -> dict[str, Any]:
    """What a supervisor does for a run its dead process left: resume it (also one that
    had entered its end state but not reported it), or start it again if it left no
    checkpoint (`restarted`)."""
    try:
        return outcome(agent.resume(run_id, wait=10 * LEASE_SECONDS))
    except RunNotFoundError:
        return {**outcome(agent.run(PROMPT, run_id=run_id)), "restarted": True}


def outcome(result: RunResult[Any]) -> dict[str, Any]:
    trail = [[step.source, step.trigger, step.dest] for step in result.trail]
    return {"end_state": result.end_state, "text": result.text,
            "messages": result.messages, "trail": trail}  # fmt: skip


def main() -> None:
    mode, where, folder, run_id = sys.argv[1], sys.argv[2], Path(sys.argv[3]), sys.argv[4]
    kill = sys.argv[5] if len(sys.argv) > 5 else None
    agent = build(where, folder, mode, kill)
    done = outcome(agent.run(PROMPT, run_id=run_id)) if mode == "run" else finish(agent, run_id)
    print(json.dumps(done))


if __name__ == "__main__":
    main()
