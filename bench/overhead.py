"""Scenario 1 — orchestration overhead, with an instant model.

Three phases per run:

A. create latency, API alone: 8 client processes each POST `creates_per_client`
   agents back to back (after a few warm-up creates) while no worker runs, so the
   number is the API's alone; the agents are then cancelled in SQL. Then the same
   clients paced, `create_rate_per_s` in all on fixed schedules (latency counted from
   when a request was due): back to back, 8 clients waiting for their answers make
   p50 ≈ 8 ÷ throughput, the server's capacity; paced, the latency of a create at a
   steady load well inside it. In turn with each, the same clients against the create
   floor (`bench.create_floor`: a minimal Flask view, one INSERT and one `send_task`),
   on the same server as ours (gevent) and on a threaded one (gthread).
B. create → first streamed event, one agent at a time: `POST /api/v1/agents/stream`
   and the time to its first `think` event. These agents also give the per-step
   overhead of an unloaded system; then the step floor (`step_floor`): a loop in
   the harness that asks the same model server, persists and publishes, and nothing
   else, clocked the same way. For both, also the part the target itself names
   (persist + publish + cancellation check): an iteration's last row built → its
   event seen by a subscriber in a process of its own (`driver.StepListener`).
C. throughput: `agents` agents created at once by the 8 clients; each makes 4
   planning calls and 3 `calculate` calls. Agents/s and ReACT steps/s over the
   makespan (first create sent → last `completed_at`), the per-step overhead under
   that load, and the CPU each process spent per agent (the workers' summed). Once
   per setting of `workers`: on 1 worker process and on one per core, as ops would
   run them (`jarvis-agents worker` is one process; it scales horizontally), each
   at the default concurrency. A and B always use 1 worker process. Then the same on
   1 worker process in native tool calling (`mode: native`): the model calls
   `calculate` as a tool, and the loop reads its tool calls instead of text.

Per-step overhead is measured from outside the worker. The bench model server
clocks each chat request (arrival: its first line read off the socket, before the
server parses headers; last byte of the reply written); for the
iterations k = 1..3 of an agent the overhead is `arrival(k) − reply_end(k−1) −
tool time(k−1)` (the tool time is the persisted OBSERVE `duration_ms`), and for the
final iteration it is `COMPLETED published − reply_end(3)`, the publish being timed
by a Redis subscriber in the harness. That covers everything the loop does between
model calls: reading the reply, parsing it, persisting THINK+ACT, publishing them,
persisting OBSERVE, publishing it, any cancellation check, rebuilding the prompt and
sending the next request; or, for the last iteration, the completing transaction and
its publishes.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from bench import driver
from bench.clients import stream_one
from bench.driver import StatusListener, StepListener, User
from bench.model_server import NATIVE_MODEL
from bench.processes import Process, machine_busy_s
from bench.stack import ModelServer, Stack
from bench.stats import latency_summary, percentile
from bench.step_floor import step_floor
from bench.step_overheads import parts, step_overheads
from bench.thread_turns import THREAD_TURNS, build_thread
from jarvis_agents.config import DEFAULT_WORKER_CONCURRENCY


def default_workers() -> tuple[int, ...]:
    """1 worker process, and one per core."""
    return tuple(sorted({1, os.cpu_count() or 1}))


@dataclass(frozen=True)
class OverheadSizes:
    agents: int = 500
    tool_calls: int = 3
    creates_per_client: int = 200
    create_warmup: int = 5
    create_rate_per_s: float = 200.0  # the paced creates, all clients together
    paced_creates_per_client: int = 100
    first_event_samples: int = 30
    step_floor_agents: int = 30
    workers: tuple[int, ...] = field(default_factory=default_workers)  # throughput phase
    timeout_s: float = 300.0


QUICK = OverheadSizes(
    agents=16, creates_per_client=5, create_warmup=1, paced_creates_per_client=5,
    first_event_samples=3,
    step_floor_agents=3, timeout_s=60.0,
)


def run(
    stack: Stack,
    users: list[User],
    *,
    runs: int,
    sizes: OverheadSizes,
    log: Any = print,
    after_run: Callable[[int], None] | None = None,
) -> dict[str, Any]:
    """All phases, `runs` times; `after_run(r)` follows throughput run r (the peer's turn)."""
    model = stack.start_model(latency_s=0.0, tool_calls=sizes.tool_calls)
    results: dict[str, Any] = {
        "create": [], "create_floor": [], "create_floor_threaded": [],
        "create_paced": [], "create_floor_paced": [], "create_floor_threaded_paced": [],
        "first_event": [], "first_event_thread": [], "step_floor": [], "throughput": [], "throughput_native": [],
    }
    floor, floor_url = stack.start_create_floor()
    threaded, threaded_url = stack.start_create_floor(threaded=True)
    try:
        for r in range(runs):  # ours and the floors in turn, so that all see the same machine
            for key, url, paced in (
                ("create", None, False), ("create_floor", floor_url, False),
                ("create_floor_threaded", threaded_url, False),
                ("create_paced", None, True), ("create_floor_paced", floor_url, True),
                ("create_floor_threaded_paced", threaded_url, True),
            ):
                results[key].append(
                    _create_latency(stack, users, sizes, r, base_url=url, paced=paced)
                )
                log(
                    f"  scenario 1, run {r + 1}: {key.replace('_', ' ')} p50 "
                    f"{results[key][-1]['p50_ms']:.2f} ms, p99 {results[key][-1]['p99_ms']:.2f} ms"
                )
    finally:
        stack.stop(floor)
        stack.stop(threaded)
    results["worker_concurrency"] = DEFAULT_WORKER_CONCURRENCY
    results["throughput"] = {str(n): [] for n in sizes.workers}
    workers = [stack.start_worker(model, name="worker-0")]
    listener = StatusListener(stack.redis)
    try:
        for r in range(runs):
            _scale(stack, model, workers, 1)
            steps_seen = StepListener(stack.redis_url)  # one at a time only
            try:
                fe = _first_events(stack, model, users[0], listener, sizes, r)
                floor = step_floor(stack, model, sizes.step_floor_agents, sizes.tool_calls, r)
                time.sleep(0.1)  # the last events reach the listener
            finally:
                seen = steps_seen.close()
            for result in (fe, floor):  # persist + publish: rows built → their event seen
                persisted = [seen[agent, seq] - built for agent, seq, built in result.pop("_built")
                             if (agent, seq) in seen]
                result.update(_prefixed("persist", latency_summary(persisted)))
            results["first_event"].append(fe)
            results["step_floor"].append(floor)
            # The same, each agent a follow-up in a thread of THREAD_TURNS earlier turns.
            thread_id = build_thread(stack, users[1], THREAD_TURNS, r)
            th = _first_events(stack, model, users[1], listener, sizes, r, tag="th",
                               extra={"thread_id": thread_id})
            th.pop("_built")
            results["first_event_thread"].append(th)
            fe = results["first_event"][-1]
            log(
                f"  scenario 1, run {r + 1}: per-step overhead p50 {fe['overhead_p50_ms']:.2f} ms "
                f"(one at a time); first event p50 {fe['p50_ms']:.1f} ms; in a thread of "
                f"{THREAD_TURNS} turns {th['overhead_p50_ms']:.2f} ms"
            )
            for n in sizes.workers:
                _scale(stack, model, workers, n)
                t = _throughput(stack, model, workers, users, listener, sizes, f"{r}w{n}")
                results["throughput"][str(n)].append(t)
                log(
                    f"  scenario 1, run {r + 1}, {n} worker process(es): "
                    f"{t['agents_per_s']:.1f} agents/s, per-step overhead p50 "
                    f"{t['overhead_p50_ms']:.2f} ms (loaded)"
                )
            # The same agents in native tool calling, on 1 worker process: the model
            # server's NATIVE_MODEL calls `calculate` as a tool instead of in text.
            _scale(stack, model, workers, 1)
            t = _throughput(stack, model, workers, users, listener, sizes, f"{r}native",
                            extra={"model": NATIVE_MODEL, "mode": "native"})
            results["throughput_native"].append(t)
            log(
                f"  scenario 1, run {r + 1}, native tool calling, 1 worker process: "
                f"{t['agents_per_s']:.1f} agents/s, per-step overhead p50 "
                f"{t['overhead_p50_ms']:.2f} ms (loaded)"
            )
            if after_run is not None:
                after_run(r)
    finally:
        listener.close()
        for worker in workers:
            stack.stop(worker)
        stack.stop(model.process)
    return results


def _scale(stack: Stack, model: ModelServer, workers: list[Process], n: int) -> None:
    """Exactly `n` worker processes running: start the missing ones, stop the extra ones."""
    while len(workers) > n:
        stack.stop(workers.pop())
    if len(workers) < n:
        workers += stack.start_workers(model, names=[f"worker-{i}" for i in range(len(workers), n)])


def _create_latency(
    stack: Stack, users: list[User], sizes: OverheadSizes, r: int, *,
    base_url: str | None = None, paced: bool = False,
) -> dict:
    """Creates from one client process per user, back to back or `paced`; at `base_url`
    (the floor) when given."""
    per_client = sizes.paced_creates_per_client if paced else sizes.creates_per_client
    tags = [f"c{r}{'p' if paced else ''}-{i}" for i in range(per_client * len(users))]
    rate = sizes.create_rate_per_s if paced else None
    replies = driver.create_agents(
        stack, users, tags, warmup_per_client=sizes.create_warmup, base_url=base_url,
        rate_per_s=rate,
    )
    elapsed = max(reply.sent_at + reply.latency_s for reply in replies) - min(
        reply.sent_at for reply in replies
    )
    errors = sum(1 for reply in replies if reply.status != 202)
    if base_url is None:
        driver.cancel_pending(stack)
    summary = latency_summary([reply.latency_s for reply in replies])
    return {
        **summary,
        "errors": errors,
        "clients": len(users),
        "creates_per_s": len(replies) / max(elapsed, 1e-9),
        # Paced: how late the clients themselves sent (sharing the cores); part of p99.
        **({"send_late_p99_ms": percentile([r.late_s for r in replies], 99) * 1000}
           if paced else {}),
    }


def _first_events(
    stack: Stack,
    model: ModelServer,
    user: User,
    listener: StatusListener,
    sizes: OverheadSizes,
    r: int,
    *,
    tag: str = "f",
    extra: dict[str, Any] | None = None,
) -> dict:
    """`first_event_samples` agents one after another, streamed (`extra` in each body)."""
    model.calls(clear=True)
    timings = [
        stream_one(stack.api_url, user.api_key, driver.goal(f"{tag}{r}-{i}"), extra)
        for i in range(sizes.first_event_samples)
    ]
    ids = [uuid.UUID(t.agent_id) for t in timings]
    time.sleep(0.2)  # the last COMPLETED publish reaches the listener
    rows = driver.agent_rows(stack, ids)
    overhead = step_overheads(
        rows, driver.step_rows(stack, ids), model.calls(clear=True), listener, sizes.tool_calls
    )
    summary = latency_summary([t.first_think_s for t in timings])
    return {
        **summary,
        "done_p50_ms": latency_summary([t.done_s for t in timings])["p50_ms"],
        "completed": sum(1 for row in rows if row.status == "COMPLETED"),
        **_prefixed("overhead", latency_summary(overhead["samples"])),
        **parts(overhead),
        "_built": overhead["built"],  # for persist + publish, once the events are in
    }


def _throughput(
    stack: Stack,
    model: ModelServer,
    workers: list[Process],
    users: list[User],
    listener: StatusListener,
    sizes: OverheadSizes,
    run: str,
    *,
    extra: dict[str, Any] | None = None,
) -> dict:
    model.calls(clear=True)
    tags = [f"t{run}-{i}" for i in range(sizes.agents)]
    cpu0 = _cpu(stack, model, workers)
    replies = driver.create_agents(stack, users, tags, extra=extra)
    ids = driver.accepted_ids(replies)
    started = min(reply.sent_at for reply in replies)
    terminal = driver.wait_terminal(stack, ids, timeout_s=sizes.timeout_s, listener=listener)
    cpu1 = _cpu(stack, model, workers)
    time.sleep(0.2)
    rows = driver.agent_rows(stack, ids)
    completed = [row for row in rows if row.status == "COMPLETED"]
    ended = max(row.completed_at.timestamp() for row in rows if row.completed_at)
    makespan = ended - started
    iterations = sum(row.step_count for row in rows)
    steps = driver.step_rows(stack, ids)
    overhead = step_overheads(rows, steps, model.calls(clear=True), listener, sizes.tool_calls)
    n = len(ids)
    cpu = {name: (cpu1[name] - cpu0.get(name, 0.0)) * 1000 / n for name in cpu1}
    return {
        "workers": len(workers),
        "agents": n,
        "completed": len(completed),
        "terminal": terminal,
        "makespan_s": makespan,
        "agents_per_s": len(completed) / makespan,
        "react_steps_per_s": iterations / makespan,
        "step_rows_per_s": len(steps) / makespan,
        **_prefixed("overhead", latency_summary(overhead["samples"])),
        **parts(overhead),
        **_prefixed("create_loaded", latency_summary([reply.latency_s for reply in replies])),
        **{f"cpu_ms_per_agent_{name}": value for name, value in cpu.items()},
    }


def _cpu(stack: Stack, model: ModelServer, workers: list[Process]) -> dict[str, float]:
    """CPU seconds so far, per part of the system (PostgreSQL: our database's backends;
    workers: all the running worker processes together)."""
    assert stack.api is not None
    return {
        "workers": sum(w.cpu_s() for w in workers),
        "api": stack.api.cpu_s(),
        "model": model.process.cpu_s(),
        **stack.service_cpu_s(),
        "machine": machine_busy_s(),
    }


def _prefixed(prefix: str, summary: dict[str, float]) -> dict[str, float]:
    return {f"{prefix}_{key}": value for key, value in summary.items()}
