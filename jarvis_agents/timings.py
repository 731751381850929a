"""Where the ReACT loop reports how long things took and what they used: the interface the
executor calls, Prometheus's in production (jarvis_agents.metrics), the cluster's
figures in a worker (jarvis_agents.cluster_metrics), nothing in tests."""

from __future__ import annotations

from typing import Protocol


class Timings(Protocol):
    """Where the loop reports how long things took (Prometheus in production)."""

    def planning(self, seconds: float) -> None: ...
    def tool(self, name: str, seconds: float) -> None: ...
    def step(self, kind: str) -> None: ...
    def agent(self, status: str, seconds: float) -> None: ...
    def tokens(self, model: str, *, input_tokens: int, output_tokens: int) -> None: ...


class NoTimings:
    """Timings that go nowhere: tests, tools, and a loop run without metrics."""

    def planning(self, seconds: float) -> None:
        pass

    def tool(self, name: str, seconds: float) -> None:
        pass

    def step(self, kind: str) -> None:
        pass

    def agent(self, status: str, seconds: float) -> None:
        pass

    def tokens(self, model: str, *, input_tokens: int, output_tokens: int) -> None:
        pass
