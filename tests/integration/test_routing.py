"""Routing by model (docs/api.md §10) with real worker processes, PostgreSQL and Redis:
`--models` workers take only their models' agents, a worker without it takes every
model's, and an agent whose model no live worker takes waits PENDING, named in /readyz,
until one appears."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from tests.support.api_server import wait_until
from tests.support.fake_ollama import FakeOllama

pytestmark = [pytest.mark.integration, pytest.mark.long]
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
        # /readyz keeps its report a few seconds (api.health.READY_FRESH_S): the warning goes then.
        wait_until(lambda: not [w for w in http.get("/readyz").json()["warnings"]
                                if "no live worker" in w], timeout_s=15, interval_s=0.3)


def test_a_model_no_longer_in_use_leaves_no_queue_consumer_or_series(
    api_env, start_api, start_worker, fake_ollama
):
    """Agents of five junk models end; a worker that takes every model stops listening to
    their queues and `/metrics` (the API's and the worker's own) drops their series, while
    a model with an agent RUNNING and one with an agent PENDING keep theirs. The idle
    horizon is shortened from the contract's 10 minutes to 6 s (JARVIS_MODEL_IDLE)."""
    import httpx

    from jarvis_agents.config import Settings
    from jarvis_agents.routing import queue_for
    from tests.conftest import free_port
    from tests.integration.test_api_health import parse, scrape
    from workers.celery_app import create_celery

    junk = [f"junk-{n}" for n in range(5)]
    fake_ollama.models = [*junk, "keep-running", "keep-pending"]
    metrics_port = free_port()
    env = {**api_env, "JARVIS_MODEL_IDLE": "6", "JARVIS_WORKER_METRICS_PORT": str(metrics_port),
           "JARVIS_STEP_TIMEOUT": "300", "JARVIS_TOTAL_TIMEOUT": "600"}
    start_worker(env, concurrency=1)  # one agent at a time: a second one waits PENDING
    api = start_api(env)
    app = create_celery(Settings.from_env(env))

    def consumed() -> set[str]:
        found = app.control.inspect(timeout=2).active_queues() or {}
        return {queue["name"] for queues in found.values() for queue in queues}

    def worker_series() -> str:
        return httpx.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).text

    try:
        with api.client(api.user()) as http:
            ids = [http.post("/api/v1/agents", json={"goal": "g", "model": model}).json()["id"]
                   for model in [*junk, "keep-running"]]
            wait_until(lambda: finished(http, ids), timeout_s=60, interval_s=0.3)
            fake_ollama.latency_s = 120.0  # what comes next stays RUNNING, or PENDING behind it
            running = http.post("/api/v1/agents", json={"goal": "g", "model": "keep-running"}).json()
            wait_until(lambda: http.get(f"/api/v1/agents/{running['id']}").json()["status"]
                       == "RUNNING", timeout_s=30, interval_s=0.2)
            pending = http.post("/api/v1/agents", json={"goal": "g", "model": "keep-pending"}).json()
            wait_until(lambda: queue_for("keep-pending") in consumed(), timeout_s=30, interval_s=0.3)

            def forgotten() -> bool:
                queues, api_series, own_series = consumed(), scrape(http), parse(worker_series())
                return (not [q for q in queues if q in map(queue_for, junk)]
                        and not [s for s in [*api_series, *own_series] if "junk-" in s]
                        # what was counted of a model, where the test looks for it
                        and 'jarvis_planning_seconds_count{model="keep-running"}' in api_series
                        and any('model="keep-running"' in s for s in own_series))

            wait_until(forgotten, timeout_s=60, interval_s=0.5)
            assert {queue_for("keep-running"), queue_for("keep-pending")} <= consumed()
            assert http.get(f"/api/v1/agents/{pending['id']}").json()["status"] == "PENDING"
    finally:
        app.close()
