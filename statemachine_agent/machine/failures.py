"""Failures of pluggable code, named so a run can end on them by name.

A guard, a verifier, an approval policy, a critic, a model adapter, an audit
sink or a checkpointer is code the engine does not own. When one raises, the run
ends in `failed` with a reason that names the component and its exception;
nothing escapes `Agent.run`. Phases wrap their calls out with `ComponentError`
so the engine can tell "the verifier raised" from a defect of the phase itself.
"""

from __future__ import annotations


class ComponentError(Exception):
    """A pluggable component raised; `component` says which (e.g. `verifier`)."""

    def __init__(self, component: str, error: BaseException) -> None:
        self.component = component
        self.error = error
        super().__init__(f"the {component} raised {type(error).__name__}: {error}")


class GuardError(ComponentError):
    """A guard raised while the engine evaluated a row: the transition did not happen."""

    def __init__(self, guard: str, error: BaseException) -> None:
        super().__init__(f"guard {guard}", error)
