"""Scenario 8 — live tokens: 1,000 SSE subscribers with `?tokens=1` on one API process.

Each run starts a fresh `jarvis-agents api` process and `agents` PENDING agents (no
worker runs); client processes (`bench.sse_clients`, tokens on) open `subscribers`
streams, spread evenly over the agents. The harness then plays the worker's side of
every agent for `seconds`: a model writing `tokens_per_s` tokens a second, handed to
the worker's own batcher (`jarvis_agents.events.TokenBatcher`, the one `RedisEventBus`
uses: every 50 ms or 256 characters, for agents with listeners announced); each
batch is published with its publish time at the head of its `delta`, and each client
notes when it arrived. A step event per agent ends the streams.

Latency = received − published. API CPU = the API process tree's CPU seconds over the
writing phase, per token the models wrote and per token event a client received.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from bench import driver
from bench.driver import User
from bench.figures import cell, med, num
from bench.sse_clients import Subscribers
from bench.stack import Stack
from bench.stats import latency_summary
from jarvis_agents.events import (
    AGENT_CHANNEL,
    TOKEN_LISTENERS,
    RedisEventBus,
    TokenBatcher,
    encode,
    token_event,
)
from jarvis_agents.lifecycle import Step, StepType, utcnow
from jarvis_agents.store import repository_for

TARGET_P99_MS = 20.0


@dataclass(frozen=True)
class TokenSizes:
    subscribers: int = 1000
    agents: int = 20
    tokens_per_s: float = 50.0  # per agent
    seconds: float = 10.0
    client_processes: int = 4


QUICK = TokenSizes(subscribers=40, agents=4, seconds=1.0, client_processes=1)


def run(stack: Stack, user: User, *, runs: int, sizes: TokenSizes, log: Any = print) -> dict[str, Any]:
    results: dict[str, Any] = {"runs": [], "sizes": asdict(sizes)}
    for r in range(runs):
        stack.restart_api()
        result = _once(stack, user, sizes)
        results["runs"].append(result)
        log(f"  scenario 8 (tokens), run {r + 1}: {result['streams']} streams, "
            f"{result['tokens_written']} tokens written, {result['events_received']} token events "
            f"received, p50 {result['p50_ms']:.2f} ms, p99 {result['p99_ms']:.2f} ms, API CPU "
            f"{result['api_cpu_us_per_token']:.0f} µs per token")
    driver.cancel_pending(stack)
    return results


def _once(stack: Stack, user: User, sizes: TokenSizes) -> dict[str, Any]:
    replies = driver.create_agents(
        stack, [user], [f"tokens-{time.monotonic_ns()}-{i}" for i in range(sizes.agents)])
    repository = repository_for(stack.engine)
    agents = [repository.get(agent_id) for agent_id in driver.accepted_ids(replies)]
    per_agent = max(sizes.subscribers // sizes.agents, 1)
    targets = [str(agent.id) for agent in agents for _ in range(per_agent)]
    subscribers = Subscribers(stack.api_url, user.api_key, targets,
                              processes=sizes.client_processes, expected=1, tokens=True)
    opened = subscribers.open()
    _wait_for_listeners(stack, [agent.id for agent in agents])
    cpu_before = stack.api.cpu_s()
    began = time.monotonic()
    written, published = _write(stack, [agent.id for agent in agents], sizes)
    cpu_s = stack.api.cpu_s() - cpu_before
    wall_s = time.monotonic() - began
    bus = RedisEventBus(stack.redis)
    for agent in agents:  # the step events that end the streams
        bus.publish_steps(agent, [Step(1, 0, StepType.THINK, "end", created_at=utcnow())])
    bus.flush()
    received = subscribers.collect()
    return {
        **latency_summary(received["latencies"]),
        "streams": opened,
        "tokens_written": written,
        "batches_published": published,
        "events_expected": published * per_agent,
        "events_received": received["tokens"],
        "complete_streams": received["complete_streams"],
        "api_cpu_share": cpu_s / wall_s,
        "api_cpu_us_per_token": cpu_s / max(written, 1) * 1e6,
        "api_cpu_us_per_event": cpu_s / max(received["tokens"], 1) * 1e6,
    }


def _wait_for_listeners(stack: Stack, agent_ids: Sequence[uuid.UUID], timeout_s: float = 30) -> None:
    """Until every agent has its token listener registered in Redis."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if all(stack.redis.exists(TOKEN_LISTENERS.format(a)) for a in agent_ids):
            return
        time.sleep(0.05)
    raise RuntimeError("the API did not register its token listeners")


def _write(stack: Stack, agent_ids: Sequence[uuid.UUID], sizes: TokenSizes) -> tuple[int, int]:
    """The models' side: tokens paced per agent, batched and published as a worker does."""
    published = 0

    def publish(batches: Sequence[tuple[uuid.UUID, int, str]]) -> None:
        nonlocal published
        pipe = stack.redis.pipeline(transaction=False)
        sent_at = f"@{time.time():.6f} "
        for agent_id, step, text in batches:
            pipe.publish(AGENT_CHANNEL.format(agent_id),
                         encode("token", token_event(agent_id, step, sent_at + text)))
        pipe.execute()
        published += len(batches)

    # Every agent here has its listeners registered (waited for above), as the workers
    # would have heard announced.
    batcher = TokenBatcher(publish=publish, listening=set)
    replies = [batcher.reply(agent_id, 0) for agent_id in agent_ids]
    for reply in replies:
        reply.__enter__()
    interval_s = 1 / (sizes.tokens_per_s * len(replies))
    total = int(sizes.seconds * sizes.tokens_per_s) * len(replies)
    next_at = time.monotonic()
    for n in range(total):
        delay = next_at - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        replies[n % len(replies)](" token")
        next_at += interval_s
    for reply in replies:
        reply.__exit__(None, None, None)
    return total, published


def section(t: dict[str, Any]) -> list[str]:
    """The scenario's part of BENCHMARKS.md."""
    sizes, runs = t["sizes"], t["runs"]
    return [
        "## 8. Live tokens (one API process)",
        "",
        (
            f"{sizes['subscribers']} `GET /api/v1/agents/{{id}}/events?tokens=1` streams on one "
            f"fresh `jarvis-agents api` process, {sizes['agents']} agents × "
            f"{sizes['subscribers'] // sizes['agents']} streams, held by "
            f"{sizes['client_processes']} client processes. For {sizes['seconds']:g} s the "
            f"harness plays each agent's model writing {sizes['tokens_per_s']:g} tokens/s "
            "through the worker's own batcher (`TokenBatcher`: every 50 ms or 256 characters, "
            "only while someone listens), each batch published with its publish time; latency "
            "= received − published. API CPU = the API process tree's CPU over the writing "
            "phase, per token written and per token event received."
        ),
        "",
        ("| p50 | p99 | max | token events received / expected | API CPU per token | "
        "per event received | API CPU share |"),
        "|---|---|---|---|---|---|---|",
        (
            f"| {cell(runs, 'p50_ms', 2)} ms | {cell(runs, 'p99_ms', 2)} ms | "
            f"{cell(runs, 'max_ms', 1)} ms | {num(med(runs, 'events_received'), 0)} / "
            f"{num(med(runs, 'events_expected'), 0)} | {cell(runs, 'api_cpu_us_per_token', 0)} µs | "
            f"{cell(runs, 'api_cpu_us_per_event', 1)} µs | {cell(runs, 'api_cpu_share', 2)} |"
        ),
        "",
        (f"Target: token published → client p99 ≤ {TARGET_P99_MS:g} ms "
        f"({'met' if med(runs, 'p99_ms') <= TARGET_P99_MS else 'NOT met'})."),
        "",
    ]
