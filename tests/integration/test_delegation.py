"""Agents that call agents end to end (README, Agents that call agents): a real API
process, PostgreSQL, Redis, a Celery worker and a scripted model server."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from jarvis_agents.demo.answers import answer as demo_answer
from tests.conftest import cli_env
from tests.support.api_server import EventStream, wait_until
from tests.support.delegation_team import BOSS_USAGE, RESEARCHER_USAGE, Team, role
from tests.support.fake_ollama import FakeOllama

pytestmark = pytest.mark.integration
pytest_plugins = ["tests.support.api_fixtures"]  # stack


@pytest.fixture(scope="module")
def stack_model() -> Iterator[FakeOllama]:
    with FakeOllama() as server:
        server.default_capabilities = ["completion", "tools"]  # `auto` is native tool calling
        yield server


def assistant(http: httpx.Client, name: str, **config: Any) -> dict[str, Any]:
    made = http.post("/api/v1/assistants", json={
        "name": name, "description": f"The {name}: give it one task.",
        "instructions": role(name), **config})
    assert made.status_code == 201, made.text
    return made.json()


def ended(http: httpx.Client, agent_id: str, timeout_s: float = 30) -> dict[str, Any]:
    return wait_until(lambda: (a := http.get(f"/api/v1/agents/{agent_id}").json())["status"]
                      in ("COMPLETED", "FAILED", "CANCELLED") and a, timeout_s=timeout_s)


def children(http: httpx.Client, caller_id: str) -> list[dict[str, Any]]:
    listed = http.get("/api/v1/agents", params={"caller_id": caller_id})
    assert listed.status_code == 200, listed.text
    return listed.json()["agents"]


def steps(http: httpx.Client, agent_id: str) -> list[dict[str, Any]]:
    return http.get(f"/api/v1/agents/{agent_id}/steps").json()["steps"]


@pytest.mark.parametrize("mode", ["native", "react"])
def test_a_boss_asks_a_researcher_and_answers_with_what_it_said(stack, mode):
    team = Team()
    stack.fake.responder = team
    with stack.api.client(stack.api.user()) as http:
        researcher = assistant(http, "researcher", mode=mode)
        assistant(http, "boss", mode=mode, delegates=["researcher"])
        with EventStream(http, "GET", "/api/v1/events") as everyone:
            boss = http.post("/api/v1/agents", json={"goal": "What boils?", "assistant": "boss"}).json()
            done = ended(http, boss["id"])
            statuses = everyone.until(lambda e: e.data["agent_id"] == boss["id"]
                                      and e.data["status"] == "COMPLETED")
        assert done["status"] == "COMPLETED", done
        question = team.questions[0]
        assert done["final_answer"] == f"The team says: researched: {question}"
        assert [e.data["status"] for e in statuses if e.data["agent_id"] == boss["id"]] == [
            "PENDING", "RUNNING", "WAITING", "PENDING", "RUNNING", "COMPLETED"]

        [child] = children(http, boss["id"])
        assert child["goal"] == question and child["status"] == "COMPLETED"
        assert child["caller_id"] == boss["id"] and child["root_id"] == boss["id"]
        assert child["depth"] == 1 and child["assistant_id"] == researcher["assistant_id"]
        assert children(http, child["id"]) == []

        # The child's model saw its goal, not its caller's conversation.
        asked = [r for r in stack.fake.requests if role("researcher") in r["messages"][0]["content"]]
        assert [m["content"] for m in asked[0]["messages"][1:]] == [question]

        rows = steps(http, boss["id"])
        act = next(s for s in rows if s["type"] == "ACT")
        observe = next(s for s in rows if s["type"] == "OBSERVE")
        assert act["tool"] == "ask_researcher" and observe["call_id"] == act["call_id"]
        assert observe["content"] == f"researched: {question}"

        own = {"input_tokens": 2 * BOSS_USAGE[0], "output_tokens": 2 * BOSS_USAGE[1],
               "model_calls": 2}
        assert done["usage"] == own
        assert done["usage_total"] == {"input_tokens": own["input_tokens"] + RESEARCHER_USAGE[0],
                                       "output_tokens": own["output_tokens"] + RESEARCHER_USAGE[1],
                                       "model_calls": 3}


def test_parallel_calls_start_their_children_at_once_and_the_caller_fans_in(stack):
    team = Team(questions=("alpha", "beta", "gamma"))
    team.gate.clear()  # the researchers wait until every child has started
    stack.fake.responder = team
    with stack.api.client(stack.api.user()) as http:
        assistant(http, "researcher")
        assistant(http, "boss", delegates=["researcher"])
        boss = http.post("/api/v1/agents", json={"goal": "Three things", "assistant": "boss"}).json()
        path = f"/api/v1/agents/{boss['id']}"
        with EventStream(http, "GET", f"{path}/events") as events:
            waiting = events.until(lambda e: e.event == "waiting")[-1].data
        parked = http.get(path).json()
        assert parked["status"] == "WAITING"
        ids = parked["waiting_for"]["agent_ids"]
        assert parked["waiting_for"]["kind"] == "agents" and len(ids) == 3
        assert waiting["agent_ids"] == ids
        refused = http.post(f"{path}/approval", json={"call_id": "call_0", "approve": True})
        assert refused.status_code == 409 and refused.json()["error"]["code"] == "not_waiting"
        started = wait_until(lambda: len(r := [c for c in children(http, boss["id"])
                                               if c["status"] == "RUNNING"]) == 3 and r)
        assert sorted(c["id"] for c in started) == sorted(ids)
        team.gate.set()
        done = ended(http, boss["id"])
        assert done["status"] == "COMPLETED", done
        assert done["final_answer"] == "The team says: " + " | ".join(
            f"researched: {q}" for q in team.questions)
        assert sorted(c["goal"] for c in children(http, boss["id"])) == sorted(team.questions)


def test_cancelling_a_caller_cancels_its_children_and_theirs(stack):
    team = Team()
    team.gate.clear()
    stack.fake.responder = team
    with stack.api.client(stack.api.user()) as http:
        assistant(http, "researcher")
        assistant(http, "middle", instructions=role("boss"), delegates=["researcher"])
        assistant(http, "boss", delegates=["middle"])
        root = http.post("/api/v1/agents", json={"goal": "Delegate twice", "assistant": "boss"}).json()
        middle = wait_until(lambda: (c := children(http, root["id"])) and c[0])
        # `middle` is a boss too: it asks the researcher, who waits at the gate.
        team_calls = wait_until(lambda: (c := children(http, middle["id"])) and c[0])
        wait_until(lambda: http.get(f"/api/v1/agents/{team_calls['id']}").json()["status"]
                   == "RUNNING")
        cancelled = http.delete(f"/api/v1/agents/{root['id']}")
        assert cancelled.status_code == 200 and cancelled.json()["status"] == "CANCELLED"
        for agent_id in (middle["id"], team_calls["id"]):
            assert ended(http, agent_id)["status"] == "CANCELLED"
        team.gate.set()
        # Each boss made one call before the cancel; the tree's usage counts both.
        one = {"input_tokens": BOSS_USAGE[0], "output_tokens": BOSS_USAGE[1], "model_calls": 1}
        two = {name: 2 * used for name, used in one.items()}
        assert cancelled.json()["usage"] == one and cancelled.json()["usage_total"] == two
        assert http.get(f"/api/v1/agents/{root['id']}").json()["usage_total"] == two
        assert http.get(f"/api/v1/agents/{middle['id']}").json()["usage_total"] == one


def test_a_child_cancelled_alone_is_observed_cancelled_and_its_caller_goes_on(stack):
    team = Team()
    team.gate.clear()
    stack.fake.responder = team
    with stack.api.client(stack.api.user()) as http:
        assistant(http, "researcher")
        assistant(http, "boss", delegates=["researcher"])
        boss = http.post("/api/v1/agents", json={"goal": "What boils?", "assistant": "boss"}).json()
        child = wait_until(lambda: (c := children(http, boss["id"])) and c[0])
        assert http.delete(f"/api/v1/agents/{child['id']}").status_code == 200
        done = ended(http, boss["id"])
        team.gate.set()
        assert done["status"] == "COMPLETED" and done["final_answer"] == "The team says: cancelled"


def test_a_call_past_the_depth_limit_creates_nothing_and_says_so(stack):
    stack.fake.responder = Team()
    with stack.api.client(stack.api.user()) as http:
        assistant(http, "chain")
        assert http.patch("/api/v1/assistants/chain", json={"delegates": ["chain"]}).status_code == 200
        root = http.post("/api/v1/agents", json={"goal": "Go deep", "assistant": "chain"}).json()
        done = ended(http, root["id"], timeout_s=60)
        assert done["status"] == "COMPLETED", done
        chain, caller = [], root["id"]
        while found := children(http, caller):
            [child] = found
            chain.append(child)
            caller = child["id"]
        assert [c["depth"] for c in chain] == [1, 2, 3]  # JARVIS_MAX_DELEGATION_DEPTH's default
        assert all(c["root_id"] == root["id"] for c in chain)
        deepest = steps(http, chain[-1]["id"])
        refused = next(s for s in deepest if s["type"] == "OBSERVE")
        assert "JARVIS_MAX_DELEGATION_DEPTH" in refused["content"]
        assert done["final_answer"].count("chain got:") == 4


def test_a_failed_child_is_an_observation_and_its_caller_goes_on(stack):
    team = Team()
    stack.fake.responder = team
    with stack.api.client(stack.api.user()) as http:
        assistant(http, "failer", max_steps=1)
        assistant(http, "boss", delegates=["failer"])
        boss = http.post("/api/v1/agents", json={"goal": "Try it", "assistant": "boss"}).json()
        done = ended(http, boss["id"])
        [child] = children(http, boss["id"])
        assert child["status"] == "FAILED"
        assert done["status"] == "COMPLETED", done
        assert done["final_answer"] == f"The team says: failed: {child['error']}"


def test_show_names_an_agents_children_and_its_caller(stack):
    stack.fake.responder = Team()
    key = stack.api.user()
    with stack.api.client(key) as http:
        assistant(http, "researcher")
        assistant(http, "boss", delegates=["researcher"])
        boss = http.post("/api/v1/agents", json={"goal": "What boils?", "assistant": "boss"}).json()
        assert ended(http, boss["id"])["status"] == "COMPLETED"
        [child] = children(http, boss["id"])

    def show(agent_id: str) -> str:
        shown = subprocess.run([sys.executable, "-m", "jarvis_agents.cli", "show", agent_id],
                               env=cli_env(JARVIS_URL=stack.api.url, JARVIS_API_KEY=key),
                               capture_output=True, text=True, timeout=60, check=True)
        return shown.stdout

    assert f"children:     {child['id']} COMPLETED 'Find the boiling point of water'" in show(boss["id"])
    shown = show(child["id"])
    assert f"caller:       {boss['id']}" in shown and "children:" not in shown


def test_the_readmes_boss_and_researcher_on_the_demo_model(stack):
    stack.fake.responder = demo_answer
    with stack.api.client(stack.api.user()) as http:
        for body in ({"name": "researcher", "tools": ["calculate", "getTime"]},
                     {"name": "boss", "tools": [], "delegates": ["researcher"]}):
            assert http.post("/api/v1/assistants", json=body).status_code == 201
        boss = http.post("/api/v1/agents", json={
            "goal": "What is 1234 * 902, and what time is it in Tokyo?", "assistant": "boss"}).json()
        done = ended(http, boss["id"])
        assert done["status"] == "COMPLETED", done
        assert done["final_answer"].startswith("1234 * 902 = 1113068. Tokyo: ")
        goals = sorted(c["goal"] for c in children(http, boss["id"]))
        assert goals == ["What is 1234 * 902?", "What time is it in Tokyo?"]
        acts = [s for s in steps(http, boss["id"]) if s["type"] == "ACT"]
        assert [a["step"] for a in acts] == [0, 0]  # one reply, two calls: they fanned out


def test_a_child_with_an_output_schema_is_observed_as_its_output(stack):
    stack.fake.responder = Team()
    schema = {"type": "object", "properties": {"answer": {"type": "string"}},
              "required": ["answer"]}
    with stack.api.client(stack.api.user()) as http:
        assistant(http, "analyst", output_schema=schema)
        assistant(http, "boss", delegates=["analyst"])
        boss = http.post("/api/v1/agents", json={"goal": "Analyse", "assistant": "boss"}).json()
        done = ended(http, boss["id"])
        [child] = children(http, boss["id"])
        assert child["output"] == {"answer": Team().questions[0]}, child["error"]
        observed = next(s for s in steps(http, boss["id"]) if s["type"] == "OBSERVE")
        assert observed["content"] == json.dumps(child["output"]) != child["final_answer"]
        assert done["status"] == "COMPLETED"


def test_an_a2a_client_of_a_caller_sees_it_working_while_it_waits_on_its_child(stack):
    from a2a.types.a2a_pb2 import TaskState

    from tests.support.a2a_client import A2A, message

    team = Team()
    team.gate.clear()
    stack.fake.responder = team
    key = stack.api.user()
    with stack.api.client(key) as http:
        assistant(http, "researcher")
        assistant(http, "boss", delegates=["researcher"])
    with A2A(stack.api.url, key) as a2a:
        task = a2a.send(message("What boils?", assistant="boss"), return_immediately=True)
        with stack.api.client(key) as http:
            wait_until(lambda: http.get(f"/api/v1/agents/{task.id}").json()["status"] == "WAITING")
        assert a2a.get(task.id).status.state == TaskState.TASK_STATE_WORKING
        team.gate.set()
        # A blocking send on it would have answered INPUT_REQUIRED; it ends instead.
        wait_until(lambda: a2a.get(task.id).status.state == TaskState.TASK_STATE_COMPLETED)
        blocking = a2a.send(message("What boils?", assistant="boss"))
        assert blocking.status.state == TaskState.TASK_STATE_COMPLETED


def test_run_shows_the_caller_waiting_on_its_children_and_asks_nothing(stack):
    team = Team()
    team.gate.clear()
    stack.fake.responder = team
    key = stack.api.user()
    with stack.api.client(key) as http:
        assistant(http, "researcher")
        assistant(http, "boss", delegates=["researcher"])
        run = subprocess.Popen(
            [sys.executable, "-m", "jarvis_agents.cli", "run", "--assistant", "boss", "What boils?"],
            env=cli_env(JARVIS_URL=stack.api.url, JARVIS_API_KEY=key), stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            wait_until(lambda: any(a["status"] == "WAITING" for a in
                                   http.get("/api/v1/agents").json()["agents"]))
        finally:
            team.gate.set()
        out, err = run.communicate(timeout=60)
    assert run.returncode == 0, err
    assert "WAITING  on the agents it called: " in out and "approve" not in out + err
    assert "The team says: researched: Find the boiling point of water" in out


def test_a_langgraph_run_of_a_caller_goes_on_through_its_wait_on_its_child(stack):
    from langgraph_sdk import get_sync_client

    team = Team()
    stack.fake.responder = team
    key = stack.api.user()
    with stack.api.client(key) as http:
        assistant(http, "researcher")
        boss = assistant(http, "boss", delegates=["researcher"])
    with get_sync_client(url=f"{stack.api.url}/langgraph", api_key=key) as sdk:
        values = sdk.runs.wait(None, boss["assistant_id"],
                               input={"messages": [{"role": "user", "content": "What boils?"}]})
    # Not an interrupt (a wait for a person) but the run's end.
    assert "__interrupt__" not in values
    said = values["messages"][-1]["content"]
    assert said == f"The team says: researched: {team.questions[0]}"


def test_the_list_of_children_is_the_callers_own(stack):
    with stack.api.client(stack.api.user()) as http:
        mine = http.post("/api/v1/agents", json={"goal": "Anything"}).json()
        bad = http.get("/api/v1/agents", params={"caller_id": "nope"})
        assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_caller_id"
        assert children(http, mine["id"]) == []
