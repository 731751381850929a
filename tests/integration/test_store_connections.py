"""How the store holds its PostgreSQL connections: dead ones replaced, dropped reads run
again, the step writer's own connection, a fork's, the planner's choices and a fixed
pool. Prepared statements: test_store_prepared.py."""

from __future__ import annotations

import os
import threading

import pytest
from sqlalchemy import create_engine, text

from jarvis_agents.lifecycle import Step, StepType, utcnow
from jarvis_agents.store import repository_for
from jarvis_agents.store.database import make_engine
from jarvis_agents.store.prepared import form_of
from jarvis_agents.store.repository import Repository
from tests.support.api_server import wait_until
from tests.support.store import new_agent, running

# How long pg_terminate_backend waits for a backend to exit (it returns at once when it has).
EXIT_WAIT_MS = 5000


def _terminate_backends(pg_url: str) -> int:
    """Terminate every backend of the database; how many, once they have all exited."""
    admin = create_engine(pg_url.rsplit("/", 1)[0] + "/postgres", isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        killed = conn.execute(text(
            "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid, :wait_ms))"
            " FROM pg_stat_activity WHERE datname = :name AND pid <> pg_backend_pid()"),
            {"name": pg_url.rsplit("/", 1)[1], "wait_ms": EXIT_WAIT_MS}).scalar_one()
    admin.dispose()
    return killed


@pytest.mark.parametrize("detected_by", ["socket", "ping"])
def test_pooled_connections_killed_while_idle_are_replaced(
    pg_url: str, detected_by: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No error reaches the caller when the server dropped every idle pooled connection."""
    from jarvis_agents.store import database

    if detected_by == "ping":
        # A socket that died without a word from the server looks fine: only the
        # ping of a connection idle for longer than IDLE_PING_S notices.
        monkeypatch.setattr(database, "_closed_by_server", lambda *_: False)
        monkeypatch.setattr(database, "IDLE_PING_S", 0.0)
    repository = repository_for(make_engine(pg_url, pool_size=2))
    user, _ = repository.users.create("survivor")
    try:
        agent = running(repository, user.id)
        repository.append_steps(agent.id, 1, [Step(1, 0, StepType.THINK, "before")], step_count=1)
        assert _terminate_backends(pg_url) >= 1
        assert repository.get(agent.id) is not None  # a prebuilt statement
        assert [s.content for s in repository.steps_after(agent.id)] == ["before"]  # SQLAlchemy
        repository.append_steps(agent.id, 1, [Step(2, 1, StepType.THINK, "after")], step_count=2)
        assert repository.heartbeat([(agent.id, 1)]) == 1
        assert _terminate_backends(pg_url) >= 1
        created, _ = repository.create_agent(new_agent(user.id), max_active=5)
        assert repository.get(created.id) is not None
    finally:
        repository.engine.dispose()


def test_a_read_whose_connection_was_just_dropped_runs_again(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A backend terminated a moment ago passes the checkout check; reads still succeed."""
    from sqlalchemy.exc import OperationalError

    from jarvis_agents.store import database

    monkeypatch.setattr(database, "_closed_by_server", lambda *_: False)
    repository = repository_for(make_engine(pg_url, pool_size=1))
    user, _ = repository.users.create("unlucky")
    try:
        agent = running(repository, user.id)
        assert _terminate_backends(pg_url) >= 1
        assert repository.get(agent.id) is not None  # a prebuilt statement
        assert _terminate_backends(pg_url) >= 1
        assert repository.steps_after(agent.id) == []  # through SQLAlchemy
        assert _terminate_backends(pg_url) >= 1
        # A write is not run twice: it may have committed before its connection broke.
        with pytest.raises(OperationalError):
            repository.heartbeat([(agent.id, 1)])
        assert repository.heartbeat([(agent.id, 1)]) == 1
    finally:
        repository.engine.dispose()


def test_the_step_writes_keep_a_connection_of_their_own(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One connection serves a process's step writes, outside the caller's pool; one
    that broke is replaced after failing its write; disposing of the engine closes it."""
    from sqlalchemy.exc import OperationalError

    from jarvis_agents.store import database

    monkeypatch.setattr(database, "_closed_by_server", lambda *_: False)  # found in use,
    monkeypatch.setattr(database, "IDLE_PING_S", 3600.0)  # however slow the machine
    repository = repository_for(make_engine(pg_url, pool_size=1, overflow=False))

    try:
        user, _ = repository.users.create("writer")
        agent = running(repository, user.id)
        pids = set()
        with repository.engine.connect():  # the pool's only connection, taken throughout
            for seq in range(1, 4):
                repository.append_steps(agent.id, 1, [Step(seq, seq, StepType.THINK, "x")],
                                        step_count=seq)
                pids.add(_writer_backend(repository))
        (first,) = pids
        assert repository._writer._engine.pool.checkedout() == 1  # kept between writes
        assert _terminate_backend(pg_url, first)
        with pytest.raises(OperationalError):  # it may have committed: its caller must know
            repository.append_steps(agent.id, 1, [Step(4, 4, StepType.THINK, "y")], step_count=4)
        repository.append_steps(agent.id, 1, [Step(4, 4, StepType.THINK, "z")], step_count=4)
        second = _writer_backend(repository)
        assert second != first
        assert [s.content for s in repository.steps_after(agent.id)] == ["x", "x", "x", "z"]
        assert _backend_alive(pg_url, second)
    finally:
        repository.engine.dispose()
    assert _gone(pg_url, second)


def test_step_writes_resume_as_soon_as_the_server_takes_connections_again() -> None:
    """While the server refuses connections, a step write or a read fails with
    SQLAlchemy's OperationalError; the first write after it is back goes through."""
    from sqlalchemy.exc import OperationalError

    from tests.conftest import PG_ADMIN_URL, new_pg_database

    with new_pg_database() as url:
        name = url.rsplit("/", 1)[1]
        admin = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
        repository = repository_for(make_engine(url, pool_size=2))
        try:
            user, _ = repository.users.create("outage")
            agent = running(repository, user.id)
            repository.append_steps(agent.id, 1, [Step(1, 0, StepType.THINK, "a")], step_count=1)
            with admin.connect() as conn:
                conn.execute(text(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false'))
            assert _terminate_backend(PG_ADMIN_URL, _writer_backend(repository))  # pg_stat_activity is server-wide
            for seq in (2, 3):  # found dead, and no new connection to be had
                with pytest.raises(OperationalError):
                    repository.append_steps(agent.id, 1, [Step(seq, 0, StepType.THINK, "b")],
                                            step_count=1)
            repository.engine.dispose()  # the pool's idle connections: a read needs a new one
            with pytest.raises(OperationalError):  # SQLAlchemy's, which the API answers 503
                repository.get(agent.id)
            with admin.connect() as conn:
                conn.execute(text(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true'))
            repository.append_steps(agent.id, 1, [Step(2, 1, StepType.THINK, "c")], step_count=2)
            assert [s.content for s in repository.steps_after(agent.id)] == ["a", "c"]
        finally:
            repository.engine.dispose()
            with admin.connect() as conn:
                conn.execute(text(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true'))
            admin.dispose()


def test_a_forked_child_writes_steps_on_a_connection_of_its_own(pg_url: str) -> None:
    """A child process never uses, nor closes, the step writer's connection of its parent."""
    repository = repository_for(make_engine(pg_url, pool_size=2))
    try:
        user, _ = repository.users.create("forked")
        agent = running(repository, user.id)
        repository.append_steps(agent.id, 1, [Step(1, 0, StepType.THINK, "parent")], step_count=1)
        writer = _writer_backend(repository)
        pid = os.fork()
        if pid == 0:  # the child: write, dispose as a forked child should, leave
            code = 1
            try:
                repository.engine.dispose(close=False)
                repository.append_steps(agent.id, 1, [Step(2, 1, StepType.THINK, "child")],
                                        step_count=2)
                repository.engine.dispose()
                code = 0
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        repository.append_steps(agent.id, 1, [Step(3, 2, StepType.THINK, "parent")], step_count=3)
        assert _writer_backend(repository) == writer  # the child neither used nor closed it
        assert [s.content for s in repository.steps_after(agent.id)] == ["parent", "child", "parent"]
    finally:
        repository.engine.dispose()


def _writer_backend(repository: Repository) -> int:
    """The backend of the step writer's own connection (connections.HeldConnection)."""
    with repository._writer.borrow() as pooled:
        return int(pooled.dbapi_connection.info.backend_pid)


def _terminate_backend(pg_url: str, pid: int) -> bool:
    """Terminate backend `pid`; whether it has exited."""
    admin = create_engine(pg_url, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            return bool(conn.execute(text("SELECT pg_terminate_backend(:p, :wait_ms)"),
                                     {"p": pid, "wait_ms": EXIT_WAIT_MS}).scalar_one())
    finally:
        admin.dispose()


def _gone(pg_url: str, pid: int) -> bool:
    """Whether backend `pid` exits (after its client closed its socket) within a deadline."""
    return bool(wait_until(lambda: not _backend_alive(pg_url, pid), timeout_s=5, interval_s=0.02))


def _backend_alive(pg_url: str, pid: int) -> bool:
    probe = create_engine(pg_url)
    try:
        with probe.connect() as conn:
            return bool(conn.execute(
                text("SELECT count(*) FROM pg_stat_activity WHERE pid = :p"), {"p": pid}
            ).scalar_one())
    finally:
        probe.dispose()


def test_guarded_writes_find_the_agent_by_its_key_without_statistics() -> None:
    """A young table has no statistics; the step write must not walk the status index.

    With `status = 'RUNNING'` in its guard the planner priced ix_agents_status_heartbeat
    like the primary key and took it: every write scanned every RUNNING entry.
    """
    from jarvis_agents.store.postgres import _APPEND_STEPS, _APPEND_STEPS_OF_MANY
    from jarvis_agents.store.repository import _claim
    from tests.conftest import new_pg_database

    with new_pg_database() as url:
        repository = repository_for(make_engine(url, pool_size=2))
        try:
            with repository.engine.begin() as conn:  # as young as a table gets
                conn.execute(text("ALTER TABLE agents SET (autovacuum_enabled = off)"))
            user, _ = repository.users.create("planner")
            for _ in range(300):
                agent = running(repository, user.id)
            pending, _ = repository.create_agent(new_agent(user.id))
            raw = repository.engine.raw_connection()
            try:
                cursor = raw.cursor()
                now = utcnow()
                claim = _claim(1).on(repository.engine.dialect)  # with a settled mode, as workers claim
                for sql, params in (
                    (_APPEND_STEPS, {
                        "id": agent.id, "attempt": 1,
                        "seq": [1], "step": [1], "type": ["THINK"], "tool": [None],
                        "content": ["x"], "created_at": [now], "duration_ms": [None],
                        "call_id": [None], "input_tokens": [None], "output_tokens": [None],
                    }),
                    (claim.sql, claim.parameters({"id": pending.id, "task_id": None, "now": now,
                                                  "settled_model_0": "test-model",
                                                  "settled_mode_0": "react"})),
                    (_APPEND_STEPS_OF_MANY, {
                        "id": [agent.id, pending.id], "attempt": [1, 1],
                        "agent_id": [agent.id], "step_attempt": [1],
                        "seq": [1], "step": [1], "type": ["THINK"], "tool": [None],
                        "content": ["x"], "created_at": [now], "duration_ms": [None],
                        "call_id": [None], "input_tokens": [None], "output_tokens": [None],
                    }),
                ):
                    cursor.execute("EXPLAIN " + sql, params)
                    plan = "\n".join(row[0] for row in cursor.fetchall())
                    assert "Index Scan using pk_agents" in plan, plan
                    assert "ix_agents_status_heartbeat" not in plan, plan
                # Prepared (store/prepared.py), on the plan PostgreSQL may cache for every call.
                cursor.execute("SET plan_cache_mode = force_generic_plan")
                for sql, params in (
                    (_APPEND_STEPS, {
                        "id": agent.id, "attempt": 1, "seq": [1], "step": [1], "type": ["THINK"],
                        "tool": [None], "content": ["x"], "created_at": [now],
                        "duration_ms": [None], "call_id": [None], "input_tokens": [None],
                        "output_tokens": [None]}),
                    (claim.sql, claim.parameters({"id": pending.id, "task_id": None, "now": now,
                                                  "settled_model_0": "test-model",
                                                  "settled_mode_0": "react"})),
                ):
                    prepared = form_of(sql)
                    cursor.execute(prepared.prepare)
                    cursor.execute("EXPLAIN " + prepared.execute, params)
                    plan = "\n".join(row[0] for row in cursor.fetchall())
                    assert "Index Scan using pk_agents" in plan, plan
                    assert "ix_agents_status_heartbeat" not in plan, plan
            finally:
                raw.rollback()
                raw.close()
        finally:
            repository.engine.dispose()


@pytest.mark.parametrize("overflow", [False, True], ids=["fixed", "overflow"])
def test_a_fixed_pool_keeps_its_connections_however_many_threads_want_one(
    pg_url: str, overflow: bool
) -> None:
    """A worker's 200 threads share a fixed pool: the same PostgreSQL backends serve them
    all, where a pool with overflow keeps opening backends beyond its size and closing
    them (each a process PostgreSQL forks and warms up)."""
    engine = make_engine(pg_url, pool_size=3, overflow=overflow)
    backends: set[int] = set()
    lock = threading.Lock()
    barrier = threading.Barrier(24)

    def work() -> None:
        barrier.wait()
        for _ in range(15):
            with engine.connect() as conn:
                pid = conn.execute(text("SELECT pg_backend_pid() FROM pg_sleep(0.002)")).scalar_one()
            with lock:
                backends.add(pid)

    threads = [threading.Thread(target=work) for _ in range(24)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        if overflow:
            assert len(backends) > 3  # the burst borrowed beyond the pool, and let go
        else:
            assert len(backends) == 3
    finally:
        engine.dispose()
