"""The engine: the transition table and what fires it.

`table` declares every row (the control flow); `ends` every end state once,
`endings` their handlers; `guards` the named predicates the rows test;
`engine` drives a run from state to state; `run` is the run record that is
checkpointed; `phase_env` what a phase is given (the record, the services, the
emitter); `cancel` the host's `CancelToken` (a leaf, standard library only);
`calls` the one model-call path; `resume` sets a stored run up to go on.
"""
