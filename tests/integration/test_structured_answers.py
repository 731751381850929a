"""Structured answers end to end: one user's `output_schema` cannot stall the worker that
checks its answers, and a schema that could is refused at create."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.api_server import wait_until

pytestmark = pytest.mark.integration
pytest_plugins = ["tests.support.api_fixtures"]  # api_env, start_api

EVIL = "^(a+)+$"  # a backtracking matcher takes 2^n steps to refuse n a's and a "!"


def test_an_answer_against_a_backtracking_pattern_stalls_no_other_agent(
    api_env, start_api, start_worker, fake_ollama
):
    def respond(request: dict[str, Any]) -> str:
        goal = request["messages"][1]["content"]
        if goal.startswith("Spell"):
            return 'THOUGHT: Here.\nFINAL_ANSWER: "' + "a" * 40 + '!"'
        return "THOUGHT: Easy.\nFINAL_ANSWER: 4"

    fake_ollama.responder = respond
    api = start_api(api_env)
    start_worker(api_env)  # one worker process: both agents are its
    with api.client(api.user()) as http:
        spelled = http.post("/api/v1/agents", json={
            "goal": "Spell it", "mode": "react",
            "output_schema": {"type": "string", "pattern": EVIL}}).json()
        # The innocent one is created once the worker is checking the first answer.
        wait_until(lambda: fake_ollama.call_count >= 1)
        innocent = http.post("/api/v1/agents", json={"goal": "2+2?", "mode": "react"}).json()

        done = http.get(f"/api/v1/agents/{innocent['id']}", params={"wait": 30}).json()
        assert done["status"] == "COMPLETED" and done["final_answer"] == "4", done
        ended = http.get(f"/api/v1/agents/{spelled['id']}", params={"wait": 30}).json()
        assert (ended["status"], ended["stop_reason"]) == ("FAILED", "invalid_output"), ended
        errors = [s["content"] for s in http.get(f"/api/v1/agents/{spelled['id']}/steps").json()["steps"]
                  if s["type"] == "ERROR"]
        assert errors and "does not match '^(a+)+$'" in errors[0], errors


def test_a_pattern_that_cannot_be_matched_in_linear_time_is_a_400_naming_it(shared_api):
    api = shared_api()
    with api.client(api.user()) as http:
        refused = http.post("/api/v1/agents", json={"goal": "x", "output_schema": {
            "type": "object", "properties": {"word": {"type": "string", "pattern": r"^(\w)\1$"}}}})
    assert refused.status_code == 400, refused.text
    message = refused.json()["error"]["message"]
    assert message.startswith(
        "`output_schema` has a pattern at `properties/word/pattern` that cannot be matched in "
        r"linear time: '^(\\w)\\1$'"), message
