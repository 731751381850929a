"""A worker dies while a caller waits on a remote delegate (README, Agents that call
agents): the call lives in the database, not in a thread, so another worker's sweep
sees the remote task end and the caller resumes; the goal was sent once."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from jarvis_agents.assistants import AssistantConfig
from jarvis_agents.lifecycle import AgentStatus, StepType
from jarvis_agents.service import CreateRequest
from tests.faults.conftest import System, running_system, system_env
from tests.support.api_server import Api
from tests.support.delegation_team import Team, answer, role
from tests.support.fake_ollama import FakeOllama
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
def system(pg_url: str, redis_url: str, fake_ollama: Any, far: tuple[Api, str],
           tmp_path: Any) -> Iterator[System]:
    fake_ollama.default_capabilities = ["completion", "tools"]
    fake_ollama.responder = Team()
    env = {**system_env(pg_url, redis_url, fake_ollama.url),
           **agents_file(far, tmp_path / "agents.json")}
    with running_system(env) as built:
        built.service.assistants.create(built.user_id, "boss", AssistantConfig(
            instructions=role("boss"), delegates=("far",)))
        yield built


def test_a_worker_killed_while_its_caller_waits_on_a_remote_task_loses_nothing(
        system: System, far: tuple[Api, str], start_worker: Any) -> None:
    FAR_GATE.clear()
    first = start_worker(system.env)
    caller, _ = system.service.create(system.user_id, CreateRequest(goal="Boil", assistant="boss"))

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
