"""The agents resource end to end: a real API process, PostgreSQL, Redis, a Celery worker
and an Ollama look-alike."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from tests.support.api_server import CALC_SCRIPT, EventStream, wait_until
from tests.support.fake_ollama import FakeOllama
from tests.support.fake_replies import FakeToolCall, Turn

pytestmark = pytest.mark.integration
pytest_plugins = ["tests.support.api_fixtures"]  # api_env, start_api, shared_api


def goals_seen_by(fake: Any) -> list[str]:
    """The goal of every chat request the model received (the first user message)."""
    found = []
    for request in fake.requests:
        users = [m["content"] for m in request.get("messages", []) if m.get("role") == "user"]
        found.append(users[0] if users else "")
    return found


def test_post_then_poll_runs_the_calculator_agent(api_env, start_api, start_worker, fake_ollama):
    fake_ollama.responder = FakeOllama.by_turn(CALC_SCRIPT)
    api = start_api(api_env)
    start_worker(api_env)
    with api.client(api.user()) as http:
        created = http.post("/api/v1/agents", json={"goal": "What is 1234 * 902?", "max_steps": 5})
        assert created.status_code == 202, created.text
        agent = created.json()
        assert created.headers["Location"] == f"/api/v1/agents/{agent['id']}"
        assert agent["status"] == "PENDING"
        assert agent["max_steps"] == 5
        assert agent["stop_reason"] is None

        done = http.get(created.headers["Location"], params={"wait": 20}).json()
        assert done["status"] == "COMPLETED", done
        assert done["final_answer"] == "1113068"
        assert done["stop_reason"] == "final_answer"
        assert done["step_count"] == 2
        assert done["duration_ms"] >= 0 and done["completed_at"] and done["started_at"]

        steps = http.get(f"/api/v1/agents/{agent['id']}/steps").json()["steps"]
        assert [s["type"] for s in steps] == ["THINK", "ACT", "OBSERVE", "THINK", "FINAL"]
        assert [s["step"] for s in steps] == [0, 0, 0, 1, 1]
        assert [s["seq"] for s in steps] == [1, 2, 3, 4, 5]
        assert steps[1]["tool"] == "calculate" and steps[1]["content"] == "1234 * 902"
        assert steps[2]["content"] == "1113068"
        assert steps[4]["content"] == "1113068"

        later = http.get(f"/api/v1/agents/{agent['id']}/steps", params={"after": 3}).json()
        assert [s["seq"] for s in later["steps"]] == [4, 5]


def test_native_agents_on_both_providers_report_mode_usage_and_typed_output(
    api_env, start_api, start_worker, fake_ollama
):
    fake_ollama.capabilities = {"llama3.2:latest": ["completion", "tools"]}
    call = Turn(tool_calls=(FakeToolCall("calculate", {"expression": "1234 * 902"}, id="c1"),),
                usage=(20, 4))

    def respond(request: dict[str, Any]) -> str | Turn:
        if "format" in request or "response_format" in request:  # the typed one
            return '{"product": 1113068}'
        answered = any(m.get("role") == "tool" for m in request["messages"])
        return Turn(text="1113068", usage=(30, 2)) if answered else call

    fake_ollama.responder = respond
    env = {**api_env, "OPENAI_BASE_URL": f"{fake_ollama.url}/v1"}
    api = start_api(env)
    start_worker(env)
    schema = {"type": "object", "properties": {"product": {"type": "integer"}}}
    with api.client(api.user()) as http:
        ollama_agent = http.post("/api/v1/agents", json={"goal": "1234 * 902?"}).json()
        typed = http.post("/api/v1/agents", json={
            "goal": "1234 * 902?", "model": "openai/test-model", "mode": "native", "tools": [],
            "output_schema": schema}).json()
        assert ollama_agent["mode"] == "auto" and typed["mode"] == "native"
        assert ollama_agent["usage"] == {"input_tokens": 0, "output_tokens": 0, "model_calls": 0}
        assert typed["output_schema"] == schema and typed["output"] is None

        done = http.get(f"/api/v1/agents/{ollama_agent['id']}", params={"wait": 20}).json()
        assert done["status"] == "COMPLETED" and done["final_answer"] == "1113068", done
        assert done["mode"] == "native" and done["output"] is None
        assert done["usage"] == {"input_tokens": 50, "output_tokens": 6, "model_calls": 2}
        steps = http.get(f"/api/v1/agents/{ollama_agent['id']}/steps").json()["steps"]
        assert [(s["type"], s["call_id"]) for s in steps] == [
            ("ACT", "c1"), ("OBSERVE", "c1"), ("FINAL", None)]
        assert steps[0]["usage"] == {"input_tokens": 20, "output_tokens": 4}
        assert steps[1]["usage"] is None

        done = http.get(f"/api/v1/agents/{typed['id']}", params={"wait": 20}).json()
        assert done["status"] == "COMPLETED" and done["output"] == {"product": 1113068}, done
        assert done["usage"]["model_calls"] == 1


def test_list_filters_by_status_and_pages_with_a_cursor(shared_api):
    api = shared_api()
    with api.client(api.user()) as http, api.client(api.user()) as other:
        other.post("/api/v1/agents", json={"goal": "someone else's"})
        ids = [http.post("/api/v1/agents", json={"goal": f"agent {i}"}).json()["id"] for i in range(5)]
        for agent_id in ids[:2]:
            assert http.delete(f"/api/v1/agents/{agent_id}").status_code == 200

        everything = http.get("/api/v1/agents").json()
        assert [a["id"] for a in everything["agents"]] == ids[::-1]  # newest first, own only
        assert everything["next_cursor"] is None

        cancelled = http.get("/api/v1/agents", params={"status": "CANCELLED"}).json()["agents"]
        assert sorted(a["id"] for a in cancelled) == sorted(ids[:2])
        pending = http.get("/api/v1/agents", params={"status": "pending"}).json()["agents"]
        assert [a["id"] for a in pending] == ids[:1:-1]
        assert http.get("/api/v1/agents", params={"status": "RUNNING"}).json()["agents"] == []

        pages, cursor = [], None
        while True:
            params: dict[str, Any] = {"limit": 2, **({"cursor": cursor} if cursor else {})}
            page = http.get("/api/v1/agents", params=params).json()
            pages.append([a["id"] for a in page["agents"]])
            cursor = page["next_cursor"]
            if cursor is None:
                break
        assert [len(p) for p in pages] == [2, 2, 1]
        assert [i for p in pages for i in p] == ids[::-1]

        unknown_params = http.get("/api/v1/agents", params={"limit": 1, "colour": "blue"})
        assert unknown_params.status_code == 200 and len(unknown_params.json()["agents"]) == 1


def test_long_poll_returns_at_the_deadline_or_as_soon_as_the_agent_ends(shared_api):
    api = shared_api()  # no worker: the agent stays PENDING until cancelled
    with api.client(api.user()) as http:
        agent = http.post("/api/v1/agents", json={"goal": "wait for me"}).json()
        url = f"/api/v1/agents/{agent['id']}"
        assert http.get(url, params={"wait": 0}).json()["status"] == "PENDING"
        idle = api.open_streams()

        def long_poll(wait_s: float) -> tuple[threading.Thread, list[dict[str, Any]]]:
            """`GET url?wait=` in a thread, once the API holds it open (its gauge says so)."""
            answers: list[dict[str, Any]] = []
            thread = threading.Thread(
                target=lambda: answers.append(http.get(url, params={"wait": wait_s}).json()))
            thread.start()
            wait_until(lambda: api.open_streams() == idle + 1)
            return thread, answers

        # Held until its deadline, then answered as the agent is.
        thread, answers = long_poll(1.5)
        thread.join(10)
        assert [a["status"] for a in answers] == ["PENDING"]
        wait_until(lambda: api.open_streams() == idle)

        # Held, and answered as soon as the agent ends: long before its own deadline.
        thread, answers = long_poll(60)
        http.delete(url)
        thread.join(20)
        assert not thread.is_alive(), "the long-poll waited on after the agent ended"
        assert [a["status"] for a in answers] == ["CANCELLED"]


def test_idempotency_key_returns_the_same_agent_and_refuses_another_body(shared_api):
    api = shared_api()
    with api.client(api.user()) as http:
        headers = {"Idempotency-Key": "order-42"}
        first = http.post("/api/v1/agents", json={"goal": "once"}, headers=headers)
        again = http.post("/api/v1/agents", json={"goal": "once"}, headers=headers)
        assert first.status_code == 202 and again.status_code == 202
        assert again.json()["id"] == first.json()["id"]
        assert again.headers["Location"] == first.headers["Location"]

        different = http.post("/api/v1/agents", json={"goal": "twice"}, headers=headers)
        assert different.status_code == 409
        assert different.json()["error"]["code"] == "idempotency_key_reused"

        # POST /stream honours the same key: it streams the agent created first.
        with EventStream(http, "POST", "/api/v1/agents/stream", json={"goal": "once"},
                         headers=headers) as streamed:
            assert streamed.response.status_code == 200
            assert streamed.response.headers["Location"] == first.headers["Location"]
        assert len(http.get("/api/v1/agents").json()["agents"]) == 1


def test_too_many_active_agents_is_a_429_with_retry_after(shared_api):
    api = shared_api(JARVIS_MAX_ACTIVE_PER_USER="2")  # and no worker
    with api.client(api.user()) as http:
        first = http.post("/api/v1/agents", json={"goal": "one"}, headers={"Idempotency-Key": "k1"})
        http.post("/api/v1/agents", json={"goal": "two"})
        refused = http.post("/api/v1/agents", json={"goal": "three"})
        assert refused.status_code == 429
        assert int(refused.headers["Retry-After"]) >= 1
        assert refused.json()["error"]["code"] == "too_many_active_agents"
        assert http.post("/api/v1/agents/stream", json={"goal": "three"}).status_code == 429

        # A repeat creates nothing, so it is not refused.
        repeat = http.post("/api/v1/agents", json={"goal": "one"}, headers={"Idempotency-Key": "k1"})
        assert repeat.status_code == 202 and repeat.json()["id"] == first.json()["id"]

        http.delete(first.headers["Location"])
        assert http.post("/api/v1/agents", json={"goal": "three"}).status_code == 202


def test_cancelling_a_pending_agent_means_the_model_is_never_called(
    api_env, start_api, start_worker, fake_ollama
):
    fake_ollama.responder = FakeOllama.by_turn(CALC_SCRIPT)
    api = start_api(api_env)
    with api.client(api.user()) as http:
        doomed = http.post("/api/v1/agents", json={"goal": "never run me"}).json()
        cancelled = http.delete(f"/api/v1/agents/{doomed['id']}")
        assert cancelled.status_code == 200
        assert cancelled.json()["status"] == "CANCELLED"
        assert cancelled.json()["stop_reason"] == "cancelled"
        again = http.delete(f"/api/v1/agents/{doomed['id']}")
        assert again.status_code == 409 and again.json()["error"]["code"] == "agent_terminal"

        start_worker(api_env)
        # An agent queued after it completes: the worker has been through the queue.
        later = http.post("/api/v1/agents", json={"goal": "run me"}).json()
        done = http.get(f"/api/v1/agents/{later['id']}", params={"wait": 20}).json()
        assert done["status"] == "COMPLETED"
        assert "never run me" not in " ".join(goals_seen_by(fake_ollama))
        assert len(goals_seen_by(fake_ollama)) == 2  # the later agent's two turns only
        final = http.get(f"/api/v1/agents/{doomed['id']}").json()
        assert final["status"] == "CANCELLED" and final["step_count"] == 0
        assert http.get(f"/api/v1/agents/{doomed['id']}/steps").json() == {"steps": []}
