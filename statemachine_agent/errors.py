"""The one root of every exception statemachine-agent raises on purpose.

A service that embeds the agent wants a single `except statemachine_agent.Error`
for "the library refused this, by name" (a missing key, an unknown run id, a
locked run, a wrong encryption key), kept apart from its own bugs and from
whatever a model SDK or a database driver raises underneath. Without a common
root it would have to list some forty classes and keep the list current.

Each subclass keeps the built-in base it had before this root existed
(`RunNotFoundError` is still a `KeyError`, `MissingAPIKeyError` still a
`ValueError`), so code that already catches the built-in keeps working; the
tree, with those bases and when each is raised, is drawn in `docs/errors.md`
(generated from the classes, so it cannot drift).

Left outside on purpose, because they never reach a caller:

- `machine.engine.MachineDefinitionError`: a defect in the package's own table
  or phases; met while running, it ends the run as `failed` by name.
- `machine.failures.ComponentError` and `GuardError`: the engine's wrapper for a
  raising verifier, sink, guard or model adapter; it becomes the `failed` end
  state naming the component, and `Agent.run` never raises it.
- `models.waiting.RetryWaitExceededError`: turned into a `ModelError` by the
  model adapter before it leaves.
- `persistence.packing.UnpackError`: turned into `CheckpointCorruptError` by the
  store before it leaves.
- `tools._execution`'s `HandlerTimeoutError`, `AbandonedError`, `EscapedError`:
  how a tool handler's timeout or escape reaches the registry, which turns each
  into an `is_error` tool result for the model.
- `replay.ProcessDied`: a `BaseException` that simulates a killed process in a
  crash drill; it must not be caught by `except Exception`, let alone by this.
- private `_...Error` classes of single modules.

`tests/test_errors.py` walks every module of the package and fails on any other
exception class that does not derive from `Error`.

Stdlib only, and imports nothing of the package, so any module can derive from
it without an import cycle.
"""

from __future__ import annotations

__all__ = ["Error"]


class Error(Exception):
    """Anything statemachine-agent raised on purpose; catch it to handle them all.

    Subclasses also derive from the built-in they always had (`KeyError`,
    `ValueError`, `TypeError`, `RuntimeError`, `LookupError`), so catching that
    still works too.
    """
