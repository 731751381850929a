"""The store's compare-and-set writes on real PostgreSQL and SQLite: transitions, the
attempt guard on step writes, take-overs, and their races with cancellation."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta

import pytest
from sqlalchemy import text
from sqlalchemy.exc import IntegrityError

from jarvis_agents.errors import StaleAttempt
from jarvis_agents.lifecycle import (
    Agent,
    AgentMode,
    AgentStatus,
    Step,
    StepType,
    StopReason,
    utcnow,
)
from jarvis_agents.store import repository_for
from jarvis_agents.store.database import make_engine
from jarvis_agents.store.repository import Repository
from tests.support.api_server import wait_until
from tests.support.store import new_agent, running


def test_transition_is_compare_and_set(repository: Repository) -> None:
    user, _ = repository.users.create("frank")
    agent = running(repository, user.id)
    assert repository.transition(agent.id, AgentStatus.RUNNING, AgentStatus.COMPLETED,
                                 final_answer="4", stop_reason=StopReason.FINAL_ANSWER)
    assert not repository.transition(agent.id, AgentStatus.RUNNING, AgentStatus.CANCELLED,
                                     stop_reason=StopReason.CANCELLED)
    stored = repository.get(agent.id)
    assert stored is not None and stored.status is AgentStatus.COMPLETED
    assert stored.final_answer == "4" and stored.completed_at is not None


def test_schema_refuses_rows_that_break_the_lifecycle(repository: Repository) -> None:
    user, _ = repository.users.create("gina")
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
    user, _ = repository.users.create("hank")
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
    user, _ = repository.users.create("ivy")
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
    user, _ = repository.users.create("jack")
    agent = running(repository, user.id)
    repository.append_steps(agent.id, 1, [Step(1, 0, StepType.THINK, "a")], step_count=1)
    with pytest.raises(IntegrityError):  # a new seq, but iteration 0's THINK again: a bug
        repository.append_steps(agent.id, 1, [Step(2, 0, StepType.THINK, "again")], step_count=1)
    # A seq its attempt wrote already: another run of the attempt (a claim a crash took
    # back, made again) got there first, so this run is the stale one.
    with pytest.raises(StaleAttempt, match="step 1 was written by another run of attempt 1"):
        repository.append_steps(agent.id, 1, [Step(1, 1, StepType.THINK, "same seq")], step_count=2)
    assert [s.content for s in repository.steps_after(agent.id)] == ["a"]


def test_an_end_whose_step_another_run_of_the_attempt_wrote_loses(repository: Repository) -> None:
    """Two runs of one attempt (a claim a crash took back, made again): the one whose
    end finds its rows' seq written by the other has lost the race, as a compare-and-set
    that matched no row has; it is no bug, and the agent is left to the other run."""
    user, _ = repository.users.create("jo")
    agent = running(repository, user.id)
    repository.append_steps(agent.id, 1, [Step(1, 0, StepType.THINK, "the other run")],
                            step_count=1)
    won = repository.transition(
        agent.id, AgentStatus.RUNNING, AgentStatus.COMPLETED, attempt=1,
        steps=[Step(1, 0, StepType.FINAL, "this run's answer")], final_answer="this run's answer",
        stop_reason=StopReason.FINAL_ANSWER, step_count=1, completed_at=utcnow(),
    )
    assert won is False
    current = repository.get(agent.id)
    assert current is not None and current.status is AgentStatus.RUNNING
    assert [s.content for s in repository.steps_after(agent.id)] == ["the other run"]


def test_a_seq_an_earlier_attempt_wrote_is_still_an_error(repository: Repository) -> None:
    user, _ = repository.users.create("jill")
    agent = running(repository, user.id)
    repository.append_steps(agent.id, 1, [Step(1, 0, StepType.THINK, "a")], step_count=1)
    taken = repository.take_over(agent.id, attempt=1, stale_before=utcnow() + timedelta(seconds=1))
    assert taken is not None and taken.attempt == 2
    # A take-over reads the steps before it goes on: one that writes over them is a bug.
    with pytest.raises(IntegrityError):
        repository.append_steps(agent.id, 2, [Step(1, 1, StepType.THINK, "over it")], step_count=2)
    assert [s.content for s in repository.steps_after(agent.id)] == ["a"]


def test_take_over_needs_a_stale_heartbeat(repository: Repository) -> None:
    user, _ = repository.users.create("kim")
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
    repository = repository_for(make_engine(pg_url, pool_size=8))
    user, _ = repository.users.create("racer")
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
def step_write_in_flight(
    repository: Repository, agent: Agent, kinds: list[StepType]
) -> Iterator[Callable[[], bool]]:
    """Attempt 1's step write, with the worker's own statement, left uncommitted until
    the block ends: what a cancel or a take-over meets mid-write. Gives a check of
    whether another backend waits for its locks."""
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
        cursor.execute("SELECT pg_backend_pid()")
        (pid,) = cursor.fetchone()
        yield lambda: waits_for(repository, pid)
        tx.commit()


def waits_for(repository: Repository, pid: int) -> bool:
    """Whether some backend waits for a lock that backend `pid` holds."""
    with repository.engine.connect() as conn:
        return bool(conn.execute(text(
            "SELECT count(*) FROM pg_stat_activity WHERE :pid = ANY(pg_blocking_pids(pid))"),
            {"pid": pid}).scalar_one())


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

    repository = repository_for(make_engine(pg_url, pool_size=4))
    events = MemoryEventBus()
    service = AgentService(repository=repository, settings=Settings.from_env({}),
                           dispatcher=NoQueue(), events=events, tool_names=["calculate"])  # type: ignore[arg-type]
    user, _ = repository.users.create("locker")
    agent = running(repository, user.id)
    answered: list[Agent] = []
    try:
        with step_write_in_flight(repository, agent, [StepType.THINK]) as waited_for:
            t = threading.Thread(target=lambda: answered.append(service.cancel(user.id, agent.id)))
            t.start()
            wait_until(waited_for)  # the cancel waits on the step write's row lock
            assert not answered
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

    repository = repository_for(make_engine(pg_url, pool_size=4))
    user, _ = repository.users.create("slow-writer")
    agent = running(repository, user.id)
    taken: dict[str, Agent | None] = {}
    try:
        with step_write_in_flight(
            repository, agent, [StepType.THINK, StepType.ACT, StepType.OBSERVE]
        ) as waited_for:
            t = threading.Thread(target=lambda: taken.update(agent=repository.take_over(
                agent.id, attempt=1, stale_before=utcnow() + timedelta(seconds=1))))
            t.start()
            wait_until(waited_for)  # the take-over waits on the write's row lock
            assert t.is_alive()
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
    """step_count (docs/api.md §2: iterations so far): while it runs, after a cancel or a lost
    worker, the last written iteration + 1; what the executor stores when it ends it."""
    user, _ = repository.users.create("nina")

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
    user, _ = repository.users.create("lee")
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


def test_a_claim_records_the_mode_an_auto_agent_of_a_known_model_runs_in(
    repository: Repository,
) -> None:
    user, _ = repository.users.create("mona")
    known = {"other-model": AgentMode.NATIVE, "test-model": AgentMode.REACT}
    auto, _ = repository.create_agent(new_agent(user.id))
    asked, _ = repository.create_agent(new_agent(user.id, mode=AgentMode.NATIVE))
    unknown, _ = repository.create_agent(new_agent(user.id))
    claims = [repository.claim(auto.id, modes=known), repository.claim(asked.id, modes=known),
              repository.claim(unknown.id, modes={"other-model": AgentMode.NATIVE})]
    assert [c.mode if c else None for c in claims] == [
        AgentMode.REACT, AgentMode.NATIVE, AgentMode.AUTO]
    assert [repository.get(a.id).mode for a in (auto, asked, unknown)] == [  # type: ignore[union-attr]
        AgentMode.REACT, AgentMode.NATIVE, AgentMode.AUTO]
