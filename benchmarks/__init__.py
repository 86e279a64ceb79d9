"""Benchmarks for `make bench` (never run by `make test`); see docs/performance.md."""
