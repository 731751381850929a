"""Assistants over HTTP (README, Assistants): a real API process on PostgreSQL; the
agents made from them, run by a real worker against an Ollama look-alike."""

from __future__ import annotations

import uuid

import pytest

pytestmark = pytest.mark.integration
pytest_plugins = ["tests.support.api_fixtures"]  # shared_api, stack

RESEARCHER = {
    "name": "researcher", "description": "Finds things out and cites them.", "model": "qwen3",
    "mode": "react", "tools": ["CALCULATE"], "instructions": "Cite your sources.",
    "approve_tools": ["*"], "output_schema": {"type": "object"}, "max_steps": 12,
    "metadata": {"team": "docs"},
}


def test_create_list_get_patch_versions_and_delete(shared_api):
    api = shared_api()
    with api.client(api.user()) as http:
        created = http.post("/api/v1/assistants", json=RESEARCHER)
        assert created.status_code == 201, created.text
        made = created.json()
        assert created.headers["Location"] == f"/api/v1/assistants/{made['assistant_id']}"
        assert {k: made[k] for k in RESEARCHER if k != "tools"} == {
            k: v for k, v in RESEARCHER.items() if k != "tools"}
        assert made["version"] == 1 and made["tools"] == ["calculate"] and made["delegates"] == []

        listed = http.get("/api/v1/assistants").json()["assistants"]
        assert [a["name"] for a in listed] == ["agent", "researcher"]
        for ref in ("researcher", made["assistant_id"]):
            assert http.get(f"/api/v1/assistants/{ref}").json() == made

        patched = http.patch("/api/v1/assistants/researcher",
                             json={"model": "llama3.3", "max_steps": None, "delegates": ["agent"]})
        assert patched.status_code == 200, patched.text
        second = patched.json()
        assert (second["version"], second["model"], second["delegates"]) == (2, "llama3.3", ["agent"])
        assert second["max_steps"] == listed[0]["max_steps"]  # reset: the settings' default
        assert second["instructions"] == "Cite your sources."  # not given: kept
        versions = http.get(f"/api/v1/assistants/{made['assistant_id']}/versions").json()["versions"]
        assert [(v["version"], v["model"]) for v in versions] == [(2, "llama3.3"), (1, "qwen3")]

        assert http.delete("/api/v1/assistants/researcher").status_code == 204
        gone = http.get(f"/api/v1/assistants/{made['assistant_id']}")
        assert gone.status_code == 404 and gone.json()["error"]["code"] == "assistant_not_found"


def test_the_default_assistant_mirrors_the_settings_and_stays_as_it_is(shared_api):
    api = shared_api(JARVIS_MODEL="llama3.1:8b", JARVIS_MAX_STEPS="9")
    with api.client(api.user()) as http:
        [default] = http.get("/api/v1/assistants").json()["assistants"]
        assert (default["name"], default["version"], default["model"], default["max_steps"],
                default["mode"], default["tools"], default["delegates"], default["instructions"]) == (
            "agent", 1, "llama3.1:8b", 9, "auto", None, [], None)
        assert http.get(f"/api/v1/assistants/{default['assistant_id']}").json() == default
        versions = http.get("/api/v1/assistants/agent/versions").json()["versions"]
        assert [v["version"] for v in versions] == [1]
        for answer in (http.patch("/api/v1/assistants/agent", json={"model": "x"}),
                       http.delete(f"/api/v1/assistants/{default['assistant_id']}")):
            assert answer.status_code == 409
            assert answer.json()["error"]["code"] == "assistant_read_only"
            assert "create an assistant of your own" in answer.json()["error"]["message"]
        taken = http.post("/api/v1/assistants", json={"name": "agent"})
        assert taken.status_code == 409 and taken.json()["error"]["code"] == "assistant_exists"
        http.post("/api/v1/assistants", json={"name": "mine"}).raise_for_status()
        again = http.post("/api/v1/assistants", json={"name": "mine"})
        assert again.status_code == 409 and again.json()["error"]["code"] == "assistant_exists"
    # Every user has their own default assistant.
    with api.client(api.user()) as http:
        assert http.get("/api/v1/assistants/agent").json()["assistant_id"] != default["assistant_id"]


def test_another_users_assistant_is_a_404_as_if_it_did_not_exist(shared_api):
    api = shared_api()
    with api.client(api.user()) as theirs:
        secret = theirs.post("/api/v1/assistants", json={"name": "secret"}).json()
        default = theirs.get("/api/v1/assistants/agent").json()
    with api.client(api.user()) as http:
        for ref in ("secret", secret["assistant_id"], default["assistant_id"], "nobody",
                    str(uuid.uuid4()), "Not%20a%20name"):
            for answer in (http.get(f"/api/v1/assistants/{ref}"),
                           http.patch(f"/api/v1/assistants/{ref}", json={"model": "x"}),
                           http.delete(f"/api/v1/assistants/{ref}"),
                           http.get(f"/api/v1/assistants/{ref}/versions"),
                           http.post("/api/v1/agents", json={"goal": "x", "assistant": ref})):
                if ref == "Not%20a%20name" and answer.request.method == "POST":
                    assert answer.status_code == 400  # not an id or a name at all
                    continue
                assert answer.status_code == 404, (ref, answer.request.method, answer.text)
                assert answer.json()["error"]["code"] == "assistant_not_found"
        assert [a["name"] for a in http.get("/api/v1/assistants").json()["assistants"]] == ["agent"]
        assert http.get("/api/v1/agents").json()["agents"] == []  # nothing was created
    with api.client() as anonymous:
        for method, path in (("GET", "/api/v1/assistants"), ("POST", "/api/v1/assistants"),
                             ("GET", "/api/v1/assistants/agent"),
                             ("PATCH", "/api/v1/assistants/agent"),
                             ("DELETE", "/api/v1/assistants/agent"),
                             ("GET", "/api/v1/assistants/agent/versions")):
            refused = anonymous.request(method, path, json={"name": "x"})
            assert refused.status_code == 401 and refused.json()["error"]["code"] == "unauthorized"


def test_a_body_that_is_not_a_json_object_is_a_400_in_the_error_shape(shared_api):
    api = shared_api()
    with api.client(api.user()) as http:
        for content, headers, code in (
            ("", {"Content-Type": "application/json"}, "invalid_json"),
            ("{", {"Content-Type": "application/json"}, "invalid_json"),
            ("[1]", {"Content-Type": "application/json"}, "invalid_json"),
            ("name: x", {"Content-Type": "application/yaml"}, "unsupported_content_type"),
        ):
            for method, path in (("POST", "/api/v1/assistants"), ("PATCH", "/api/v1/assistants/agent")):
                refused = http.request(method, path, content=content, headers=headers)
                assert refused.status_code == 400, refused.text
                assert refused.json()["error"]["code"] == code
        wrong = http.put("/api/v1/assistants/agent", json={})
        assert wrong.status_code == 405 and wrong.json()["error"]["code"] == "method_not_allowed"


@pytest.mark.parametrize(("body", "code", "says"), [
    ({"name": "Researcher"}, "invalid_request", "`name` must be 1 to 64 characters of a-z"),
    ({}, "invalid_request", "`name` is missing"),
    ({"name": "r", "nickname": "x"}, "invalid_request", "unknown field `nickname`"),
    ({"name": "r", "tools": ["teleport"]}, "unknown_tool", "unknown tool(s): teleport"),
    ({"name": "r", "approve_tools": ["teleport"]}, "unknown_tool", "teleport"),
    ({"name": "r", "delegates": ["nobody"]}, "unknown_delegate", "unknown delegate(s): nobody"),
    ({"name": "r", "max_steps": 0}, "invalid_request", "`max_steps` must be a whole number"),
    ({"name": "r", "mode": "fast"}, "invalid_request", "`mode` must be `auto`, `native` or `react`"),
    ({"name": "r", "model": "a b"}, "invalid_request", "`model` must not contain spaces"),
    ({"name": "r", "output_schema": {"type": "nope"}}, "invalid_request", "not a valid JSON Schema"),
    ({"name": "r", "metadata": "x"}, "invalid_request", "`metadata` must be a JSON object"),
    ({"name": "r", "instructions": "a\u0000b"}, "invalid_request", "must not contain NUL"),
])
def test_a_bad_assistant_is_a_400_saying_what_to_fix(shared_api, body, code, says):
    api = shared_api()
    with api.client(api.user()) as http:
        refused = http.post("/api/v1/assistants", json=body)
        assert refused.status_code == 400, refused.text
        assert refused.json()["error"]["code"] == code
        assert says in refused.json()["error"]["message"]
        http.post("/api/v1/assistants", json={"name": "ok"}).raise_for_status()
        patch = {k: v for k, v in body.items() if k != "name"} or {"name": "renamed"}
        refused = http.patch("/api/v1/assistants/ok", json=patch)
        assert refused.status_code == 400, refused.text
        assert http.get("/api/v1/assistants/ok").json()["version"] == 1


def test_an_agent_takes_its_assistants_version_and_the_fields_given(shared_api):
    api = shared_api()
    with api.client(api.user()) as http:
        made = http.post("/api/v1/assistants", json=RESEARCHER).json()
        http.patch("/api/v1/assistants/researcher", json={"max_steps": 14}).raise_for_status()
        agent = http.post("/api/v1/agents", json={"goal": "Why?", "assistant": "researcher"}).json()
        assert (agent["assistant_id"], agent["assistant_version"]) == (made["assistant_id"], 2)
        assert (agent["model"], agent["mode"], agent["tools"], agent["approve_tools"],
                agent["max_steps"], agent["output_schema"]) == (
            "qwen3", "react", ["calculate"], ["*"], 14, {"type": "object"})
        given = http.post("/api/v1/agents", json={
            "goal": "Why?", "assistant": made["assistant_id"], "model": "llama3.3", "max_steps": 2,
            "mode": "native", "tools": [], "approve_tools": ["calculate"]}).json()
        assert (given["model"], given["max_steps"], given["mode"], given["tools"],
                given["approve_tools"], given["assistant_version"]) == (
            "llama3.3", 2, "native", [], ["calculate"], 2)
        assert http.get(f"/api/v1/agents/{given['id']}").json()["assistant_id"] == made["assistant_id"]
        default = http.get("/api/v1/assistants/agent").json()
        plain = http.post("/api/v1/agents", json={"goal": "Why?"}).json()
        assert (plain["assistant_id"], plain["assistant_version"]) == (default["assistant_id"], 1)
        assert (plain["model"], plain["max_steps"]) == (default["model"], default["max_steps"])
        # The same Idempotency-Key with another assistant is another body.
        keyed = {"Idempotency-Key": f"k-{uuid.uuid4()}"}
        first = http.post("/api/v1/agents", json={"goal": "Why?", "assistant": "researcher"},
                          headers=keyed)
        assert http.post("/api/v1/agents", json={"goal": "Why?", "assistant": "researcher"},
                         headers=keyed).json()["id"] == first.json()["id"]
        assert http.post("/api/v1/agents", json={"goal": "Why?"}, headers=keyed).status_code == 409
        streamed = http.post("/api/v1/agents/stream", json={"goal": "x", "assistant": "nobody"})
        assert streamed.status_code == 404
        assert streamed.json()["error"]["code"] == "assistant_not_found"


def test_the_model_is_given_the_assistants_instructions(stack):
    stack.fake.responder = lambda request: "THOUGHT: easy\nFINAL_ANSWER: quatre"
    with stack.api.client(stack.api.user()) as http:
        http.post("/api/v1/assistants", json={
            "name": "french", "mode": "react", "instructions": "Always answer in French.",
        }).raise_for_status()
        agent = http.post("/api/v1/agents", json={"goal": "2 + 2?", "assistant": "french"}).json()
        done = http.get(f"/api/v1/agents/{agent['id']}", params={"wait": 30}).json()
        assert done["status"] == "COMPLETED" and done["final_answer"] == "quatre", done
    [request] = [r for r in stack.fake.requests if r["messages"][1]["content"] == "2 + 2?"]
    system = request["messages"][0]["content"]
    assert system.startswith("You are Jarvis")
    assert system.rstrip().endswith("Always answer in French.")
