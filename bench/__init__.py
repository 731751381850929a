"""Reproducible benchmarks of jarvis-agents against the real system (issue 7).

`python -m bench` (or `make bench`) starts PostgreSQL database, Redis, the API, workers
and a model server of a chosen latency, runs every scenario, and writes BENCHMARKS.md.
"""
