"""PostgreSQL killed outright under running agents (SIGKILL, fsync on), then started again.

A claim commits without waiting for the WAL to reach the disk (Repository.claim): a
crash can take it back, leaving the agent PENDING while the worker that claimed it is
still planning its first step; the sweeper queues it again and it runs again, under
the same attempt number. Whatever the crash kept, every agent must complete, none may
be lost or counted as a lost worker, and no step may be written or planned twice.
"""

from __future__ import annotations

import os
import signal
import threading
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, text

from jarvis_agents.lifecycle import Agent, AgentStatus, StepType
from jarvis_agents.service import CreateRequest
from tests.conftest import Process, _descendants, private_redis
from tests.faults.conftest import System, running_system
from tests.faults.own_servers import OwnPostgres, own_postgres
from tests.faults.test_restarts import LONG, LONG_STEPS, restart_env
from tests.faults.test_worker_death import assert_clean_history

KEPT = LOST = 3  # agents whose claim the crash keeps, and takes


class Replies:
    """The script by turn, the same to every run of an agent; a call whose `gate(turn)`
    gives an Event when it arrives is answered once that Event is set."""

    def __init__(self, script: list[str]) -> None:
        self.script = script
        self.gate: Callable[[int], threading.Event | None] = lambda turn: None

    def __call__(self, request: dict[str, Any]) -> str:
        turn = sum(1 for m in request.get("messages", []) if m.get("role") == "assistant")
        if (gate := self.gate(turn)) is not None:
            gate.wait(60)
        return self.script[turn]


def asked(requests: list[dict[str, Any]], agent: Agent) -> Counter[int]:
    """How many times the model was asked for each turn of this agent's."""
    return Counter(sum(1 for m in r["messages"] if m["role"] == "assistant") for r in requests
                   if any(agent.goal in str(m.get("content")) for m in r["messages"]))


@pytest.fixture
def redis_url(tmp_path: Path) -> Iterator[str]:
    """A redis-server of the test's own: nothing to wait for while other sessions hold
    the shared server's databases (its PostgreSQL is its own too)."""
    with private_redis(tmp_path) as url:
        yield url


@pytest.fixture
def crashable_postgres() -> Iterator[OwnPostgres]:
    # fsync on: what a commit made durable survives the crash. Nothing but the commits
    # writes the WAL out behind the test's back: no background writer, no autovacuum
    # (and the WAL writer is paused at the moment the test chooses).
    with own_postgres({"fsync": "on", "bgwriter_lru_maxpages": "0", "autovacuum": "off"}) as server:
        yield server


def test_a_postgres_crash_loses_no_agent_and_runs_none_twice(
    crashable_postgres: OwnPostgres, redis_url: str, fake_ollama: Any, start_worker: Any
) -> None:
    from jarvis_agents.store.database import upgrade

    database_url = crashable_postgres.create_database(f"jarvis_{uuid.uuid4().hex[:8]}")
    upgrade(database_url)
    replies = Replies(LONG)
    fake_ollama.responder = replies
    before_crash, later_turns = threading.Event(), threading.Event()
    replies.gate = lambda turn: before_crash  # the calls asked before the crash wait
    env = {**restart_env(database_url, redis_url, fake_ollama.url),
           "JARVIS_HEARTBEAT_INTERVAL": "1", "JARVIS_PENDING_REQUEUE": "3"}
    with running_system(env) as system, gates_opened(before_crash, later_turns):
        def create(n: int) -> Agent:  # in ReACT mode, which no write after the claim settles
            return system.service.create(system.user_id, CreateRequest(
                goal=f"crash {n}: add up", mode="react"))[0]

        kept = [create(n) for n in range(KEPT)]
        worker = start_worker(system.env)
        system.wait_until(lambda: fake_ollama.call_count == KEPT, 30, "the first agents to plan")
        # From here on the heartbeats wait for these rows and the WAL writer sleeps. The
        # next agents are created while the worker is frozen: their creates, durable
        # commits, write the first claims out; their own claims follow them all and stay
        # in the server's memory, for the crash to take.
        with rows_locked(database_url, kept):
            crashable_postgres.pause_wal_writer()
            with frozen(worker):
                lost = [create(KEPT + n) for n in range(LOST)]
            system.wait_until(lambda: fake_ollama.call_count == KEPT + LOST, 30,
                              "the last agents to plan")
            crashable_postgres.crash()
        crashable_postgres.start()

        after = [system.repository.get(a.id) for a in kept + lost]
        assert [(a.status, a.attempt) for a in after] == (  # type: ignore[union-attr]
            [(AgentStatus.RUNNING, 1)] * KEPT + [(AgentStatus.PENDING, 0)] * LOST
        ), "the crash did not keep and take the claims it was set up to"

        # The lost claims' agents run again and write their first steps while the runs
        # the crash cut off still plan: those then write theirs, and are refused.
        replies.gate = lambda turn: later_turns if turn >= 1 else None
        system.wait_until(lambda: all(len(system.repository.steps_after(a.id)) == 3 for a in lost),
                          60, "the lost claims' agents to run again")
        before_crash.set()
        system.wait_until(lambda: all(len(system.repository.steps_after(a.id)) == 3 for a in kept),
                          30, "the kept claims' agents to go on")
        assert_every_run_beats(system, kept + lost)
        later_turns.set()

        for agent in kept + lost:
            done = system.terminal(agent.id, timeout_s=60)
            assert done.status is AgentStatus.COMPLETED, (done.status, done.error)
            assert done.final_answer == "8"
            assert done.losses == 0, "the crash counted as a lost worker"
            steps = system.repository.steps_after(agent.id)
            assert len(steps) == LONG_STEPS, [(s.seq, s.step, s.type.value) for s in steps]
            assert_clean_history(system, agent.id)
            assert [s.type for s in steps][-1] is StepType.FINAL
            # Planned once per turn; the first turn again after a lost claim only.
            assert asked(fake_ollama.requests, agent) == Counter(
                {0: 2 if agent in lost else 1, 1: 1, 2: 1, 3: 1, 4: 1})
        # The runs the crash cut off stopped as stale attempts, refused by their first
        # step's seq: nothing taken for a bug of ours in the worker's log.
        output = worker.output()
        assert "stopped: " in output and "internal error" not in output, output[-3000:]
        assert "raised unexpected" not in output, output[-3000:]


def assert_every_run_beats(system: System, agents: list[Agent]) -> None:
    """Two heartbeats on, the worker marks every agent it runs alive, those it runs a
    second time included (else they are taken for lost once their heartbeat is stale)."""
    def beat(agent: Agent) -> datetime:
        return system.repository.get(agent.id).heartbeat_at  # type: ignore[union-attr,return-value]

    for _ in range(2):
        last = max(map(beat, agents))
        system.wait_until(lambda last=last: beat(agents[0]) > last, 30, "a heartbeat")
    latest = beat(agents[0])
    behind = [a.id for a in agents if beat(a) < latest]
    assert not behind, f"the worker no longer marks {behind} alive"


@contextmanager
def gates_opened(*gates: threading.Event) -> Iterator[None]:
    """Every gate open at the end, whatever happened: no model call is left held."""
    try:
        yield
    finally:
        for gate in gates:
            gate.set()


@contextmanager
def frozen(process: Process) -> Iterator[None]:
    """The process and its children stopped (SIGSTOP) in the block, then let go on."""
    pids = [process.proc.pid, *_descendants(process.proc.pid)]
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGCONT)


@contextmanager
def rows_locked(database_url: str, agents: list[Agent]) -> Iterator[None]:
    """These agents' rows locked (FOR UPDATE) by a transaction left open in the block."""
    engine = create_engine(database_url)
    conn = engine.connect()
    try:
        conn.execute(text("SELECT id FROM agents WHERE id = ANY(:ids) FOR UPDATE"),
                     {"ids": [a.id for a in agents]})
        yield
    finally:
        conn.invalidate()  # a crash took it: nothing to roll back
        engine.dispose()
