"""`jarvis-agents worker` as its operator reads it (and `up` shows it): what a warm
shutdown says it does with the agents it runs."""

from __future__ import annotations

import signal
import threading
from typing import Any

import pytest

from tests.support.api_server import wait_until

pytestmark = pytest.mark.integration
pytest_plugins = ["tests.support.api_fixtures"]


def test_a_shutdown_counts_its_running_agents_in_words(
    api_env: dict[str, str], start_api: Any, start_worker: Any, fake_ollama: Any
) -> None:
    released = threading.Event()
    fake_ollama.responder = lambda request: released.wait(60) and "FINAL_ANSWER: late"
    env = {**api_env, "JARVIS_SHUTDOWN_GRACE": "1"}
    api = start_api(env)
    worker = start_worker(env)
    try:
        with api.client(api.user()) as http:
            agent_id = http.post("/api/v1/agents", json={"goal": "wait"}).json()["id"]
            wait_until(lambda: http.get(f"/api/v1/agents/{agent_id}").json()["status"] == "RUNNING")
        worker.signal(signal.SIGTERM)
        worker.wait_for("shutting down:")
        worker.proc.wait(30)
    finally:
        released.set()
    assert "shutting down: 1 running agent is handed back in 1 s" in worker.output(), worker.output()
