"""The settings that guard a run, and their pure checks: `budget` and `pricing` (what
a run may spend), `stall` (repetition), `reflection`, `verify`, `approval`
(who decides on a tool call) and `context` (the context window's settings).
"""
