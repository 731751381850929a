"""Scenario 3 — SSE fan-out: 1,000 concurrent subscribers on one API process.

Each run starts a fresh `jarvis-agents api` process (so memory is measured from a
clean baseline), warms it with a few streams, then 4 client processes open
`subscribers` streams of `GET /api/v1/agents/{id}/events` on PENDING agents (no
worker runs). The harness then publishes step events on Redis exactly as a worker
does (`RedisEventBus.publish_steps`, seq 1, 2, 3 … per agent) with the publish time
in the event's `content`; each client notes when the event arrived.

Two shapes:
* spread — 100 agents × 10 subscribers each; one event every `spread_interval_s`,
  agent after agent (a steady flow: 200 events/s → 2,000 SSE writes/s);
* hot — 1 agent × 1,000 subscribers; one event every `hot_interval_s`, each
  written to all 1,000 streams at once (a dashboard everyone watches).

Memory per stream = (RSS of the API's worker process with the streams open and the
events delivered − its RSS before they opened) / streams.

And the floor (`bench.sse_floor`): the hot shape's events written by one plain Python
process to the same number of streams held by the same client processes — one
pre-encoded frame, one non-blocking `send()` per socket. What the API's hot shape
costs above it is ours; the floor itself is this machine's.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Any

from bench import driver
from bench.driver import User
from bench.sse_clients import Subscribers
from bench.sse_floor import FloorServer
from bench.stack import Stack
from bench.stats import latency_summary, median
from jarvis_agents.events import RedisEventBus
from jarvis_agents.lifecycle import Step, StepType, utcnow
from jarvis_agents.store import repository_for


@dataclass(frozen=True)
class FanoutSizes:
    subscribers: int = 1000
    client_processes: int = 4
    spread_agents: int = 100
    spread_rounds: int = 10
    spread_interval_s: float = 0.005
    hot_events: int = 10
    hot_interval_s: float = 0.2
    warmup_streams: int = 10


QUICK = FanoutSizes(
    subscribers=100,
    client_processes=2,
    spread_agents=10,
    spread_rounds=3,
    hot_events=3,
    hot_interval_s=0.1,
    warmup_streams=2,
)


def run(
    stack: Stack, user: User, *, runs: int, sizes: FanoutSizes, log: Any = print
) -> dict[str, Any]:
    results: dict[str, Any] = {"spread": [], "hot": [], "floor": []}
    for r in range(runs):
        for shape in ("spread", "hot"):
            stack.restart_api()
            result = _once(stack, user, sizes, shape)
            results[shape].append(result)
            log(
                f"  scenario 3 ({shape}), run {r + 1}: {result['streams']} streams, p50 "
                f"{result['p50_ms']:.2f} ms, p99 {result['p99_ms']:.2f} ms, "
                f"{result['kib_per_stream']:.1f} KiB per stream"
            )
        result = _floor(sizes)
        results["floor"].append(result)
        log(
            f"  scenario 3 (floor), run {r + 1}: {result['streams']} streams, p50 "
            f"{result['p50_ms']:.2f} ms, p99 {result['p99_ms']:.2f} ms, send loop "
            f"{result['send_loop_ms']:.2f} ms per event"
        )
    driver.cancel_pending(stack)  # no later worker may run these agents
    return results


def _once(stack: Stack, user: User, sizes: FanoutSizes, shape: str) -> dict:
    n_agents = sizes.spread_agents if shape == "spread" else 1
    agents = _pending_agents(stack, user, n_agents + 1)
    warm, agents = agents[0], agents[1:]
    _warm_up(stack, user, warm, sizes.warmup_streams)
    per_agent = sizes.subscribers // n_agents
    targets = [str(agent.id) for agent in agents for _ in range(per_agent)]
    rounds = sizes.spread_rounds if shape == "spread" else sizes.hot_events
    interval = sizes.spread_interval_s if shape == "spread" else sizes.hot_interval_s
    time.sleep(0.5)
    rss_before = stack.api_rss()
    subscribers = Subscribers(
        stack.api_url, user.api_key, targets, processes=sizes.client_processes, expected=rounds
    )
    opened = subscribers.open()
    time.sleep(1.0)  # every stream has written its first keepalive
    rss_open = stack.api_rss()
    _publish(stack, agents, rounds=rounds, interval_s=interval, first_seq=1)
    received = subscribers.collect()
    rss_after = stack.api_rss()
    expected = len(targets) * rounds
    return {
        **latency_summary(received["latencies"]),
        "streams": opened,
        "events_expected": expected,
        "events_received": len(received["latencies"]),
        "complete_streams": received["complete_streams"],
        "kib_per_stream": (max(rss_open, rss_after) - rss_before) / 1024 / max(opened, 1),
        "kib_per_stream_open": (rss_open - rss_before) / 1024 / max(opened, 1),
        "rss_before_mib": rss_before / 2**20,
        "rss_after_mib": rss_after / 2**20,
    }


def _floor(sizes: FanoutSizes) -> dict:
    """The hot shape with one plain process writing a pre-encoded frame (bench.sse_floor)."""
    server = FloorServer(sizes.subscribers)
    url = server.start()
    targets = [str(uuid.uuid4())] * sizes.subscribers  # the floor ignores the path
    subscribers = Subscribers(
        url, "floor", targets, processes=sizes.client_processes, expected=sizes.hot_events
    )
    opened = subscribers.open()
    time.sleep(1.0)  # as in the real runs
    server.send(rounds=sizes.hot_events, interval_s=sizes.hot_interval_s)
    received = subscribers.collect()
    sent = server.close()
    return {
        **latency_summary(received["latencies"]),
        "streams": opened,
        "events_expected": opened * sizes.hot_events,
        "events_received": len(received["latencies"]),
        "complete_streams": received["complete_streams"],
        "send_loop_ms": median(sent["loop_s"]) * 1000,
        "send_us_per_stream": median(sent["loop_s"]) * 1e6 / max(opened, 1),
        "short_sends": sent["short_sends"],
        "frame_bytes": sent["frame_bytes"],
    }


def _pending_agents(stack: Stack, user: User, n: int) -> list[Any]:
    """Agents that stay PENDING (no worker runs), so their streams stay open."""
    replies = driver.create_agents(
        stack, [user], [f"sse-{time.monotonic_ns()}-{i}" for i in range(n)]
    )
    repository = repository_for(stack.engine)
    return [repository.get(agent_id) for agent_id in driver.accepted_ids(replies)]


def _warm_up(stack: Stack, user: User, agent: Any, streams: int) -> None:
    """A few streams and events first: lazy imports and first-use allocations are not
    what one more stream costs."""
    subscribers = Subscribers(
        stack.api_url, user.api_key, [str(agent.id)] * streams, processes=1, expected=2
    )
    subscribers.open()
    _publish(stack, [agent], rounds=2, interval_s=0.01, first_seq=1)
    subscribers.collect(grace_s=5)


def _publish(
    stack: Stack, agents: list[Any], *, rounds: int, interval_s: float, first_seq: int
) -> None:
    """Step events as the worker publishes them, paced: one every `interval_s`."""
    bus = RedisEventBus(stack.redis)
    next_at = time.monotonic()
    for seq in range(first_seq, first_seq + rounds):
        for agent in agents:
            delay = next_at - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            step = Step(seq, 0, StepType.THINK, f"{time.time():.6f}", created_at=utcnow())
            bus.publish_steps(agent, [step])
            next_at += interval_s
