"""LangGraph's SDK (README, LangGraph SDK): a worker SIGKILLed while a caller waits in
`runs.wait`; the run is resumed by another worker and the caller still gets its result."""

from __future__ import annotations

import signal
import threading
import uuid
from typing import Any

from langgraph_sdk import get_sync_client

from tests.faults.conftest import System

pytest_plugins = ["tests.support.api_fixtures"]


def test_runs_wait_answers_across_a_killed_worker(
    system: System, fake_ollama: Any, start_worker: Any, start_api: Any,
) -> None:
    fake_ollama.latency_s = 1.0
    api = start_api(system.env)
    first = start_worker(system.env)
    key = api.user()
    answered: dict[str, Any] = {}
    with get_sync_client(url=f"{api.url}/langgraph", api_key=key, timeout=120) as client:
        thread_id = client.threads.create()["thread_id"]

        def call() -> None:
            answered["values"] = client.runs.wait(thread_id, "agent", input={
                "messages": [{"role": "user", "content": "What is 1234 * 902?"}]})

        caller = threading.Thread(target=call, daemon=True)
        caller.start()
        system.wait_until(lambda: bool(client.runs.list(thread_id)), 30, "the run")
        run_id = uuid.UUID(client.runs.list(thread_id)[0]["run_id"])
        # Kill once the first iteration is persisted and the second planning call is in flight.
        system.wait_until(lambda: len(system.repository.steps_after(run_id)) >= 3, 30,
                          "the first steps")
        first.signal(signal.SIGKILL)
        first.proc.wait(10)
        assert "values" not in answered  # still waiting: the run has not ended
        fake_ollama.latency_s = 0.0
        start_worker(system.env)
        caller.join(90)
        assert answered["values"]["messages"][-1]["content"] == "1113068"
        assert client.runs.get(thread_id, str(run_id))["status"] == "success"
    agent = system.repository.get(run_id)
    assert agent is not None and (agent.attempt, agent.losses) == (2, 1)  # really resumed
