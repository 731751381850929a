"""Workers die around an approval; the approved call still runs exactly once."""

from __future__ import annotations

import json
import os
import signal
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from jarvis_agents.lifecycle import AgentStatus, StepType
from jarvis_agents.service import CreateRequest
from tests.conftest import _descendants
from tests.faults.conftest import System, running_system, system_env
from tests.faults.test_worker_death import assert_clean_history

SEARCH_SCRIPT = [
    "THOUGHT: look it up\nACTION: search\nINPUT: the answer",
    "THOUGHT: done\nFINAL_ANSWER: 42",
]


class SearchServer:
    """A DuckDuckGo look-alike that counts the searches it answers."""

    def __init__(self) -> None:
        self.queries: list[str] = []
        self.open = threading.Event()  # answers wait for it
        self.open.set()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                owner.queries.append(self.path)
                owner.open.wait(30)
                body = json.dumps({"Answer": "42 is the answer"}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def search_system(pg_url: str, redis_url: str, fake_ollama: Any) -> Iterator[tuple[System, SearchServer]]:
    fake_ollama.responder = fake_ollama.by_turn(SEARCH_SCRIPT)
    search = SearchServer()
    env = {**system_env(pg_url, redis_url, fake_ollama.url), "JARVIS_DUCKDUCKGO_URL": search.url,
           "JARVIS_SEARCH_BACKEND": "duckduckgo"}
    try:
        with running_system(env) as built:
            yield built, search
    finally:
        search.close()


def waiting_agent(system: System) -> Any:
    agent, _ = system.service.create(
        system.user_id, CreateRequest(goal="What is the answer?", approve_tools=("search",)))
    system.wait_until(lambda: system.repository.get(agent.id).status is AgentStatus.WAITING,  # type: ignore[union-attr]
                      20, "the agent to wait")
    return system.repository.get(agent.id)


def approve(system: System, waiting: Any) -> Any:
    return system.service.approve(system.user_id, waiting.id,
                                  call_id=waiting.waiting_for["call_id"], approve=True)


def kill(worker: Any) -> None:
    worker.signal(signal.SIGKILL)
    worker.proc.wait(10)


def assert_ran_once(system: System, search: SearchServer, agent_id: Any, *, runs: int = 1,
                    losses: tuple[int, ...] = (0,)) -> None:
    done = system.terminal(agent_id, timeout_s=40)
    assert done.status is AgentStatus.COMPLETED, (done.stop_reason, done.error)
    assert done.final_answer == "42" and done.losses in losses
    steps = system.repository.steps_after(agent_id)
    observe = [s for s in steps if s.type is StepType.OBSERVE]
    act = next(s for s in steps if s.type is StepType.ACT)
    assert len(observe) == 1 and "42 is the answer" in observe[0].content
    assert observe[0].call_id == act.call_id
    assert len(search.queries) == runs, search.queries
    assert_clean_history(system, agent_id)


def test_a_worker_killed_while_the_agent_waits_loses_nothing(
        search_system: tuple[System, SearchServer], start_worker: Any) -> None:
    system, search = search_system
    first = start_worker(system.env)
    waiting = waiting_agent(system)
    kill(first)
    approve(system, waiting)
    start_worker(system.env)
    assert_ran_once(system, search, waiting.id)


def test_a_worker_killed_between_the_approval_and_the_call_runs_it_once_after(
        search_system: tuple[System, SearchServer], start_worker: Any) -> None:
    system, search = search_system
    first = start_worker(system.env)
    waiting = waiting_agent(system)
    # Frozen (its Celery process too, which has a process group of its own), it cannot
    # take the resumed agent off the queue; then it dies, holding nothing.
    for pid in [first.proc.pid, *_descendants(first.proc.pid)]:
        os.kill(pid, signal.SIGSTOP)
    assert approve(system, waiting).status is AgentStatus.PENDING
    kill(first)
    assert search.queries == []
    start_worker(system.env)
    # Rarely the frozen worker had taken the agent as it froze (a loss, counted): the
    # call still runs once, on the next worker.
    assert_ran_once(system, search, waiting.id, losses=(0, 1))


def test_a_worker_killed_during_the_approved_call_runs_it_again_and_observes_once(
        search_system: tuple[System, SearchServer], start_worker: Any) -> None:
    system, search = search_system
    first = start_worker(system.env)
    waiting = waiting_agent(system)
    search.open.clear()
    approve(system, waiting)
    system.wait_until(lambda: len(search.queries) == 1, 20, "the approved call to start")
    kill(first)
    search.open.set()
    start_worker(system.env)
    # Its ACT was persisted and its OBSERVE was not: the call runs again (CONTRACT §3).
    assert_ran_once(system, search, waiting.id, runs=2, losses=(1,))
