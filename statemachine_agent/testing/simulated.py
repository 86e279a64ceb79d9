"""A seeded model that misbehaves at given rates, for evaluating loop policies offline.

A loop policy (a stall detector, a verifier, a reflection interval) only shows its
worth on runs that go wrong, and a scripted model goes wrong only where its script
says so. `MisbehavingModel` knows, for each prompt, the tool calls that solve it and
the right answer (a `Task`), and picks for each prompt one way of behaving, by a hash
of its seed and the prompt:

- `good`: calls the task's tools in order, then answers right;
- `repeat`: calls the first tool, then the same call again, forever;
- `drift`: alternates between the first two calls (A, B, A, B, ...), forever;
- `early`: answers at once, without a tool, and wrongly;
- `overrun`: goes through the calls twice before answering right (correct, but dear).

A run that misbehaves comes back when the loop nudges it: any text the engine adds
to a user message after the prompt (a stall intervention, a reflection prompt, a
verifier's feedback) makes the model follow the task from there. So a stall policy
turns a looping run into a completed one, and a verifier turns an early wrong answer
into a right one, which is what an evaluation should be able to measure.

Every reply is a pure function of the seed and the request (never of call order), so
runs give the same replies under any concurrency and after a resume, and an
evaluation's report is reproducible. Repeats of one prompt behave the same.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from statemachine_agent.models.base import DEFAULT_MODEL, JSON, ModelReply, ModelRequest, Usage

Behaviour = Literal["good", "repeat", "drift", "early", "overrun"]
"""How a run of one prompt goes (see the module's docstring)."""

BEHAVIOURS: tuple[Behaviour, ...] = ("repeat", "drift", "early", "overrun", "good")
"""The behaviours, in the order their rates are laid out on [0, 1)."""


@dataclass(frozen=True, slots=True)
class Task:
    """What solves one prompt: the tool calls, in order, and the right answer."""

    calls: tuple[JSON, ...]
    """`{"name": ..., "input": {...}}` per call."""
    answer: str
    wrong_answer: str = "I believe it is done."
    """What an `early` run answers before calling any tool."""


@dataclass(slots=True)
class MisbehavingModel:
    """A `Model` that solves `tasks` (by prompt), misbehaving at the given rates.

    The rates are probabilities (they must sum to at most 1); the rest of the prompts
    behave well. `calls` counts the requests answered, for tests.
    """

    tasks: Mapping[str, Task]
    seed: int = 0
    repeat: float = 0.0
    drift: float = 0.0
    early: float = 0.0
    overrun: float = 0.0
    name: str = DEFAULT_MODEL
    calls: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        rates = (self.repeat, self.drift, self.early, self.overrun)
        if any(not 0.0 <= r <= 1.0 for r in rates) or sum(rates) > 1.0 + 1e-9:
            raise ValueError(f"rates must be in [0, 1] and sum to at most 1, not {rates}")
        for prompt, task in self.tasks.items():
            if not task.calls:
                raise ValueError(f"the task of {prompt!r} has no tool calls")

    def behaviour(self, prompt: str) -> Behaviour:
        """How runs of `prompt` go: drawn once from the seed and the prompt."""
        digest = hashlib.sha256(f"{self.seed}\x00{prompt}".encode()).digest()
        draw = int.from_bytes(digest[:8], "big") / 2**64
        edge = 0.0
        for name, rate in zip(
            BEHAVIOURS, (self.repeat, self.drift, self.early, self.overrun), strict=False
        ):
            edge += rate
            if draw < edge:
                return name
        return "good"

    async def acomplete(self, request: ModelRequest) -> ModelReply:
        self.calls += 1
        messages = list(request.messages)
        prompt = _text_of(messages[0]) if messages else ""
        task = self.tasks.get(prompt)
        done = sum(1 for m in messages if m.get("role") == "assistant")
        if task is None:
            return self._reply(request, [_text(f"I have no task for {prompt!r}.")], done)
        if request.tool_choice == {"type": "none"} or not request.tools:
            return self._reply(request, [_text(f"Stopped before the end of {prompt!r}.")], done)
        if _nudged(messages):  # back on track: the calls not made yet, then the answer
            made = _calls_made(messages)
            missing = [c for c in task.calls if _key(c) not in made]
            return self._step(request, Task(tuple(missing), task.answer), 0, done)
        how = self.behaviour(prompt)
        if how == "early":
            return self._reply(request, [_text(task.wrong_answer)], done)
        if how == "repeat":
            return self._reply(request, [_call(task.calls[0], done)], done)
        if how == "drift":
            pair = (task.calls[0], task.calls[1 % len(task.calls)])  # one call: a repeat
            return self._reply(request, [_call(pair[done % 2], done)], done)
        plan = task.calls * 2 if how == "overrun" else task.calls
        return self._step(request, Task(plan, task.answer), done, done)

    def _step(self, request: ModelRequest, task: Task, step: int, done: int) -> ModelReply:
        if step < len(task.calls):
            return self._reply(request, [_call(task.calls[step], done)], done)
        return self._reply(request, [_text(task.answer)], done)

    def _reply(self, request: ModelRequest, content: list[JSON], done: int) -> ModelReply:
        """A reply with usage that grows with the history, as a real one's does."""
        size = len(json.dumps(list(request.messages), sort_keys=True, default=str))
        key = hashlib.sha256(f"{self.seed}:{done}:{size}".encode()).hexdigest()[:20]
        calls_tool = any(b["type"] == "tool_use" for b in content)
        return ModelReply(
            content=tuple(content),
            stop_reason="tool_use" if calls_tool else "end_turn",
            usage=Usage(input_tokens=200 + size // 4, output_tokens=40),
            model=self.name,
            id=f"msg_sim_{key}",
        )


def _text(text: str) -> JSON:
    return {"type": "text", "text": text}


def _call(call: JSON, done: int) -> JSON:
    return {
        "type": "tool_use",
        "id": f"toolu_sim_{done:04d}",
        "name": call["name"],
        "input": dict(call.get("input") or {}),
    }


def _text_of(message: JSON) -> str:
    content: Any = message.get("content")
    if isinstance(content, str):
        return content
    return "".join(
        str(b.get("text", ""))
        for b in content or ()
        if isinstance(b, dict) and b.get("type") == "text"
    )


def _key(call: JSON) -> str:
    return json.dumps([call.get("name"), call.get("input") or {}], sort_keys=True)


def _calls_made(messages: Sequence[JSON]) -> set[str]:
    return {
        _key(block)
        for message in messages
        if message.get("role") == "assistant" and isinstance(message.get("content"), list)
        for block in message["content"]
        if isinstance(block, dict) and block.get("type") == "tool_use"
    }


def _nudged(messages: Sequence[JSON]) -> bool:
    """Whether the engine added text to a user message after the prompt (a stall
    intervention, a reflection prompt or a verifier's feedback)."""
    for message in messages[1:]:
        if message.get("role") != "user":
            continue
        content: Any = message.get("content")
        if isinstance(content, str) or any(
            isinstance(b, dict) and b.get("type") == "text" for b in content or ()
        ):
            return True
    return False
