"""Models: one small protocol, several adapters.

`base` holds the `Model` protocol and the normalized reply; `anthropic` the real
Anthropic SDK adapter, `openai` the OpenAI-compatible one; `scripted`,
`progress` and `replay` answer without a network (a script, a function of the
run's progress, a recorded audit file); the rest are the adapters' helpers.
"""
