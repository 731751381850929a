"""Threads and forks over HTTP (docs/api.md §8): a real API process, PostgreSQL, Redis, a
Celery worker and an Ollama look-alike; and the refusals, on the shared API."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

pytestmark = pytest.mark.integration
pytest_plugins = ["tests.support.api_fixtures"]  # api_env, start_api, shared_api


def calculator(request: dict[str, Any]) -> str:
    """Multiplies 6 by 7 for a new goal, answers with what it observed, and doubles 42
    for a follow-up (which it can only do knowing the earlier answer)."""
    last = request["messages"][-1]["content"]
    if last.startswith("OBSERVATION: "):
        return "THOUGHT: done\nFINAL_ANSWER: " + last.removeprefix("OBSERVATION: ")
    if last == "And doubled?":
        earlier = [m["content"] for m in request["messages"] if m["role"] == "assistant"]
        return f"THOUGHT: twice {earlier[-1]}\nFINAL_ANSWER: {2 * int(earlier[-1])}"
    return "THOUGHT: multiply\nACTION: calculate\nINPUT: 6 * 7"


def test_a_follow_up_and_a_fork_from_end_to_end(api_env, start_api, start_worker, fake_ollama):
    fake_ollama.responder = calculator
    api = start_api(api_env)
    start_worker(api_env)
    with api.client(api.user()) as http:
        first = http.post("/api/v1/agents", json={"goal": "What is 6 * 7?"}).json()
        assert first["thread_id"] == first["id"] and first["parent_id"] is None
        done = http.get(f"/api/v1/agents/{first['id']}", params={"wait": 20}).json()
        assert done["final_answer"] == "42", done

        created = http.post("/api/v1/agents", json={"goal": "And doubled?", "thread_id": first["id"]})
        assert created.status_code == 202, created.text
        follow_up = created.json()
        assert (follow_up["thread_id"], follow_up["parent_id"]) == (first["id"], first["id"])
        assert follow_up["context"] == {"turns": 1, "left_out": 0}
        done = http.get(f"/api/v1/agents/{follow_up['id']}", params={"wait": 20}).json()
        assert done["final_answer"] == "84", done
        listed = http.get("/api/v1/agents", params={"thread_id": first["id"]}).json()["agents"]
        assert [a["id"] for a in listed] == [follow_up["id"], first["id"]]

        forked = http.post(f"/api/v1/agents/{first['id']}/fork", json={"after_seq": 3})
        assert forked.status_code == 202, forked.text
        fork = forked.json()
        assert forked.headers["Location"] == f"/api/v1/agents/{fork['id']}"
        assert fork["forked_from"] == {"agent_id": first["id"], "seq": 3}
        assert fork["thread_id"] == fork["id"] and fork["parent_id"] == first["id"]
        done = http.get(f"/api/v1/agents/{fork['id']}", params={"wait": 20}).json()
        assert done["status"] == "COMPLETED" and done["final_answer"] == "42", done
        original = http.get(f"/api/v1/agents/{first['id']}/steps").json()["steps"]
        steps = http.get(f"/api/v1/agents/{fork['id']}/steps").json()["steps"]
        keys = ("seq", "step", "type", "tool", "content")
        assert [{k: s[k] for k in keys} for s in steps[:3]] == [
            {k: s[k] for k in keys} for s in original[:3]]
        assert [s["seq"] for s in steps] == [1, 2, 3, 4, 5] and steps[3]["step"] == 1


def test_bad_threads_and_forks_are_refused_with_a_sentence(shared_api):
    api = shared_api()
    with api.client(api.user()) as http, api.client(api.user()) as other:
        first = http.post("/api/v1/agents", json={"goal": "first"}).json()

        def create(thread_id: object, client: Any = http) -> Any:
            return client.post("/api/v1/agents", json={"goal": "next", "thread_id": thread_id})

        bad = create("not-a-uuid")
        assert bad.status_code == 400 and "`thread_id` must be a UUID" in bad.json()["error"]["message"]
        assert create(str(uuid.uuid4())).json()["error"]["code"] == "thread_not_found"
        assert create(first["id"], other).status_code == 404
        busy = create(first["id"])
        assert busy.status_code == 409 and busy.json()["error"]["code"] == "thread_busy"
        assert "still PENDING" in busy.json()["error"]["message"]
        listed = http.get("/api/v1/agents", params={"thread_id": "nope"})
        assert listed.status_code == 400 and listed.json()["error"]["code"] == "invalid_thread_id"

        fork = f"/api/v1/agents/{first['id']}/fork"
        running = http.post(fork, json={"after_seq": 0})
        assert running.status_code == 409 and running.json()["error"]["code"] == "agent_not_ended"
        assert other.post(fork, json={"after_seq": 0}).status_code == 404
        http.delete(f"/api/v1/agents/{first['id']}")
        for body, said in (({}, "`after_seq` is missing"), ({"after_seq": -1}, "`after_seq` must be"),
                           ({"after_seq": 0, "mode": "fast"}, '`mode` must be one of "auto"'),
                           ({"after_seq": 0, "colour": 1}, "unknown field `colour` (a fork takes"),
                           ({"after_seq": 5}, "the nearest valid values are 0")):
            refused = http.post(fork, json=body)
            assert refused.status_code == 400 and said in refused.json()["error"]["message"], refused.text
        again = http.post(fork, json={"after_seq": 0, "goal": "again", "mode": "react"})
        assert again.status_code == 202 and again.json()["goal"] == "again"
