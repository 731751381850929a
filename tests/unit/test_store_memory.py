"""The in-memory store keeps the rules of the interface it shares with the Repository:
compare-and-set, the attempt guard, idempotency keys, the active limit, the sweeps."""

from __future__ import annotations

import inspect
import uuid
from dataclasses import replace
from datetime import timedelta

import pytest

from jarvis_agents.errors import Conflict, RateLimited, StaleAttempt
from jarvis_agents.lifecycle import AgentStatus, Step, StepType, utcnow
from jarvis_agents.store.interface import AgentStore
from jarvis_agents.store.memory import MemoryStore
from jarvis_agents.store.postgres import PostgresRepository
from jarvis_agents.store.repository import Repository
from tests.support.store import new_agent, running


@pytest.mark.parametrize("implementation", [MemoryStore, Repository, PostgresRepository])
def test_every_store_has_every_method_of_the_interface_with_its_signature(
    implementation: type,
) -> None:
    for name, method in inspect.getmembers(AgentStore, inspect.isfunction):
        if name.startswith("_"):
            continue
        ours = getattr(implementation, name)
        assert list(inspect.signature(ours).parameters) == list(
            inspect.signature(method).parameters), name


def test_a_create_is_refused_past_the_limit_and_repeated_by_its_key() -> None:
    store, user = MemoryStore(), uuid.uuid4()
    first, created = store.create_agent(new_agent(user, idempotency_key="k", request_hash="h"),
                                        max_active=1)
    assert created
    again, created = store.create_agent(new_agent(user, idempotency_key="k", request_hash="h"))
    assert (again.id, created) == (first.id, False)
    with pytest.raises(Conflict):
        store.create_agent(new_agent(user, idempotency_key="k", request_hash="other"))
    with pytest.raises(RateLimited):
        store.create_agent(new_agent(user), max_active=1)


def test_only_the_running_attempt_writes_steps_and_a_take_over_starts_the_next() -> None:
    store = MemoryStore()
    agent = running(store, uuid.uuid4())
    assert store.claim(agent.id) is None  # claimed once
    store.append_steps(agent.id, 1, [Step(1, 0, StepType.THINK, "t")], step_count=1)
    assert store.take_over(agent.id, attempt=1, stale_before=utcnow() - timedelta(hours=1)) is None
    taken = store.take_over(agent.id, attempt=1, stale_before=utcnow() + timedelta(seconds=1))
    assert taken is not None and (taken.attempt, taken.losses) == (2, 1)
    with pytest.raises(StaleAttempt):
        store.append_steps(agent.id, 1, [Step(2, 1, StepType.THINK, "late")], step_count=2)
    assert store.heartbeat([(agent.id, 1), (agent.id, 2)]) == 1
    assert store.release(agent.id, 2)
    handed_back = store.take_over(agent.id, attempt=2, stale_before=utcnow())
    assert handed_back is not None and handed_back.losses == 1  # a hand-back is no loss
    assert not store.transition(agent.id, AgentStatus.RUNNING, AgentStatus.COMPLETED, attempt=2)
    assert store.transition(agent.id, AgentStatus.RUNNING, AgentStatus.COMPLETED, attempt=3,
                            final_answer="done")
    assert [s.content for s in store.steps_after(agent.id)] == ["t"]


def test_the_sweeps_claim_each_agent_once_per_period() -> None:
    store, user = MemoryStore(), uuid.uuid4()
    pending, _ = store.create_agent(new_agent(user))
    store.forget_task(pending.id)
    lost = running(store, user)
    store.release(lost.id, 1)
    later = utcnow() + timedelta(seconds=1)
    assert store.requeue_pending(untouched_before=utcnow() - timedelta(hours=1)) == [
        (pending.id, str(pending.id))]
    assert store.requeue_pending(untouched_before=utcnow() - timedelta(hours=1)) == []
    assert store.requeue_stale_running(stale_before=later) == [(lost.id, 1, True)]
    assert store.requeue_stale_running(stale_before=utcnow() - timedelta(hours=1)) == []


def test_agents_list_newest_first_page_by_page() -> None:
    store, user = MemoryStore(), uuid.uuid4()
    start = utcnow()
    made = [store.create_agent(replace(new_agent(user), created_at=start + timedelta(seconds=i)))[0]
            for i in range(3)]
    page, cursor = store.list_agents(user, limit=2)
    assert [a.id for a in page] == [made[2].id, made[1].id] and cursor is not None
    page, cursor = store.list_agents(user, limit=2, cursor=cursor)
    assert [a.id for a in page] == [made[0].id] and cursor is None
    assert store.models_of([made[0].id]) == {made[0].id: "test-model"}
