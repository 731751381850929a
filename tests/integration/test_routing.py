"""Routing by model (CONTRACT §10) with real worker processes, PostgreSQL and Redis:
`--models` workers take only their models' agents, a worker without it takes every
model's, and an agent whose model no live worker takes waits PENDING, named in /readyz,
until one appears."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from tests.support.api_server import wait_until
from tests.support.fake_ollama import FakeOllama

pytestmark = pytest.mark.integration
pytest_plugins = ["tests.support.api_fixtures"]

MODELS = ["model-a", "model-b", "model-c", "model-d", "model-e"]


def finished(http: Any, ids: list[str]) -> list[dict[str, Any]] | None:
    agents = [http.get(f"/api/v1/agents/{i}").json() for i in ids]
    return agents if all(a["status"] == "COMPLETED" for a in agents) else None


def test_two_workers_of_different_models_share_a_burst(api_env, start_api, start_worker, fake_ollama):
    fake_ollama.models = MODELS  # the API's: it asks whether a create's model exists
    with FakeOllama(models=MODELS) as serves_a, FakeOllama(models=MODELS) as serves_b:
        # Each worker has a model server of its own: which one was asked shows who ran what.
        start_worker({**api_env, "OLLAMA_HOST": serves_a.url, "JARVIS_MODEL": "model-a"},
                     concurrency=10, models="model-a")
        start_worker({**api_env, "OLLAMA_HOST": serves_b.url}, concurrency=10, models="model-b")
        api = start_api(api_env)
        with api.client(api.user()) as http:
            ids = [http.post("/api/v1/agents", json={"goal": f"g{i}", "model": model}).json()["id"]
                   for i in range(15) for model in ("model-a", "model-b")]
            agents = wait_until(lambda: finished(http, ids), timeout_s=60, interval_s=0.3)
        assert Counter(a["model"] for a in agents) == {"model-a": 15, "model-b": 15}
        assert {r["model"] for r in serves_a.requests} == {"model-a"}
        assert {r["model"] for r in serves_b.requests} == {"model-b"}
        assert len(serves_a.requests) == len(serves_b.requests) == 15


def test_a_model_without_a_worker_waits_named_in_readyz_until_one_appears(
    api_env, start_api, start_worker, fake_ollama
):
    fake_ollama.models = MODELS
    start_worker(api_env, concurrency=5, models="model-a")
    api = start_api(api_env)
    with api.client(api.user()) as http:
        waiting = http.post("/api/v1/agents", json={"goal": "g", "model": "model-c"}).json()["id"]

        def warned() -> list[str] | None:
            ready = http.get("/readyz")
            assert ready.status_code == 200  # a warning, not a 503
            found = [w for w in ready.json()["warnings"] if "'model-c'" in w]
            return found or None

        (warning,) = wait_until(warned, timeout_s=20, interval_s=0.3)
        assert "no live worker" in warning and "--models model-c" in warning
        assert http.get(f"/api/v1/agents/{waiting}").json()["status"] == "PENDING"

        # A worker for every model appears: it takes the waiting agent, and the agents of
        # a model first queued after it started.
        start_worker(api_env, concurrency=5)
        later = http.post("/api/v1/agents", json={"goal": "g", "model": "model-e"}).json()["id"]
        wait_until(lambda: finished(http, [waiting, later]), timeout_s=30, interval_s=0.3)
        assert not [w for w in http.get("/readyz").json()["warnings"] if "no live worker" in w]
