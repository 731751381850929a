"""A worker dies while a caller waits on a remote delegate (README, Agents that call
agents): the call lives in the database, not in a thread, so another worker's sweep
sees the remote task end and the caller resumes; the goal was sent once."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from jarvis_agents.assistants import AssistantConfig
from jarvis_agents.lifecycle import AgentStatus, StepType
from jarvis_agents.service import CreateRequest
from tests.conftest import Process
from tests.faults.conftest import System, running_system, system_env
from tests.support.api_server import Api, launch
from tests.support.delegation_team import Team, answer, role
from tests.support.fake_ollama import FakeOllama
from tests.support.flaky_relay import FlakyRelay
from tests.support.remote_agents import agents_file, far_stack

FAR_GATE = threading.Event()


@pytest.fixture(scope="module")
def far(redis_dbs_lock: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Api, str]]:
    """The remote side, its model answering 42 once FAR_GATE is open."""
    def responder(request: dict[str, Any]) -> Any:
        FAR_GATE.wait(60)
        return answer("42", native=bool(request.get("tools")))

    with FakeOllama() as model:
        model.responder = responder
        with far_stack(model.url, tmp_path_factory.mktemp("far")) as remote:
            yield remote
        FAR_GATE.set()


@pytest.fixture
def relay(far: tuple[Api, str]) -> Iterator[FlakyRelay]:
    """`far` again, as `flaky`: behind a relay the test can make refuse or hold."""
    relayed = FlakyRelay(urlsplit(far[0].url).port or 80)
    yield relayed
    relayed.close()


@pytest.fixture
def system(pg_url: str, redis_url: str, fake_ollama: Any, far: tuple[Api, str],
           relay: FlakyRelay, tmp_path: Any) -> Iterator[System]:
    fake_ollama.default_capabilities = ["completion", "tools"]
    fake_ollama.responder = Team()
    env = {**system_env(pg_url, redis_url, fake_ollama.url),
           **agents_file(far, tmp_path / "agents.json", flaky=relay.url)}
    with running_system(env) as built:
        for name in ("far", "flaky"):
            built.service.assistants.create(built.user_id, f"boss-{name}", AssistantConfig(
                instructions=role("boss"), delegates=(name,)))
        yield built


def far_tasks(far: tuple[Api, str], goal: str) -> list[dict[str, Any]]:
    """The remote agent's tasks (agents of its user) of `goal`, newest first."""
    api, key = far
    with httpx.Client(base_url=api.url, headers={"Authorization": f"Bearer {key}"}) as remote:
        return [t for t in remote.get("/api/v1/agents").json()["agents"] if t["goal"] == goal]


def test_a_worker_killed_while_its_caller_waits_on_a_remote_task_loses_nothing(
        system: System, far: tuple[Api, str], start_worker: Any) -> None:
    FAR_GATE.clear()
    first = start_worker(system.env)
    caller, _ = system.service.create(system.user_id, CreateRequest(goal="Boil", assistant="boss-far"))

    def sent() -> bool:
        children = system.repository.delegation.children(caller.id)
        return bool(children) and "task_id" in (children[0].waiting_for or {})

    system.wait_until(sent, 30, "the goal to be sent to the remote agent")
    first.signal(signal.SIGKILL)
    first.proc.wait(10)
    FAR_GATE.set()  # the remote task ends while no worker of ours runs
    start_worker(system.env)
    done = system.terminal(caller.id, timeout_s=60)
    assert done.status is AgentStatus.COMPLETED, done.error
    assert done.final_answer == "The team says: 42"
    observed = [s for s in system.repository.steps_after(caller.id) if s.type is StepType.OBSERVE]
    assert [s.content for s in observed] == ["42"]
    api, key = far
    with httpx.Client(base_url=api.url, headers={"Authorization": f"Bearer {key}"}) as remote:
        tasks = remote.get("/api/v1/agents").json()["agents"]
    assert [t["goal"] for t in tasks] == [Team().questions[0]]  # sent once


def test_a_worker_killed_between_the_send_and_the_wait_starts_one_remote_task(
        system: System, far: tuple[Api, str], relay: FlakyRelay, fake_ollama: Any,
        start_worker: Any) -> None:
    """The remote has the message, the worker dies before it parks the call: the next
    claim sends it again, as the same message, and the remote starts no second task."""
    goal = "Boil once, whatever happens"
    fake_ollama.responder = Team(questions=(goal,))
    FAR_GATE.set()
    relay.sends_answered.clear()  # the remote's answer never reaches the first worker
    first = start_worker(system.env)
    caller, _ = system.service.create(system.user_id, CreateRequest(goal="Boil", assistant="boss-flaky"))
    system.wait_until(lambda: far_tasks(far, goal) != [], 30, "the remote agent to get the goal")
    first.signal(signal.SIGKILL)
    first.proc.wait(10)
    relay.sends_answered.set()
    start_worker(system.env)  # its sweeper finds the call's child lost, and runs it again
    done = system.terminal(caller.id, timeout_s=60)
    assert done.status is AgentStatus.COMPLETED, done.error
    assert done.final_answer == "The team says: 42"
    assert relay.sends_seen == 2  # sent again ...
    assert len(far_tasks(far, goal)) == 1  # ... as the same message


def test_a_send_whose_answer_is_cut_is_sent_again_and_starts_one_task(
        system: System, far: tuple[Api, str], relay: FlakyRelay, fake_ollama: Any,
        start_worker: Any) -> None:
    """The remote has the message, the connection is cut before its answer: the send is
    tried again, as the same message, and the call goes on with the one task."""
    goal = "Boil once, whatever the network does"
    fake_ollama.responder = Team(questions=(goal,))
    FAR_GATE.set()
    relay.send_answers_to_cut = 1
    start_worker(system.env)
    caller, _ = system.service.create(system.user_id, CreateRequest(goal="Boil", assistant="boss-flaky"))
    done = system.terminal(caller.id, timeout_s=60)
    assert done.status is AgentStatus.COMPLETED, done.error
    assert done.final_answer == "The team says: 42"
    assert relay.sends_seen == 2
    assert len(far_tasks(far, goal)) == 1


def test_a_cancel_the_remote_refused_is_sent_again_once_it_is_back(
        system: System, far: tuple[Api, str], relay: FlakyRelay, fake_ollama: Any,
        start_worker: Any) -> None:
    goal = "Boil until cancelled"
    fake_ollama.responder = Team(questions=(goal,))
    FAR_GATE.clear()  # the remote task runs until it is cancelled
    try:
        start_worker(system.env)
        caller, _ = system.service.create(system.user_id, CreateRequest(goal="Boil", assistant="boss-flaky"))

        def waiting() -> bool:
            children = system.repository.delegation.children(caller.id)
            return bool(children) and children[0].status is AgentStatus.WAITING

        system.wait_until(waiting, 30, "the call to wait on its remote task")
        relay.refusing.set()  # the remote is down when the caller is cancelled
        system.service.cancel(system.user_id, caller.id)
        [task] = far_tasks(far, goal)
        assert task["status"] in ("PENDING", "RUNNING")  # the CancelTask was lost
        relay.refusing.clear()
        system.wait_until(lambda: far_tasks(far, goal)[0]["status"] == "CANCELLED", 30,
                          "a sweep to cancel the remote task")
        system.wait_until(lambda: "cancel_owed" not in (  # settled: tried no more
            system.repository.delegation.children(caller.id)[0].waiting_for or {}), 10,
            "the cancel to be settled")
    finally:
        FAR_GATE.set()


def test_an_api_killed_between_a_cancel_and_its_cancel_task_leaves_it_owed(
        system: System, far: tuple[Api, str], relay: FlakyRelay, fake_ollama: Any,
        start_worker: Any, started_processes: list[Process], tmp_path: Any) -> None:
    """The cancel is committed, the API dies before the remote has the CancelTask: the
    commit itself owed it, so a worker's sweep sends it."""
    goal = "Boil until the API dies"
    fake_ollama.responder = Team(questions=(goal,))
    FAR_GATE.clear()  # the remote task runs until it is cancelled
    try:
        start_worker(system.env)
        api = launch(system.env, tmp_path / "api.log", started_processes)
        key = api.user()
        user = system.repository.users.by_api_key(key)
        assert user is not None
        system.service.assistants.create(user.id, "boss-flaky", AssistantConfig(
            instructions=role("boss"), delegates=("flaky",)))
        caller, _ = system.service.create(user.id, CreateRequest(goal="Boil", assistant="boss-flaky"))

        def waiting() -> bool:
            children = system.repository.delegation.children(caller.id)
            return bool(children) and children[0].status is AgentStatus.WAITING

        system.wait_until(waiting, 30, "the call to wait on its remote task")
        relay.holding_cancels.set()
        with api.client(key) as http:
            threading.Thread(target=lambda: _quietly(http.delete, f"/api/v1/agents/{caller.id}"),
                             daemon=True).start()
            system.wait_until(lambda: relay.cancels_held >= 1, 30, "the API to send CancelTask")
            api.process.signal(signal.SIGKILL)
            api.process.proc.wait(10)
        assert system.repository.get(caller.id).status is AgentStatus.CANCELLED  # type: ignore[union-attr]
        assert far_tasks(far, goal)[0]["status"] in ("PENDING", "RUNNING")  # never had it
        relay.holding_cancels.clear()
        system.wait_until(lambda: far_tasks(far, goal)[0]["status"] == "CANCELLED", 30,
                          "a sweep to cancel the remote task")
    finally:
        FAR_GATE.set()


def _quietly(call: Any, *args: Any) -> None:
    """A request whose server is killed under it: its error is the point, not a failure."""
    try:
        call(*args)
    except httpx.HTTPError:
        pass
