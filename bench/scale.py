"""Scenario 7 — scale on one worker process (issue 23): 1,000 and 5,000 agents × 2 model
calls × 2 s on ONE `jarvis-agents worker` at its default settings, created at once by the
clients (one process per user).

The ideal is what one agent alone takes plus the time to create them all: every agent
waits on the model at the same time once it exists. What one worker process can hold in
flight is what an operator pays for, so beside the makespan the scenario reports the
worker's memory per agent in flight (its peak resident memory above the idle figure,
over the agents in flight at the peak) and its CPU per agent. One process runs Python
on one core at a time: when the worker's CPU seconds exceed the ideal, they are the floor
the makespan cannot go under on this machine, and the report says so.
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass
from typing import Any

from bench import driver
from bench.driver import StatusListener, User
from bench.figures import cell, med, num
from bench.processes import Process, rss_bytes
from bench.stack import Stack
from jarvis_agents.config import DEFAULT_WORKER_CONCURRENCY


@dataclass(frozen=True)
class ScaleSizes:
    agents: tuple[int, ...] = (1000, 5000)
    latency_s: float = 2.0
    planning_calls: int = 2
    timeout_s: float = 600.0


QUICK = ScaleSizes(agents=(40,), latency_s=0.2, timeout_s=60.0)
# The bounds: makespan ÷ ideal, by how many agents.
BOUNDS = {1000: 1.5, 5000: 2.0}
MEMORY_GOAL_KIB = 256


def run(stack: Stack, users: list[User], *, runs: int, sizes: ScaleSizes,
        log: Any = print) -> dict[str, Any]:
    model = stack.start_model(latency_s=sizes.latency_s, tool_calls=sizes.planning_calls - 1)
    results: dict[str, Any] = {"worker_concurrency": DEFAULT_WORKER_CONCURRENCY, "by_agents": {}}
    try:
        worker = stack.start_worker(model, name="worker-scale")
        listener = StatusListener(stack.redis)
        try:
            for n in sizes.agents:
                found = results["by_agents"].setdefault(str(n), [])
                for r in range(runs):
                    found.append(_once(stack, worker, users, listener, sizes, n, f"{n}-{r}"))
                    m = found[-1]
                    log(f"  scenario 7, {n} agents, run {r + 1}: makespan {m['makespan_s']:.1f} s "
                        f"= {m['vs_ideal']:.2f}x ideal ({m['ideal_s']:.1f} s); worker CPU "
                        f"{m['worker_cpu_s']:.1f} s, {m['cpu_ms_per_agent']:.2f} ms per agent; "
                        f"{m['kib_per_agent']:.0f} KiB per agent in flight "
                        f"({m['in_flight']} at the peak)")
        finally:
            listener.close()
            stack.stop(worker)
    finally:
        stack.stop(model.process)
    return results


def _running(stack: Stack) -> int:
    from sqlalchemy import text

    with stack.engine.connect() as conn:
        return int(conn.execute(text("SELECT count(*) FROM agents WHERE status = 'RUNNING'")).scalar_one())


def _worker_rss(worker: Process) -> int:
    return sum(rss_bytes(pid) for pid in worker.tree())


def _once(stack: Stack, worker: Process, users: list[User], listener: StatusListener,
          sizes: ScaleSizes, n: int, tag: str) -> dict[str, Any]:
    idle_rss = _worker_rss(worker)
    peak = {"rss": idle_rss, "in_flight": 0}
    done = threading.Event()

    def sample() -> None:  # the peak of the worker's memory, and of the agents it ran
        counted = -math.inf
        while not done.wait(0.1):
            peak["rss"] = max(peak["rss"], _worker_rss(worker))
            if time.monotonic() - counted >= 1.0:  # a count costs PostgreSQL: once a second
                counted = time.monotonic()
                peak["in_flight"] = max(peak["in_flight"], _running(stack))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    cpu0 = worker.cpu_s()
    replies = driver.create_agents(stack, users, [f"scale{tag}-{i}" for i in range(n)])
    ids = driver.accepted_ids(replies)
    started = min(reply.sent_at for reply in replies)
    created = max(reply.sent_at + reply.latency_s for reply in replies) - started
    driver.wait_terminal(stack, ids, timeout_s=sizes.timeout_s, listener=listener)
    done.set()
    sampler.join()
    cpu_s = worker.cpu_s() - cpu0
    rows = driver.agent_rows(stack, ids)
    ended = max(row.completed_at.timestamp() for row in rows if row.completed_at)
    makespan = ended - started
    ideal = sizes.planning_calls * sizes.latency_s + created
    in_flight = max(peak["in_flight"], 1)
    return {
        "agents": len(ids),
        "completed": sum(1 for row in rows if row.status == "COMPLETED"),
        "makespan_s": makespan,
        "all_created_s": created,
        "ideal_s": ideal,
        "vs_ideal": makespan / ideal,
        "worker_cpu_s": cpu_s,
        "floor_vs_ideal": max(ideal, cpu_s) / ideal,
        "cpu_ms_per_agent": cpu_s * 1000 / len(ids),
        "in_flight": peak["in_flight"],
        "kib_per_agent": (peak["rss"] - idle_rss) / 1024 / in_flight,
        "peak_rss_mib": peak["rss"] / 2**20,
    }


# --- the report ----------------------------------------------------------------------------


def targets(s: dict[str, Any]) -> list[tuple[str, str, bool | None]]:
    """The issue's targets, one row each: (what, the figures, met; None: not measured)."""
    rows: list[tuple[str, str, bool | None]] = []
    for n, runs in s["by_agents"].items():
        bound = BOUNDS.get(int(n))
        vs, floor = med(runs, "vs_ideal"), med(runs, "floor_vs_ideal")
        if bound is None or math.isnan(vs):
            continue
        below_floor = floor > bound
        measured = (f"{num(med(runs, 'makespan_s'))} s = {num(vs, 2)}× the ideal "
                    f"({num(med(runs, 'ideal_s'))} s); the worker's CPU alone is "
                    f"{num(floor, 2)}× it" + (" — the bound is below this machine's floor"
                                              if below_floor else ""))
        label = (f"{int(n):,} agents on one worker process at default settings within "
                 f"{bound:g}× the ideal (issue 23)")
        rows.append((label, measured, vs <= bound))
    every = [r for runs in s["by_agents"].values() for r in runs]
    kib = med(every, "kib_per_agent")
    if not math.isnan(kib):
        rows.append((f"the worker's memory per agent in flight ≤ {MEMORY_GOAL_KIB} KiB (issue 23)",
                     f"{num(kib, 0)} KiB", kib <= MEMORY_GOAL_KIB))
    return rows


def section(s: dict[str, Any]) -> list[str]:
    sizes = s["sizes"]
    out = [
        "## 7. Scale on one worker process",
        "",
        (
            f"Agents × {sizes['planning_calls']} model calls × {num(sizes['latency_s'])} s on ONE "
            f"worker process at its default settings (`JARVIS_WORKER_CONCURRENCY` "
            f"{s['worker_concurrency']}), created at once by the clients. *Ideal* = one agent "
            "alone + the time to create them all. *Worker CPU* = the worker process's CPU "
            "seconds over the run: it runs Python on one core at a time, so when they exceed "
            "the ideal they are the floor. *Memory per agent* = the worker's peak resident "
            "memory above its idle figure ÷ the agents running at the peak."
        ),
        "",
        "| agents | makespan | ideal | × ideal | worker CPU | CPU per agent | in flight | memory per agent | completed |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for n, runs in s["by_agents"].items():
        out.append(
            f"| {int(n):,} | {cell(runs, 'makespan_s', unit=' s')} | {cell(runs, 'ideal_s', unit=' s')} "
            f"| {cell(runs, 'vs_ideal', 2)} | {cell(runs, 'worker_cpu_s', unit=' s')} "
            f"| {cell(runs, 'cpu_ms_per_agent', 2, ' ms')} | {cell(runs, 'in_flight', 0)} "
            f"| {cell(runs, 'kib_per_agent', 0, ' KiB')} | {cell(runs, 'completed', 0)} |"
        )
    return [*out, ""]
