"""Keeping a run inside the model's context window.

In this package "context" means one thing, the context window: `compaction`
measures the history and replaces old tool results, `summary` writes the
summaries of `summarize`, `caching` places the prompt-cache breakpoints and
`notices` the system notices added to the history without breaking the
tool_use/tool_result pairing. The settings are `policy.context.ContextPolicy`.
"""
