"""Recovering agents in SQL, on PostgreSQL and SQLite: the sweeper's claims, take-overs
that count only lost workers, and `worker_lost` decided by the heartbeat in the CAS."""

from __future__ import annotations

import threading
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import update

from jarvis_agents.lifecycle import Agent, AgentStatus, Step, StepType, StopReason, utcnow
from jarvis_agents.store.repository import Repository, agents
from tests.support.store import new_agent, running

SWEEPERS = 4


def age(repository: Repository, agent_id: uuid.UUID, *, heartbeat_at: datetime | None,
        updated_at: datetime) -> None:
    with repository.engine.begin() as conn:
        conn.execute(update(agents).where(agents.c.id == agent_id)
                     .values(heartbeat_at=heartbeat_at, updated_at=updated_at))


def race(sweep: Callable[[], list[Any]]) -> list[Any]:
    """What SWEEPERS concurrent calls of `sweep` claimed, all together."""
    start = threading.Barrier(SWEEPERS)
    claimed: list[Any] = []
    lock = threading.Lock()

    def one() -> None:
        start.wait()
        rows = sweep()
        with lock:
            claimed.extend(rows)

    threads = [threading.Thread(target=one) for _ in range(SWEEPERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    return claimed


def test_a_stale_agent_is_requeued_once_however_many_sweepers_race(repository: Repository) -> None:
    user, _ = repository.users.create("sweep")
    long_ago = utcnow() - timedelta(minutes=5)
    stale = [running(repository, user.id) for _ in range(12)]
    for agent in stale:
        age(repository, agent.id, heartbeat_at=long_ago, updated_at=long_ago)
    alive = running(repository, user.id)
    handed_back = running(repository, user.id)
    assert repository.release(handed_back.id, 1)  # its worker enqueues it itself

    stale_before = utcnow() - timedelta(seconds=30)
    claimed = race(lambda: repository.requeue_stale_running(stale_before=stale_before))
    assert Counter(agent_id for agent_id, _, _ in claimed) == Counter(a.id for a in stale)
    assert {(attempt, back) for _, attempt, back in claimed} == {(1, False)}
    # Claimed for this period: the next sweeps leave them alone.
    assert repository.requeue_stale_running(stale_before=stale_before) == []
    # A period later, what is still stale (its message was lost too) goes again, and a
    # hand-back whose enqueue failed is queued by a sweep as well; a live agent never.
    for agent in [*stale, handed_back]:
        age(repository, agent.id, heartbeat_at=repository.get(agent.id).heartbeat_at,  # type: ignore[union-attr]
            updated_at=long_ago)
    again = repository.requeue_stale_running(stale_before=stale_before)
    assert sorted(again) == sorted([(a.id, 1, False) for a in stale] + [(handed_back.id, 1, True)])
    assert alive.id not in {agent_id for agent_id, _, _ in again}


def test_a_handed_back_agent_is_looked_at_within_an_interval(repository: Repository) -> None:
    user, _ = repository.users.create("handed")
    handed_back = running(repository, user.id)
    assert repository.release(handed_back.id, 1)
    stale = running(repository, user.id)
    now = utcnow()
    age(repository, stale.id, heartbeat_at=now - timedelta(seconds=10), updated_at=now - timedelta(seconds=10))
    age(repository, handed_back.id, heartbeat_at=None, updated_at=now - timedelta(seconds=10))
    # Its worker enqueued it: a sweep looks only after an interval, not a staleness period.
    def claim() -> list[tuple[uuid.UUID, int, bool]]:
        return repository.requeue_stale_running(
            stale_before=now - timedelta(seconds=30), handed_back_before=now - timedelta(seconds=5))

    assert claim() == [(handed_back.id, 1, True)]  # the stale-ish one beat 10 s ago: alive
    assert claim() == []  # looked at: not again within the interval


def test_a_pending_agent_is_looked_for_on_the_queue_once_per_period(repository: Repository) -> None:
    """The claim is a look, not a send: the sweeper sends again only an agent whose
    message is gone (tests/integration/test_direct_enqueue.py)."""
    user, _ = repository.users.create("pending")
    long_ago = utcnow() - timedelta(minutes=5)
    waited: list[Agent] = []
    for _ in range(6):
        agent, _ = repository.create_agent(new_agent(user.id))
        age(repository, agent.id, heartbeat_at=None, updated_at=long_ago)
        waited.append(agent)
    unqueued, _ = repository.create_agent(new_agent(user.id))  # its enqueue failed
    repository.forget_task(unqueued.id)
    fresh = replace(new_agent(user.id), task_id="on-the-queue")
    repository.create_agent(fresh)

    untouched_before = utcnow() - timedelta(seconds=60)
    claimed = race(lambda: repository.requeue_pending(untouched_before=untouched_before))
    expected = {a.id for a in waited} | {unqueued.id}
    assert Counter(agent_id for agent_id, _ in claimed) == Counter(expected)
    assert all(task_id for _, task_id in claimed)  # each goes under a task id it keeps
    for agent_id, task_id in claimed:
        assert repository.get(agent_id).task_id == task_id  # type: ignore[union-attr]
    assert repository.requeue_pending(untouched_before=untouched_before) == []


def test_a_take_over_counts_a_lost_worker_and_not_a_hand_back(repository: Repository) -> None:
    user, _ = repository.users.create("losses")
    agent = running(repository, user.id)
    assert agent.losses == 0
    later = utcnow() + timedelta(seconds=1)  # every heartbeat so far is stale
    lost = repository.take_over(agent.id, attempt=1, stale_before=later)
    assert lost is not None and (lost.attempt, lost.losses) == (2, 1)
    assert repository.release(agent.id, 2)
    handed = repository.take_over(agent.id, attempt=2, stale_before=utcnow() - timedelta(hours=1))
    assert handed is not None and (handed.attempt, handed.losses) == (3, 1)
    assert repository.get(agent.id).losses == 1  # type: ignore[union-attr]


def give_up(repository: Repository, agent: Agent, heartbeat_before: datetime,
            steps: tuple[Step, ...] = ()) -> bool:
    failed = agent.with_failed("lost", stop_reason=StopReason.WORKER_LOST)
    return repository.transition(
        agent.id, AgentStatus.RUNNING, AgentStatus.FAILED, attempt=agent.attempt,
        heartbeat_before=heartbeat_before, steps=steps, losses=agent.losses + 1,
        error=failed.error, stop_reason=failed.stop_reason, completed_at=failed.completed_at,
    )


def test_worker_lost_is_refused_to_a_fresh_heartbeat_and_to_a_hand_back(
    repository: Repository,
) -> None:
    user, _ = repository.users.create("lost")
    agent = running(repository, user.id)
    stale_before = utcnow() - timedelta(seconds=30)
    assert not give_up(repository, agent, stale_before)  # it beats: alive
    error_row = (Step(1, 0, StepType.ERROR, "lost"),)
    assert not give_up(repository, agent, stale_before, error_row)  # PostgreSQL's other path
    assert repository.release(agent.id, 1)
    assert not give_up(repository, agent, utcnow() + timedelta(seconds=1))  # handed back
    taken = repository.take_over(agent.id, attempt=1, stale_before=stale_before)
    assert taken is not None and taken.losses == 0
    assert repository.get(agent.id).status is AgentStatus.RUNNING  # type: ignore[union-attr]
    long_ago = utcnow() - timedelta(minutes=5)
    age(repository, agent.id, heartbeat_at=long_ago, updated_at=long_ago)
    assert give_up(repository, taken, stale_before)
    failed = repository.get(agent.id)
    assert failed is not None and failed.status is AgentStatus.FAILED
    assert (failed.stop_reason, failed.losses) == (StopReason.WORKER_LOST, 1)


def test_a_bug_ends_the_agent_as_internal_error_with_its_count(repository: Repository) -> None:
    user, _ = repository.users.create("bug")
    agent = running(repository, user.id)
    error_row = Step(1, 0, StepType.ERROR, "internal error: KeyError: 'x'")
    failed = agent.with_failed(error_row.content, stop_reason=StopReason.INTERNAL_ERROR,
                               step_count=1)
    assert repository.transition(
        agent.id, AgentStatus.RUNNING, AgentStatus.FAILED, attempt=1, steps=(error_row,),
        error=failed.error, stop_reason=failed.stop_reason, step_count=1,
        completed_at=failed.completed_at)
    stored = repository.get(agent.id)
    assert stored is not None and stored.stop_reason is StopReason.INTERNAL_ERROR
    assert (stored.error, stored.step_count) == ("internal error: KeyError: 'x'", 1)
