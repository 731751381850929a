"""Workers die around agents that call agents (README, Agents that call agents): while a
caller waits on its child, and while the caller is being resumed. No child is lost and
none is made twice (a call's child is keyed by its caller and call id); the caller ends
once, with its child's answer observed once."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from jarvis_agents.assistants import AssistantConfig
from jarvis_agents.lifecycle import Agent, AgentStatus, StepType, StopReason, utcnow
from jarvis_agents.service import CreateRequest
from tests.faults.conftest import System, running_system, system_env
from tests.faults.test_worker_death import assert_clean_history
from tests.support.delegation_team import Team, role

pytestmark = pytest.mark.long

OTHER_MODEL = "llama3.2"  # a model of the fake server besides the default (test-model)


@pytest.fixture
def team(fake_ollama: Any) -> Team:
    fake_ollama.default_capabilities = ["completion", "tools"]
    fake_ollama.responder = Team()
    return fake_ollama.responder


def team_system(pg_url: str, redis_url: str, fake_ollama: Any, *,
                researcher_model: str | None = None, **extra: str) -> Iterator[System]:
    env = {**system_env(pg_url, redis_url, fake_ollama.url), **extra}
    with running_system(env) as system:
        for name, delegates, model in (("researcher", None, researcher_model),
                                       ("boss", ("researcher",), None)):
            system.service.assistants.create(system.user_id, name, AssistantConfig(
                description=f"The {name}.", instructions=role(name), delegates=delegates,
                model=model))
        yield system


@pytest.fixture
def system(pg_url: str, redis_url: str, fake_ollama: Any, team: Team) -> Iterator[System]:
    yield from team_system(pg_url, redis_url, fake_ollama)


def boss(system: System, goal: str = "What boils?") -> Agent:
    agent, _ = system.service.create(system.user_id, CreateRequest(goal=goal, assistant="boss"))
    return agent


def children_of(system: System, caller: Agent) -> list[Agent]:
    return system.repository.delegation.children(caller.id)


def waiting(system: System, caller: Agent) -> Agent:
    system.wait_until(lambda: system.repository.get(caller.id).status is AgentStatus.WAITING,  # type: ignore[union-attr]
                      20, "the caller to wait on its child")
    return system.repository.get(caller.id)  # type: ignore[return-value]


def kill(worker: Any) -> None:
    worker.signal(signal.SIGKILL)
    worker.proc.wait(10)


def assert_one_child_observed_once(system: System, caller: Agent) -> None:
    done = system.terminal(caller.id, timeout_s=60)
    assert done.status is AgentStatus.COMPLETED, (done.stop_reason, done.error)
    [child] = children_of(system, caller)
    assert child.status is AgentStatus.COMPLETED
    assert done.final_answer == f"The team says: {child.final_answer}"
    steps = system.repository.steps_after(caller.id)
    observed = [s for s in steps if s.type is StepType.OBSERVE]
    assert len(observed) == 1 and observed[0].content == child.final_answer
    assert_clean_history(system, caller.id)


def test_a_worker_killed_while_its_caller_waits_loses_no_child(
        system: System, team: Team, start_worker: Any) -> None:
    first = start_worker(system.env)
    team.gate.clear()  # the child is on the first worker, asking the model, when it dies
    caller = boss(system)
    waiting(system, caller)
    [child] = children_of(system, caller)
    system.wait_until(lambda: system.repository.get(child.id).status is AgentStatus.RUNNING,  # type: ignore[union-attr]
                      20, "the child to run")
    kill(first)
    team.gate.set()
    start_worker(system.env)
    assert_one_child_observed_once(system, caller)
    assert system.repository.get(child.id).losses == 1  # type: ignore[union-attr]


def test_a_worker_killed_while_the_caller_is_resumed_makes_no_child_twice(
        system: System, team: Team, start_worker: Any) -> None:
    first = start_worker(system.env)
    team.boss_gate.clear()  # the resumed caller's next model call waits: the kill comes then
    caller = boss(system)
    system.wait_until(lambda: (c := system.repository.get(caller.id)) is not None  # type: ignore[union-attr]
                      and c.status is AgentStatus.RUNNING and c.attempt == 2,
                      30, "the caller to be resumed")
    kill(first)
    team.boss_gate.set()
    start_worker(system.env)
    assert_one_child_observed_once(system, caller)


def test_a_caller_whose_last_child_ended_unnoticed_is_woken_by_the_sweeper(
        system: System, team: Team, start_worker: Any) -> None:
    team.gate.clear()
    start_worker(system.env)
    caller = boss(system)
    waiting(system, caller)
    [child] = children_of(system, caller)
    # The child's end, as a worker that died before it woke the caller left it.
    system.wait_until(lambda: system.repository.get(child.id).status is AgentStatus.RUNNING,  # type: ignore[union-attr]
                      20, "the child to run")
    assert system.repository.transition(child.id, AgentStatus.RUNNING, AgentStatus.FAILED,
                                        error="lost in a test",
                                        stop_reason=StopReason.WORKER_LOST)
    team.gate.set()
    done = system.terminal(caller.id, timeout_s=30)
    assert done.status is AgentStatus.COMPLETED
    assert done.final_answer == "The team says: failed: lost in a test"


def test_time_waiting_on_children_is_not_the_callers_and_the_active_limit_spares_them(
        pg_url: str, redis_url: str, fake_ollama: Any, team: Team, start_worker: Any) -> None:
    team.questions = ("one", "two", "three")
    for system in team_system(pg_url, redis_url, fake_ollama, JARVIS_TOTAL_TIMEOUT="4",
                              JARVIS_MAX_ACTIVE_PER_USER="1", researcher_model=OTHER_MODEL):
        start_worker(system.env, models=system.settings.model)
        caller = boss(system)
        parked = waiting(system, caller)
        # Three children of a user whose limit is one agent at once: none refused. They
        # stay PENDING (no worker takes their model yet) past the caller's total timeout.
        assert [c.status for c in children_of(system, caller)] == [AgentStatus.PENDING] * 3
        system.wait_until(lambda: utcnow() - parked.updated_at > timedelta(seconds=5),  # noqa: B023
                          10, "the caller's total timeout to pass while it waits")
        start_worker(system.env, models=OTHER_MODEL)
        done = system.terminal(caller.id, timeout_s=30)
        assert done.status is AgentStatus.COMPLETED, done.error
        assert done.final_answer == "The team says: " + " | ".join(
            f"researched: {q}" for q in team.questions)
        assert done.waited_ms >= 5000
