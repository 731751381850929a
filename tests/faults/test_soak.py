"""A soak: 100 agents while workers are SIGKILLed and restarted every few seconds."""

from __future__ import annotations

import random
import signal
import time
from collections import Counter
from typing import Any

from jarvis_agents.lifecycle import AgentStatus, StopReason
from tests.faults.conftest import System


def test_soak_with_workers_killed_every_few_seconds(system: System, fake_ollama: Any,
                                                   start_worker: Any) -> None:
    rng = random.Random(7)
    fake_ollama.latency_s = lambda: rng.uniform(0.5, 1.5)
    env = {**system.env, "JARVIS_MAX_ATTEMPTS": "3", "JARVIS_TOTAL_TIMEOUT": "600"}
    workers = [start_worker(env), start_worker(env)]
    # Agents arrive over the whole chaos window, so kills always find some in flight.
    agents = []
    chaos_until = time.monotonic() + 30
    kills = 0
    next_kill = time.monotonic() + rng.uniform(3, 5)
    while time.monotonic() < chaos_until or len(agents) < 100:
        if len(agents) < 100:
            agents.append(system.create(f"soak {len(agents)}: what is 1234 * 902?"))
        time.sleep(0.25)
        if time.monotonic() < next_kill or time.monotonic() > chaos_until:
            continue
        next_kill = time.monotonic() + rng.uniform(3, 5)
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
    print(f"\nsoak: {kills} worker kills, {dict(outcome)}, {resumed} agents resumed at least once")
    for agent in ended:
        assert agent.status is AgentStatus.COMPLETED or agent.stop_reason is StopReason.WORKER_LOST, agent
        steps = system.repository.steps_after(agent.id)
        assert [s.seq for s in steps] == list(range(1, len(steps) + 1)), agent.id
        assert len({(s.step, s.type) for s in steps}) == len(steps), agent.id
        if agent.status is AgentStatus.COMPLETED:
            assert agent.final_answer == "1113068"
    assert outcome["COMPLETED"] + outcome["FAILED/worker_lost"] == 100
