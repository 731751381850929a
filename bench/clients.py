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
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

SPAWN = multiprocessing.get_context("spawn")


@dataclass(frozen=True)
class Reply:
    sent_at: float  # wall clock (time.time) when the request was sent
    latency_s: float
    status: int
    body: dict[str, Any]


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
    barrier: Any,
    out: Any,
    index: int,
    interval_s: float | None,
    offset_s: float,
) -> None:
    conn = _connection(base_url)
    for body in warmup:
        _post(conn, path, body, headers)
    replies: list[tuple[float, float, int, bytes]] = []
    barrier.wait()
    start, start_wall = time.perf_counter() + offset_s, time.time() + offset_s
    for i, body in enumerate(bodies):
        began = time.perf_counter()
        if interval_s is not None:
            # Paced: request i is due at start + i × interval, and its latency counts
            # from then, so a reply that made the next request late is not hidden
            # (no coordinated omission).
            due = start + i * interval_s
            if due > began:
                time.sleep(due - began)
            began = due
        sent_at = start_wall + (began - start)
        status, raw = _post(conn, path, body, headers)
        replies.append((sent_at, time.perf_counter() - began, status, raw))
    conn.close()
    # Idle until every client is done: one that exited now (an interpreter's teardown
    # takes a core for ~10-20 ms here) would delay the others' last requests.
    barrier.wait()
    out.put((index, replies))


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
    Returns every reply, in no particular order; raises if a client process fails.
    """
    clients = len(bodies)
    interval_s = clients / rate_per_s if rate_per_s else None
    barrier = SPAWN.Barrier(clients + 1)
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
                barrier,
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
        barrier.wait(timeout=120)  # every client is connected and warmed up
        barrier.wait(timeout=timeout_s)  # every client has its replies
        results: list[Reply] = []
        for _ in range(clients):
            _, replies = out.get(timeout=timeout_s)
            results.extend(
                Reply(sent_at, latency_s, status, json.loads(raw) if raw else {})
                for sent_at, latency_s, status, raw in replies
            )
    finally:
        for process in processes:
            process.join(timeout=10)
            if process.is_alive():
                process.kill()
    return results


# --- one agent streamed at a time --------------------------------------------------------


@dataclass(frozen=True)
class StreamTiming:
    agent_id: str
    first_think_s: float  # request sent → first `think` event received
    done_s: float  # request sent → `done` received
    events: list[str]


def stream_one(base_url: str, api_key: str, goal: str) -> StreamTiming:
    """POST /api/v1/agents/stream and read it to the end, timing the first `think`."""
    conn = _connection(base_url)
    body = json.dumps({"goal": goal}).encode()
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
