"""Schedules in the store on real SQLite and PostgreSQL: read back for their user only,
the per-user limit, and firing: a due time makes one agent however many schedulers race
for it on connections of their own, missed due times collapse, an overlap is skipped and
counted (README, Schedules)."""

from __future__ import annotations

import threading
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import select, update
from sqlalchemy.exc import OperationalError

from jarvis_agents.config import Settings
from jarvis_agents.dispatch import MemoryDispatcher
from jarvis_agents.errors import RateLimited
from jarvis_agents.events import MemoryEventBus
from jarvis_agents.lifecycle import AgentStatus
from jarvis_agents.schedule_service import ScheduleRequest
from jarvis_agents.scheduler import Scheduler
from jarvis_agents.schedules import Template
from jarvis_agents.service import AgentService
from jarvis_agents.store import repository_for
from jarvis_agents.store.database import make_engine
from jarvis_agents.store.models import AgentRow, UserRow
from jarvis_agents.store.repository import Repository
from jarvis_agents.store.schedules import ScheduleRow

pytestmark = pytest.mark.integration

SETTINGS = Settings.from_env({"JARVIS_MODEL": "llama3.2", "JARVIS_MAX_SCHEDULES_PER_USER": "500"})
agents = AgentRow.__table__
schedules = ScheduleRow.__table__
users = UserRow.__table__
DUE = datetime(2026, 1, 1, 3, tzinfo=UTC)


def service_on(repository: Repository, settings: Settings = SETTINGS) -> AgentService:
    return AgentService(repository=repository, settings=settings, dispatcher=MemoryDispatcher(),
                        events=MemoryEventBus(), tool_names=["calculate"])


def make_due(repository: Repository, due: datetime = DUE) -> None:
    with repository.engine.begin() as conn:
        conn.execute(update(schedules).values(next_run_at=due))


def agents_of(repository: Repository) -> list[Any]:
    with repository.engine.connect() as conn:
        return list(conn.execute(select(agents.c.schedule_id, agents.c.scheduled_for,
                                        agents.c.status)).mappings())


def test_a_schedule_reads_back_for_its_user_only_and_the_limit_holds(repository: Repository) -> None:
    alice, _ = repository.users.create("alice")
    bob, _ = repository.users.create("bob")
    service = service_on(repository, Settings.from_env({"JARVIS_MAX_SCHEDULES_PER_USER": "2"}))
    request = ScheduleRequest(goal="Report", cron="0 9 * * 1-5", timezone="Europe/Paris",
                              thread="same", overlap="allow",
                              template=Template(tools=("calculate",), output_schema={"type": "object"}))
    made = service.schedules.create(alice.id, request)
    assert repository.schedules.find(alice.id, made.id) == made
    assert repository.schedules.find(bob.id, made.id) is None
    service.schedules.create(alice.id, request)
    with pytest.raises(RateLimited) as refused:
        service.schedules.create(alice.id, request)
    assert refused.value.code == "too_many_schedules"
    assert [s.id for s in repository.schedules.of_user(bob.id)] == []
    paused = service.schedules.patch(alice.id, made.id, {"enabled": False, "max_steps": 3})
    assert not paused.enabled and paused.template.max_steps == 3
    assert repository.schedules.find(alice.id, made.id) == paused
    assert not repository.schedules.delete(bob.id, made.id)
    assert repository.schedules.delete(alice.id, made.id)


def test_two_schedulers_racing_fire_each_due_time_once(database_url: str) -> None:
    """Two schedulers, each on an engine of its own, fire 300 schedules due at once."""
    setup = repository_for(make_engine(database_url))
    alice, _ = setup.users.create("alice")
    service = service_on(setup)
    for n in range(300):
        service.schedules.create(alice.id, ScheduleRequest(goal=f"run {n}", cron="* * * * *"))
    make_due(setup)
    won: list[int] = []
    start = threading.Barrier(2)

    def race() -> None:
        repository = repository_for(make_engine(database_url))
        scheduler = Scheduler(service_on(repository), batch=50)
        start.wait()
        fired = 0
        for _ in range(200):  # SQLite refuses a writer whose snapshot is stale: again
            try:
                fired += len(scheduler.fire(DUE + timedelta(seconds=1)))
                break
            except OperationalError:
                continue
        won.append(fired)
        repository.engine.dispose()

    racers = [threading.Thread(target=race) for _ in range(2)]
    for racer in racers:
        racer.start()
    for racer in racers:
        racer.join(120)
    made = agents_of(setup)
    assert sum(won) == 300 and len(made) == 300
    assert set(Counter(row["schedule_id"] for row in made).values()) == {1}
    setup.engine.dispose()


def test_missed_due_times_collapse_and_an_overlap_is_skipped(repository: Repository) -> None:
    alice, _ = repository.users.create("alice")
    service = service_on(repository)
    schedule = service.schedules.create(alice.id, ScheduleRequest(goal="Report", cron="0 3 * * *"))
    make_due(repository)
    scheduler = Scheduler(service)
    fired = scheduler.fire(DUE + timedelta(days=3, hours=2))
    assert [f.agent.scheduled_for for f in fired] == [DUE + timedelta(days=3)]
    assert repository.get(fired[0].agent.id).schedule_id == schedule.id
    after = repository.schedules.find(alice.id, schedule.id)
    assert after.next_run_at == DUE + timedelta(days=4) and after.last_agent_id == fired[0].agent.id
    skipped = scheduler.fire(DUE + timedelta(days=4))
    assert [f.agent for f in skipped] == [None]
    assert repository.schedules.find(alice.id, schedule.id).skipped == 1
    service.cancel(alice.id, fired[0].agent.id)
    again = scheduler.fire(DUE + timedelta(days=5))
    assert again[0].agent is not None and again[0].agent.status is AgentStatus.PENDING
    assert [row["scheduled_for"].replace(tzinfo=UTC) for row in agents_of(repository)
            if row["status"] == "PENDING"] == [DUE + timedelta(days=5)]


def test_a_due_time_whose_agent_the_index_refuses_is_made_once(repository: Repository) -> None:
    """Should a firing's compare-and-set ever be passed twice, the unique index keeps one agent."""
    alice, _ = repository.users.create("alice")
    service = service_on(repository)
    schedule = service.schedules.create(alice.id, ScheduleRequest(goal="Report", cron="0 3 * * *",
                                                                  overlap="allow"))
    make_due(repository)
    scheduler = Scheduler(service)
    assert len(scheduler.fire(DUE)) == 1
    make_due(repository)  # as if the due time were read again
    refused = scheduler.fire(DUE)
    assert [f.agent for f in refused] == [None]
    assert len(agents_of(repository)) == 1
    assert repository.schedules.find(alice.id, schedule.id).skipped == 1


def test_a_users_schedules_go_with_the_user(repository: Repository) -> None:
    alice, _ = repository.users.create("alice")
    service = service_on(repository)
    made = service.schedules.create(alice.id, ScheduleRequest(goal="Report", cron="0 3 * * *"))
    with repository.engine.begin() as conn:
        conn.execute(users.delete().where(users.c.id == alice.id))
    assert repository.schedules.find(alice.id, made.id) is None


def test_deleting_a_user_deletes_their_schedules(repository: Repository) -> None:
    """`jarvis-agents users delete` (README, Deleting and retention): the user's schedules go."""
    bob, _ = repository.users.create("bob")
    made = service_on(repository).schedules.create(bob.id, ScheduleRequest(goal="Report",
                                                                          cron="0 3 * * *"))
    assert repository.deletions.delete_user(bob.id)
    assert repository.schedules.find(bob.id, made.id) is None
