"""Deleting agents and threads over HTTP (README, Deleting and retention), on the shared
API: a purge's 204, 404 and 409, every read a 404 afterwards, and a thread's deletion."""

from __future__ import annotations

import uuid

import httpx
import pytest

pytestmark = pytest.mark.integration
pytest_plugins = ["tests.support.api_fixtures"]  # shared_api


def test_a_purge_deletes_an_ended_agent_and_every_read_of_it_is_a_404(shared_api):
    api = shared_api()
    with api.client(api.user()) as http, api.client(api.user()) as other:
        agent = http.post("/api/v1/agents", json={"goal": "to be deleted"}).json()
        path = f"/api/v1/agents/{agent['id']}"

        active = http.delete(path, params={"purge": "true"})
        assert active.status_code == 409, active.text
        assert active.json()["error"]["code"] == "agent_active"
        assert "cancel it first" in active.json()["error"]["message"]
        assert http.delete(path).json()["status"] == "CANCELLED"  # a plain DELETE cancels
        assert other.delete(path, params={"purge": "true"}).status_code == 404
        bad = http.delete(path, params={"purge": "maybe"})
        assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_purge"

        purged = http.delete(path, params={"purge": "true"})
        assert purged.status_code == 204 and purged.content == b""
        for read in (path, f"{path}/steps", f"{path}/events"):
            gone = http.get(read)
            assert gone.status_code == 404, (read, gone.text)
            assert gone.json()["error"]["code"] == "not_found"
        assert http.delete(path, params={"purge": "true"}).status_code == 404
        assert http.delete(path).status_code == 404
        listed = http.get("/api/v1/agents").json()["agents"]
        assert agent["id"] not in [a["id"] for a in listed]
        unknown = http.delete(f"/api/v1/agents/{uuid.uuid4()}", params={"purge": "1"})
        assert unknown.status_code == 404


def test_a_thread_is_deleted_whole_once_none_of_its_agents_is_active(shared_api):
    api = shared_api()
    with api.client(api.user()) as http, api.client(api.user()) as other:
        first = http.post("/api/v1/agents", json={"goal": "first"}).json()
        http.delete(f"/api/v1/agents/{first['id']}")
        follow_up = http.post("/api/v1/agents", json={"goal": "next", "thread_id": first["id"]})
        assert follow_up.status_code == 202, follow_up.text
        thread = f"/api/v1/threads/{first['id']}"

        busy = http.delete(thread)
        assert busy.status_code == 409 and busy.json()["error"]["code"] == "thread_busy"
        assert http.get(f"/api/v1/agents/{first['id']}").status_code == 200
        assert other.delete(thread).status_code == 404
        assert http.delete(f"/api/v1/threads/{uuid.uuid4()}").status_code == 404
        assert http.delete("/api/v1/threads/not-a-uuid").json()["error"]["code"] == "thread_not_found"

        http.delete(f"/api/v1/agents/{follow_up.json()['id']}")
        deleted = http.delete(thread)
        assert deleted.status_code == 204, deleted.text
        for agent_id in (first["id"], follow_up.json()["id"]):
            assert http.get(f"/api/v1/agents/{agent_id}").status_code == 404
        assert http.delete(thread).status_code == 404
        anonymous = httpx.delete(api.url + thread)
        assert anonymous.status_code == 401
