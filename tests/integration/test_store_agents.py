"""The store's agents on real PostgreSQL and SQLite: migrations, create and read back,
user scoping, pagination, idempotency keys and the active limit, also under races."""

from __future__ import annotations

import threading
import uuid

import pytest
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine, inspect, text

from jarvis_agents.errors import Conflict, RateLimited, RequestError
from jarvis_agents.lifecycle import AgentStatus, Step, StepType
from jarvis_agents.store import repository_for
from jarvis_agents.store.database import alembic_config, make_engine, upgrade
from jarvis_agents.store.repository import Repository
from tests.support.store import new_agent, running


def test_migrations_from_empty_are_idempotent(tmp_path) -> None:  # type: ignore[no-untyped-def]
    url = f"sqlite:///{tmp_path / 'fresh.db'}"
    head = ScriptDirectory.from_config(alembic_config(url)).get_current_head()
    assert upgrade(url) == head
    assert upgrade(url) == head
    engine = create_engine(url)
    assert {"users", "agents", "agent_steps", "webhook_deliveries"} <= set(
        inspect(engine).get_table_names())
    engine.dispose()


def test_create_get_and_user_scoping(repository: Repository) -> None:
    alice, key = repository.users.create("alice")
    bob, _ = repository.users.create("bob")
    assert repository.users.by_api_key(key) == alice
    assert repository.users.by_api_key(key + "x") is None
    agent, created = repository.create_agent(new_agent(alice.id, "What is 2+2?"))
    assert created
    fetched = repository.get(agent.id, user_id=alice.id)
    assert fetched is not None and fetched.goal == "What is 2+2?"
    assert fetched.status is AgentStatus.PENDING and fetched.created_at.tzinfo is not None
    assert repository.get(agent.id, user_id=bob.id) is None
    assert repository.list_agents(bob.id) == ([], None)


def test_a_created_agent_reads_back_exactly_as_given(repository: Repository) -> None:
    """Every field survives the create (on PostgreSQL it travels as JSON to a function)."""
    user, _ = repository.users.create("exact")
    for agent in (
        new_agent(user.id, "Ünïcode \"quotes\" \\ and 💡", tools=("calculate", "getTime"),
                  webhook_url="https://example.com/hook?a=1", idempotency_key="k ü",
                  request_hash="h" * 64),
        new_agent(user.id, "no tools", tools=()),
        new_agent(user.id, "defaults"),
    ):
        created, _ = repository.create_agent(agent, max_active=10)
        assert created == agent
        assert repository.get(agent.id) == agent


def test_duplicate_user_is_a_conflict(repository: Repository) -> None:
    repository.users.create("carol")
    with pytest.raises(Conflict, match="already exists"):
        repository.users.create("carol")


def test_list_is_newest_first_with_cursor_and_filter(repository: Repository) -> None:
    user, _ = repository.users.create("dave")
    ids = []
    for i in range(7):
        agent, _ = repository.create_agent(new_agent(user.id, f"goal {i}"))
        ids.append(agent.id)
    repository.claim(ids[0])
    page, cursor = repository.list_agents(user.id, limit=3)
    seen = [a.id for a in page]
    while cursor:
        page, cursor = repository.list_agents(user.id, limit=3, cursor=cursor)
        seen += [a.id for a in page]
    assert seen == list(reversed(ids))
    pending, _ = repository.list_agents(user.id, status=AgentStatus.PENDING, limit=100)
    assert len(pending) == 6
    running_now, _ = repository.list_agents(user.id, status=AgentStatus.RUNNING)
    assert [a.id for a in running_now] == [ids[0]]
    with pytest.raises(RequestError, match="cursor"):
        repository.list_agents(user.id, cursor="garbage!")


def test_idempotency_key_and_active_limit(repository: Repository) -> None:
    user, _ = repository.users.create("erin")
    first, created = repository.create_agent(
        new_agent(user.id, idempotency_key="k1", request_hash="h1"), max_active=2)
    again, created_again = repository.create_agent(
        new_agent(user.id, idempotency_key="k1", request_hash="h1"), max_active=2)
    assert created and not created_again and again.id == first.id
    with pytest.raises(Conflict):
        repository.create_agent(new_agent(user.id, idempotency_key="k1", request_hash="h2"))
    repository.create_agent(new_agent(user.id), max_active=2)
    with pytest.raises(RateLimited):
        repository.create_agent(new_agent(user.id), max_active=2)
    # A repeat never counts against the limit.
    repeat, _ = repository.create_agent(
        new_agent(user.id, idempotency_key="k1", request_hash="h1"), max_active=2)
    assert repeat.id == first.id


def test_steps_come_back_as_written(repository: Repository) -> None:
    user, _ = repository.users.create("mia")
    agent = running(repository, user.id)
    written = [
        Step(1, 0, StepType.THINK, "It's a 'quoted' {thought}, with %s and \\ in it", duration_ms=12),
        Step(2, 0, StepType.ACT, "1234 * 902", tool="calculate"),
    ]
    repository.append_steps(agent.id, 1, written, step_count=1)
    repository.append_steps(agent.id, 1, [Step(3, 0, StepType.OBSERVE, "1113068",
                                               tool="calculate", duration_ms=0)], step_count=1)
    read = repository.steps_after(agent.id)
    assert [(s.seq, s.step, s.type, s.tool, s.content, s.duration_ms) for s in read] == [
        (1, 0, StepType.THINK, None, written[0].content, 12),
        (2, 0, StepType.ACT, "calculate", "1234 * 902", None),
        (3, 0, StepType.OBSERVE, "calculate", "1113068", 0),
    ]
    assert read[0].created_at == written[0].created_at
    stored = repository.get(agent.id, user_id=user.id)
    assert stored is not None and stored.step_count == 1 and stored.heartbeat_at is not None


def test_agent_with_steps_reads_both_as_their_own_reads_do(repository: Repository) -> None:
    """What a follower reads in one statement: the agent as `get` reads it and its steps
    after a seq as `steps_after` does; nothing for another user's agent or none."""
    user, _ = repository.users.create("nia")
    other, _ = repository.users.create("oto")
    agent = running(repository, user.id)
    assert repository.agent_with_steps(agent.id) == (repository.get(agent.id), [])
    repository.append_steps(agent.id, 1, [
        Step(1, 0, StepType.THINK, "a thought", duration_ms=7),
        Step(2, 0, StepType.ACT, "6 * 7", tool="calculate", call_id="c1"),
        Step(3, 0, StepType.OBSERVE, "42", tool="calculate", call_id="c1")], step_count=1)
    for after in (0, 1, 3):
        read = repository.agent_with_steps(agent.id, after=after, user_id=user.id)
        assert read == (repository.get(agent.id), repository.steps_after(agent.id, after))
    assert [s.seq for s in repository.agent_with_steps(agent.id, after=1)[1]] == [2, 3]
    assert repository.agent_with_steps(agent.id, user_id=other.id) == (None, [])
    assert repository.agent_with_steps(uuid.uuid4()) == (None, [])


def test_concurrent_creates_respect_the_active_limit(pg_url: str) -> None:
    """16 creates at once for one user with a limit of 5: exactly 5 get through."""
    repository = repository_for(make_engine(pg_url, pool_size=8))
    user, _ = repository.users.create("crowd")
    try:
        def create(barrier: threading.Barrier, limit: int, outcomes: list[str]) -> None:
            barrier.wait()
            try:
                repository.create_agent(new_agent(user.id), max_active=limit)
                outcomes.append("created")
            except RateLimited:
                outcomes.append("refused")

        for round_no in range(5):
            barrier = threading.Barrier(16)
            outcomes: list[str] = []
            threads = [threading.Thread(target=create, args=(barrier, 5 * (round_no + 1), outcomes))
                       for _ in range(16)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            assert outcomes.count("created") == 5, f"round {round_no}: {outcomes}"
            pending, _ = repository.list_agents(user.id, status=AgentStatus.PENDING, limit=100)
            assert len(pending) == 5 * (round_no + 1)
    finally:
        repository.engine.dispose()


def test_concurrent_creates_with_one_idempotency_key_make_one_agent(pg_url: str) -> None:
    repository = repository_for(make_engine(pg_url, pool_size=8))
    user, _ = repository.users.create("twins")
    try:
        barrier = threading.Barrier(8)
        results: list[tuple[uuid.UUID, bool]] = []

        def create(limit: int | None) -> None:
            barrier.wait()
            agent, created = repository.create_agent(
                new_agent(user.id, idempotency_key="same", request_hash="h"), max_active=limit)
            results.append((agent.id, created))

        threads = [threading.Thread(target=create, args=(None if i % 2 else 10,))
                   for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len({agent_id for agent_id, _ in results}) == 1
        assert sum(created for _, created in results) == 1
    finally:
        repository.engine.dispose()


def test_a_refused_create_leaves_no_transaction_holding_the_user(pg_url: str) -> None:
    """After a 429 or a repeat, the next create of that user does not wait for a lock."""
    repository = repository_for(make_engine(pg_url, pool_size=1))
    other = repository_for(make_engine(pg_url, pool_size=1))
    user, _ = repository.users.create("held")
    try:
        first, _ = repository.create_agent(new_agent(user.id, idempotency_key="k",
                                                     request_hash="h"), max_active=1)
        with pytest.raises(RateLimited, match="limit is 1"):
            repository.create_agent(new_agent(user.id), max_active=1)
        again, created = repository.create_agent(
            new_agent(user.id, idempotency_key="k", request_hash="h"), max_active=1)
        assert again.id == first.id and not created
        with pytest.raises(Conflict):
            repository.create_agent(new_agent(user.id, idempotency_key="k", request_hash="x"),
                                    max_active=1)
        # Were the user's row still locked, this would wait out the lock timeout and fail.
        other.create_agent(new_agent(user.id), max_active=2)
        with repository.engine.connect() as conn:
            stuck = conn.execute(text(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                " AND state LIKE 'idle in transaction%'")).scalar_one()
        assert stuck == 0
    finally:
        repository.engine.dispose()
        other.engine.dispose()
