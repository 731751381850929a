"""Workers die; agents do not: resumed from their last step, nothing written twice."""

from __future__ import annotations

import signal
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from jarvis_agents.lifecycle import AgentStatus, StepType
from tests.faults.conftest import System

pytestmark = pytest.mark.long


def assert_clean_history(system: System, agent_id: Any) -> None:
    steps = system.repository.steps_after(agent_id)
    assert [s.seq for s in steps] == list(range(1, len(steps) + 1)), "gaps or duplicates in seq"
    assert Counter((s.step, s.type) for s in steps).most_common(1)[0][1] == 1
    assert [s.type for s in steps].count(StepType.FINAL) == 1


def test_sigkill_mid_agent_then_another_worker_completes_it(system: System, fake_ollama: Any,
                                                             start_worker: Any) -> None:
    fake_ollama.latency_s = 1.0
    first = start_worker(system.env)
    agent = system.create()
    # Kill once the first iteration is persisted and the second planning call is in flight.
    system.wait_until(lambda: len(system.repository.steps_after(agent.id)) >= 3, 20, "first steps")
    first.signal(signal.SIGKILL)
    first.proc.wait(10)
    assert system.repository.get(agent.id).status is AgentStatus.RUNNING  # type: ignore[union-attr]
    fake_ollama.latency_s = 0.0  # the kill is behind it: the resumed calls need not be slow
    start_worker(system.env)
    done = system.terminal(agent.id, timeout_s=40)
    assert done.status is AgentStatus.COMPLETED, done.error
    assert done.final_answer == "1113068"
    assert (done.attempt, done.losses) == (2, 1)  # a worker really lost: counted
    assert_clean_history(system, agent.id)
    assert f"[agent {agent.id}]" in first.output()  # log lines carry the agent id


def test_sigterm_loses_no_agent_and_counts_no_lost_worker(
    system: System, fake_ollama: Any, start_worker: Any
) -> None:
    """SIGTERM: running agents get a grace period, then are handed back and resumed
    elsewhere; a hand-back is not a lost worker, even where one loss would fail them."""
    fake_ollama.latency_s = 2.0  # each agent needs ~6 s, longer than the grace period
    env = {**system.env, "JARVIS_SHUTDOWN_GRACE": "1", "JARVIS_MAX_ATTEMPTS": "1"}
    worker = start_worker(env)
    agents = [system.create() for _ in range(5)]
    system.wait_until(
        lambda: all(system.repository.get(a.id).status is AgentStatus.RUNNING for a in agents),  # type: ignore[union-attr]
        20, "agents to start")
    worker.signal(signal.SIGTERM)
    # It stops after its grace period, not once its agents end: they are handed back.
    worker.proc.wait(30)
    # A clean exit, its last lines written (the process skips the interpreter's teardown).
    assert worker.proc.returncode == 0, worker.output()[-3000:]
    output = worker.output()
    assert all(f"agent {a.id} handed back" in output for a in agents), output[-3000:]
    handed_back = [system.repository.get(a.id) for a in agents]
    assert all(a.status is AgentStatus.RUNNING and a.heartbeat_at is None for a in handed_back)  # type: ignore[union-attr]
    fake_ollama.latency_s = 0.0  # the shutdown is behind them: the resumed calls need not be slow
    start_worker(env)
    for agent in agents:
        done = system.terminal(agent.id, timeout_s=40)
        assert done.status is AgentStatus.COMPLETED, (done.stop_reason, done.error)
        assert (done.attempt, done.losses) == (2, 0)  # resumed by the second worker, not restarted
        assert_clean_history(system, agent.id)


def test_model_down_then_back_within_its_retries_completes(system: System, fake_ollama: Any,
                                                            start_worker: Any) -> None:
    worker = start_worker({**system.env, "JARVIS_MODEL_RETRIES": "6"})
    fake_ollama.latency_s = 0.3
    agent = system.create()
    system.wait_until(lambda: len(system.repository.steps_after(agent.id)) >= 3, 20, "first steps")
    fake_ollama.stop()
    system.wait_until(lambda: "failed (attempt 2 of 6)" in worker.output(), 20,
                      "the worker to retry the model call")
    fake_ollama.start()
    done = system.terminal(agent.id, timeout_s=40)
    assert done.status is AgentStatus.COMPLETED, (done.stop_reason, done.error)
    assert (done.attempt, done.losses) == (1, 0)  # a model outage is not a lost worker
    assert_clean_history(system, agent.id)


def test_model_down_past_its_retries_fails_the_agent(system: System, fake_ollama: Any,
                                                     start_worker: Any) -> None:
    worker = start_worker(system.env)  # JARVIS_MODEL_RETRIES=3
    fake_ollama.latency_s = 0.3
    agent = system.create()
    system.wait_until(lambda: len(system.repository.steps_after(agent.id)) >= 3, 20, "first steps")
    fake_ollama.stop()
    done = system.terminal(agent.id, timeout_s=40)
    assert done.status is AgentStatus.FAILED
    assert done.stop_reason is not None and done.stop_reason.value == "model_error"
    assert "Ollama" in (done.error or "")
    assert "failed (attempt 2 of 3)" in worker.output()


def test_a_fork_whose_worker_dies_in_its_first_iteration_resumes_without_copying_twice(
    system: System, fake_ollama: Any, start_worker: Any
) -> None:
    """A fork resumes as any agent does: the copies are its history, written once."""
    from jarvis_agents.service import ForkRequest

    first = start_worker(system.env)
    original = system.terminal(system.create().id, timeout_s=30)
    assert original.status is AgentStatus.COMPLETED, original.error
    fake_ollama.latency_s = 3.0
    asked = len(fake_ollama.requests)
    fork = system.service.fork(system.user_id, original.id, ForkRequest(after_seq=3))
    # Kill while the fork's first planning call after the fork point is in flight.
    system.wait_until(lambda: len(fake_ollama.requests) > asked, 20, "the fork's first model call")
    first.signal(signal.SIGKILL)
    first.proc.wait(10)
    assert [s.seq for s in system.repository.steps_after(fork.id)] == [1, 2, 3]
    fake_ollama.latency_s = 0.0
    start_worker(system.env)
    done = system.terminal(fork.id, timeout_s=40)
    assert done.status is AgentStatus.COMPLETED and done.final_answer == "1113068", done.error
    assert done.losses == 1
    assert_clean_history(system, fork.id)
    copied = system.repository.steps_after(fork.id)[:3]
    assert [(s.seq, s.step, s.type, s.tool, s.content) for s in copied] == [
        (s.seq, s.step, s.type, s.tool, s.content) for s in system.repository.steps_after(original.id)[:3]]


def test_an_agent_handed_back_before_a_redis_restart_runs_again_as_the_next_worker_starts(
    pg_url: str, fake_ollama: Any, start_worker: Any, tmp_path: Path
) -> None:
    """`jarvis-agents up` stopped and started again: the worker hands its agent back, the
    embedded Redis goes with its message, and the next worker must not leave the agent
    RUNNING with nobody on it until a staleness period has passed since the hand-back."""
    from tests.faults.conftest import CALC, running_system, system_env
    from tests.faults.own_servers import OwnRedis

    own = OwnRedis(tmp_path)
    own.start()
    fake_ollama.responder = fake_ollama.by_turn(CALC)
    fake_ollama.latency_s = 2.0
    # No staleness period passes during the test: only a hand-back seen as such is resumed.
    env = {**system_env(pg_url, own.url, fake_ollama.url), "JARVIS_SHUTDOWN_GRACE": "0.1",
           "JARVIS_HEARTBEAT_STALE": "600"}
    try:
        with running_system(env) as system:
            worker = start_worker(env)
            agent = system.create()
            system.wait_until(lambda: system.repository.get(agent.id).status  # type: ignore[union-attr]
                              is AgentStatus.RUNNING, 20, "the agent to start")
            worker.signal(signal.SIGTERM)
            worker.proc.wait(30)
            handed_back = system.repository.get(agent.id)
            assert handed_back is not None and handed_back.heartbeat_at is None, worker.output()[-2000:]
            own.stop()  # the message it queued goes with Redis
            own.start()
            fake_ollama.latency_s = 0.0
            start_worker(env)

            def resumed() -> bool:
                now = system.repository.get(agent.id)
                return now is not None and now.attempt == 2 and now.heartbeat_at is not None

            system.wait_until(resumed, 30, "the next worker to take the agent")
            done = system.terminal(agent.id, timeout_s=30)
            assert done.status is AgentStatus.COMPLETED, (done.stop_reason, done.error)
            assert (done.attempt, done.losses) == (2, 0)
            assert_clean_history(system, agent.id)
    finally:
        own.stop()
