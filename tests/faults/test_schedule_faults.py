"""Schedules under faults (README, Schedules): two worker processes racing for the same
due times, and PostgreSQL restarting while schedules are due. Each due time makes one
agent, which runs to its end."""

from __future__ import annotations

import os
import signal
import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import select, update

from jarvis_agents.lifecycle import AgentStatus
from jarvis_agents.schedule_service import ScheduleRequest
from jarvis_agents.store.models import AgentRow
from jarvis_agents.store.schedules import ScheduleRow
from tests.conftest import _descendants, private_redis
from tests.faults.conftest import System, running_system, system_env, wait_until
from tests.faults.own_servers import own_postgres

agents = AgentRow.__table__
schedules = ScheduleRow.__table__
# A daily cron: a due time moved into the past fires once, its next is a day away.
DAILY = "0 3 * * *"


def make_schedules(system: System, count: int) -> list[uuid.UUID]:
    return [system.service.schedules.create(
        system.user_id, ScheduleRequest(goal=f"report {n}", cron=DAILY)).id for n in range(count)]


def set_due(system: System, due: datetime) -> None:
    with system.repository.engine.begin() as conn:
        conn.execute(update(schedules).values(next_run_at=due))


def scheduled_agents(system: System) -> list[Any]:
    with system.repository.engine.connect() as conn:
        return list(conn.execute(
            select(agents.c.id, agents.c.schedule_id, agents.c.scheduled_for, agents.c.status)
            .where(agents.c.schedule_id.is_not(None))).mappings())


def assert_one_agent_each(system: System, made: list[uuid.UUID], due: datetime) -> None:
    """Every schedule made exactly one agent, for `due`, and each completed."""
    wait_until(lambda: len(scheduled_agents(system)) >= len(made), 60, "every schedule's agent")
    rows = scheduled_agents(system)
    assert Counter(row["schedule_id"] for row in rows) == Counter(made)
    assert {row["scheduled_for"].astimezone(UTC) for row in rows} == {due}
    for row in rows:
        assert system.terminal(row["id"], timeout_s=60).status is AgentStatus.COMPLETED


def test_two_workers_fire_each_due_time_once(
    pg_url: str, redis_url: str, fake_ollama: Any, start_worker: Any
) -> None:
    fake_ollama.responder = lambda request: "THOUGHT: done\nFINAL_ANSWER: reported"
    env = {**system_env(pg_url, redis_url, fake_ollama.url), "JARVIS_MAX_SCHEDULES_PER_USER": "200"}
    with running_system(env) as system:
        workers = [start_worker(system.env, wait=False) for _ in range(2)]
        for worker in workers:
            worker.wait_for("ready.", timeout_s=60)
        made = make_schedules(system, 200)
        due = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=1)
        set_due(system, due)  # both workers' loops find all 200 due at once
        assert_one_agent_each(system, made, due)
        for schedule_id in made:
            after = system.repository.schedules.find(system.user_id, schedule_id)
            # Moved on to its cron's next time (how far depends on the clock's hour now).
            assert after is not None and after.next_run_at > due
            assert after.skipped == 0


def test_a_postgres_restart_while_schedules_are_due_fires_each_once(
    fake_ollama: Any, start_worker: Any, tmp_path: Path
) -> None:
    """The due time comes while the server is down: the firing loop meets the outage, and
    once the server is back each due time fires, once."""
    from jarvis_agents.store.database import upgrade

    fake_ollama.responder = lambda request: "THOUGHT: done\nFINAL_ANSWER: reported"
    with own_postgres() as server, private_redis(tmp_path) as redis_url:
        database_url = server.create_database(f"jarvis_{uuid.uuid4().hex[:8]}")
        upgrade(database_url)
        env = {**system_env(database_url, redis_url, fake_ollama.url),
               "JARVIS_HEARTBEAT_STALE": "20"}
        with running_system(env) as system:
            worker = start_worker(system.env)
            made = make_schedules(system, 20)
            due = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=2)
            set_due(system, due)
            system.repository.engine.dispose()  # its connections die with the server
            server.stop()
            wait_until(lambda: "firing schedules failed" in worker.output(), 30,
                       "the firing loop to meet the outage")
            wait_until(lambda: datetime.now(UTC) > due, 10, "the due time to pass")
            server.start()
            assert_one_agent_each(system, made, due)


def test_the_supervisor_fires_while_the_celery_process_is_frozen(
    pg_url: str, redis_url: str, fake_ollama: Any, start_worker: Any
) -> None:
    """The firing loop lives in the worker's supervisor: a Celery process that cannot run
    (stopped, as a hung or restarting one) holds up no due time; its agents wait queued."""
    fake_ollama.responder = lambda request: "THOUGHT: done\nFINAL_ANSWER: reported"
    with running_system(system_env(pg_url, redis_url, fake_ollama.url)) as system:
        worker = start_worker(system.env)
        celery = [pid for pid in _descendants(worker.proc.pid)
                  if b"workers.main" in Path(f"/proc/{pid}/cmdline").read_bytes()]
        assert len(celery) == 1, celery
        made = make_schedules(system, 5)
        os.kill(celery[0], signal.SIGSTOP)
        try:
            due = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=1)
            set_due(system, due)
            wait_until(lambda: len(scheduled_agents(system)) == len(made), 30,
                       "the agents of the due schedules")
            assert {row["status"] for row in scheduled_agents(system)} == {"PENDING"}
        finally:
            os.kill(celery[0], signal.SIGCONT)
        assert_one_agent_each(system, made, due)
