"""PostgreSQL and Redis restart under running agents: nothing lost, nothing counted.

Each test starts a server of its own (never the shared ones) and a real worker
process on it, lets several agents get going, stops the server, and starts it
again once the outage has hit what the test aims at: every agent's next write, a
tool call in flight, a webhook under way. Every agent must complete in its first
attempt, with no loss counted, every step written and every call made exactly once.
"""

from __future__ import annotations

import secrets
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from jarvis_agents.lifecycle import Agent, AgentStatus, StepType
from jarvis_agents.service import CreateRequest
from tests.conftest import Process, private_redis
from tests.faults.conftest import System, running_system, system_env, wait_until
from tests.faults.own_servers import OwnRedis, own_postgres
from tests.faults.test_worker_death import assert_clean_history
from tests.support.search_server import SearchServer
from tests.support.webhook_receiver import HANG, WebhookReceiver

pytestmark = pytest.mark.long

# Four tool iterations (THINK, ACT, OBSERVE each) and an answer (THINK, FINAL).
LONG = [
    *(f"THOUGHT: step {n}\nACTION: calculate\nINPUT: {n} + {n}" for n in range(1, 5)),
    "THOUGHT: done\nFINAL_ANSWER: 8",
]
LONG_STEPS = 4 * 3 + 2
# A search, which blocks: its ACT and its OBSERVE are two writes, the call between them.
SEARCH = [
    "THOUGHT: look it up\nACTION: search\nINPUT: the answer",
    "THOUGHT: done\nFINAL_ANSWER: 42",
]
SEARCH_STEPS = 3 + 2
AGENTS = 6


def restart_env(database_url: str, redis_url: str, ollama_url: str) -> dict[str, str]:
    # A heartbeat is stale after 20 s, as after 30 by default: longer than the outage.
    return {**system_env(database_url, redis_url, ollama_url), "JARVIS_HEARTBEAT_STALE": "20"}


@dataclass
class Outage:
    """A server of the test's own (`kind`: "postgres" or "redis"), stopped and started again."""

    kind: str
    database_url: str
    redis_url: str
    stop: Callable[[], None]
    start: Callable[[], None]

    def across(self, hit: Callable[[], bool], what: str, *,
               meanwhile: Callable[[], None] = lambda: None) -> None:
        """Stop the server, do `meanwhile`, and start it again once `hit` says the
        outage hit `what`."""
        self.stop()
        meanwhile()
        wait_until(hit, 60, what)
        self.start()


@pytest.fixture(params=["postgres", "redis"])
def outage(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Outage]:
    from jarvis_agents.store.database import upgrade

    if request.param == "postgres":
        with own_postgres() as server, private_redis(tmp_path) as redis_url:
            database_url = server.create_database(f"jarvis_{uuid.uuid4().hex[:8]}")
            upgrade(database_url)
            yield Outage("postgres", database_url, redis_url, server.stop, server.start)
        return
    pg_url = request.getfixturevalue("pg_url")
    own = OwnRedis(tmp_path)
    own.start()
    try:
        yield Outage("redis", pg_url, own.url, own.stop, own.start)
    finally:
        own.stop()


def failed_writes(worker: Process, agents: list[Agent]) -> Callable[[], bool]:
    """Whether each agent's worker has seen a write of its steps fail (PostgreSQL down)."""
    return lambda: all(f"[agent {a.id}]: writing steps failed" in worker.output() for a in agents)


def wrote_since(system: System, counts: dict[uuid.UUID, int]) -> Callable[[], bool]:
    """Whether each agent has written steps past `counts` (Redis down: unpublished)."""
    return lambda: all(len(system.repository.steps_after(i)) > n for i, n in counts.items())


def step_counts(system: System, agents: list[Agent]) -> dict[uuid.UUID, int]:
    return {a.id: len(system.repository.steps_after(a.id)) for a in agents}


def assert_completed_once(system: System, agents: list[Agent], *, answer: str, steps: int) -> None:
    """Each agent completed in its first attempt, no loss counted, each step once."""
    for agent in agents:
        done = system.terminal(agent.id, timeout_s=60)
        assert done.status is AgentStatus.COMPLETED, (done.status, done.error)
        assert done.final_answer == answer
        assert (done.attempt, done.losses) == (1, 0), "the outage counted as a lost worker"
        written = system.repository.steps_after(agent.id)
        assert len(written) == steps, [(s.seq, s.step, s.type.value) for s in written]
        assert_clean_history(system, agent.id)
        assert written[-1].type is StepType.FINAL


def test_a_restart_between_model_calls_loses_and_counts_nothing(
    outage: Outage, fake_ollama: Any, start_worker: Any
) -> None:
    """Each model call 1.5 s: the outage finds every agent mid-call, and its next write
    (PostgreSQL) or publish (Redis) meets the server down."""
    fake_ollama.responder = fake_ollama.by_turn(LONG)
    fake_ollama.latency_s = 1.5
    env = restart_env(outage.database_url, outage.redis_url, fake_ollama.url)
    with running_system(env) as system:
        worker = start_worker(system.env)
        agents = [system.create(f"restart {n}: add up") for n in range(AGENTS)]
        system.wait_until(lambda: all(system.repository.steps_after(a.id) for a in agents), 30,
                          "every agent's first step")
        if outage.kind == "postgres":
            outage.across(failed_writes(worker, agents), "every agent's write to fail")
        else:
            outage.across(wrote_since(system, step_counts(system, agents)),
                          "every agent to write while Redis is down")
        fake_ollama.latency_s = 0.1  # what the outage could hit is behind it
        assert_completed_once(system, agents, answer="8", steps=LONG_STEPS)
        later = system.create("after the restart")  # the worker still takes new agents
        assert system.terminal(later.id, timeout_s=60).status is AgentStatus.COMPLETED
    # Its consumer reconnected: the Celery process never had to be restarted.
    assert "restarting in" not in worker.output(), "the Celery process died"


def test_a_blocking_tool_call_across_a_restart_runs_once(
    outage: Outage, fake_ollama: Any, start_worker: Any
) -> None:
    """Every agent's search is under way (its ACT written) when the server stops; the
    searches answer while it is down, so that each OBSERVE meets the outage."""
    fake_ollama.responder = fake_ollama.by_turn(SEARCH)
    with SearchServer() as search:
        search.open.clear()
        env = {**restart_env(outage.database_url, outage.redis_url, fake_ollama.url),
               "JARVIS_SEARCH_BACKEND": "duckduckgo", "JARVIS_DUCKDUCKGO_URL": search.url}
        with running_system(env) as system:
            worker = start_worker(system.env)
            agents = [system.create(f"restart {n}: look it up") for n in range(AGENTS)]
            system.wait_until(lambda: len(search.queries) == AGENTS, 30, "every agent's search")
            assert all(len(system.repository.steps_after(a.id)) == 2 for a in agents)  # THINK, ACT

            met = (failed_writes(worker, agents) if outage.kind == "postgres"
                   else wrote_since(system, dict.fromkeys((a.id for a in agents), 2)))
            outage.across(met, "every search's result to meet the outage",
                          meanwhile=search.open.set)
            assert_completed_once(system, agents, answer="42", steps=SEARCH_STEPS)
            for agent in agents:
                observe = [s for s in system.repository.steps_after(agent.id)
                           if s.type is StepType.OBSERVE]
                assert len(observe) == 1 and "42 is the answer" in observe[0].content
            assert len(search.queries) == AGENTS, search.queries  # no search made twice


def test_a_webhook_under_way_across_a_postgres_restart_is_delivered_once(
    fake_ollama: Any, start_worker: Any, tmp_path: Path
) -> None:
    """Every try has reached the receiver, which answers only once the server is down:
    the dispatcher cannot record them delivered until it is back, and must not send
    them again meanwhile."""
    from jarvis_agents.store.database import upgrade

    with own_postgres() as server, private_redis(tmp_path) as redis_url, \
            WebhookReceiver(script=[HANG] * AGENTS) as receiver:
        database_url = server.create_database(f"jarvis_{uuid.uuid4().hex[:8]}")
        upgrade(database_url)
        env = webhook_env(restart_env(database_url, redis_url, fake_ollama.url))
        with running_system(env) as system:
            worker = start_worker(system.env)
            agents = [create_with_webhook(system, receiver.url, n) for n in range(AGENTS)]
            receiver.wait_for(AGENTS, timeout_s=30)
            server.stop()
            receiver.release.set()  # the tries succeed while the server is down …
            # … and two rounds of the dispatcher fail to record them (the first could
            # have come before the answers).
            unrecorded = "could not claim due webhooks"
            before = worker.output().count(unrecorded)
            wait_until(lambda: worker.output().count(unrecorded) >= before + 2, 60,
                       "the dispatcher to fail to record the deliveries")
            server.start()
            wait_until(lambda: all(delivered(system, a) for a in agents), 60,
                       "the deliveries to be recorded")
            assert_delivered_once(system, receiver, agents)


def test_agents_ending_while_redis_is_down_deliver_their_webhooks_once(
    pg_url: str, fake_ollama: Any, start_worker: Any, tmp_path: Path
) -> None:
    """The agents end while Redis is down (their ends are not published); what their
    ends owe is in the database, and is delivered, once, before Redis is back."""
    fake_ollama.responder = fake_ollama.by_turn(LONG)
    fake_ollama.latency_s = 1.0
    own = OwnRedis(tmp_path)
    own.start()
    try:
        with WebhookReceiver() as receiver:
            env = webhook_env(restart_env(pg_url, own.url, fake_ollama.url))
            with running_system(env) as system:
                start_worker(system.env)
                agents = [create_with_webhook(system, receiver.url, n) for n in range(AGENTS)]
                system.wait_until(lambda: all(system.repository.steps_after(a.id) for a in agents),
                                  30, "every agent's first step")
                own.stop()
                wait_until(lambda: all(delivered(system, a) for a in agents), 60,
                           "every agent to end and its webhook to be delivered")
                own.start()
                assert_completed_once(system, agents, answer="8", steps=LONG_STEPS)
                assert_delivered_once(system, receiver, agents)
    finally:
        own.stop()


# --- webhooks ------------------------------------------------------------------------


def webhook_env(env: dict[str, str]) -> dict[str, str]:
    return {**env, "JARVIS_WEBHOOK_SECRET": secrets.token_hex(8),
            "JARVIS_WEBHOOK_ALLOW_PRIVATE": "1"}  # the receiver is on loopback


def create_with_webhook(system: System, url: str, n: int) -> Agent:
    agent, _ = system.service.create(
        system.user_id, CreateRequest(goal=f"restart {n}: add up", webhook_url=url))
    return agent


def delivered(system: System, agent: Agent) -> bool:
    return any(d["delivered_at"] is not None for d in system.repository.outbox.of_agent(agent.id))


def assert_delivered_once(system: System, receiver: WebhookReceiver, agents: list[Agent]) -> None:
    """One `agent.completed` per agent, each `webhook-id` received once."""
    ids = Counter(r.header("webhook-id") for r in receiver.requests)
    assert all(n == 1 for n in ids.values()), f"sent again: {ids}"
    for agent in agents:
        (delivery,) = system.repository.outbox.of_agent(agent.id)
        assert delivery["event"] == "agent.completed" and delivery["delivered_at"] is not None
        assert ids[str(delivery["id"])] == 1
    assert len(ids) == len(agents)
