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

import json
import os
import re
import time
import uuid
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from bench import driver
from bench.clients import stream_one
from bench.driver import AgentRow, StatusListener, StepListener, StepRow, User
from bench.model_server import NATIVE_MODEL
from bench.processes import Process, machine_busy_s
from bench.stack import ModelServer, Stack
from bench.stats import latency_summary, percentile
from jarvis_agents.config import DEFAULT_WORKER_CONCURRENCY

TAG = re.compile(r"\[bench ([^\]]+)\]")


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
        "first_event": [], "step_floor": [], "throughput": [], "throughput_native": [],
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
            fe = results["first_event"][-1]
            log(
                f"  scenario 1, run {r + 1}: per-step overhead p50 {fe['overhead_p50_ms']:.2f} ms "
                f"(one at a time); first event p50 {fe['p50_ms']:.1f} ms"
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
) -> dict:
    model.calls(clear=True)
    timings = [
        stream_one(stack.api_url, user.api_key, driver.goal(f"f{r}-{i}"))
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
        **_parts(overhead),
        "_built": overhead["built"],  # for persist + publish, once the events are in
    }


# The rows of one inline-tool iteration, as the bench model's agents write them.
_FLOOR_ROWS = (
    ("THINK", None, "I need to multiply the numbers first."),
    ("ACT", "calculate", "1234 * 902"),
    ("OBSERVE", "calculate", "1113068"),
)


def step_floor(stack: Stack, model: ModelServer, agents: int, tool_calls: int, r: int) -> dict:
    """The per-step overhead of a loop that does only what the target names.

    One agent at a time, from the harness: ask the model server for a reply (a kept-
    alive `http.client` connection, unstreamed), then persist the iteration's three rows
    in one durable INSERT (autocommit, the same table and indexes), publish their three
    events in one Redis PUBLISH round trip, and ask for the next reply. No guard, no
    parsing beyond the JSON, no prompt, no tool, no threads. Clocked as ours is: the
    model server's arrival of request k − the end of its reply k−1 (iterations 1 to
    `tool_calls`). Its waits are ours (the model server, PostgreSQL's commit, Redis),
    so it pays what this machine charges for them, wake-ups of idle cores included.
    Also `_built`, as `_first_events` gives it, for its persist + publish.
    """
    import http.client
    from urllib.parse import urlsplit

    from sqlalchemy import text

    from jarvis_agents.events import AGENT_CHANNEL, step_event
    from jarvis_agents.lifecycle import Step, StepType, utcnow

    with stack.engine.connect() as conn:  # any agent row will do for the foreign key
        agent_id = conn.execute(
            text("SELECT id FROM agents ORDER BY created_at LIMIT 1 OFFSET :r"), {"r": r}
        ).scalar_one()
    insert = (
        "INSERT INTO agent_steps (agent_id, seq, step, type, tool, content, created_at, "
        "duration_ms, attempt) VALUES " + ", ".join(["(%s, %s, %s, %s, %s, %s, %s, %s, 1)"] * 3)
    )
    channel = AGENT_CHANNEL.format(agent_id)
    url = urlsplit(model.url)
    chat = http.client.HTTPConnection(url.hostname, url.port, timeout=30)
    raw = stack.engine.raw_connection()
    tags = [f"floor{r}-{i}" for i in range(agents)]
    written: list[tuple[str, int, float]] = []  # (agent, its last seq, its rows built)
    model.calls(clear=True)
    try:
        # On psycopg2's connection: set on SQLAlchemy's proxy around it, the attribute
        # did nothing, and the floor's INSERTs ran in one transaction that never
        # committed (a floor without the commit's WAL flush, until this was found).
        raw.dbapi_connection.autocommit = True
        with raw.cursor() as cursor:
            cursor.execute("DELETE FROM agent_steps WHERE agent_id = %s", (str(agent_id),))
            seq = 0
            for tag in tags:
                messages = [{"role": "user", "content": driver.goal(tag)}]
                for k in range(tool_calls + 1):
                    body = json.dumps({"model": "llama3.2", "messages": messages, "stream": False})
                    chat.request("POST", "/api/chat", body=body,
                                 headers={"Content-Type": "application/json"})
                    reply = json.loads(chat.getresponse().read())["message"]["content"]
                    if k == tool_calls:
                        break
                    now = utcnow()
                    steps = [  # one agent row holds them all: iterations numbered throughout
                        Step(seq + i + 1, seq // 3, StepType(kind), content, tool=tool,
                             created_at=now, duration_ms=0)
                        for i, (kind, tool, content) in enumerate(_FLOOR_ROWS)
                    ]
                    seq += len(steps)
                    written.append((str(agent_id), seq, now.timestamp()))
                    cursor.execute(insert, [
                        value for s in steps
                        for value in (str(agent_id), s.seq, s.step, s.type.value, s.tool,
                                      s.content, s.created_at, s.duration_ms)
                    ])
                    pipeline = stack.redis.pipeline(transaction=False)
                    for s in steps:
                        pipeline.publish(channel, json.dumps(step_event(agent_id, s)))
                    pipeline.execute()
                    messages += [{"role": "assistant", "content": reply},
                                 {"role": "user", "content": "OBSERVATION: 1113068"}]
            _check_committed(stack, agent_id, seq)
            cursor.execute("DELETE FROM agent_steps WHERE agent_id = %s", (str(agent_id),))
    finally:
        raw.close()
        chat.close()
    turns = _turns(model.calls(clear=True))
    samples = [
        turns[tag][k][0] - turns[tag][k - 1][1]
        for tag in tags
        for k in range(1, tool_calls + 1)
        if k in turns[tag] and k - 1 in turns[tag]
    ]
    return {**latency_summary(samples), "_built": written}


def _check_committed(stack: Stack, agent_id: Any, rows: int) -> None:
    """Fail unless another connection sees the floor's `rows` rows: its INSERTs committed."""
    from sqlalchemy import text

    with stack.engine.connect() as conn:
        seen = conn.execute(
            text("SELECT count(*) FROM agent_steps WHERE agent_id = :id"), {"id": agent_id}
        ).scalar_one()
    if seen != rows:
        raise RuntimeError(f"the step floor's INSERTs did not commit: {seen} of {rows} rows seen")


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
        **_parts(overhead),
        **_prefixed("create_loaded", latency_summary([reply.latency_s for reply in replies])),
        **{f"cpu_ms_per_agent_{name}": value for name, value in cpu.items()},
    }


def _turns(calls: list[tuple]) -> dict[str, dict[int, tuple[float, float]]]:
    """The model server's clocks, by agent tag and turn: (arrived, reply finished)."""
    turns: dict[str, dict[int, tuple[float, float]]] = defaultdict(dict)
    for tag, turn, arrived, finished in calls:
        turns[tag][turn] = (arrived, finished)
    return turns


def step_overheads(
    rows: list[AgentRow],
    steps: list[StepRow],
    calls: list[tuple],
    listener: StatusListener,
    tool_calls: int,
) -> dict[str, Any]:
    """Per-iteration time outside the model and the tool (see the module docstring).

    Also `built`: (agent_id, seq, wall clock) of each inline iteration's last row (its
    OBSERVE) when it was built, for what the target itself names, persist + publish +
    cancellation check: from then until that row's event is seen by a subscriber.

    Also split into parts with the rows' `created_at` (taken by the worker as it builds
    them): `reply` = end of the model's reply → the iteration's rows built (the model
    client's tail: reading, parsing); `act` = rows built → tool result, minus the tool's
    own time (an inline tool's bookkeeping); `next` = tool result → next model request
    arrives (the one write of THINK+ACT+OBSERVE, publish, the cancellation check,
    prompt, request) or, for the final iteration, rows built → COMPLETED published.
    """
    turns = _turns(calls)
    written: dict[tuple[uuid.UUID, int, str], StepRow] = {
        (s.agent_id, s.step, s.type): s for s in steps
    }
    parts: dict[str, list[float]] = {
        "samples": [],
        "start": [],
        "reply": [],
        "act": [],
        "next": [],
        "final": [],
        "built": [],
    }
    for row in rows:
        match = TAG.search(row.goal)
        calls_of = turns.get(match.group(1)) if match else None
        if row.status != "COMPLETED" or not calls_of or len(calls_of) != tool_calls + 1:
            continue
        for k in range(1, tool_calls + 1):
            observe = written.get((row.id, k - 1, "OBSERVE"))
            think = written.get((row.id, k - 1, "THINK"))
            tool_s = (observe.duration_ms or 0) / 1000 if observe else 0.0
            parts["samples"].append(calls_of[k][0] - calls_of[k - 1][1] - tool_s)
            if observe and think:
                built, result = think.created_at.timestamp(), observe.created_at.timestamp()
                parts["reply"].append(built - calls_of[k - 1][1])
                parts["act"].append(result - built - tool_s)
                parts["next"].append(calls_of[k][0] - result)
                parts["built"].append((str(row.id), observe.seq, result))
        completed_seen = listener.get(row.id, "COMPLETED")
        final = written.get((row.id, tool_calls, "THINK"))
        if completed_seen is not None:
            parts["samples"].append(completed_seen - calls_of[tool_calls][1])
            if final is not None:
                parts["reply"].append(final.created_at.timestamp() - calls_of[tool_calls][1])
                parts["final"].append(completed_seen - final.created_at.timestamp())
        running_seen = listener.get(row.id, "RUNNING")
        if running_seen is not None:
            parts["start"].append(calls_of[0][0] - running_seen)
    return parts


def _parts(overhead: dict[str, list[float]]) -> dict[str, float]:
    """p50 of each part of the per-step overhead, in ms."""
    return {
        f"part_{name}_p50_ms": percentile(overhead[name], 50) * 1000
        for name in ("reply", "act", "next", "final", "start")
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
