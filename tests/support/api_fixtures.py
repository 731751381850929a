"""Fixtures for the API's integration tests; the test modules load them as a plugin:

    pytest_plugins = ["tests.support.api_fixtures"]
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import (
    SHARED_REDIS_DB,
    Process,
    emptied_redis,
    held_redis_db,
    new_pg_database,
    stop_all,
    worker_process,
)
from tests.support.api_server import Api, launch
from tests.support.fake_ollama import FakeOllama


def stack_env(database_url: str, redis_url: str, ollama_url: str) -> dict[str, str]:
    """The environment an API and its workers share: PostgreSQL, Redis, the fake model."""
    return {
        "DATABASE_URL": database_url,
        "REDIS_URL": redis_url,
        "OLLAMA_HOST": ollama_url,
        "JARVIS_HEARTBEAT_INTERVAL": "1",
        "JARVIS_HEARTBEAT_STALE": "10",
    }


@pytest.fixture
def api_env(pg_url: str, redis_url: str, fake_ollama: Any) -> dict[str, str]:
    return stack_env(pg_url, redis_url, fake_ollama.url)


@pytest.fixture
def start_api(tmp_path: Path, started_processes: list[Process]) -> Callable[..., Api]:
    """start_api(env) → a ready Api; killed at the end of the test, together with its
    workers (`started_processes`)."""
    counter = itertools.count()

    def start(env: dict[str, str]) -> Api:
        return launch(env, tmp_path / f"api-{next(counter)}.log", started_processes)

    return start


# --- APIs shared by the whole session (tests that need no worker) ------------------------


@pytest.fixture(scope="session")
def shared_api_env(pg_server_url: str, redis_dbs_lock: None) -> Iterator[dict[str, str]]:
    """The session's PostgreSQL and a Redis database of its own; no model server (port 9).

    Tests on a shared API keep to themselves by creating their own users.
    """
    with emptied_redis(SHARED_REDIS_DB) as url:
        yield {"DATABASE_URL": pg_server_url, "REDIS_URL": url, "OLLAMA_HOST": "http://127.0.0.1:9"}


@pytest.fixture(scope="session")
def shared_api(
    shared_api_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Callable[..., Api]]:
    """shared_api(**extra_env) → a running Api, started once per distinct environment."""
    started: list[Process] = []
    apis: dict[tuple[tuple[str, str], ...], Api] = {}
    logs = tmp_path_factory.mktemp("api")

    def get(**extra: str) -> Api:
        key = tuple(sorted(extra.items()))
        if key not in apis:
            apis[key] = launch({**shared_api_env, **extra}, logs / f"api-{len(apis)}.log", started)
        return apis[key]

    yield get
    stop_all(started)


# --- a stack shared by a module's tests (tests that need a worker, all on one env) -----


@dataclass
class Stack:
    """An API, a worker and the model server they call, on a database and a Redis
    database of their own."""

    api: Api
    fake: FakeOllama
    env: dict[str, str]
    worker: Process


@pytest.fixture(scope="module")
def stack_extra_env() -> dict[str, str]:
    """What a module adds to its stack's environment; a module overrides this fixture."""
    return {}


@pytest.fixture(scope="module")
def stack_model() -> Iterator[FakeOllama]:
    with FakeOllama() as server:
        yield server


@pytest.fixture(scope="module")
def stack_redis_url(redis_dbs_lock: None) -> Iterator[str]:
    """The Redis of the module's stack: a database of the shared server kept out of the
    cycle while the module runs (a module may give its stack a server of its own)."""
    with held_redis_db() as url:
        yield url


@pytest.fixture(scope="module")
def module_stack(
    stack_model: FakeOllama, stack_extra_env: dict[str, str], stack_redis_url: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Stack]:
    """Started once per module: a worker and an API take ~10 s to start and stop, far
    longer than most tests they serve. Its own PostgreSQL database, so no test's
    truncation (`pg_url`) and no other worker's sweeps reach it; tests keep to
    themselves by creating their own users (`stack.api.user()`)."""
    with new_pg_database() as database_url:
        env = {**stack_env(database_url, stack_redis_url, stack_model.url), **stack_extra_env}
        logs = tmp_path_factory.mktemp("stack")
        worker = worker_process(env, logs / "worker.log")
        started = [worker]
        try:
            api = launch(env, logs / "api.log", started)  # the worker starts meanwhile
            worker.wait_for("ready.", timeout_s=60)
            yield Stack(api=api, fake=stack_model, env=env, worker=worker)
        finally:
            stop_all(started)


@pytest.fixture
def stack(module_stack: Stack) -> Stack:
    """The module's stack, its model server reset for this test (`FakeOllama.reset`)."""
    module_stack.fake.reset()
    return module_stack

