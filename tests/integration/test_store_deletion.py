"""Deleting agents and retention on real PostgreSQL and SQLite (and the in-memory twin):
what goes with an agent, what a kept agent keeps, a user's deletion, and the races."""

from __future__ import annotations

import threading
import uuid
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

import pytest

from jarvis_agents.deleting import Deleting
from jarvis_agents.errors import Conflict, NotFound
from jarvis_agents.lifecycle import Agent, AgentStatus, Step, StepType, StopReason, utcnow
from jarvis_agents.retention import Deleted, Retention
from jarvis_agents.store.memory import MemoryStore
from tests.support.store import iteration, new_agent, running, waiting

LONG_AGO = timedelta(hours=2)
RETENTION_S = 3600.0


def ended(store: Any, user_id: uuid.UUID, *, ago: timedelta = timedelta(0), **kw: Any) -> Agent:
    """A new agent of the user's, with one iteration's steps, ended `ago` (cancelled then)."""
    agent = running(store, user_id) if not kw else _running_as(store, replace(new_agent(user_id), **kw))
    store.append_steps(agent.id, agent.attempt, iteration(0), step_count=1)
    assert store.transition(agent.id, AgentStatus.RUNNING, AgentStatus.CANCELLED,
                            stop_reason=StopReason.CANCELLED, now=utcnow() - ago)
    found = store.get(agent.id)
    assert found is not None
    return found


def _running_as(store: Any, agent: Agent) -> Agent:
    created, _ = store.create_agent(agent)
    claimed = store.claim(created.id)
    assert claimed is not None
    return claimed


def sweep(store: Any, **kw: Any) -> Deleted:
    return Retention(store.deletions, retention_s=RETENTION_S, **kw).sweep().deleted


def test_a_purge_takes_the_steps_and_deliveries_and_refuses_an_active_agent(repository) -> None:
    alice, _ = repository.users.create("alice")
    bob, _ = repository.users.create("bob")
    deleting = Deleting(repository)
    agent = running(repository, alice.id)
    repository.append_steps(agent.id, agent.attempt, iteration(0), step_count=1)
    with pytest.raises(Conflict, match="cancel it first"):
        deleting.purge(alice.id, agent.id)
    with repository.engine.begin() as conn:  # a delivery owed, as an ending with a webhook owes it
        repository.outbox.owe(conn, agent.id, "agent.completed", now=utcnow())
    assert repository.transition(agent.id, AgentStatus.RUNNING, AgentStatus.CANCELLED,
                                 stop_reason=StopReason.CANCELLED)
    with pytest.raises(NotFound):
        deleting.purge(bob.id, agent.id)
    assert repository.steps_after(agent.id)

    assert deleting.purge(alice.id, agent.id).steps == 3
    assert repository.get(agent.id) is None and repository.steps_after(agent.id) == []
    assert repository.outbox.of_agent(agent.id) == []
    with pytest.raises(NotFound):
        deleting.purge(alice.id, agent.id)


def test_retention_deletes_the_old_and_keeps_what_a_kept_agent_depends_on(repository) -> None:
    user, _ = repository.users.create("alice")
    old = ended(repository, user.id, ago=LONG_AGO)
    recent = ended(repository, user.id)
    # A thread whose later turn is recent: its earlier turn is kept.
    first = ended(repository, user.id, ago=LONG_AGO)
    later = ended(repository, user.id, thread_id=first.id, parent_id=first.id)
    # A thread ended long ago, every turn of it: all go.
    gone_first = ended(repository, user.id, ago=LONG_AGO)
    gone_later = ended(repository, user.id, ago=LONG_AGO, thread_id=gone_first.id)
    # A caller still waiting keeps its child, ended long ago, and the child its own child.
    caller, _ = waiting(repository, user.id)
    child = ended(repository, user.id, ago=LONG_AGO, caller_id=caller.id, caller_call_id="c1",
                  root_id=caller.id, depth=1)
    grandchild = ended(repository, user.id, ago=LONG_AGO, caller_id=child.id, caller_call_id="c2",
                       root_id=caller.id, depth=2)
    # A recent fork keeps its origin; an old fork of a recent origin goes.
    origin = ended(repository, user.id, ago=LONG_AGO)
    fork = ended(repository, user.id, forked_from_id=origin.id, forked_from_seq=3)
    old_fork = ended(repository, user.id, ago=LONG_AGO, forked_from_id=recent.id, forked_from_seq=3)

    recorded: list[Deleted] = []
    deleted = sweep(repository, record=recorded.append)

    gone = {old.id, gone_first.id, gone_later.id, old_fork.id}
    kept = {recent.id, first.id, later.id, caller.id, child.id, grandchild.id, origin.id, fork.id}
    assert {a for a in gone | kept if repository.get(a) is not None} == kept
    assert all(repository.steps_after(a) == [] for a in gone)
    assert all(repository.steps_after(a) for a in kept - {caller.id})
    assert deleted == Deleted(agents=4, steps=12) == sum(recorded, Deleted())
    oldest_kept = repository.statistics.oldest_ended_at()  # the API's gauge reads it
    assert oldest_kept is not None and utcnow() - oldest_kept >= LONG_AGO - timedelta(minutes=1)
    assert sweep(repository) == Deleted()


def test_retention_on_the_in_memory_store_keeps_the_same() -> None:
    store = MemoryStore()
    user = uuid.uuid4()
    old = ended(store, user, ago=LONG_AGO)
    first = ended(store, user, ago=LONG_AGO)
    later = ended(store, user, thread_id=first.id)
    assert sweep(store).agents == 1
    assert store.get(old.id) is None and store.get(first.id) and store.get(later.id)


def test_deleting_a_user_refuses_while_one_of_their_agents_waits(repository) -> None:
    user, _ = repository.users.create("carol")
    other, _ = repository.users.create("dave")
    deleting = Deleting(repository)
    agent, _ = waiting(repository, user.id)
    done = ended(repository, user.id)
    kept = ended(repository, other.id)
    with pytest.raises(Conflict, match="cancel them first"):
        deleting.delete_agents_of_user(user.id)
    assert repository.get(done.id) is not None and repository.users.by_name("carol")
    assert not repository.deletions.delete_user(user.id)
    assert repository.users.by_name("carol") is not None

    assert repository.transition(agent.id, AgentStatus.WAITING, AgentStatus.CANCELLED,
                                 stop_reason=StopReason.CANCELLED)
    assert deleting.delete_agents_of_user(user.id).agents == 2
    assert repository.deletions.delete_user(user.id)
    assert repository.users.by_name("carol") is None and repository.get(agent.id) is None
    assert repository.get(kept.id) is not None


def test_a_sweep_racing_a_resume_loses_no_step(repository) -> None:
    """An agent that waited long (its steps and its child's are old) is approved and goes
    on while sweeps run: its steps, and the child it called, stay."""
    user, _ = repository.users.create("erin")
    agent, _ = waiting(repository, user.id)
    child = ended(repository, user.id, ago=LONG_AGO, caller_id=agent.id, caller_call_id="c1",
                  root_id=agent.id, depth=1)
    old = [ended(repository, user.id, ago=LONG_AGO) for _ in range(20)]
    stop = threading.Event()
    swept: list[Deleted] = []
    failures: list[BaseException] = []

    def sweeping() -> None:
        try:
            while not stop.is_set():
                swept.append(sweep(repository))
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            failures.append(exc)

    sweeper = threading.Thread(target=sweeping)
    sweeper.start()
    try:
        for _ in range(5):
            assert repository.resume(agent.id, user_id=user.id, attempt=agent.attempt,
                                     max_active=None, waiting_for=None)
            claimed = repository.claim(agent.id)
            assert claimed is not None
            written = repository.steps_after(agent.id)
            rows = [Step(len(written) + 1, written[-1].step + 1, StepType.THINK, "go on"),
                    Step(len(written) + 2, written[-1].step + 1, StepType.ACT, "1 + 1",
                         tool="calculate", call_id=f"call_{claimed.attempt}")]
            moved = claimed.with_waiting(call_id=f"call_{claimed.attempt}", tool="calculate",
                                         tool_input="1 + 1")
            assert repository.transition(
                agent.id, AgentStatus.RUNNING, AgentStatus.WAITING, attempt=claimed.attempt,
                steps=rows, waiting_for=moved.waiting_for, heartbeat_at=None)
            agent = repository.get(agent.id)
    finally:
        stop.set()
        sweeper.join(30)
    assert not failures
    assert [s.seq for s in repository.steps_after(agent.id)] == list(range(1, 13))
    assert repository.get(child.id) is not None and repository.steps_after(child.id)
    assert all(repository.get(a.id) is None for a in old)
    assert sum(swept, Deleted()).agents == 20


def test_the_sweep_keeps_an_agent_whose_follow_up_is_created_meanwhile(repository) -> None:
    """The delete checks again, in SQL: a follow-up made after the sweep looked keeps its turn."""
    user, _ = repository.users.create("frank")
    first = ended(repository, user.id, ago=LONG_AGO)
    cutoff: datetime = utcnow() - timedelta(seconds=RETENTION_S)
    repository.create_agent(replace(new_agent(user.id), thread_id=first.id, parent_id=first.id))
    assert repository.deletions.delete_ended([first.id], ended_before=cutoff) == Deleted()
    assert repository.get(first.id) is not None


def test_a_purged_agent_takes_the_langgraph_runs_that_resumed_it(repository) -> None:
    from jarvis_agents.store.langgraph import RESUME, LangGraphStore, RunRow

    user, _ = repository.users.create("grace")
    agent = ended(repository, user.id)
    kept = ended(repository, user.id)
    runs = LangGraphStore(repository.engine)
    for of in (agent, kept):
        runs.add_run(RunRow(id=uuid.uuid4(), user_id=user.id, thread_id=of.id, kind=RESUME,
                            created_at=utcnow(), agent_id=of.id, after_seq=2))
    Deleting(repository).purge(user.id, agent.id)
    assert runs.runs_of_thread(agent.id) == []
    assert [r.agent_id for r in runs.runs_of_thread(kept.id)] == [kept.id]
