"""The operator's endpoints: liveness, readiness, Prometheus metrics and the OpenAPI document."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import pytest

from api.health import READY_FRESH_S, READY_WAIT_S
from api.scrape_cache import MAX_AGE_S
from tests.conftest import free_port
from tests.support.api_server import wait_until

pytestmark = pytest.mark.integration
pytest_plugins = ["tests.support.api_fixtures"]  # api_env, start_api, shared_api

# A change shows in /readyz once the report kept is old enough to be renewed, and checked.
REPORTED_WITHIN_S = READY_FRESH_S + READY_WAIT_S + 2

CONTRACT_OPERATIONS = {
    ("post", "/api/v1/agents"), ("get", "/api/v1/agents"), ("post", "/api/v1/agents/stream"),
    ("get", "/api/v1/agents/{agent_id}"), ("delete", "/api/v1/agents/{agent_id}"),
    ("get", "/api/v1/agents/{agent_id}/steps"), ("get", "/api/v1/agents/{agent_id}/events"),
    ("post", "/api/v1/agents/{agent_id}/approval"), ("post", "/api/v1/agents/{agent_id}/fork"),
    ("get", "/api/v1/events"), ("get", "/api/v1/tools"), ("get", "/api/v1/openapi.json"),
    ("get", "/healthz"), ("get", "/readyz"), ("get", "/metrics"),
    ("post", "/api/v1/assistants"), ("get", "/api/v1/assistants"),
    ("get", "/api/v1/assistants/{assistant}"), ("patch", "/api/v1/assistants/{assistant}"),
    ("delete", "/api/v1/assistants/{assistant}"), ("get", "/api/v1/assistants/{assistant}/versions"),
    ("post", "/api/v1/schedules"), ("get", "/api/v1/schedules"),
    ("get", "/api/v1/schedules/{schedule_id}"), ("patch", "/api/v1/schedules/{schedule_id}"),
    ("delete", "/api/v1/schedules/{schedule_id}"),
    ("delete", "/api/v1/threads/{thread_id}"),
    # LangGraph's SDK (README, LangGraph SDK)
    ("post", "/langgraph/assistants/search"), ("get", "/langgraph/assistants/{assistant_id}"),
    ("post", "/langgraph/threads"), ("post", "/langgraph/threads/search"),
    ("get", "/langgraph/threads/{thread_id}"), ("get", "/langgraph/threads/{thread_id}/state"),
    ("post", "/langgraph/threads/{thread_id}/history"),
    ("post", "/langgraph/threads/{thread_id}/runs"), ("get", "/langgraph/threads/{thread_id}/runs"),
    ("post", "/langgraph/runs"), ("post", "/langgraph/threads/{thread_id}/runs/wait"),
    ("post", "/langgraph/runs/wait"), ("post", "/langgraph/threads/{thread_id}/runs/stream"),
    ("post", "/langgraph/runs/stream"), ("get", "/langgraph/threads/{thread_id}/runs/{run_id}"),
    ("get", "/langgraph/threads/{thread_id}/runs/{run_id}/join"),
    ("get", "/langgraph/threads/{thread_id}/runs/{run_id}/stream"),
    ("post", "/langgraph/threads/{thread_id}/runs/{run_id}/cancel"),
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
        }, "warnings": []}

        fake_ollama.models = ["qwen2.5:72b"]  # the default model is not pulled: still ready
        # The report is kept up to READY_FRESH_S: the change shows within that.
        not_pulled = wait_until(lambda: changed(http, "model_pulled", False), timeout_s=REPORTED_WITHIN_S)
        assert not_pulled.status_code == 200
        assert not_pulled.json()["status"] == "ready"
        assert not_pulled.json()["checks"]["ollama"] == {
            "ok": True, "error": None, "model": "llama3.2", "model_pulled": False,
        }
        (warning,) = not_pulled.json()["warnings"]  # ready, but agents would fail: said so
        assert "'llama3.2' is not on the Ollama server" in warning
        assert "ollama pull llama3.2" in warning

        fake_ollama.stop()
        down = wait_until(lambda: changed(http, "ok", False), timeout_s=REPORTED_WITHIN_S)
        assert down.status_code == 503
        body = down.json()
        assert body["status"] == "unavailable"
        assert body["checks"]["database"]["ok"] and body["checks"]["redis"]["ok"]
        assert body["checks"]["ollama"]["ok"] is False and body["checks"]["ollama"]["error"]
        assert http.get("/healthz").status_code == 200  # alive, just not ready

        fake_ollama.start()  # the same port
        wait_until(lambda: http.get("/readyz").status_code == 200, timeout_s=REPORTED_WITHIN_S)


def test_readiness_costs_the_dependencies_one_check_per_5_s_however_often_asked(
    api_env, start_api, fake_ollama
):
    api = start_api(api_env)
    with api.client() as http:
        before = fake_ollama.connections
        started = time.monotonic()
        answers = [http.get("/readyz").status_code for _ in range(50)]
        elapsed = time.monotonic() - started
    assert answers == [200] * 50
    # The model check connects afresh each time (one connection, one request).
    checks = fake_ollama.connections - before
    assert 1 <= checks <= 1 + elapsed // READY_FRESH_S, (checks, elapsed)


def test_readiness_shows_no_url_query_string_or_credential(
    api_env, start_api, fake_ollama, tmp_path
):
    # The model server's address and an MCP server's URL carry a credential and a token;
    # the default model is not there, which /readyz warns of, naming the server.
    with_secrets = fake_ollama.url.replace("//", "//ada:pa55word@")
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps({"mcpServers": {"remote": {
        "url": f"{with_secrets}/mcp?token=s3cret", "headers": {"Authorization": "Bearer s3cret"}}}}))
    fake_ollama.models = ["another-model"]
    api = start_api({**api_env, "JARVIS_MCP_CONFIG": str(config),
                     "OLLAMA_HOST": f"{with_secrets}/?token=s3cret"})
    with api.client() as http:
        answer = http.get("/readyz")
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["checks"]["ollama"]["model_pulled"] is False
    (warning,) = body["warnings"]
    assert "'llama3.2' is not on the Ollama server" in warning
    assert body["mcp"]["servers"]["remote"]["ok"] is False
    for secret in ("s3cret", "pa55word", "ada:", "token", "://"):
        assert secret not in answer.text, (secret, body)


def changed(http: Any, field: str, value: object) -> Any:
    """The /readyz answer once the model server's check says `field` is `value`, else None."""
    answer = http.get("/readyz")
    checks = answer.json()["checks"]
    return answer if (checks.get("ollama") or checks["openai"])[field] == value else None


def test_readiness_asks_the_server_of_an_openai_default_model_not_ollama(
    api_env, start_api, fake_ollama
):
    # An OpenAI-only deployment: no Ollama anywhere, the fake answering the OpenAI protocol.
    no_ollama = f"http://127.0.0.1:{free_port()}"
    api = start_api({**api_env, "OLLAMA_HOST": no_ollama, "OPENAI_BASE_URL": f"{fake_ollama.url}/v1",
                     "JARVIS_MODEL": "openai/test-model"})
    with api.client() as http:
        ready = http.get("/readyz")
        assert ready.status_code == 200, ready.text
        assert ready.json()["checks"]["openai"] == {
            "ok": True, "error": None, "model": "openai/test-model", "model_pulled": True,
        }
        assert "ollama" not in ready.json()["checks"] and ready.json()["warnings"] == []

        fake_ollama.models = ["other-model"]
        not_served = wait_until(lambda: changed(http, "model_pulled", False), timeout_s=REPORTED_WITHIN_S)
        assert not_served.status_code == 200
        (warning,) = not_served.json()["warnings"]
        assert "'openai/test-model' is not on the OpenAI-compatible server" in warning

        fake_ollama.stop()
        down = wait_until(lambda: changed(http, "ok", False), timeout_s=REPORTED_WITHIN_S)
        assert down.status_code == 503 and down.json()["checks"]["openai"]["ok"] is False
        fake_ollama.start()


def test_metrics_report_the_database_and_the_queue_at_most_15_s_late(api_env, start_api):
    api = start_api(api_env)  # on a database of its own, and no worker: what is queued stays queued
    with api.client(api.user()) as http:
        scrape(http)  # the figures as they were, now kept for a while
        ids = [http.post("/api/v1/agents", json={"goal": f"g{i}"}).json()["id"] for i in range(3)]
        http.delete(f"/api/v1/agents/{ids[0]}")
        expected = {
            'jarvis_agents{status="PENDING"}': 2, 'jarvis_agents{status="CANCELLED"}': 1,
            'jarvis_agents{status="COMPLETED"}': 0, 'jarvis_queue_depth{model="llama3.2"}': 3,
            # no worker takes them: the metrics say so, as /readyz does
            'jarvis_unserved_pending_agents{model="llama3.2"}': 2,
        }

        def updated() -> dict[str, float] | None:
            found = scrape(http)
            return found if all(found.get(k) == v for k, v in expected.items()) else None

        after = wait_until(updated, timeout_s=MAX_AGE_S + 5, interval_s=0.5)
    assert after['jarvis_oldest_pending_age_seconds{model="llama3.2"}'] > 0
    assert after["jarvis_workers_alive"] == 0
    assert after['jarvis_metrics_source_up{source="database"}'] == 1
    assert after['jarvis_metrics_source_up{source="redis"}'] == 1
    assert after["jarvis_api_event_hub_connected"] in (0, 1)
    assert "process_cpu_seconds_total" in after or "python_info" in " ".join(after)


def test_a_scrape_reads_no_steps_however_many_there_are(pg_url, redis_url):
    """In process, so every statement the API sends can be seen: with 200,000 steps stored,
    a scrape reads the agents' figures without touching the steps, and the scrapes that
    follow within seconds send no statement at all."""
    from sqlalchemy import create_engine, event, text

    from api import create_app
    from jarvis_agents.config import Settings

    seed = create_engine(pg_url)
    with seed.begin() as conn:
        user_id = uuid.uuid4()
        conn.execute(text(
            "INSERT INTO users (id, name, api_key_hash, created_at)"
            " VALUES (:id, 'seeded', repeat('0', 64), now())"), {"id": user_id})
        conn.execute(text(
            "INSERT INTO agents (id, user_id, goal, status, model, max_steps, step_count,"
            " stop_reason, created_at, updated_at, completed_at, attempt)"
            " SELECT gen_random_uuid(), :user_id, 'seeded', 'CANCELLED', 'm', 50, 0, 'cancelled',"
            " now(), now(), now(), 1 FROM generate_series(1, 4000)"), {"user_id": user_id})
        conn.execute(text(
            "INSERT INTO agents (id, user_id, goal, status, model, max_steps, step_count,"
            " created_at, updated_at, attempt)"
            " SELECT gen_random_uuid(), :user_id, 'waiting', 'PENDING', 'm', 50, 0,"
            " now() - interval '1 minute', now(), 0 FROM generate_series(1, 3)"),
            {"user_id": user_id})
        conn.execute(text(
            "INSERT INTO agent_steps (agent_id, seq, step, type, content, created_at, attempt)"
            " SELECT agents.id, n, n - 1, 'THINK', 'a thought', now(), 1"
            " FROM agents CROSS JOIN generate_series(1, 50) AS n WHERE agents.status = 'CANCELLED'"))
        assert conn.execute(text("SELECT count(*) FROM agent_steps")).scalar_one() == 200_000
    seed.dispose()

    settings = Settings.from_env(
        {"DATABASE_URL": pg_url, "REDIS_URL": redis_url, "OLLAMA_HOST": "http://127.0.0.1:9"}
    )
    app = create_app(settings)
    context = app.extensions["jarvis"]
    statements: list[str] = []
    event.listen(context.service.repository.engine, "before_cursor_execute",
                 lambda conn, cursor, sql, *rest: statements.append(sql))
    try:
        client = app.test_client()
        first = client.get("/metrics")
        assert first.status_code == 200
        samples = parse(first.get_data(as_text=True))
        assert samples['jarvis_agents{status="CANCELLED"}'] == 4000
        assert samples['jarvis_agents{status="PENDING"}'] == 3
        assert samples['jarvis_oldest_pending_age_seconds{model="m"}'] >= 60
        assert samples['jarvis_metrics_source_up{source="database"}'] == 1
        assert statements, "the first scrape reads the database"
        assert not [sql for sql in statements if "agent_steps" in sql], statements

        statements.clear()
        for _ in range(20):
            assert client.get("/metrics").status_code == 200
        assert statements == []
    finally:
        context.close()


def scrape(http: Any) -> dict[str, float]:
    """`/metrics` as {sample: value}, read without an API key."""
    response = http.get("/metrics", headers={"Authorization": ""})
    assert response.status_code == 200
    assert response.headers["Content-Type"].startswith("text/plain")
    return parse(response.text)


def parse(text: str) -> dict[str, float]:
    samples = {}
    for line in text.splitlines():
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
        if method in {"get", "post", "patch", "delete"}
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
    for method, path in [("post", "/api/v1/agents/stream"), ("get", "/api/v1/agents/{agent_id}"),
                         ("get", "/api/v1/agents/{agent_id}/events"), ("get", "/api/v1/events")]:
        too_many = document["paths"][path][method]["responses"]["429"]
        assert "JARVIS_MAX_STREAMS_PER_USER" in too_many["description"]
        assert "too_many_streams" in too_many["description"]
        assert "Retry-After" in too_many["headers"]
