"""PostgreSQL and Redis restart under running agents: nothing lost, nothing counted.

Each test starts a server of its own (never the shared ones) and a real worker
process on it, lets several agents get going, stops the server for several seconds
and starts it again. Every agent must complete in its first attempt, with no loss
counted and every step written exactly once.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from jarvis_agents.lifecycle import AgentStatus, StepType
from tests.conftest import missing
from tests.faults.conftest import System, running_system, system_env
from tests.faults.own_servers import OwnPostgres, OwnRedis
from tests.faults.test_worker_death import assert_clean_history

# Four tool iterations (THINK, ACT, OBSERVE each) and an answer (THINK, FINAL).
LONG = [
    *(f"THOUGHT: step {n}\nACTION: calculate\nINPUT: {n} + {n}" for n in range(1, 5)),
    "THOUGHT: done\nFINAL_ANSWER: 8",
]
LONG_STEPS = 4 * 3 + 2
AGENTS = 6
OUTAGE_S = 7.0


def restart_env(database_url: str, redis_url: str, ollama_url: str) -> dict[str, str]:
    # A heartbeat is stale after 20 s, as after 30 by default: longer than the outage.
    return {**system_env(database_url, redis_url, ollama_url), "JARVIS_HEARTBEAT_STALE": "20"}


def assert_a_restart_costs_nothing(system: System, start_worker: Any, model: Any, *,
                                    stop: Callable[[], None], start: Callable[[], None]) -> Any:
    """Several agents on a real worker, each model call 1.5 s so that the outage finds
    them mid-call and mid-write; the server stopped for OUTAGE_S while they run, then
    started again. Returns the worker process."""
    worker = start_worker(system.env)
    agents = [system.create(f"restart {n}: add up") for n in range(AGENTS)]
    system.wait_until(
        lambda: all(system.repository.steps_after(a.id) for a in agents), 30,
        "every agent's first step")
    stop()
    time.sleep(OUTAGE_S)  # the outage itself; what follows waits on conditions
    start()
    # What the outage could hit is behind it: the rest of the calls need not be slow.
    model.latency_s = 0.1
    for agent in agents:
        done = system.terminal(agent.id, timeout_s=60)
        assert done.status is AgentStatus.COMPLETED, (done.status, done.error)
        assert done.final_answer == "8"
        assert (done.attempt, done.losses) == (1, 0), "the outage counted as a lost worker"
        steps = system.repository.steps_after(agent.id)
        assert len(steps) == LONG_STEPS, [(s.seq, s.step, s.type.value) for s in steps]
        assert_clean_history(system, agent.id)
        assert [s.type for s in steps][-1] is StepType.FINAL
    # The worker still takes new agents.
    later = system.create("after the restart")
    assert system.terminal(later.id, timeout_s=60).status is AgentStatus.COMPLETED
    return worker


@pytest.fixture
def own_postgres() -> Iterator[OwnPostgres]:
    server = OwnPostgres()
    if (why := server.available) is not None:
        missing("a private PostgreSQL server", why)
    try:
        server.init()
        server.start()
        yield server
    finally:
        server.destroy()


def test_postgres_restart_loses_and_counts_nothing(
    own_postgres: OwnPostgres, redis_url: str, fake_ollama: Any, start_worker: Any
) -> None:
    from jarvis_agents.store.database import upgrade

    database_url = own_postgres.create_database(f"jarvis_{uuid.uuid4().hex[:8]}")
    upgrade(database_url)
    fake_ollama.responder = fake_ollama.by_turn(LONG)
    fake_ollama.latency_s = 1.5
    with running_system(restart_env(database_url, redis_url, fake_ollama.url)) as system:
        assert_a_restart_costs_nothing(system, start_worker, fake_ollama, stop=own_postgres.stop,
                                       start=own_postgres.start)


def test_redis_restart_loses_and_counts_nothing(
    pg_url: str, fake_ollama: Any, start_worker: Any, tmp_path: Path
) -> None:
    own = OwnRedis(tmp_path)
    own.start()
    fake_ollama.responder = fake_ollama.by_turn(LONG)
    fake_ollama.latency_s = 1.5
    try:
        with running_system(restart_env(pg_url, own.url, fake_ollama.url)) as system:
            worker = assert_a_restart_costs_nothing(system, start_worker, fake_ollama,
                                                    stop=own.stop, start=own.start)
        # Its consumer reconnected: the Celery process never had to be restarted.
        assert "restarting in" not in worker.output(), "the Celery process died"
    finally:
        own.stop()
