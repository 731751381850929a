"""The repository on real PostgreSQL and SQLite: migrations, scoping, pagination, CAS."""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import pytest
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine, inspect, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import IntegrityError

from jarvis_agents.errors import Conflict, RateLimited, RequestError, StaleAttempt
from jarvis_agents.lifecycle import Agent, AgentStatus, Step, StepType, StopReason, utcnow
from jarvis_agents.store.database import alembic_config, make_engine, upgrade
from jarvis_agents.store.repository import Repository


def new_agent(user_id: uuid.UUID, goal: str = "goal", **kw: object) -> Agent:
    return Agent.new(user_id=user_id, goal=goal, model="test-model", max_steps=5, **kw)  # type: ignore[arg-type]


def running(repository: Repository, user_id: uuid.UUID) -> Agent:
    agent, _ = repository.create_agent(new_agent(user_id))
    claimed = repository.claim(agent.id)
    assert claimed is not None and claimed.attempt == 1
    return claimed


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
    alice, key = repository.create_user("alice")
    bob, _ = repository.create_user("bob")
    assert repository.user_by_api_key(key) == alice
    assert repository.user_by_api_key(key + "x") is None
    agent, created = repository.create_agent(new_agent(alice.id, "What is 2+2?"))
    assert created
    fetched = repository.get(agent.id, user_id=alice.id)
    assert fetched is not None and fetched.goal == "What is 2+2?"
    assert fetched.status is AgentStatus.PENDING and fetched.created_at.tzinfo is not None
    assert repository.get(agent.id, user_id=bob.id) is None
    assert repository.list_agents(bob.id) == ([], None)


def test_a_created_agent_reads_back_exactly_as_given(repository: Repository) -> None:
    """Every field survives the create (on PostgreSQL it travels as JSON to a function)."""
    user, _ = repository.create_user("exact")
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
    repository.create_user("carol")
    with pytest.raises(Conflict, match="already exists"):
        repository.create_user("carol")


def test_list_is_newest_first_with_cursor_and_filter(repository: Repository) -> None:
    user, _ = repository.create_user("dave")
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
    user, _ = repository.create_user("erin")
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


def test_transition_is_compare_and_set(repository: Repository) -> None:
    user, _ = repository.create_user("frank")
    agent = running(repository, user.id)
    assert repository.transition(agent.id, AgentStatus.RUNNING, AgentStatus.COMPLETED,
                                 final_answer="4", stop_reason=StopReason.FINAL_ANSWER)
    assert not repository.transition(agent.id, AgentStatus.RUNNING, AgentStatus.CANCELLED,
                                     stop_reason=StopReason.CANCELLED)
    stored = repository.get(agent.id)
    assert stored is not None and stored.status is AgentStatus.COMPLETED
    assert stored.final_answer == "4" and stored.completed_at is not None


def test_schema_refuses_rows_that_break_the_lifecycle(repository: Repository) -> None:
    user, _ = repository.create_user("gina")
    agent = running(repository, user.id)
    bad = [
        "UPDATE agents SET final_answer = 'x' WHERE id = :id",  # not COMPLETED
        "UPDATE agents SET status = 'COMPLETED' WHERE id = :id",  # no answer, no completed_at
        "UPDATE agents SET status = 'DONE' WHERE id = :id",
        "UPDATE agents SET goal = '   ' WHERE id = :id",
        "UPDATE agents SET error = 'e' WHERE id = :id",
        "UPDATE agents SET completed_at = started_at WHERE id = :id",
    ]
    param = agent.id.hex if repository.engine.dialect.name == "sqlite" else str(agent.id)
    for statement in bad:
        with pytest.raises(IntegrityError), repository.engine.begin() as conn:
            conn.execute(text(statement), {"id": param})


def test_step_writes_need_the_running_attempt(repository: Repository) -> None:
    user, _ = repository.create_user("hank")
    agent = running(repository, user.id)
    think = [Step(1, 0, StepType.THINK, "thinking")]
    repository.append_steps(agent.id, 1, think, step_count=1)
    with pytest.raises(StaleAttempt):
        repository.append_steps(agent.id, 2, [Step(2, 0, StepType.ACT, "x", tool="calculate")],
                                step_count=1)
    assert repository.transition(agent.id, AgentStatus.RUNNING, AgentStatus.CANCELLED,
                                 stop_reason=StopReason.CANCELLED)
    with pytest.raises(StaleAttempt):
        repository.append_steps(agent.id, 1, [Step(2, 0, StepType.ACT, "x", tool="calculate")],
                                step_count=1)
    assert [s.seq for s in repository.steps_after(agent.id)] == [1]


def test_the_database_statement_itself_refuses_a_cancelled_agents_step(repository: Repository) -> None:
    """Bypass Python entirely: the guarded UPDATE matches no row once the agent is CANCELLED."""
    user, _ = repository.create_user("ivy")
    agent = running(repository, user.id)
    repository.transition(agent.id, AgentStatus.RUNNING, AgentStatus.CANCELLED,
                          stop_reason=StopReason.CANCELLED)
    param = agent.id.hex if repository.engine.dialect.name == "sqlite" else str(agent.id)
    with repository.engine.begin() as conn:
        matched = conn.execute(
            text("UPDATE agents SET step_count = 1 WHERE id = :id AND status = 'RUNNING' AND attempt = 1"),
            {"id": param},
        ).rowcount
    assert matched == 0


def test_a_step_cannot_be_written_twice(repository: Repository) -> None:
    user, _ = repository.create_user("jack")
    agent = running(repository, user.id)
    repository.append_steps(agent.id, 1, [Step(1, 0, StepType.THINK, "a")], step_count=1)
    with pytest.raises(IntegrityError):
        repository.append_steps(agent.id, 1, [Step(2, 0, StepType.THINK, "again")], step_count=1)
    with pytest.raises(IntegrityError):
        repository.append_steps(agent.id, 1, [Step(1, 1, StepType.THINK, "same seq")], step_count=2)
    assert [s.content for s in repository.steps_after(agent.id)] == ["a"]


def test_take_over_needs_a_stale_heartbeat(repository: Repository) -> None:
    user, _ = repository.create_user("kim")
    agent = running(repository, user.id)
    assert repository.take_over(agent.id, attempt=1, stale_before=utcnow() - timedelta(seconds=30)) is None
    taken = repository.take_over(agent.id, attempt=1, stale_before=utcnow() + timedelta(seconds=1))
    assert taken is not None and taken.attempt == 2
    with pytest.raises(StaleAttempt):
        repository.append_steps(agent.id, 1, [Step(1, 0, StepType.THINK, "old")], step_count=1)
    assert repository.heartbeat([(agent.id, 1)]) == 0
    assert repository.heartbeat([(agent.id, 2)]) == 1


def test_race_between_completion_and_cancellation(pg_url: str) -> None:
    """200 rounds on PostgreSQL: many threads complete or cancel one agent; one wins."""
    repository = Repository(make_engine(pg_url, pool_size=8))
    user, _ = repository.create_user("racer")
    try:
        for round_no in range(200):
            agent = running(repository, user.id)
            barrier = threading.Barrier(8)
            wins: list[str] = []

            def contend(kind: str, agent: Agent = agent, barrier: threading.Barrier = barrier,
                        wins: list[str] = wins) -> None:
                barrier.wait()
                if kind == "complete":
                    won = repository.transition(
                        agent.id, AgentStatus.RUNNING, AgentStatus.COMPLETED, attempt=1,
                        steps=[Step(1, 0, StepType.FINAL, "done")],
                        final_answer="done", stop_reason=StopReason.FINAL_ANSWER, step_count=1)
                else:
                    won = repository.transition(
                        agent.id, AgentStatus.RUNNING, AgentStatus.CANCELLED,
                        stop_reason=StopReason.CANCELLED)
                if won:
                    wins.append(kind)

            threads = [threading.Thread(target=contend, args=("complete" if i % 2 else "cancel",))
                       for i in range(8)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            assert len(wins) == 1, f"round {round_no}: {wins}"
            stored = repository.get(agent.id)
            assert stored is not None
            steps = repository.steps_after(agent.id)
            if wins[0] == "complete":
                assert stored.status is AgentStatus.COMPLETED and stored.final_answer == "done"
                assert [s.type for s in steps] == [StepType.FINAL]
            else:
                assert stored.status is AgentStatus.CANCELLED and stored.final_answer is None
                assert steps == []
            assert stored.completed_at is not None and stored.stop_reason is not None
    finally:
        repository.engine.dispose()


@contextmanager
def step_write_in_flight(repository: Repository, agent: Agent, kinds: list[StepType]) -> Iterator[None]:
    """Attempt 1's step write, with the worker's own statement, left uncommitted until
    the block ends: what a cancel or a take-over meets mid-write."""
    from jarvis_agents.store.postgres import _APPEND_STEPS

    n, now = len(kinds), utcnow()
    with repository.engine.connect() as writer:
        tx = writer.begin()
        cursor = writer.connection.dbapi_connection.cursor()
        cursor.execute(_APPEND_STEPS, {
            "id": agent.id, "attempt": 1, "seq": list(range(1, n + 1)), "step": [0] * n,
            "type": [k.value for k in kinds],
            "tool": [None if k is StepType.THINK else "calculate" for k in kinds],
            "content": ["x"] * n, "created_at": [now] * n, "duration_ms": [None] * n,
            "call_id": [None if k is StepType.THINK else "call_1" for k in kinds],
            "input_tokens": [None] * n, "output_tokens": [None] * n,
        })
        assert cursor.fetchone() == (1,)
        yield
        tx.commit()


def test_cancel_blocks_behind_an_inflight_step_write(pg_url: str) -> None:
    """A cancel that comes while a step write is in flight waits on the row lock the
    write holds, then wins; the cancelled agent, as answered and as published, counts
    the iteration that write made."""
    from jarvis_agents.config import Settings
    from jarvis_agents.events import MemoryEventBus
    from jarvis_agents.service import AgentService

    class NoQueue:
        def revoke(self, task_ids: object) -> None:
            pass

    repository = Repository(make_engine(pg_url, pool_size=4))
    events = MemoryEventBus()
    service = AgentService(repository=repository, settings=Settings.from_env({}),
                           dispatcher=NoQueue(), events=events, tool_names=["calculate"])  # type: ignore[arg-type]
    user, _ = repository.create_user("locker")
    agent = running(repository, user.id)
    answered: list[Agent] = []
    try:
        with step_write_in_flight(repository, agent, [StepType.THINK]):
            t = threading.Thread(target=lambda: answered.append(service.cancel(user.id, agent.id)))
            t.start()
            time.sleep(0.3)
            assert not answered  # blocked behind the step write's row lock
        t.join(5)
        (cancelled,) = answered
        assert cancelled.status is AgentStatus.CANCELLED and cancelled.step_count == 1
        published = [m.data for m in events.messages if m.kind == "status"]
        assert published and all(d["step_count"] == 1 for d in published)
        stored = repository.get(agent.id)
        assert stored is not None and stored.status is AgentStatus.CANCELLED
        assert stored.step_count == 1
        assert [s.content for s in repository.steps_after(agent.id)] == ["x"]
    finally:
        repository.engine.dispose()


def test_a_take_over_that_waited_for_a_step_write_resumes_after_it(
    pg_url: str, tmp_path  # type: ignore[no-untyped-def]
) -> None:
    """A take-over blocked behind attempt 1's first step write counts the steps as they
    were when it began (none); the new attempt still resumes after that write."""
    from jarvis_agents.config import Settings
    from jarvis_agents.events import MemoryEventBus
    from jarvis_agents.executor import Executor, Limits
    from jarvis_agents.llm.scripted import ScriptedChatModel
    from jarvis_agents.tools.registry import ToolRegistry

    repository = Repository(make_engine(pg_url, pool_size=4))
    user, _ = repository.create_user("slow-writer")
    agent = running(repository, user.id)
    taken: dict[str, Agent | None] = {}
    try:
        with step_write_in_flight(
            repository, agent, [StepType.THINK, StepType.ACT, StepType.OBSERVE]
        ):
            t = threading.Thread(target=lambda: taken.update(agent=repository.take_over(
                agent.id, attempt=1, stale_before=utcnow() + timedelta(seconds=1))))
            t.start()
            time.sleep(0.3)
            assert t.is_alive()  # blocked behind the write's row lock
        t.join(5)
        resumed = taken["agent"]
        assert resumed is not None and resumed.attempt == 2
        tools = ToolRegistry.default(Settings.from_env({"JARVIS_DATA_DIR": str(tmp_path)}))
        executor = Executor(
            store=repository, model=ScriptedChatModel(["THOUGHT: done\nFINAL_ANSWER: 2"]),
            tools=tools, events=MemoryEventBus(), limits=Limits(step_timeout_s=5, total_timeout_s=30))
        done = executor.run(resumed)
        tools.close()
        assert done is not None and done.status is AgentStatus.COMPLETED and done.step_count == 2
        assert [(s.seq, s.step, s.type) for s in repository.steps_after(agent.id)] == [
            (1, 0, StepType.THINK), (2, 0, StepType.ACT), (3, 0, StepType.OBSERVE),
            (4, 1, StepType.THINK), (5, 1, StepType.FINAL)]
    finally:
        repository.engine.dispose()


def test_step_count_is_the_iterations_written_whoever_ends_the_agent(
    repository: Repository,
) -> None:
    """step_count (CONTRACT: iterations so far): while it runs, after a cancel or a lost
    worker, the last written iteration + 1; what the executor stores when it ends it."""
    user, _ = repository.create_user("nina")

    def count(agent_id: uuid.UUID) -> int:
        got = repository.get(agent_id, user_id=user.id)
        listed = {a.id: a for a in repository.list_agents(user.id, limit=50)[0]}
        assert got is not None and listed[agent_id].step_count == got.step_count
        return got.step_count

    pending, _ = repository.create_agent(new_agent(user.id))
    assert count(pending.id) == 0
    agent = running(repository, user.id)
    assert count(agent.id) == 0
    repository.append_steps(agent.id, 1, [Step(1, 0, StepType.THINK, "t"),
                                          Step(2, 0, StepType.ACT, "1+1", tool="calculate")],
                            step_count=1)
    assert count(agent.id) == 1
    repository.append_steps(agent.id, 1, [Step(3, 0, StepType.OBSERVE, "2", tool="calculate")],
                            step_count=1)
    repository.append_steps(agent.id, 1, [Step(4, 1, StepType.THINK, "t"),
                                          Step(5, 1, StepType.ACT, "2+2", tool="calculate"),
                                          Step(6, 1, StepType.OBSERVE, "4", tool="calculate")],
                            step_count=2)
    assert count(agent.id) == 2
    # A new attempt resumes from what the claim or take-over returns: the count is there.
    resumed = repository.take_over(agent.id, attempt=1, stale_before=utcnow() + timedelta(seconds=1))
    assert resumed is not None and resumed.step_count == 2
    assert repository.transition(agent.id, AgentStatus.RUNNING, AgentStatus.CANCELLED,
                                 stop_reason=StopReason.CANCELLED)
    assert count(agent.id) == 2

    lost = running(repository, user.id)
    repository.append_steps(lost.id, 1, [Step(1, 0, StepType.THINK, "t")], step_count=1)
    assert repository.transition(lost.id, AgentStatus.RUNNING, AgentStatus.FAILED, attempt=1,
                                 error="lost", stop_reason=StopReason.WORKER_LOST)
    assert count(lost.id) == 1

    # The executor's own ending stores its count, which its ERROR row alone cannot give:
    # the iteration that timed out (2) never ran, so it does not count.
    timed_out = running(repository, user.id)
    repository.append_steps(timed_out.id, 1, [Step(1, 0, StepType.THINK, "t"),
                                              Step(2, 0, StepType.ACT, "1", tool="calculate"),
                                              Step(3, 0, StepType.OBSERVE, "1", tool="calculate")],
                            step_count=1)
    repository.append_steps(timed_out.id, 1, [Step(4, 1, StepType.THINK, "t"),
                                              Step(5, 1, StepType.ACT, "1", tool="calculate"),
                                              Step(6, 1, StepType.OBSERVE, "1", tool="calculate")],
                            step_count=2)
    assert repository.transition(
        timed_out.id, AgentStatus.RUNNING, AgentStatus.FAILED, attempt=1,
        steps=[Step(7, 2, StepType.ERROR, "out of time")], error="out of time",
        stop_reason=StopReason.TOTAL_TIMEOUT, step_count=2)
    assert count(timed_out.id) == 2


def test_a_superseded_attempt_cannot_end_the_agent_or_write_its_last_step(
    repository: Repository,
) -> None:
    user, _ = repository.create_user("lee")
    agent = running(repository, user.id)
    assert repository.take_over(agent.id, attempt=1, stale_before=utcnow() + timedelta(seconds=1))
    won = repository.transition(
        agent.id, AgentStatus.RUNNING, AgentStatus.COMPLETED, attempt=1,
        steps=[Step(1, 0, StepType.FINAL, "late")], final_answer="late",
        stop_reason=StopReason.FINAL_ANSWER, step_count=1)
    assert not won
    assert repository.steps_after(agent.id) == []
    stored = repository.get(agent.id)
    assert stored is not None and stored.status is AgentStatus.RUNNING and stored.attempt == 2
    # The attempt that owns it now ends it, with its rows written in the same statement.
    assert repository.transition(
        agent.id, AgentStatus.RUNNING, AgentStatus.FAILED, attempt=2,
        steps=[Step(1, 0, StepType.ERROR, "the model is unreachable")],
        error="the model is unreachable", stop_reason=StopReason.MODEL_ERROR, step_count=0)
    assert [(s.type, s.content) for s in repository.steps_after(agent.id)] == [
        (StepType.ERROR, "the model is unreachable")]
    stored = repository.get(agent.id)
    assert stored is not None and stored.status is AgentStatus.FAILED


def test_steps_come_back_as_written(repository: Repository) -> None:
    user, _ = repository.create_user("mia")
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


def test_concurrent_creates_respect_the_active_limit(pg_url: str) -> None:
    """16 creates at once for one user with a limit of 5: exactly 5 get through."""
    repository = Repository(make_engine(pg_url, pool_size=8))
    user, _ = repository.create_user("crowd")
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
    repository = Repository(make_engine(pg_url, pool_size=8))
    user, _ = repository.create_user("twins")
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
    repository = Repository(make_engine(pg_url, pool_size=1))
    other = Repository(make_engine(pg_url, pool_size=1))
    user, _ = repository.create_user("held")
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
        began = time.monotonic()
        other.create_agent(new_agent(user.id), max_active=2)
        assert time.monotonic() - began < 2  # the lock timeout is 10 s
        with repository.engine.connect() as conn:
            stuck = conn.execute(text(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                " AND state LIKE 'idle in transaction%'")).scalar_one()
        assert stuck == 0
    finally:
        repository.engine.dispose()
        other.engine.dispose()


def _terminate_backends(pg_url: str) -> int:
    admin = create_engine(pg_url.rsplit("/", 1)[0] + "/postgres", isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        killed = conn.execute(text(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE datname = :name AND pid <> pg_backend_pid()"),
            {"name": pg_url.rsplit("/", 1)[1]}).scalar_one()
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
        monkeypatch.setattr(database, "_has_input", lambda _connection: False)
        monkeypatch.setattr(database, "IDLE_PING_S", 0.0)
    repository = Repository(make_engine(pg_url, pool_size=2))
    user, _ = repository.create_user("survivor")
    try:
        agent = running(repository, user.id)
        repository.append_steps(agent.id, 1, [Step(1, 0, StepType.THINK, "before")], step_count=1)
        assert _terminate_backends(pg_url) >= 1
        time.sleep(0.2)
        assert repository.get(agent.id) is not None  # a prebuilt statement
        assert [s.content for s in repository.steps_after(agent.id)] == ["before"]  # SQLAlchemy
        repository.append_steps(agent.id, 1, [Step(2, 1, StepType.THINK, "after")], step_count=2)
        assert repository.heartbeat([(agent.id, 1)]) == 1
        assert _terminate_backends(pg_url) >= 1
        time.sleep(0.2)
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

    monkeypatch.setattr(database, "_has_input", lambda _connection: False)
    repository = Repository(make_engine(pg_url, pool_size=1))
    user, _ = repository.create_user("unlucky")
    try:
        agent = running(repository, user.id)
        assert _terminate_backends(pg_url) >= 1
        time.sleep(0.2)
        assert repository.get(agent.id) is not None  # a prebuilt statement
        assert _terminate_backends(pg_url) >= 1
        time.sleep(0.2)
        assert repository.steps_after(agent.id) == []  # through SQLAlchemy
        assert _terminate_backends(pg_url) >= 1
        time.sleep(0.2)
        # A write is not run twice: it may have committed before its connection broke.
        with pytest.raises(OperationalError):
            repository.heartbeat([(agent.id, 1)])
        assert repository.heartbeat([(agent.id, 1)]) == 1
    finally:
        repository.engine.dispose()


def test_the_step_write_is_prepared_and_survives_a_server_that_drops_it(
    pg_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The step write runs prepared; a server without the statement (as behind a pooler
    in transaction mode) loses no write, and plain SQL is sent from then on."""
    repository = Repository(make_engine(pg_url, pool_size=1))

    def on_the_writers_connection(sql: str) -> list[tuple[Any, ...]]:
        # The step writes have a connection of their own (postgres._HeldConnection).
        with repository._pg._writer.borrow() as pooled, pooled.dbapi_connection.cursor() as cursor:
            cursor.execute(sql)
            return cursor.fetchall() if cursor.description else []

    def prepared_here() -> list[str]:
        return [name for (name,) in on_the_writers_connection("SELECT name FROM pg_prepared_statements")]

    try:
        user, _ = repository.create_user("prepared")
        agent = running(repository, user.id)
        repository.append_steps(agent.id, 1, [Step(1, 0, StepType.THINK, "a")], step_count=1)
        repository.append_steps(agent.id, 1, [Step(2, 0, StepType.ACT, "1 + 1", tool="calculate")],
                                step_count=1)
        (name,) = prepared_here()  # named after its text: another version's is another
        assert name.startswith("jarvis_append_steps_")
        on_the_writers_connection("DEALLOCATE ALL")
        repository.append_steps(agent.id, 1, [Step(3, 0, StepType.OBSERVE, "2", tool="calculate",
                                                   duration_ms=0)], step_count=1)
        assert "transaction mode" in caplog.text
        repository.append_steps(agent.id, 1, [Step(4, 1, StepType.THINK, "b")], step_count=2)
        assert prepared_here() == []
        assert [s.content for s in repository.steps_after(agent.id)] == ["a", "1 + 1", "2", "b"]
        with pytest.raises(StaleAttempt):  # the plain statement still guards
            repository.append_steps(agent.id, 2, [Step(5, 1, StepType.ACT, "x")], step_count=2)
    finally:
        repository.engine.dispose()


def test_the_step_writes_keep_a_connection_of_their_own(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One connection serves a process's step writes, outside the caller's pool; one
    that broke is replaced after failing its write; disposing of the engine closes it."""
    from sqlalchemy.exc import OperationalError

    from jarvis_agents.store import database

    monkeypatch.setattr(database, "_has_input", lambda _connection: False)  # found in use,
    monkeypatch.setattr(database, "IDLE_PING_S", 3600.0)  # however slow the machine
    repository = Repository(make_engine(pg_url, pool_size=1, overflow=False))

    try:
        user, _ = repository.create_user("writer")
        agent = running(repository, user.id)
        pids = set()
        with repository.engine.connect():  # the pool's only connection, taken throughout
            for seq in range(1, 4):
                repository.append_steps(agent.id, 1, [Step(seq, seq, StepType.THINK, "x")],
                                        step_count=seq)
                pids.add(_writer_backend(repository))
        (first,) = pids
        assert repository._pg._writer._engine.pool.checkedout() == 1  # kept between writes
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
        repository = Repository(make_engine(url, pool_size=2))
        try:
            user, _ = repository.create_user("outage")
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
    repository = Repository(make_engine(pg_url, pool_size=2))
    try:
        user, _ = repository.create_user("forked")
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
    """The backend of the step writer's own connection (postgres._HeldConnection)."""
    assert repository._pg is not None
    with repository._pg._writer.borrow() as pooled:
        return int(pooled.dbapi_connection.info.backend_pid)


def _terminate_backend(pg_url: str, pid: int) -> bool:
    admin = create_engine(pg_url, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            killed = conn.execute(text("SELECT pg_terminate_backend(:p)"), {"p": pid}).scalar_one()
    finally:
        admin.dispose()
    return bool(killed) and _gone(pg_url, pid)


def _gone(pg_url: str, pid: int) -> bool:
    """Whether backend `pid` has exited, within a second (it exits after its socket closes)."""
    for _ in range(50):
        if not _backend_alive(pg_url, pid):
            return True
        time.sleep(0.02)
    return False


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
    from jarvis_agents.store.postgres import (
        _APPEND_NAME,
        _APPEND_STEPS,
        _APPEND_STEPS_OF_MANY,
        _CLAIM,
        _PREPARE,
    )
    from tests.conftest import new_pg_database

    with new_pg_database() as url:
        repository = Repository(make_engine(url, pool_size=2))
        try:
            with repository.engine.begin() as conn:  # as young as a table gets
                conn.execute(text("ALTER TABLE agents SET (autovacuum_enabled = off)"))
            user, _ = repository.create_user("planner")
            for _ in range(300):
                agent = running(repository, user.id)
            pending, _ = repository.create_agent(new_agent(user.id))
            raw = repository.engine.raw_connection()
            try:
                cursor = raw.cursor()
                now = utcnow()
                for sql, params in (
                    (_APPEND_STEPS, {
                        "id": agent.id, "attempt": 1,
                        "seq": [1], "step": [1], "type": ["THINK"], "tool": [None],
                        "content": ["x"], "created_at": [now], "duration_ms": [None],
                        "call_id": [None], "input_tokens": [None], "output_tokens": [None],
                    }),
                    (_CLAIM, {"id": pending.id, "task_id": None, "now": now}),
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
                # The prepared step write, on the plan PostgreSQL may cache for every call.
                cursor.execute(_PREPARE[_APPEND_NAME])
                cursor.execute("SET plan_cache_mode = force_generic_plan")
                cursor.execute(
                    f"EXPLAIN EXECUTE {_APPEND_NAME} (%s, 1, '{{1}}', '{{1}}', '{{THINK}}', "
                    "'{NULL}', '{x}', ARRAY[now()], '{NULL}', '{NULL}', '{NULL}', '{NULL}')",
                    (agent.id,))
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


def _iteration(step: int) -> list[Step]:
    """One inline-tool iteration's rows, as the executor writes them."""
    seq = 3 * step + 1
    return [Step(seq, step, StepType.THINK, f"thought {step}"),
            Step(seq + 1, step, StepType.ACT, "1 + 1", tool="calculate"),
            Step(seq + 2, step, StepType.OBSERVE, "2", tool="calculate")]


def test_steps_of_many_agents_in_one_statement_keep_each_agents_guard(pg_url: str) -> None:
    repository = Repository(make_engine(pg_url, pool_size=2))
    try:
        user, _ = repository.create_user("batch")
        alive, cancelled, taken_over = (running(repository, user.id) for _ in range(3))
        assert repository.transition(cancelled.id, AgentStatus.RUNNING, AgentStatus.CANCELLED,
                                     stop_reason=StopReason.CANCELLED)
        assert repository.take_over(taken_over.id, attempt=1,
                                    stale_before=utcnow() + timedelta(seconds=1))
        assert repository._pg is not None
        # In descending id order: the statement sorts them, the answers must not move.
        expected = sorted([(alive.id, True), (cancelled.id, False), (taken_over.id, False)],
                          reverse=True)
        outcomes = repository._pg.append_steps_of_many(
            [(agent_id, 1, _iteration(0)) for agent_id, _ in expected]
        )
        assert outcomes == [owned for _, owned in expected]
        assert [s.content for s in repository.steps_after(alive.id)] == ["thought 0", "1 + 1", "2"]
        assert repository.steps_after(cancelled.id) == []
        assert repository.steps_after(taken_over.id) == []
        # The new attempt of the agent taken over writes; the old one's rows stay out.
        outcomes = repository._pg.append_steps_of_many([
            (taken_over.id, 1, _iteration(0)), (taken_over.id, 2, _iteration(0)),
        ])
        assert outcomes == [False, True]
        assert {s.seq for s in repository.steps_after(taken_over.id)} == {1, 2, 3}
    finally:
        repository.engine.dispose()


def test_one_agents_bad_rows_fail_only_its_own_write_of_a_batch(pg_url: str) -> None:
    repository = Repository(make_engine(pg_url, pool_size=2))
    try:
        user, _ = repository.create_user("batch-bad")
        good, bad = running(repository, user.id), running(repository, user.id)
        repository.append_steps(bad.id, 1, _iteration(0), step_count=1)
        assert repository._pg is not None
        first, second = sorted([good.id, bad.id], reverse=True)  # the statement reorders them
        outcomes = dict(zip((first, second), repository._pg.append_steps_of_many([
            (first, 1, _iteration(0)), (second, 1, _iteration(0)),  # bad's are written already
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
    from jarvis_agents.store.postgres import PostgresStatements

    batches: list[int] = []  # the size of each statement that wrote several agents' steps
    many = PostgresStatements.append_steps_of_many

    def counted(self: PostgresStatements, writes: Any) -> Any:
        batches.append(len(writes))
        return many(self, writes)

    monkeypatch.setattr(PostgresStatements, "append_steps_of_many", counted)
    url = make_url(pg_url).update_query_dict({"application_name": "jarvis-test-crowd"})
    repository = Repository(make_engine(url.render_as_string(hide_password=False),
                                        pool_size=10, overflow=False))
    try:
        user, _ = repository.create_user("crowd")
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
                    repository.append_steps(one.id, 1, _iteration(step), step_count=step + 1)
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
