"""A worker killed in the middle of a native iteration: its calls persisted, their
results not. The agent resumes on another worker, which runs the calls without a result
and never asks the model again for the reply those calls came from."""

from __future__ import annotations

import signal
import socket
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from jarvis_agents.lifecycle import AgentMode, AgentStatus, StepType
from jarvis_agents.service import CreateRequest
from tests.faults.conftest import System
from tests.support.fake_replies import FakeToolCall, Turn

SCRIPT = [
    Turn(text="Search, and compute.", tool_calls=(
        FakeToolCall("search", {"query": "jarvis"}, id="call_s"),
        FakeToolCall("calculate", {"expression": "1234 * 902"}, id="call_c"))),
    Turn(text="1113068"),
]


@pytest.fixture
def silent_server() -> Iterator[str]:
    """A server that accepts connections and never answers: a search that hangs."""
    with socket.create_server(("127.0.0.1", 0), backlog=64) as listening:
        yield f"http://127.0.0.1:{listening.getsockname()[1]}"


def turns_asked(requests: list[dict[str, Any]]) -> Counter[int]:
    """How many times each turn (the assistant messages before it) was asked for."""
    return Counter(sum(1 for m in r["messages"] if m["role"] == "assistant") for r in requests)


def test_sigkill_between_the_calls_and_their_results_resumes_without_asking_again(
    system: System, fake_ollama: Any, start_worker: Any, silent_server: str
) -> None:
    fake_ollama.capabilities = {"test-model:latest": ["completion", "tools"]}
    fake_ollama.responder = fake_ollama.by_turn(SCRIPT)
    env = {**system.env, "JARVIS_SEARXNG_URL": silent_server, "JARVIS_TOOL_TIMEOUT": "3"}
    first = start_worker(env)
    agent, _ = system.service.create(system.user_id, CreateRequest(
        goal="Search for jarvis and compute 1234 * 902", mode="native"))
    # The iteration's [THINK, ACT, ACT] are written; the search hangs, so no OBSERVE yet.
    system.wait_until(lambda: len(system.repository.steps_after(agent.id)) == 3, 20, "the calls")
    first.signal(signal.SIGKILL)
    first.proc.wait(10)
    before = system.repository.steps_after(agent.id)
    assert [s.type for s in before] == [StepType.THINK, StepType.ACT, StepType.ACT]
    assert fake_ollama.call_count == 1
    start_worker(env)
    done = system.terminal(agent.id, timeout_s=40)
    assert done.status is AgentStatus.COMPLETED, done.error
    assert done.final_answer == "1113068" and done.mode is AgentMode.NATIVE
    assert (done.attempt, done.losses) == (2, 1)
    assert turns_asked(fake_ollama.requests) == Counter({0: 1, 1: 1})  # never asked twice
    steps = system.repository.steps_after(agent.id)
    assert steps[:3] == before
    assert [s.seq for s in steps] == list(range(1, len(steps) + 1))
    observed = {s.call_id: s.content for s in steps if s.type is StepType.OBSERVE}
    assert set(observed) == {"call_s", "call_c"} and observed["call_c"] == "1113068"
    # The model saw its calls and both results, as if nothing had happened.
    last = fake_ollama.requests[-1]["messages"]
    assert [m["role"] for m in last] == ["system", "user", "assistant", "tool", "tool"]
    assert [c["id"] for c in last[2]["tool_calls"]] == ["call_s", "call_c"]
    assert done.usage.model_calls == 2
