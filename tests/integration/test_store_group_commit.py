"""Step writes of many agents in one statement on PostgreSQL (store/group_commit.py):
each agent's guard kept, one agent's bad rows fail only its write, no deadlock."""

from __future__ import annotations

import threading
import time
import uuid
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import IntegrityError

from jarvis_agents.errors import StaleAttempt
from jarvis_agents.lifecycle import Agent, AgentStatus, StopReason, utcnow
from jarvis_agents.store import repository_for
from jarvis_agents.store.database import make_engine
from tests.support.store import iteration, running


def test_steps_of_many_agents_in_one_statement_keep_each_agents_guard(pg_url: str) -> None:
    repository = repository_for(make_engine(pg_url, pool_size=2))
    try:
        user, _ = repository.users.create("batch")
        alive, cancelled, taken_over = (running(repository, user.id) for _ in range(3))
        assert repository.transition(cancelled.id, AgentStatus.RUNNING, AgentStatus.CANCELLED,
                                     stop_reason=StopReason.CANCELLED)
        assert repository.take_over(taken_over.id, attempt=1,
                                    stale_before=utcnow() + timedelta(seconds=1))
        # In descending id order: the statement sorts them, the answers must not move.
        expected = sorted([(alive.id, True), (cancelled.id, False), (taken_over.id, False)],
                          reverse=True)
        outcomes = repository.append_steps_of_many(
            [(agent_id, 1, iteration(0)) for agent_id, _ in expected]
        )
        assert outcomes == [owned for _, owned in expected]
        assert [s.content for s in repository.steps_after(alive.id)] == ["thought 0", "1 + 1", "2"]
        assert repository.steps_after(cancelled.id) == []
        assert repository.steps_after(taken_over.id) == []
        # The new attempt of the agent taken over writes; the old one's rows stay out.
        outcomes = repository.append_steps_of_many([
            (taken_over.id, 1, iteration(0)), (taken_over.id, 2, iteration(0)),
        ])
        assert outcomes == [False, True]
        assert {s.seq for s in repository.steps_after(taken_over.id)} == {1, 2, 3}
    finally:
        repository.engine.dispose()


def test_one_agents_bad_rows_fail_only_its_own_write_of_a_batch(pg_url: str) -> None:
    repository = repository_for(make_engine(pg_url, pool_size=2))
    try:
        user, _ = repository.users.create("batch-bad")
        good, bad = running(repository, user.id), running(repository, user.id)
        repository.append_steps(bad.id, 1, iteration(0), step_count=1)
        first, second = sorted([good.id, bad.id], reverse=True)  # the statement reorders them
        outcomes = dict(zip((first, second), repository.append_steps_of_many([
            (first, 1, iteration(0)), (second, 1, iteration(0)),  # bad's are written already
        ]), strict=True))
        assert outcomes[good.id] is True
        assert isinstance(outcomes[bad.id], IntegrityError)
        assert len(repository.steps_after(good.id)) == 3
        assert len(repository.steps_after(bad.id)) == 3
    finally:
        repository.engine.dispose()


def _deadlocks(engine) -> int:  # type: ignore[no-untyped-def]
    """Deadlocks PostgreSQL has found in this database, those of `engine`'s backends
    included: a backend reports its counts at most once a second while it lives, and
    as it exits, before it leaves pg_stat_activity."""
    application = engine.url.query["application_name"]
    engine.dispose()
    counter = create_engine(engine.url.difference_update_query(["application_name"]))
    try:
        with counter.connect() as conn:
            deadline = time.monotonic() + 10
            while conn.execute(text(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = :name"
            ), {"name": application}).scalar_one():
                assert time.monotonic() < deadline, "the pool's backends did not exit"
                time.sleep(0.01)
            conn.execute(text("SELECT pg_stat_clear_snapshot()"))
            return int(conn.execute(text(
                "SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()"
            )).scalar_one())
    finally:
        counter.dispose()


@pytest.mark.timeout(120)
def test_concurrent_step_writes_share_commits_and_each_keeps_its_guard(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """30 agent threads write 20 iterations each while the heartbeat beats them all and
    one agent is cancelled midway: every write that returned is there, in order, the
    cancelled agent's later writes are refused, and writes shared statements with no
    deadlock between their row locks and the heartbeat's."""
    from jarvis_agents.store.postgres import PostgresRepository

    batches: list[int] = []  # the size of each statement that wrote several agents' steps
    many = PostgresRepository.append_steps_of_many

    def counted(self: PostgresRepository, writes: Any) -> Any:
        batches.append(len(writes))
        return many(self, writes)

    monkeypatch.setattr(PostgresRepository, "append_steps_of_many", counted)
    url = make_url(pg_url).update_query_dict({"application_name": "jarvis-test-crowd"})
    repository = repository_for(make_engine(url.render_as_string(hide_password=False),
                                        pool_size=10, overflow=False))
    try:
        user, _ = repository.users.create("crowd")
        crowd = [running(repository, user.id) for _ in range(30)]
        victim = crowd[7]
        written: dict[uuid.UUID, int] = {}
        errors: list[BaseException] = []
        start = threading.Barrier(len(crowd) + 1)
        done = threading.Event()

        def agent(one: Agent) -> None:
            start.wait()
            count = 0
            try:
                for step in range(20):
                    if one is victim and step == 10:
                        assert repository.transition(
                            one.id, AgentStatus.RUNNING, AgentStatus.CANCELLED,
                            stop_reason=StopReason.CANCELLED,
                        )
                    repository.append_steps(one.id, 1, iteration(step), step_count=step + 1)
                    count += 1
            except StaleAttempt:
                pass
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)
            written[one.id] = count

        def beat() -> None:
            start.wait()
            while not done.is_set():  # as often as it can: the most chances to deadlock
                try:
                    repository.heartbeat([(one.id, 1) for one in crowd])
                except BaseException as exc:  # noqa: BLE001 - reported below
                    errors.append(exc)

        threads = [threading.Thread(target=agent, args=(one,)) for one in crowd]
        heartbeat = threading.Thread(target=beat)
        deadlocks_before = _deadlocks(repository.engine)
        for thread in [*threads, heartbeat]:
            thread.start()
        for thread in threads:
            thread.join(90)
        done.set()
        heartbeat.join(10)
        deadlocks_after = _deadlocks(repository.engine)

        assert errors == []
        assert written[victim.id] == 10
        for one in crowd:
            seqs = [s.seq for s in repository.steps_after(one.id)]
            assert seqs == list(range(1, 3 * written[one.id] + 1)), one.id
        assert sum(written.values()) == 29 * 20 + 10
        assert deadlocks_after == deadlocks_before
        assert max(batches, default=0) > 1, batches  # writes that queued up shared one
    finally:
        repository.engine.dispose()
