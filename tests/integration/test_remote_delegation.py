"""Remote delegates end to end (README, Agents that call agents): a stack whose
JARVIS_A2A_AGENTS names an agent served by a second stack over A2A
(tests/support/remote_agents.py), reached with the official `a2a-sdk` client."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import cli_env
from tests.support.api_server import Api, wait_until
from tests.support.delegation_team import Team, call, role
from tests.support.fake_ollama import FakeOllama
from tests.support.remote_agents import agents_file, far_stack

pytestmark = pytest.mark.integration
pytest_plugins = ["tests.support.api_fixtures"]  # stack


@pytest.fixture(scope="module")
def stack_model() -> Iterator[FakeOllama]:
    with FakeOllama() as server:
        server.default_capabilities = ["completion", "tools"]
        yield server


@pytest.fixture(scope="module")
def far(stack_model: FakeOllama, redis_dbs_lock: None,
        tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Api, str]]:
    with far_stack(stack_model.url, tmp_path_factory.mktemp("far")) as remote:
        yield remote


@pytest.fixture(scope="module")
def stack_extra_env(far: tuple[Api, str], tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return agents_file(far, tmp_path_factory.mktemp("a2a") / "agents.json")


def boss(http: httpx.Client, delegate: str, mode: str = "auto") -> None:
    made = http.post("/api/v1/assistants", json={
        "name": f"boss-{delegate}", "instructions": role("boss"), "delegates": [delegate],
        "mode": mode})
    assert made.status_code == 201, made.text


def ended(http: httpx.Client, agent_id: str) -> dict[str, Any]:
    return wait_until(lambda: (a := http.get(f"/api/v1/agents/{agent_id}").json())["status"]
                      in ("COMPLETED", "FAILED", "CANCELLED") and a, timeout_s=60)


def children(http: httpx.Client, caller_id: str) -> list[dict[str, Any]]:
    return http.get("/api/v1/agents", params={"caller_id": caller_id}).json()["agents"]


@pytest.mark.parametrize("mode", ["native", "react"])
def test_a_boss_asks_a_remote_agent_and_answers_with_its_artifact(stack, far, mode):
    team = Team()
    stack.fake.responder = team  # the remote agent, of no assistant of the team, answers 42
    far_api, far_key = far
    with stack.api.client(stack.api.user()) as http:
        boss(http, "far", mode)
        caller = http.post("/api/v1/agents", json={"goal": "What boils?", "assistant": "boss-far"}).json()
        done = ended(http, caller["id"])
        assert done["status"] == "COMPLETED", done
        assert done["final_answer"] == "The team says: 42"
        [child] = children(http, caller["id"])
        assert child["goal"] == team.questions[0] and child["status"] == "COMPLETED"
        assert child["final_answer"] == "42" and child["caller_id"] == caller["id"]
    with far_api.client(far_key) as remote:  # the goal ran there, as an agent of its user
        task = remote.get("/api/v1/agents").json()["agents"][0]  # the latest
        assert task["goal"] == team.questions[0] and task["status"] == "COMPLETED"
    # What the remote task used (its Task's metadata says) is the child's, and the tree's.
    assert task["usage_total"]["model_calls"] == 1
    assert child["usage"] == task["usage_total"]
    assert done["usage_total"] == {name: used + task["usage_total"][name]
                                   for name, used in done["usage"].items()}


def test_an_unreachable_remote_agent_is_an_observation(stack):
    stack.fake.responder = Team()
    with stack.api.client(stack.api.user()) as http:
        boss(http, "gone")
        caller = http.post("/api/v1/agents", json={"goal": "What boils?", "assistant": "boss-gone"}).json()
        done = ended(http, caller["id"])
        assert done["status"] == "COMPLETED", done
        assert done["final_answer"].startswith(
            "The team says: the remote agent 'gone' could not be reached"), done


def test_a_remote_agent_that_needs_input_is_an_observation_quoting_it(stack):
    team = Team(questions=("calculate 1+1",))

    def responder(request: dict[str, Any]) -> Any:
        if "ROLE:" not in request["messages"][0]["content"]:  # the remote agent
            return call("calculate", ["1+1"], native=bool(request.get("tools")))
        return team(request)

    stack.fake.responder = responder
    with stack.api.client(stack.api.user()) as http:
        boss(http, "far")
        caller = http.post("/api/v1/agents", json={"goal": "Add", "assistant": "boss-far"}).json()
        done = ended(http, caller["id"])
        assert done["status"] == "COMPLETED", done
        assert done["final_answer"].startswith(
            "The team says: the remote agent 'far' needs input to go on; it asks: "), done
        assert "calculate" in done["final_answer"]


@pytest.mark.parametrize("cancelled", ["caller", "call"])
def test_cancelling_the_caller_or_the_call_cancels_the_remote_task(stack, far, cancelled):
    team = Team()
    held = threading.Event()

    def responder(request: dict[str, Any]) -> Any:
        if "ROLE:" not in request["messages"][0]["content"]:
            held.wait(60)  # the remote agent works until the test lets it go
        return team(request)

    stack.fake.responder = responder
    far_api, far_key = far
    key = stack.api.user()
    try:
        with stack.api.client(key) as http, far_api.client(far_key) as remote:
            boss(http, "far")
            caller = http.post("/api/v1/agents", json={"goal": "Boil", "assistant": "boss-far"}).json()
            child = wait_until(lambda: (c := children(http, caller["id"])) and c[0]["status"] == "WAITING"
                               and c[0], timeout_s=60)
            task_id = child["waiting_for"]["task_id"]
            shown = subprocess.run([sys.executable, "-m", "jarvis_agents.cli", "show", child["id"]],
                                   env=cli_env(JARVIS_URL=stack.api.url, JARVIS_API_KEY=key),
                                   capture_output=True, text=True, timeout=60, check=True).stdout
            assert f"the remote agent far's task {task_id}" in shown, shown
            assert remote.get(f"/api/v1/agents/{task_id}").json()["status"] in ("PENDING", "RUNNING")
            which = caller if cancelled == "caller" else child
            assert http.delete(f"/api/v1/agents/{which['id']}").status_code == 200
            wait_until(lambda: remote.get(f"/api/v1/agents/{task_id}").json()["status"] == "CANCELLED",
                       timeout_s=30)
            assert http.get(f"/api/v1/agents/{child['id']}").json()["status"] == "CANCELLED"
    finally:
        held.set()


def test_a_bad_agents_file_is_a_clear_startup_error(tmp_path: Path):
    from jarvis_agents.config import Settings
    from jarvis_agents.errors import ConfigError

    path = tmp_path / "agents.json"
    path.write_text(json.dumps({"agents": {"far": {"url": "ftp://nowhere"}}}))
    with pytest.raises(ConfigError, match="JARVIS_A2A_AGENTS: .*'far': `url` must be"):
        Settings.from_env({"JARVIS_A2A_AGENTS": str(path)})
    with pytest.raises(ConfigError, match="cannot read"):
        Settings.from_env({"JARVIS_A2A_AGENTS": str(tmp_path / "missing.json")})
