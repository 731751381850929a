"""Load generators: HTTP clients that run in processes of their own.

The issue measured ~7 ms added to a create's p50 by the GIL when eight client threads
shared one interpreter, so each concurrent client here is a separate process (spawned,
not forked: the harness has threads). A client keeps one keep-alive connection
(`http.client` writes a small request in one send, so Nagle never holds it), waits at
a barrier so that all start together, and reports wall-clock send times and
latencies measured with `perf_counter`.
"""

from __future__ import annotations

import http.client
import json
import multiprocessing
import queue
import threading
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

SPAWN = multiprocessing.get_context("spawn")


@dataclass(frozen=True)
class Reply:
    sent_at: float  # wall clock (time.time) when the request was sent (paced: was due)
    latency_s: float
    status: int
    body: dict[str, Any]
    late_s: float = 0.0  # paced: how late the client itself sent it (its own delay)


def _connection(base_url: str) -> http.client.HTTPConnection:
    parts = urlsplit(base_url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=120)
    conn.connect()
    return conn


def _post(
    conn: http.client.HTTPConnection, path: str, body: bytes, headers: dict[str, str]
) -> tuple[int, bytes]:
    conn.request("POST", path, body=body, headers=headers)
    response = conn.getresponse()
    return response.status, response.read()


def _create_client(
    base_url: str,
    path: str,
    headers: dict[str, str],
    bodies: list[bytes],
    warmup: list[bytes],
    barriers: tuple[Any, Any],
    out: Any,
    index: int,
    interval_s: float | None,
    offset_s: float,
) -> None:
    start_together, done_together = barriers
    try:
        conn = _connection(base_url)
        for body in warmup:
            _post(conn, path, body, headers)
        replies: list[tuple[float, float, int, bytes, float]] = []
        start_together.wait()
        start, start_wall = time.perf_counter() + offset_s, time.time() + offset_s
        for i, body in enumerate(bodies):
            began = time.perf_counter()
            late = 0.0
            if interval_s is not None:
                # Paced: request i is due at start + i × interval, and its latency counts
                # from then, so a reply that made the next request late is not hidden
                # (no coordinated omission).
                due = start + i * interval_s
                if due > began:
                    time.sleep(due - began)
                late = time.perf_counter() - due
                began = due
            sent_at = start_wall + (began - start)
            status, raw = _post(conn, path, body, headers)
            replies.append((sent_at, time.perf_counter() - began, status, raw, late))
        conn.close()
        # Idle until every client is done: one that exited now (an interpreter's teardown
        # takes a core for ~10-20 ms here) would delay the others' last requests.
        done_together.wait()
        out.put((index, replies, None))
    except Exception as exc:  # noqa: BLE001 - reported to the harness, which raises it
        out.put((index, [], f"{type(exc).__name__}: {exc}"))
        for barrier in barriers:  # nobody waits for this client any longer
            barrier.abort()


def post_concurrently(
    base_url: str,
    path: str,
    *,
    headers: list[dict[str, str]],
    bodies: list[list[bytes]],
    warmup: list[list[bytes]] | None = None,
    rate_per_s: float | None = None,
    timeout_s: float = 600,
) -> list[Reply]:
    """POST each client's bodies in order, one process per client, all starting together.

    Back to back (each client sends as soon as its last reply came), or with
    `rate_per_s` at that offered rate in all: each client on a fixed schedule, the
    clients' schedules staggered evenly, latency counted from when a request was due.
    Returns every reply, in no particular order; raises, with its reason, as soon as a
    client fails.
    """
    clients = len(bodies)
    interval_s = clients / rate_per_s if rate_per_s else None
    barriers = (SPAWN.Barrier(clients + 1), SPAWN.Barrier(clients))
    out = SPAWN.Queue()
    processes = [
        SPAWN.Process(
            target=_create_client,
            args=(
                base_url,
                path,
                headers[i],
                bodies[i],
                (warmup or [[]] * clients)[i],
                barriers,
                out,
                i,
                interval_s,
                i * interval_s / clients if interval_s else 0.0,
            ),
            daemon=True,
        )
        for i in range(clients)
    ]
    for process in processes:
        process.start()
    try:
        try:
            barriers[0].wait(timeout=120)  # every client is connected and warmed up
        except threading.BrokenBarrierError:
            pass  # a client failed: its reason is on the queue
        results: list[Reply] = []
        deadline = time.monotonic() + timeout_s
        for _ in range(clients):
            index, replies, error = _next_result(out, processes, deadline)
            if error is not None:
                raise RuntimeError(f"client process {index} failed: {error}")
            results.extend(
                Reply(sent_at, latency_s, status, json.loads(raw) if raw else {}, late_s)
                for sent_at, latency_s, status, raw, late_s in replies
            )
    finally:
        for process in processes:
            process.join(timeout=10)
            if process.is_alive():
                process.kill()
    return results


def _next_result(out: Any, processes: list[Any], deadline: float) -> tuple[int, list, str | None]:
    """The next client's report; raises if a client died without one, or at `deadline`."""
    while True:
        try:
            return out.get(timeout=1.0)
        except queue.Empty:
            dead = [p.exitcode for p in processes if p.exitcode not in (None, 0)]
            if dead:
                raise RuntimeError(f"a client process died (exit code {dead[0]})") from None
            if time.monotonic() > deadline:
                raise TimeoutError("the client processes did not finish in time") from None


# --- one agent streamed at a time --------------------------------------------------------


@dataclass(frozen=True)
class StreamTiming:
    agent_id: str
    first_think_s: float  # request sent → first `think` event received
    done_s: float  # request sent → `done` received
    events: list[str]


def stream_one(
    base_url: str, api_key: str, goal: str, extra: dict[str, Any] | None = None
) -> StreamTiming:
    """POST /api/v1/agents/stream and read it to the end, timing the first `think`;
    `extra` fields go into the body."""
    conn = _connection(base_url)
    body = json.dumps({"goal": goal, **(extra or {})}).encode()
    headers = {
        "Authorization": f"Bearer {api_key}",
        "Content-Type": "application/json",
        "Accept": "text/event-stream",
    }
    try:
        began = time.perf_counter()
        conn.request("POST", "/api/v1/agents/stream", body=body, headers=headers)
        response = conn.getresponse()
        if response.status != 200:
            raise RuntimeError(f"POST /agents/stream: HTTP {response.status}: {response.read()!r}")
        agent_id = (response.getheader("Location") or "").rsplit("/", 1)[-1]
        first_think = None
        events: list[str] = []
        while True:
            line = response.readline()
            if not line:
                raise RuntimeError(f"stream of {agent_id} ended without `done`: {events}")
            if not line.startswith(b"event: "):
                continue
            event = line[7:].strip().decode()
            events.append(event)
            if event == "think" and first_think is None:
                first_think = time.perf_counter() - began
            if event == "done":
                done = time.perf_counter() - began
                break
        if first_think is None:
            raise RuntimeError(f"stream of {agent_id} had no `think` event: {events}")
        return StreamTiming(agent_id, first_think, done, events)
    finally:
        conn.close()
