"""`jarvis-agents delete` and `jarvis-agents users delete` (README, Deleting and retention),
against the shared API and its database: what each deletes, and their one-line refusals."""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from jarvis_agents.config import Settings
from jarvis_agents.lifecycle import AgentStatus, StopReason
from jarvis_agents.store import open_repository
from tests.conftest import cli_env
from tests.support.api_server import wait_until
from tests.support.store import waiting

pytestmark = pytest.mark.integration
pytest_plugins = ["tests.support.api_fixtures"]  # shared_api


def jarvis(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([sys.executable, "-m", "jarvis_agents.cli", *args], env=cli_env(**env),
                            check=False, capture_output=True, text=True, timeout=60)
    assert "Traceback" not in result.stderr, result.stderr
    return result


def one_line_error(result: subprocess.CompletedProcess[str], text: str) -> None:
    assert result.returncode != 0, result
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and text in lines[0], result.stderr


@pytest.fixture
def repository(shared_api) -> Iterator[Any]:
    found = open_repository(Settings.from_env(shared_api().env), pool_size=1)
    yield found
    found.engine.dispose()


def test_delete_removes_an_ended_agent_and_a_thread_and_refuses_an_active_one(shared_api):
    api = shared_api()
    key = api.user()
    env = {"JARVIS_URL": api.url, "JARVIS_API_KEY": key}
    with api.client(key) as http:
        agent = http.post("/api/v1/agents", json={"goal": "one"}).json()
        one_line_error(jarvis("delete", agent["id"], **env), "cancel it first")
        http.delete(f"/api/v1/agents/{agent['id']}")
        deleted = jarvis("delete", agent["id"], **env)
        assert deleted.returncode == 0 and f"deleted agent {agent['id']}" in deleted.stdout
        assert http.get(f"/api/v1/agents/{agent['id']}").status_code == 404
        one_line_error(jarvis("delete", agent["id"], **env), "no agent with id")
        one_line_error(jarvis("delete", "nope", **env), "is not an agent id")

        first = http.post("/api/v1/agents", json={"goal": "first"}).json()
        http.delete(f"/api/v1/agents/{first['id']}")
        later = http.post("/api/v1/agents", json={"goal": "next", "thread_id": first["id"]}).json()
        one_line_error(jarvis("delete", "--thread", first["id"], **env), "cancel it first")
        http.delete(f"/api/v1/agents/{later['id']}")
        assert jarvis("delete", "--thread", first["id"], **env).returncode == 0
        assert {http.get(f"/api/v1/agents/{a}").status_code for a in (first["id"], later["id"])} == {404}


def test_users_delete_refuses_a_user_with_a_waiting_agent_then_deletes_all_they_own(
    shared_api, repository,
):
    api = shared_api()
    name = f"leaver-{uuid.uuid4().hex[:8]}"
    key = api.user(name)
    other = api.user()
    db = {"DATABASE_URL": api.env["DATABASE_URL"]}
    user = repository.users.by_name(name)
    with api.client(key) as http, api.client(other) as others:
        ended = http.post("/api/v1/agents", json={"goal": "done"}).json()
        http.delete(f"/api/v1/agents/{ended['id']}")
        assert http.post("/api/v1/assistants", json={"name": "helper"}).status_code == 201
        kept = others.post("/api/v1/agents", json={"goal": "not theirs"}).json()
        agent, _ = waiting(repository, user.id)  # what an approval gate leaves

        one_line_error(jarvis("users", "delete", name, **db), "cancel them first")
        assert http.get(f"/api/v1/agents/{ended['id']}").status_code == 200  # nothing deleted
        assert repository.transition(agent.id, AgentStatus.WAITING, AgentStatus.CANCELLED,
                                     stop_reason=StopReason.CANCELLED)
        deleted = jarvis("users", "delete", name, **db)
        assert deleted.returncode == 0, deleted.stderr
        assert f"deleted user {name} with 2 agents" in deleted.stdout
        assert repository.users.by_name(name) is None
        # The key finds nobody, once the API's memory of it lapses (as after a revoke).
        wait_until(lambda: http.get("/api/v1/agents").status_code == 401, timeout_s=10)
        assert repository.get(agent.id) is None and repository.get(uuid.UUID(ended["id"])) is None
        assert repository.assistants.of_user(user.id) == []
        assert others.get(f"/api/v1/agents/{kept['id']}").status_code == 200
    one_line_error(jarvis("users", "delete", name, **db), "there is no user named")
