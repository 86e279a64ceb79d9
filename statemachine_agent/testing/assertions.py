"""Assertions on a run's trail, for testing an agent one transition at a time.

They compare what the machine did (states, triggers, guards) rather than the
text a model wrote, so a test names the control flow it expects.
"""

from __future__ import annotations

from collections.abc import Sequence

from statemachine_agent.machine.result import RunResult


def path(result: RunResult) -> list[str]:
    """The states the run visited, in order."""
    return result.path


def fired(result: RunResult) -> list[tuple[str, str, str]]:
    """The (source, trigger, dest) of every transition, in order."""
    return [(t.source, t.trigger, t.dest) for t in result.trail]


def assert_path(result: RunResult, expected: Sequence[str]) -> None:
    """The run visited exactly these states, in this order."""
    actual = path(result)
    if actual != list(expected):
        raise AssertionError(
            f"run {result.run_id} took path\n  {' -> '.join(actual)}\nexpected\n  "
            f"{' -> '.join(expected)}\n(ended in {result.end_state}: {result.reason})"
        )


def assert_fired(
    result: RunResult, source: str, trigger: str, dest: str, *, via: Sequence[str] | None = None
) -> None:
    """The transition fired at least once (through the row with guards `via`, if given)."""
    for step in result.trail:
        if (step.source, step.trigger, step.dest) == (source, trigger, dest) and (
            via is None or list(step.via) == list(via)
        ):
            return
    shown = "\n  ".join(f"{s} --{t}--> {d}" for s, t, d in fired(result)) or "(nothing)"
    wanted = f"{source} --{trigger}--> {dest}" + (f" via {list(via)}" if via is not None else "")
    raise AssertionError(f"{wanted} never fired; the run fired:\n  {shown}")


def assert_not_fired(result: RunResult, source: str, trigger: str, dest: str) -> None:
    """The transition never fired."""
    if (source, trigger, dest) in fired(result):
        raise AssertionError(f"{source} --{trigger}--> {dest} fired in run {result.run_id}")


def assert_end_state(result: RunResult, end_state: str) -> None:
    """The run ended in this state; the message says why it did not."""
    if result.end_state != end_state:
        raise AssertionError(
            f"run {result.run_id} ended in {result.end_state!r} ({result.reason}), "
            f"expected {end_state!r}; path: {' -> '.join(path(result))}"
        )
