"""Approvals end to end (docs/api.md §7): a real API process, PostgreSQL, Redis, Celery
workers and an Ollama look-alike."""

from __future__ import annotations

import uuid

import pytest

from jarvis_agents.config import Settings
from jarvis_agents.store import open_repository
from tests.support.api_server import EventStream, wait_until
from tests.support.fake_ollama import FakeOllama
from tests.support.store import waiting

pytestmark = pytest.mark.integration
pytest_plugins = ["tests.support.api_fixtures"]  # api_env, start_api, stack, shared_api

SCRIPT = [
    "THOUGHT: multiply\nACTION: calculate\nINPUT: 6*7",
    "THOUGHT: done\nFINAL_ANSWER: the answer is in the observation",
]
GATED = {"goal": "What is 6*7?", "max_steps": 5, "approve_tools": ["calculate"]}


@pytest.fixture(scope="module")
def stack_extra_env() -> dict[str, str]:
    """The module's stack signs webhooks (and may call this machine's receiver)."""
    return {"JARVIS_WEBHOOK_SECRET": "s3cret", "JARVIS_WEBHOOK_ALLOW_PRIVATE": "1"}


def steps_of(http, agent_id: str) -> list[dict]:  # type: ignore[no-untyped-def]
    return http.get(f"/api/v1/agents/{agent_id}/steps").json()["steps"]


def wait_status(http, agent_id: str, status: str, timeout_s: float = 20) -> dict:  # type: ignore[no-untyped-def]
    def reached() -> dict | None:
        agent = http.get(f"/api/v1/agents/{agent_id}").json()
        return agent if agent["status"] == status else None

    return wait_until(reached, timeout_s=timeout_s)


def test_a_gated_call_waits_then_runs_once_approved(stack):
    stack.fake.responder = FakeOllama.by_turn(SCRIPT)
    api = stack.api
    with api.client(api.user()) as http, api.client(api.user()) as other:
        with EventStream(http, "GET", "/api/v1/events") as everyone:
            agent = http.post("/api/v1/agents", json=GATED).json()
            path = f"/api/v1/agents/{agent['id']}"
            with EventStream(http, "GET", f"{path}/events") as events:
                seen = events.until(lambda e: e.event == "waiting")
            statuses = everyone.until(lambda e: e.data["status"] == "WAITING")
        assert [e.event for e in seen] == ["think", "act", "waiting"]
        act = seen[1].data
        assert act["call_id"].startswith("call_") and act["content"] == "6*7"
        assert seen[2].data == {"agent_id": agent["id"], "call_id": act["call_id"],
                                "tool": "calculate", "input": "6*7"}
        assert seen[2].id is None
        assert [e.data["status"] for e in statuses] == ["PENDING", "RUNNING", "WAITING"]

        waiting = http.get(path).json()
        assert waiting["status"] == "WAITING" and waiting["stop_reason"] is None
        assert waiting["approve_tools"] == ["calculate"]
        assert {k: v for k, v in waiting["waiting_for"].items() if k != "since"} == {
            "call_id": act["call_id"], "tool": "calculate", "input": "6*7"}
        assert waiting["waiting_for"]["since"].endswith("Z")

        # A client that joins while it waits gets the steps, then `waiting` again.
        with EventStream(http, "GET", f"{path}/events") as late:
            assert [e.event for e in late.until(lambda e: e.event == "waiting")] == [
                "think", "act", "waiting"]

        refused = http.post(f"{path}/approval", json={"call_id": "call_nope", "approve": True})
        assert refused.status_code == 409 and refused.json()["error"]["code"] == "wrong_call_id"
        answer = {"call_id": act["call_id"], "approve": True}
        assert other.post(f"{path}/approval", json=answer).status_code == 404
        assert http.get(path).json()["status"] == "WAITING"

        with EventStream(http, "GET", f"{path}/events", params={"after": 2}) as stream:
            approved = http.post(f"{path}/approval", json=answer)
            assert approved.status_code == 202, approved.text
            assert approved.json()["status"] == "PENDING" and approved.json()["waiting_for"] is None
            again = http.post(f"{path}/approval", json=answer)
            assert again.status_code == 409 and again.json()["error"]["code"] == "not_waiting"
            rest = stream.rest()  # the stream stayed open across the wait
        assert [e.event for e in rest][-1] == "done" and rest[-1].data["status"] == "COMPLETED"

        steps = steps_of(http, agent["id"])
        assert [s["type"] for s in steps] == ["THINK", "ACT", "OBSERVE", "THINK", "FINAL"]
        assert steps[2]["content"] == "42" and steps[2]["call_id"] == act["call_id"]


def test_an_edited_input_runs_and_a_denial_is_the_observation(stack):
    stack.fake.responder = FakeOllama.by_turn(SCRIPT)
    api = stack.api
    with api.client(api.user()) as http:
        answers = [({"approve": True, "input": "6*8"}, "48"),
                   ({"approve": False, "reason": "use your head"}, "denied: use your head")]
        for extra, observed in answers:
            agent = http.post("/api/v1/agents", json=GATED).json()
            waiting = wait_status(http, agent["id"], "WAITING")
            call_id = waiting["waiting_for"]["call_id"]
            answered = http.post(f"/api/v1/agents/{agent['id']}/approval",
                                 json={"call_id": call_id, **extra})
            assert answered.status_code == 202, answered.text
            done = http.get(f"/api/v1/agents/{agent['id']}", params={"wait": 20}).json()
            assert done["status"] == "COMPLETED", done
            observe = [s for s in steps_of(http, agent["id"]) if s["type"] == "OBSERVE"]
            assert [s["content"] for s in observe] == [observed]


def test_delete_cancels_a_waiting_agent_and_bad_answers_change_nothing(stack):
    stack.fake.responder = FakeOllama.by_turn(SCRIPT)
    api = stack.api
    with api.client(api.user()) as http:
        agent = http.post("/api/v1/agents", json=GATED).json()
        path = f"/api/v1/agents/{agent['id']}"
        call_id = wait_status(http, agent["id"], "WAITING")["waiting_for"]["call_id"]
        for body, message in [
            ({"approve": True}, "`call_id` is missing"),
            ({"call_id": call_id, "approve": "yes"}, "`approve` must be true or false"),
            ({"call_id": call_id, "approve": True, "extra": 1}, "unknown field `extra`"),
            ([], "must be a JSON object"),
        ]:
            bad = http.post(f"{path}/approval", json=body)
            assert bad.status_code == 400, bad.text
            assert message in bad.json()["error"]["message"]
        unknown = http.post("/api/v1/agents/00000000-0000-0000-0000-000000000000/approval",
                            json={"call_id": call_id, "approve": True})
        assert unknown.status_code == 404
        assert http.get(path).json()["status"] == "WAITING"

        cancelled = http.delete(path)
        assert cancelled.status_code == 200 and cancelled.json()["status"] == "CANCELLED"
        late = http.post(f"{path}/approval", json={"call_id": call_id, "approve": True})
        assert late.status_code == 409
        running = http.post("/api/v1/agents", json={"goal": "x", "approve_tools": ["nope"]})
        assert running.status_code == 400 and "unknown tool(s): nope" in running.text


def test_an_approval_past_the_active_limit_is_a_429_and_the_agent_goes_on_waiting(shared_api):
    api = shared_api(JARVIS_MAX_ACTIVE_PER_USER="1")  # no worker: a created agent stays PENDING
    repository = open_repository(Settings.from_env(api.env), pool_size=1)
    try:
        user, key = repository.users.create(f"approver-{uuid.uuid4().hex[:8]}")
        agent, call_id = waiting(repository, user.id)
    finally:
        repository.engine.dispose()
    path = f"/api/v1/agents/{agent.id}"
    answer = {"call_id": call_id, "approve": True}
    with api.client(key) as http:
        holder = http.post("/api/v1/agents", json={"goal": "takes the one slot"})
        assert holder.status_code == 202, holder.text
        create_refused = http.post("/api/v1/agents", json={"goal": "one too many"})
        assert create_refused.status_code == 429

        refused = http.post(f"{path}/approval", json=answer)
        assert refused.status_code == 429, refused.text
        assert refused.json()["error"]["code"] == create_refused.json()["error"]["code"]
        assert int(refused.headers["Retry-After"]) > 0
        still = http.get(path).json()
        assert still["status"] == "WAITING" and still["waiting_for"]["call_id"] == call_id

        assert http.delete(f"/api/v1/agents/{holder.json()['id']}").status_code == 200
        approved = http.post(f"{path}/approval", json=answer)
        assert approved.status_code == 202, approved.text
        assert approved.json()["status"] == "PENDING"


def test_waiting_agents_hold_no_worker(api_env, start_api, start_worker, fake_ollama):
    fake_ollama.responder = FakeOllama.by_turn(SCRIPT)
    api = start_api(api_env)
    start_worker(api_env, concurrency=2)
    with api.client(api.user()) as http:
        ids = [http.post("/api/v1/agents", json=GATED).json()["id"] for _ in range(4)]
        for agent_id in ids:
            wait_status(http, agent_id, "WAITING", timeout_s=30)
        free = http.post("/api/v1/agents", json={"goal": "What is 6*7?", "max_steps": 5}).json()
        done = http.get(f"/api/v1/agents/{free['id']}", params={"wait": 20}).json()
        assert done["status"] == "COMPLETED", done


def test_an_unanswered_approval_times_out(api_env, start_api, start_worker, fake_ollama):
    fake_ollama.responder = FakeOllama.by_turn(SCRIPT)
    env = {**api_env, "JARVIS_APPROVAL_TIMEOUT": "2", "JARVIS_APPROVE_TOOLS": "calculate"}
    api = start_api(env)
    start_worker(env)
    with api.client(api.user()) as http:
        agent = http.post("/api/v1/agents", json={"goal": "What is 6*7?"}).json()
        wait_status(http, agent["id"], "WAITING")
        failed = wait_status(http, agent["id"], "FAILED", timeout_s=15)
        assert failed["stop_reason"] == "approval_timeout"
        assert "JARVIS_APPROVAL_TIMEOUT" in failed["error"]


def test_the_webhook_hears_of_the_wait_then_of_the_end(stack):
    import json

    from tests.support.webhook_receiver import WebhookReceiver

    stack.fake.responder = FakeOllama.by_turn(SCRIPT)
    api = stack.api
    with WebhookReceiver(script=[200, 200]) as receiver, api.client(api.user()) as http:
        agent = http.post("/api/v1/agents", json={**GATED, "webhook_url": receiver.url}).json()
        (waiting,) = receiver.wait_for(1, timeout_s=20)
        assert waiting.header("X-Jarvis-Event") == "agent.waiting"
        body = json.loads(waiting.body)
        assert body["id"] == agent["id"] and body["status"] == "WAITING"
        assert body["waiting_for"]["tool"] == "calculate"
        http.post(f"/api/v1/agents/{agent['id']}/approval",
                  json={"call_id": body["waiting_for"]["call_id"], "approve": True})
        ended = receiver.wait_for(2, timeout_s=20)[1]
        assert ended.header("X-Jarvis-Event") == "agent.completed"
        assert ended.header("webhook-id") != waiting.header("webhook-id")
