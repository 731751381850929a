"""How failures become answers: an unreachable database or Redis is a 503 the client may
retry, anything unexpected a 500 — both in the error shape, with no traceback."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
import redis
from sqlalchemy.exc import OperationalError

from api import create_app
from jarvis_agents.config import Settings
from jarvis_agents.errors import DependencyUnavailable
from jarvis_agents.store.users import User, hash_api_key

KEY = "jrv_test-key"


class Repository:
    """Knows one user; `failure` is raised by every agent read."""

    def __init__(self) -> None:
        self.user = User(uuid.uuid4(), "ada", None)  # type: ignore[arg-type]
        self.failure: Exception | None = None

    @property
    def users(self) -> Repository:  # its users too
        return self

    def by_key_hash(self, key_hash: str) -> User | None:
        return self.user if key_hash == hash_api_key(KEY) else None

    def get(self, agent_id: uuid.UUID, *, user_id: uuid.UUID | None = None) -> Any:
        assert self.failure is not None
        raise self.failure


class Service:
    def __init__(self, repository: Repository) -> None:
        self.repository = repository

    def get(self, user_id: uuid.UUID, agent_id: uuid.UUID) -> Any:
        return self.repository.get(agent_id, user_id=user_id)


@pytest.fixture
def app_and_repository(tmp_path: Path) -> tuple[Any, Repository]:
    settings = Settings(database_url="sqlite://", redis_url="redis://127.0.0.1:1/0", data_dir=tmp_path)
    repository = Repository()
    app = create_app(settings, service=Service(repository), redis=object())  # type: ignore[arg-type]
    return app, repository


FAILURES = [
    (OperationalError("SELECT", {}, Exception("server closed the connection")), 503,
     "service_unavailable"),
    (redis.ConnectionError("Error 111 connecting"), 503, "service_unavailable"),
    (DependencyUnavailable("cannot reach the database: refused"), 503, "service_unavailable"),
    (RuntimeError("a bug with a secret in it"), 500, "internal_error"),
]


@pytest.mark.parametrize(("failure", "status", "code"), FAILURES,
                         ids=["sqlalchemy", "redis", "dependency", "bug"])
def test_failures_become_json_errors(app_and_repository, failure, status, code) -> None:
    app, repository = app_and_repository
    repository.failure = failure
    response = app.test_client().get(
        f"/api/v1/agents/{uuid.uuid4()}", headers={"Authorization": f"Bearer {KEY}"}
    )
    assert response.status_code == status
    body = response.get_json()
    assert set(body) == {"error"} and body["error"]["code"] == code
    assert "Traceback" not in response.get_data(as_text=True)
    assert "secret" not in body["error"]["message"]
    if status == 503:
        assert int(response.headers["Retry-After"]) > 0


def test_the_app_is_built_without_connecting_anywhere(app_and_repository) -> None:
    app, _ = app_and_repository  # Redis at port 1 would refuse: nothing was asked of it
    document = app.test_client().get("/api/v1/openapi.json").get_json()
    assert "/api/v1/agents" in document["paths"]
