"""A2A (README, A2A): a worker SIGKILLed while a caller waits on a blocking SendMessage;
the task is resumed by another worker and the caller still gets its answer."""

from __future__ import annotations

import signal
import threading
import uuid
from typing import Any

from a2a.types.a2a_pb2 import TaskState

from tests.faults.conftest import System
from tests.support.a2a_client import A2A

pytest_plugins = ["tests.support.api_fixtures"]


def test_a_blocking_send_message_answers_across_a_killed_worker(
    system: System, fake_ollama: Any, start_worker: Any, start_api: Any,
) -> None:
    fake_ollama.latency_s = 1.0
    api = start_api(system.env)
    first = start_worker(system.env)
    key = api.user()
    answered: dict[str, Any] = {}

    def call() -> None:
        with A2A(api.url, key, timeout_s=120) as a2a:
            answered["task"] = a2a.send("What is 1234 * 902?")

    caller = threading.Thread(target=call, daemon=True)
    caller.start()
    with A2A(api.url, key) as watcher:
        system.wait_until(lambda: bool(watcher.list().tasks), 30, "the task")
        agent_id = uuid.UUID(watcher.list().tasks[0].id)
    # Kill once the first iteration is persisted and the second planning call is in flight.
    system.wait_until(lambda: len(system.repository.steps_after(agent_id)) >= 3, 30,
                      "the first steps")
    first.signal(signal.SIGKILL)
    first.proc.wait(10)
    assert "task" not in answered  # still waiting: the agent has not ended
    fake_ollama.latency_s = 0.0
    start_worker(system.env)
    caller.join(90)
    task = answered["task"]
    assert task.id == str(agent_id) and task.status.state == TaskState.TASK_STATE_COMPLETED
    assert "".join(p.text for p in task.artifacts[0].parts) == "1113068"
    agent = system.repository.get(agent_id)
    assert agent is not None and (agent.attempt, agent.losses) == (2, 1)  # really resumed
