"""Scenario 5 — what webhooks cost: agents/s with a webhook on every agent against the same
run's figure without (issue 18: the outbox may cost at most 5 %).

The throughput phase of scenario 1 (instant model, 4 planning calls and 3 `calculate`
calls per agent, created at once by the 8 clients) on one worker process per core, twice
per run in turn: without `webhook_url`, and with one pointing at `python -m
bench.webhook_receiver`, a fast local receiver (one asyncio loop; every POST answered 200
at once). The stack runs with `JARVIS_WEBHOOK_SECRET` set and
`JARVIS_WEBHOOK_ALLOW_PRIVATE=1` (the receiver is on 127.0.0.1) in both halves, so the
only difference is the webhooks. Agents/s counts over the makespan (first create sent →
last `completed_at`); the deliveries go on after it, so the phase then waits until each
agent's webhook has arrived and reports how long after its agent's `completed_at` it did.
Agents/s moves with whatever else the shared machine runs; the CPU each half spent per
agent (workers, API, PostgreSQL, Redis, model server and receiver, summed over the whole
half, the deliveries included) is the steadier measure of what the webhooks cost.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass, field
from typing import Any

from bench import driver
from bench.driver import StatusListener, User
from bench.figures import cell, med, num, processes
from bench.processes import Process
from bench.stack import WEBHOOK_ENV, ModelServer, Stack
from bench.stats import latency_summary
from bench.webhook_receiver import fetch_deliveries
from jarvis_agents.lifecycle import utcnow


def _per_core() -> tuple[int, ...]:
    return (os.cpu_count() or 1,)


@dataclass(frozen=True)
class WebhookSizes:
    agents: int = 500
    tool_calls: int = 3
    warmup_agents: int = 20
    workers: tuple[int, ...] = field(default_factory=_per_core)
    timeout_s: float = 300.0


QUICK = WebhookSizes(agents=16, warmup_agents=2, workers=(1,), timeout_s=60.0)


def run(
    stack: Stack, users: list[User], *, runs: int, sizes: WebhookSizes, log: Any = print,
) -> dict[str, Any]:
    model = stack.start_model(latency_s=0.0, tool_calls=sizes.tool_calls)
    receiver, url = stack.start_webhook_receiver()
    (n,) = sizes.workers
    workers = stack.start_workers(model, names=[f"worker-webhooks-{i}" for i in range(n)])
    listener = StatusListener(stack.redis)
    results: dict[str, Any] = {"workers": n, "runs": []}
    processes_now = [*workers, receiver, model.process]

    def phase(webhook_url: str | None, agents: int, run: str) -> dict[str, Any]:
        return _phase(stack, model, users, listener, processes_now, receiver, webhook_url, url,
                      agents, run, sizes)

    try:
        phase(url, sizes.warmup_agents, "warm")
        for r in range(runs):
            # In turn, and the other way round on odd runs: drift favours neither half.
            order = ("plain", "webhooks") if r % 2 == 0 else ("webhooks", "plain")
            found = {
                half: phase(url if half == "webhooks" else None, sizes.agents, f"{r}{half[0]}")
                for half in order
            }
            plain, hooked = found["plain"], found["webhooks"]
            floor_ms = _try_floor_ms(stack, users[0], url)
            entry = {
                "plain_agents_per_s": plain["agents_per_s"],
                "webhooks_agents_per_s": hooked["agents_per_s"],
                "ratio": hooked["agents_per_s"] / plain["agents_per_s"],
                "plain_cpu_ms_per_agent": plain["cpu_ms_per_agent"],
                "webhooks_cpu_ms_per_agent": hooked["cpu_ms_per_agent"],
                "cpu_ratio": hooked["cpu_ms_per_agent"] / plain["cpu_ms_per_agent"],
                "receiver_cpu_ms_per_agent": hooked["receiver_cpu_ms_per_agent"],
                "try_floor_ms": floor_ms,
                # The outbox's own cost: what is left of the webhooks' CPU once the try
                # itself (any webhook, outbox or not, costs one) is taken away.
                "outbox_cpu_ratio": (hooked["cpu_ms_per_agent"] - hooked["receiver_cpu_ms_per_agent"]
                                     - floor_ms) / plain["cpu_ms_per_agent"],
                "floor_share": floor_ms / plain["cpu_ms_per_agent"],
                # What the webhooks cost on our side: the receiver's CPU is the receiver's.
                "ours_cpu_ratio": (hooked["cpu_ms_per_agent"] - hooked["receiver_cpu_ms_per_agent"])
                / plain["cpu_ms_per_agent"],
                **{k: v for k, v in hooked.items() if k.startswith(("delivered", "delivery_"))},
                **{f"{half}_{k}": v for half, found_half in (("plain", plain), ("webhooks", hooked))
                   for k, v in found_half.items()
                   if k.endswith("_cpu_ms_per_agent") and k.startswith(("workers", "api", "postgres", "redis"))},
            }
            results["runs"].append(entry)
            log(
                f"  scenario 5, run {r + 1}: {entry['plain_agents_per_s']:.1f} agents/s without "
                f"webhooks, {entry['webhooks_agents_per_s']:.1f} with ({entry['ratio']:.3f}); CPU "
                f"{entry['plain_cpu_ms_per_agent']:.1f} vs {entry['webhooks_cpu_ms_per_agent']:.1f} "
                f"ms per agent (workers {entry['plain_workers_cpu_ms_per_agent']:.1f} vs "
                f"{entry['webhooks_workers_cpu_ms_per_agent']:.1f}, PostgreSQL "
                f"{entry['plain_postgres_cpu_ms_per_agent']:.1f} vs "
                f"{entry['webhooks_postgres_cpu_ms_per_agent']:.1f}); "
                f"{entry['delivered']} of {sizes.agents} delivered, p50 "
                f"{entry.get('delivery_p50_ms', float('nan')):.0f} ms after completion"
            )
    finally:
        listener.close()
        for worker in workers:
            stack.stop(worker)
        stack.stop(receiver)
        stack.stop(model.process)
    return results


def _phase(
    stack: Stack, model: ModelServer, users: list[User], listener: StatusListener,
    processes_now: list[Process], receiver: Process, webhook_url: str | None, receiver_url: str,
    agents: int, run: str, sizes: WebhookSizes,
) -> dict[str, Any]:
    fetch_deliveries(receiver_url, clear=True)
    model.calls(clear=True)
    cpu0, receiver0 = stack.system_cpu_s(processes_now), receiver.cpu_s()
    parts0 = _cpu_parts(stack, processes_now)
    extra = {"webhook_url": webhook_url} if webhook_url else {}
    replies = driver.create_agents(stack, users, [f"w{run}-{i}" for i in range(agents)],
                                   extra=extra)
    ids = driver.accepted_ids(replies)
    started = min(reply.sent_at for reply in replies)
    driver.wait_terminal(stack, ids, timeout_s=sizes.timeout_s, listener=listener)
    rows = driver.agent_rows(stack, ids)
    completed = [row for row in rows if row.status == "COMPLETED"]
    ended = max(row.completed_at.timestamp() for row in rows if row.completed_at)
    found: dict[str, Any] = {"agents_per_s": len(completed) / (ended - started)}
    if webhook_url:
        arrived = _wait_delivered(receiver_url, {str(i) for i in ids}, sizes.timeout_s)
        done = {str(row.id): row.completed_at.timestamp() for row in rows if row.completed_at}
        after = [arrived[agent] - done[agent] for agent in arrived if agent in done]
        found["delivered"] = len(arrived)
        found.update({f"delivery_{k}": v for k, v in latency_summary(after).items()})
    found["cpu_ms_per_agent"] = (stack.system_cpu_s(processes_now) - cpu0) * 1000 / len(ids)
    found["receiver_cpu_ms_per_agent"] = (receiver.cpu_s() - receiver0) * 1000 / len(ids)
    parts1 = _cpu_parts(stack, processes_now)
    for part, spent in parts1.items():
        found[f"{part}_cpu_ms_per_agent"] = (spent - parts0[part]) * 1000 / len(ids)
    model.calls(clear=True)
    return found


def _try_floor_ms(stack: Stack, user: User, receiver_url: str, tries: int = 300) -> float:
    """CPU ms of one webhook try without any outbox: the body of a real agent's JSON,
    signed and POSTed to the receiver by the classes the dispatcher uses, in this
    process, one after another. Any way of sending webhooks pays this per agent."""
    import json
    import uuid

    import httpx

    from jarvis_agents.webhooks.sender import WebhookSender
    from jarvis_agents.webhooks.signing import Signer

    assert stack.api is not None
    with httpx.Client(base_url=stack.api_url, headers=user.headers) as http:
        agent = http.get("/api/v1/agents", params={"limit": 1}).json()["agents"][0]
    signer = Signer(WEBHOOK_ENV["JARVIS_WEBHOOK_SECRET"])
    sender = WebhookSender(allow_private=True)
    agent_id = uuid.UUID(agent["id"])
    try:
        began = time.process_time()
        for _ in range(tries):
            body = json.dumps(agent, separators=(",", ":")).encode()
            headers = signer.headers(delivery_id=uuid.uuid4(), event="agent.completed",
                                     agent_id=agent_id, body=body, now=utcnow())
            assert sender.post(receiver_url, body, headers).delivered
        spent = time.process_time() - began
    finally:
        sender.close()
    fetch_deliveries(receiver_url, clear=True)
    return spent * 1000 / tries


def _cpu_parts(stack: Stack, processes_now: list[Process]) -> dict[str, float]:
    """CPU seconds so far of the workers (every process but the receiver and the model
    server), the API, and each service: where a half's CPU went."""
    assert stack.api is not None
    workers = [p for p in processes_now if p.name.startswith("worker")]
    return {"workers": sum(p.cpu_s() for p in workers), "api": stack.api.cpu_s(),
            **stack.service_cpu_s()}


def _wait_delivered(receiver_url: str, ids: set[str], timeout_s: float) -> dict[str, float]:
    """Each agent's first delivery's arrival, once all came or the time is up."""
    deadline = time.monotonic() + timeout_s
    arrived: dict[str, float] = {}
    while True:
        for agent, _, at in fetch_deliveries(receiver_url):
            if agent in ids:
                arrived.setdefault(agent, at)
        if len(arrived) >= len(ids) or time.monotonic() > deadline:
            return arrived
        time.sleep(0.2)


# --- the report ----------------------------------------------------------------------------


def target(w: dict[str, Any]) -> tuple[str, str, bool | None]:
    """The issue's target: (what, the figures, whether it was met; None: not measured)."""
    ratio = med(w["runs"], "ratio")
    cost = (1 - ratio) * 100
    cpu = med(w["runs"], "cpu_ratio")
    measured = (
        f"{num(cost, 1)} % ({num(med(w['runs'], 'webhooks_agents_per_s'))} vs "
        f"{num(med(w['runs'], 'plain_agents_per_s'))} agents/s, ratio {num(ratio, 3)}; CPU "
        f"per agent × {num(cpu, 3)}, × {num(med(w['runs'], 'ours_cpu_ratio'), 3)} without the "
        f"receiver's; of that, the floor of one signed POST is "
        f"{num(med(w['runs'], 'floor_share') * 100, 1)} % and the outbox's own × "
        f"{num(med(w['runs'], 'outbox_cpu_ratio'), 3)})"
    )
    label = ("a webhook on every agent costs < 5 % of agents/s (same run without webhooks; "
             f"{processes(w['workers'])}; issue 18)")
    return (
        label,
        measured,
        None if math.isnan(ratio) else ratio >= 0.95,
    )


def section(w: dict[str, Any]) -> list[str]:
    sizes, runs = w["sizes"], w["runs"]
    return [
        "## 5. Webhooks (the outbox's cost)",
        "",
        (
            f"{sizes['agents']} agents created at once, as in scenario 1's throughput phase, on "
            f"{processes(w['workers'])}, without and then with a `webhook_url` on every agent "
            "(in turn, the order swapped on every other run); the receiver is "
            "`bench.webhook_receiver` on 127.0.0.1, answering 200 at once. Ratio = agents/s "
            "with ÷ without. *After completion* = a webhook's arrival at the receiver − its "
            "agent's `completed_at` (the dispatcher claims due deliveries every second, or "
            "as soon as a sender is free)."
        ),
        "",
        "| | without webhooks | with | ratio |",
        "|---|---|---|---|",
        (
            f"| agents/s | {cell(runs, 'plain_agents_per_s')} | "
            f"{cell(runs, 'webhooks_agents_per_s')} | {cell(runs, 'ratio', 3)} |"
        ),
        (
            f"| CPU ms per agent (all but the clients) | {cell(runs, 'plain_cpu_ms_per_agent', 2)} "
            f"| {cell(runs, 'webhooks_cpu_ms_per_agent', 2)} | {cell(runs, 'cpu_ratio', 3)} |"
        ),
        (
            f"| of which the receiver's (not ours) | – | "
            f"{cell(runs, 'receiver_cpu_ms_per_agent', 2)} | {cell(runs, 'ours_cpu_ratio', 3)} "
            "without it |"
        ),
        (
            f"| one try alone, no outbox (the floor: signing and POSTing a webhook) | – | "
            f"{cell(runs, 'try_floor_ms', 2)} | {cell(runs, 'floor_share', 3)} of the "
            "CPU per agent without webhooks |"
        ),
        (
            f"| the outbox's own (all but the receiver and the floor) | – | – | "
            f"{cell(runs, 'outbox_cpu_ratio', 3)} |"
        ),
        "",
        (
            f"Delivered: {cell(runs, 'delivered', 0)} of {sizes['agents']}; after completion "
            f"p50 {cell(runs, 'delivery_p50_ms', 0)} ms, p99 {cell(runs, 'delivery_p99_ms', 0)} ms."
        ),
        "",
    ]
