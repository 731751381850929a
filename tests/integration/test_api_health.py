"""The operator's endpoints: liveness, readiness, Prometheus metrics and the OpenAPI document."""

from __future__ import annotations

from typing import Any

import pytest

pytestmark = pytest.mark.integration
pytest_plugins = ["tests.support.api_fixtures"]  # api_env, start_api, shared_api

CONTRACT_OPERATIONS = {
    ("post", "/api/v1/agents"), ("get", "/api/v1/agents"), ("post", "/api/v1/agents/stream"),
    ("get", "/api/v1/agents/{agent_id}"), ("delete", "/api/v1/agents/{agent_id}"),
    ("get", "/api/v1/agents/{agent_id}/steps"), ("get", "/api/v1/agents/{agent_id}/events"),
    ("get", "/api/v1/events"), ("get", "/api/v1/tools"), ("get", "/api/v1/openapi.json"),
    ("get", "/healthz"), ("get", "/readyz"), ("get", "/metrics"),
}


def test_readiness_reports_each_dependency(api_env, start_api, fake_ollama):
    api = start_api(api_env)
    with api.client() as http:
        assert http.get("/healthz").json() == {"status": "ok"}

        ready = http.get("/readyz")
        assert ready.status_code == 200, ready.text
        assert ready.json() == {"status": "ready", "checks": {
            "database": {"ok": True, "error": None},
            "redis": {"ok": True, "error": None},
            "ollama": {"ok": True, "error": None, "model": "llama3.2", "model_pulled": True},
        }}

        fake_ollama.models = ["qwen2.5:72b"]  # the default model is not pulled: still ready
        not_pulled = http.get("/readyz")
        assert not_pulled.status_code == 200
        assert not_pulled.json()["checks"]["ollama"] == {
            "ok": True, "error": None, "model": "llama3.2", "model_pulled": False,
        }

        fake_ollama.stop()
        down = http.get("/readyz")
        assert down.status_code == 503
        body = down.json()
        assert body["status"] == "unavailable"
        assert body["checks"]["database"]["ok"] and body["checks"]["redis"]["ok"]
        assert body["checks"]["ollama"]["ok"] is False and body["checks"]["ollama"]["error"]
        assert http.get("/healthz").status_code == 200  # alive, just not ready

        fake_ollama.start()  # the same port
        assert http.get("/readyz").status_code == 200


def test_metrics_are_computed_from_the_database_and_the_queue(shared_api):
    api = shared_api()  # no worker: what is queued stays queued
    with api.client(api.user()) as http:
        before = scrape(http)
        ids = [http.post("/api/v1/agents", json={"goal": f"g{i}"}).json()["id"] for i in range(3)]
        http.delete(f"/api/v1/agents/{ids[0]}")
        after = scrape(http)

    def grew(sample: str) -> float:
        return after[sample] - before.get(sample, 0.0)

    assert grew('jarvis_agents{status="PENDING"}') == 2
    assert grew('jarvis_agents{status="CANCELLED"}') == 1
    assert grew('jarvis_agents{status="COMPLETED"}') == 0
    assert grew('jarvis_queue_depth{queue="jarvis-agents"}') == 3
    assert 'jarvis_steps{type="THINK"}' in after
    assert after["jarvis_oldest_pending_age_seconds"] > 0
    assert after['jarvis_metrics_source_up{source="database"}'] == 1
    assert after['jarvis_metrics_source_up{source="redis"}'] == 1
    assert after["jarvis_api_event_hub_connected"] in (0, 1)
    assert "process_cpu_seconds_total" in after or "python_info" in " ".join(after)


def scrape(http: Any) -> dict[str, float]:
    """`/metrics` as {sample: value}, read without an API key."""
    response = http.get("/metrics", headers={"Authorization": ""})
    assert response.status_code == 200
    assert response.headers["Content-Type"].startswith("text/plain")
    samples = {}
    for line in response.text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            samples[name] = float(value)
    return samples


def test_the_openapi_document_covers_the_contract(shared_api):
    api = shared_api()
    with api.client() as http:
        document = http.get("/api/v1/openapi.json").json()
        tools = http.get("/api/v1/tools", headers={"Authorization": f"Bearer {api.user()}"})
    assert document["openapi"].startswith("3.1")
    operations = {
        (method, path) for path, item in document["paths"].items() for method in item
        if method in {"get", "post", "delete"}
    }
    assert operations == CONTRACT_OPERATIONS
    assert document["components"]["securitySchemes"]["bearerAuth"]["scheme"] == "bearer"
    assert document["security"] == [{"bearerAuth": []}]
    for path in ("/healthz", "/readyz", "/metrics", "/api/v1/openapi.json"):
        assert document["paths"][path]["get"]["security"] == []

    create = document["paths"]["/api/v1/agents"]["post"]
    assert {"202", "400", "401", "409", "413", "429"} <= set(create["responses"])
    assert "Location" in create["responses"]["202"]["headers"]
    assert "Retry-After" in create["responses"]["429"]["headers"]
    body = document["components"]["schemas"]["CreateAgent"]
    assert body["additionalProperties"] is False and body["required"] == ["goal"]
    tool_enum = body["properties"]["tools"]["anyOf"][0]["items"]["enum"]
    assert tool_enum == [t["name"] for t in tools.json()["tools"]]
    stream = document["paths"]["/api/v1/agents/stream"]["post"]["responses"]["200"]
    assert "text/event-stream" in stream["content"]
