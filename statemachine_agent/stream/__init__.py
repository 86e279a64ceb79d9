"""Streaming a run: its events as they happen (`Agent.astream`, `Agent.stream`)."""
