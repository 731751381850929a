"""A soak: 100 agents while workers are SIGKILLed and restarted every few seconds.

Every agent must complete, and each lost worker must be counted as one. A kill every
4-6 s, alternating between the two workers, gives each worker ~10 s to live; an
agent needs ~3 s of model time per attempt, so about one attempt in three is lost,
and ~4 s later (its heartbeat is stale after 3 s) resumed. Measured over several
runs, an agent lost its worker up to 4 times; the odds of 10 are below one in ten
thousand per agent, so with JARVIS_MAX_ATTEMPTS=10 a `worker_lost` here is a defect.
"""

from __future__ import annotations

import random
import signal
import time
from collections import Counter
from typing import Any

import pytest

from jarvis_agents.lifecycle import AgentStatus, StepType
from tests.faults.conftest import System

pytestmark = pytest.mark.long


def test_soak_with_workers_killed_every_few_seconds(system: System, fake_ollama: Any,
                                                   start_worker: Any) -> None:
    rng = random.Random(7)
    fake_ollama.latency_s = lambda: rng.uniform(0.5, 1.5)
    env = {**system.env, "JARVIS_MAX_ATTEMPTS": "10", "JARVIS_TOTAL_TIMEOUT": "600"}
    workers = [start_worker(env), start_worker(env)]
    # Agents arrive over the whole chaos window, so kills always find some in flight.
    agents = []
    chaos_until = time.monotonic() + 30
    kills = 0
    next_kill = time.monotonic() + rng.uniform(4, 6)
    while time.monotonic() < chaos_until or len(agents) < 100:
        if len(agents) < 100:
            agents.append(system.create(f"soak {len(agents)}: what is 1234 * 902?"))
        time.sleep(0.25)
        if time.monotonic() < next_kill or time.monotonic() > chaos_until:
            continue
        next_kill = time.monotonic() + rng.uniform(4, 6)
        victim = kills % 2
        workers[victim].signal(signal.SIGKILL)
        workers[victim].proc.wait(10)
        workers[victim] = start_worker(env, wait=False)
        kills += 1
    ended = [system.terminal(a.id, timeout_s=120) for a in agents]
    outcome = Counter(
        a.status.value if a.status is AgentStatus.COMPLETED else f"{a.status.value}/{a.stop_reason.value}"  # type: ignore[union-attr]
        for a in ended
    )
    resumed = sum(1 for a in ended if a.attempt > 1)
    print(f"\nsoak: {kills} worker kills, {dict(outcome)}, {resumed} agents resumed at least once, "
          f"most losses of one agent: {max(a.losses for a in ended)}")
    assert outcome == {"COMPLETED": 100}, outcome
    assert resumed >= 10, "the kills must have hit agents mid-run"
    for agent in ended:
        assert agent.final_answer == "1113068"
        # Every attempt after the first took over from a killed worker: each one a loss.
        assert agent.losses == agent.attempt - 1, agent
        steps = system.repository.steps_after(agent.id)
        assert [s.seq for s in steps] == list(range(1, len(steps) + 1)), agent.id
        assert len({(s.step, s.type) for s in steps}) == len(steps), agent.id
        assert [s.type for s in steps].count(StepType.FINAL) == 1, agent.id
