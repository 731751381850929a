"""Scenario 2 — I/O-bound concurrency: slow model calls on one worker process.

`agents` agents, each making 2 planning calls (one `calculate`, then the answer) to
a model that takes `latency_s` per call, on ONE `jarvis-agents worker` process at
the default `JARVIS_WORKER_CONCURRENCY` (read from `Settings`, as the worker reads
it). The ideal makespan is what one agent alone would take, 2 × latency (4 s at
2 s): every agent waits on the model at the same time, which needs a thread per
agent — the default (1000) fits the 200 agents in one wave, where the former 100
took two. The makespan runs from the first create sent to the last `completed_at`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bench import driver
from bench.driver import User
from bench.processes import Process
from bench.stack import Stack
from jarvis_agents.config import DEFAULT_WORKER_CONCURRENCY


@dataclass(frozen=True)
class ConcurrencySizes:
    agents: int = 200
    latency_s: float = 2.0
    planning_calls: int = 2
    concurrency: int | None = None  # None: the worker's default
    timeout_s: float = 120.0


QUICK = ConcurrencySizes(agents=20, latency_s=0.2, timeout_s=60.0)


def ideal_s(sizes: ConcurrencySizes) -> float:
    return sizes.planning_calls * sizes.latency_s


def run(
    stack: Stack,
    users: list[User],
    *,
    runs: int,
    sizes: ConcurrencySizes,
    log: Any = print,
    after_run: Callable[[int], None] | None = None,
) -> dict[str, Any]:
    """`runs` times; `after_run(r)` follows run r (the peer's turn)."""
    model = stack.start_model(latency_s=sizes.latency_s, tool_calls=sizes.planning_calls - 1)
    results: dict[str, Any] = {
        "ideal_s": ideal_s(sizes),
        "worker_concurrency": sizes.concurrency or DEFAULT_WORKER_CONCURRENCY,
        "setting": f"--concurrency {sizes.concurrency}" if sizes.concurrency else "default",
        "runs": [],
    }
    try:
        worker = stack.start_worker(model, concurrency=sizes.concurrency, name="worker-io")
        try:
            for r in range(runs):
                results["runs"].append(_once(stack, worker, users, sizes, str(r)))
                m = results["runs"][-1]
                log(
                    f"  scenario 2 ({results['setting']}, concurrency "
                    f"{results['worker_concurrency']}), run {r + 1}: makespan "
                    f"{m['makespan_s']:.2f} s = {m['vs_ideal']:.2f}x ideal"
                )
                if after_run is not None:
                    after_run(r)
        finally:
            stack.stop(worker)
    finally:
        stack.stop(model.process)
    return results


def _once(
    stack: Stack, worker: Process, users: list[User], sizes: ConcurrencySizes, tag: str
) -> dict:
    assert stack.api is not None
    cpu0 = (worker.cpu_s(), stack.api.cpu_s())
    replies = driver.create_agents(stack, users, [f"io{tag}-{i}" for i in range(sizes.agents)])
    ids = driver.accepted_ids(replies)
    started = min(reply.sent_at for reply in replies)
    created = max(reply.sent_at + reply.latency_s for reply in replies) - started
    driver.wait_terminal(stack, ids, timeout_s=sizes.timeout_s)
    cpu1 = (worker.cpu_s(), stack.api.cpu_s())
    rows = driver.agent_rows(stack, ids)
    completed = sum(1 for row in rows if row.status == "COMPLETED")
    ended = max(row.completed_at.timestamp() for row in rows if row.completed_at)
    makespan = ended - started
    # CPU seconds per second of makespan: 1.0 = one core busy the whole time.
    return {
        "agents": len(ids),
        "completed": completed,
        "makespan_s": makespan,
        "vs_ideal": makespan / ideal_s(sizes),
        "all_created_s": created,
        "worker_cpu_share": (cpu1[0] - cpu0[0]) / makespan,
        "api_cpu_share": (cpu1[1] - cpu0[1]) / makespan,
    }
