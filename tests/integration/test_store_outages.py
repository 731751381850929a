"""An agent's own database calls through an outage, on PostgreSQL and SQLite: retried in
place, and a write whose reply was lost after its commit recognised as its own."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy.exc import OperationalError

from jarvis_agents.errors import StaleAttempt
from jarvis_agents.lifecycle import Agent, AgentStatus, Step, StepType, utcnow
from jarvis_agents.store.outages import OutageTolerantStore
from jarvis_agents.store.repository import Repository
from tests.support.store import new_agent, running


def dropped() -> OperationalError:
    return OperationalError("COMMIT", {}, Exception("server closed the connection unexpectedly"))


def flaky(repository: Repository, name: str, *, failures: int, after_commit: bool) -> list[int]:
    """Make `repository.<name>` fail `failures` times as a dropped connection does:
    before the statement reached the server, or after it committed (the reply lost).
    Returns the list that counts the calls."""
    real: Callable[..., Any] = getattr(repository, name)
    calls: list[int] = []

    def call(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) <= failures:
            if after_commit:
                real(*args, **kwargs)
            raise dropped()
        return real(*args, **kwargs)

    setattr(repository, name, call)
    return calls


@pytest.fixture
def store(repository: Repository) -> OutageTolerantStore:
    return OutageTolerantStore(repository, budget_s=10)


@pytest.fixture
def agent(repository: Repository) -> Agent:
    """A RUNNING agent under its first attempt."""
    user, _ = repository.users.create("outage")
    return running(repository, user.id)


def think(seq: int, step: int, text: str) -> Step:
    return Step(seq, step, StepType.THINK, text, created_at=utcnow())


@pytest.mark.parametrize("after_commit", [False, True])
def test_a_step_write_is_retried_and_written_once(
    repository: Repository, store: OutageTolerantStore, agent: Agent, after_commit: bool
) -> None:
    calls = flaky(repository, "append_steps", failures=2, after_commit=after_commit)
    store.append_steps(agent.id, 1, [think(1, 0, "a")], step_count=1)
    # After a commit, the second try already meets its own row (a unique violation).
    assert len(calls) == (2 if after_commit else 3)
    assert [s.content for s in repository.steps_after(agent.id)] == ["a"]


def test_a_step_that_is_not_its_own_is_still_refused(
    repository: Repository, store: OutageTolerantStore, agent: Agent
) -> None:
    repository.append_steps(agent.id, 1, [think(1, 0, "theirs")], step_count=1)
    flaky(repository, "append_steps", failures=1, after_commit=False)
    with pytest.raises(StaleAttempt):  # its seq taken under its attempt, by another run
        store.append_steps(agent.id, 1, [think(1, 1, "mine")], step_count=2)
    assert [s.content for s in repository.steps_after(agent.id)] == ["theirs"]


@pytest.mark.parametrize("after_commit", [False, True])
def test_the_end_of_an_agent_is_retried_and_known_as_its_own(
    repository: Repository, store: OutageTolerantStore, agent: Agent, after_commit: bool
) -> None:
    done = agent.with_completed("42")
    flaky(repository, "transition", failures=1, after_commit=after_commit)
    assert store.transition(
        agent.id, AgentStatus.RUNNING, AgentStatus.COMPLETED, attempt=1,
        steps=[Step(1, 0, StepType.FINAL, "42", created_at=utcnow())], final_answer="42",
        stop_reason=done.stop_reason, step_count=1, completed_at=done.completed_at,
    )
    ended = repository.get(agent.id)
    assert ended is not None and ended.status is AgentStatus.COMPLETED
    assert [s.content for s in repository.steps_after(agent.id)] == ["42"]
    # Someone else's end is not mistaken for ours.
    other = running(repository, agent.user_id)
    assert repository.transition(other.id, AgentStatus.RUNNING, AgentStatus.CANCELLED,
                                 stop_reason=done.stop_reason.CANCELLED)  # type: ignore[union-attr]
    flaky(repository, "transition", failures=1, after_commit=False)
    assert not store.transition(other.id, AgentStatus.RUNNING, AgentStatus.CANCELLED,
                                attempt=1, stop_reason=done.stop_reason.CANCELLED)  # type: ignore[union-attr]


@pytest.mark.parametrize("after_commit", [False, True])
def test_a_claim_and_a_take_over_are_retried_and_known_as_their_own(
    repository: Repository, store: OutageTolerantStore, after_commit: bool
) -> None:
    user, _ = repository.users.create("claim")
    agent, _ = repository.create_agent(new_agent(user.id))
    flaky(repository, "claim", failures=1, after_commit=after_commit)
    claimed = store.claim(agent.id, task_id="t1")
    assert claimed is not None and (claimed.status, claimed.attempt) == (AgentStatus.RUNNING, 1)
    assert store.claim(agent.id, task_id="t1") is None  # a second delivery of the same task
    flaky(repository, "take_over", failures=1, after_commit=after_commit)
    taken = store.take_over(agent.id, attempt=1, stale_before=utcnow(), task_id="t2")
    assert taken is not None and (taken.attempt, taken.losses) == (2, 1)


def test_an_outage_longer_than_the_budget_is_raised(repository: Repository, agent: Agent) -> None:
    calls = flaky(repository, "append_steps", failures=1000, after_commit=False)
    with pytest.raises(OperationalError):
        OutageTolerantStore(repository, budget_s=0.5).append_steps(
            agent.id, 1, [think(1, 0, "a")], step_count=1)
    assert 2 <= len(calls) < 20
    assert repository.steps_after(agent.id) == []
