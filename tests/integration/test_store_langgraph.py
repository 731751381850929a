"""LangGraph's threads and runs in SQL (jarvis_agents/store/langgraph.py), on SQLite and
PostgreSQL: a listing that is the union of threads of agents and threads made ahead, and
the queue of enqueued runs."""

from __future__ import annotations

import uuid
from dataclasses import replace
from datetime import timedelta

import pytest

from jarvis_agents.lifecycle import Agent, utcnow
from jarvis_agents.store.langgraph import CANCELLED, QUEUED, LangGraphStore, RunRow

pytestmark = pytest.mark.integration


def test_threads_of_agents_and_threads_made_ahead_are_listed_together(repository):
    store = LangGraphStore(repository.engine)
    user, _ = repository.users.create(f"u-{uuid.uuid4()}")
    other, _ = repository.users.create(f"o-{uuid.uuid4()}")
    agent, _ = repository.create_agent(Agent.new(user_id=user.id, goal="g", model="m", max_steps=3))
    made = store.add_thread(user.id, uuid.uuid4(), {"team": "red"})
    store.add_thread(other.id, uuid.uuid4(), {})
    listed = store.threads(user.id, limit=10, offset=0)
    assert {t.id for t in listed} == {agent.id, made.id}
    assert store.thread(user.id, made.id).metadata == {"team": "red"}  # type: ignore[union-attr]
    assert store.thread(other.id, agent.id) is None
    assert store.with_metadata(user.id, {"team": "red"}) == [made.id]
    # A thread made ahead whose first agent has come is listed once, as a thread of agents.
    repository.create_agent(replace(
        Agent.new(user_id=user.id, goal="g", model="m", max_steps=3), thread_id=made.id))
    assert sorted(t.id for t in store.threads(user.id, limit=10, offset=0)) == sorted(
        [agent.id, made.id])
    assert store.threads(user.id, limit=1, offset=1)[0].id in {agent.id, made.id}


def test_queued_runs_leave_the_queue_once_started_or_cancelled(repository):
    store = LangGraphStore(repository.engine)
    user, _ = repository.users.create(f"u-{uuid.uuid4()}")
    thread = uuid.uuid4()
    now = utcnow()
    runs = [RunRow(id=uuid.uuid4(), user_id=user.id, thread_id=thread, kind=QUEUED,
                   created_at=now + timedelta(milliseconds=i), goal=f"g{i}") for i in range(3)]
    for run in reversed(runs):
        store.add_run(run)
    assert [r.id for r in store.runs_of_thread(thread, kind=QUEUED)] == [r.id for r in runs]
    assert store.queued_threads() == [thread]
    assert store.started(runs[0].id) and not store.started(runs[0].id)
    assert store.drop_run(runs[1].id) and not store.drop_run(runs[1].id)
    assert store.run(user.id, runs[1].id).kind == CANCELLED  # type: ignore[union-attr]
    assert [r.id for r in store.runs_of_thread(thread, kind=QUEUED)] == [runs[2].id]
