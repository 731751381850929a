"""Driving our system: create agents through the API, wait for them, read what they did.

Creates go through `POST /api/v1/agents` from several client processes; completion
is read from PostgreSQL (the record), and status changes are also timed as they are
published on Redis, by a listener in the harness.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import text

from bench.clients import SPAWN, Reply, post_concurrently
from bench.stack import Stack
from jarvis_agents.lifecycle import TERMINAL

ENDED = frozenset(status.value for status in TERMINAL)


@dataclass(frozen=True)
class User:
    id: uuid.UUID
    api_key: str

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}", "Content-Type": "application/json"}


def goal(tag: str) -> str:
    """A goal the bench model recognises (`[bench TAG]`), unique per agent."""
    return f"[bench {tag}] What is 1234 * 902, then 1235 * 902, then 1236 * 902?"


def create_agents(
    stack: Stack, users: list[User], tags: list[str], *, warmup_per_client: int = 0,
    base_url: str | None = None, rate_per_s: float | None = None,
    extra: dict[str, Any] | None = None,
) -> list[Reply]:
    """Create one agent per tag, the tags dealt round-robin to one client process per user
    (at `base_url`, the API's unless given); back to back, or paced at `rate_per_s` in all.
    `extra` fields go into every body."""
    clients = len(users)
    bodies = [
        [json.dumps({"goal": goal(t), **(extra or {})}).encode() for t in tags[i::clients]]
        for i in range(clients)
    ]
    warmup = [
        [
            json.dumps({"goal": goal(f"warmup-{uuid.uuid4().hex[:8]}")}).encode()
            for _ in range(warmup_per_client)
        ]
        for _ in range(clients)
    ]
    return post_concurrently(
        base_url or stack.api_url,
        "/api/v1/agents",
        headers=[u.headers for u in users],
        bodies=bodies,
        warmup=warmup,
        rate_per_s=rate_per_s,
    )


def accepted_ids(replies: list[Reply]) -> list[uuid.UUID]:
    bad = [r for r in replies if r.status != 202]
    if bad:
        raise RuntimeError(f"{len(bad)} creates failed; first: HTTP {bad[0].status} {bad[0].body}")
    return [uuid.UUID(r.body["id"]) for r in replies]


def wait_terminal(
    stack: Stack, ids: list[uuid.UUID], *, timeout_s: float, listener: StatusListener | None = None
) -> int:
    """Wait until every agent is terminal; returns how many are (the database's count).

    With a listener, the terminal statuses published on Redis say when, and the database
    is asked once a second (a missed message cannot hang the wait) and at the end. Asking
    it every 50 ms cost PostgreSQL ~2 ms of CPU per poll, inside the time being measured.
    """
    deadline = time.monotonic() + timeout_s
    query = text(
        "SELECT count(*) FROM agents WHERE id = ANY(CAST(:ids AS uuid[])) "
        "AND status = ANY(CAST(:ended AS text[]))"
    )
    params = {"ids": [str(i) for i in ids], "ended": sorted(ENDED)}
    wanted = set(params["ids"])
    asked = 0.0
    while True:
        now = time.monotonic()
        heard = listener is not None and listener.all_ended(wanted)
        if listener is None or heard or now - asked >= 1.0 or now >= deadline:
            asked = now
            with stack.engine.connect() as conn:
                done = conn.execute(query, params).scalar_one()
            if done >= len(ids) or now >= deadline:
                return int(done)
        time.sleep(0.05 if listener is None else 0.01)


@dataclass(frozen=True)
class AgentRow:
    id: uuid.UUID
    goal: str
    status: str
    step_count: int
    started_at: datetime | None
    completed_at: datetime | None


def agent_rows(stack: Stack, ids: list[uuid.UUID]) -> list[AgentRow]:
    with stack.engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT id, goal, status, step_count, started_at, completed_at FROM agents "
                "WHERE id = ANY(CAST(:ids AS uuid[]))"
            ),
            {"ids": [str(i) for i in ids]},
        ).all()
    return [AgentRow(*row) for row in rows]


@dataclass(frozen=True)
class StepRow:
    agent_id: uuid.UUID
    step: int
    type: str
    duration_ms: int | None
    created_at: datetime  # set by the worker just before it writes the row
    seq: int = 0


def step_rows(stack: Stack, ids: list[uuid.UUID]) -> list[StepRow]:
    """Every persisted step of these agents."""
    with stack.engine.connect() as conn:
        return [
            StepRow(*r)
            for r in conn.execute(
                text(
                    "SELECT agent_id, step, type, duration_ms, created_at, seq FROM agent_steps "
                    "WHERE agent_id = ANY(CAST(:ids AS uuid[]))"
                ),
                {"ids": [str(i) for i in ids]},
            ).all()
        ]


def cancel_pending(stack: Stack) -> int:
    """End the agents a worker-less phase left PENDING, and empty the task queue.

    Straight in SQL and Redis: the create-latency phase has no worker, and its
    thousands of agents must not be run by the next phase's.
    """
    with stack.engine.begin() as conn:
        count = conn.execute(
            text(
                "UPDATE agents SET status = 'CANCELLED', stop_reason = 'cancelled', "
                "completed_at = now(), updated_at = now() WHERE status = 'PENDING'"
            )
        ).rowcount
    for key in stack.redis.scan_iter(match="jarvis-agents*"):
        stack.redis.delete(key)
    return int(count)


class StepListener:
    """Times every step event published on Redis, from a process of its own: a thread
    in the harness would wait for the GIL behind whatever the harness runs meanwhile
    (the step floor's loop, for one). `close()` returns (agent_id, seq) → wall clock.

    Ours come as `{"kind": "step", "data": …}`; the step floor's as the bare data.
    """

    def __init__(self, redis_url: str) -> None:
        ready, self._stop, self._out = SPAWN.Event(), SPAWN.Event(), SPAWN.Queue()
        self._process = SPAWN.Process(
            target=_listen_for_steps, args=(redis_url, ready, self._stop, self._out), daemon=True
        )
        self._process.start()
        if not ready.wait(timeout=30):
            self._process.kill()
            raise RuntimeError("the step listener did not subscribe within 30 s")

    def close(self) -> dict[tuple[str, int], float]:
        self._stop.set()
        try:
            return self._out.get(timeout=30)
        finally:
            self._process.join(timeout=5)


def _listen_for_steps(redis_url: str, ready: Any, stop: Any, out: Any) -> None:
    import redis

    pubsub = redis.Redis.from_url(redis_url).pubsub(ignore_subscribe_messages=True)
    pubsub.psubscribe("jarvis:agent:*")
    pubsub.get_message(timeout=1.0)  # the subscription's confirmation
    ready.set()
    times: dict[tuple[str, int], float] = {}
    while not stop.is_set():
        message = pubsub.get_message(timeout=0.2)
        if message is None:
            continue
        now = time.time()
        try:
            body = json.loads(message["data"])
            if body.get("kind", "step") != "step":
                continue
            data = body.get("data", body)
            times.setdefault((str(data["agent_id"]), int(data["seq"])), now)
        except (ValueError, KeyError, TypeError, AttributeError):
            continue
    pubsub.close()
    out.put(times)


class StatusListener:
    """Times every status change published on Redis: (agent_id, status) → wall clock."""

    def __init__(self, redis_client: Any) -> None:
        self._pubsub = redis_client.pubsub(ignore_subscribe_messages=True)
        self._pubsub.psubscribe("jarvis:user:*")
        self._pubsub.get_message(timeout=1.0)  # the subscription's confirmation
        self.times: dict[tuple[str, str], float] = {}
        self.ended: set[str] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-status", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            message = self._pubsub.get_message(timeout=0.2)
            if message is None:
                continue
            now = time.time()
            try:
                data = json.loads(message["data"])["data"]
                key = (data["agent_id"], data["status"])
            except (ValueError, KeyError, TypeError):
                continue
            with self._lock:
                self.times.setdefault(key, now)
                if key[1] in ENDED:
                    self.ended.add(key[0])

    def get(self, agent_id: uuid.UUID, status: str) -> float | None:
        with self._lock:
            return self.times.get((str(agent_id), status))

    def all_ended(self, ids: set[str]) -> bool:
        """Whether a terminal status was published for every one of these agents."""
        with self._lock:
            return ids <= self.ended

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._pubsub.close()
