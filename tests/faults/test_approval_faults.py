"""Workers die around an approval: the approved call runs once, or, when its worker dies
during it, once more under the same idempotency key (so the tool can tell), and it is
observed once."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jarvis_agents.lifecycle import AgentStatus, StepType
from jarvis_agents.service import CreateRequest
from tests.conftest import _descendants
from tests.faults.conftest import System, running_system, system_env
from tests.faults.test_worker_death import assert_clean_history

pytest_plugins = ["tests.support.mcp_fixtures"]  # http_server

LEDGER_SCRIPT = [
    "THOUGHT: write it down\nACTION: ledger__record\nINPUT: the answer",
    "THOUGHT: done\nFINAL_ANSWER: 42",
]


class Ledger:
    """The `ledger` MCP server's files (tests/support/mcp_servers.py): what it recorded,
    and the hold that keeps its answers back while it exists."""

    def __init__(self, directory: Path) -> None:
        self.record = directory / "ledger.jsonl"
        self.held = directory / "ledger.hold"

    def entries(self) -> list[dict[str, Any]]:
        if not self.record.exists():
            return []
        return [json.loads(line) for line in self.record.read_text().splitlines()]

    def hold(self) -> None:
        self.held.touch()

    def release(self) -> None:
        self.held.unlink()


@pytest.fixture
def ledger_system(pg_url: str, redis_url: str, fake_ollama: Any, http_server: Any,
                  tmp_path: Path) -> Iterator[tuple[System, Ledger]]:
    fake_ollama.responder = fake_ollama.by_turn(LEDGER_SCRIPT)
    ledger = Ledger(tmp_path)
    url = http_server("ledger", MCP_RECORD=str(ledger.record), MCP_HOLD=str(ledger.held))
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps({"mcpServers": {"ledger": {"url": url}}}))
    env = {**system_env(pg_url, redis_url, fake_ollama.url), "JARVIS_MCP_CONFIG": str(config)}
    with running_system(env) as built:
        yield built, ledger


def waiting_agent(system: System) -> Any:
    # Every tool: the service's fixed list of tools knows no MCP server's.
    agent, _ = system.service.create(
        system.user_id, CreateRequest(goal="What is the answer?", approve_tools=("*",)))
    system.wait_until(lambda: system.repository.get(agent.id).status is AgentStatus.WAITING,  # type: ignore[union-attr]
                      20, "the agent to wait")
    return system.repository.get(agent.id)


def approve(system: System, waiting: Any) -> Any:
    return system.service.approve(system.user_id, waiting.id,
                                  call_id=waiting.waiting_for["call_id"], approve=True)


def kill(worker: Any) -> None:
    worker.signal(signal.SIGKILL)
    worker.proc.wait(10)


def assert_ran_once(system: System, ledger: Ledger, agent_id: Any, *, runs: int = 1,
                    losses: tuple[int, ...] = (0,)) -> None:
    done = system.terminal(agent_id, timeout_s=40)
    assert done.status is AgentStatus.COMPLETED, (done.stop_reason, done.error)
    assert done.final_answer == "42" and done.losses in losses
    steps = system.repository.steps_after(agent_id)
    observe = [s for s in steps if s.type is StepType.OBSERVE]
    act = next(s for s in steps if s.type is StepType.ACT)
    assert len(observe) == 1 and observe[0].content == "recorded: the answer"
    assert observe[0].call_id == act.call_id
    # Each run carried the call's key, `<agent_id>:<call_id>`: a re-run the same as the first.
    assert ledger.entries() == [{"text": "the answer", "key": f"{agent_id}:{act.call_id}"}] * runs
    assert_clean_history(system, agent_id)


def test_a_worker_killed_while_the_agent_waits_loses_nothing(
        ledger_system: tuple[System, Ledger], start_worker: Any) -> None:
    system, ledger = ledger_system
    first = start_worker(system.env)
    waiting = waiting_agent(system)
    kill(first)
    approve(system, waiting)
    start_worker(system.env)
    assert_ran_once(system, ledger, waiting.id)


def test_a_worker_killed_between_the_approval_and_the_call_runs_it_once_after(
        ledger_system: tuple[System, Ledger], start_worker: Any) -> None:
    system, ledger = ledger_system
    first = start_worker(system.env)
    waiting = waiting_agent(system)
    # Frozen (its Celery process too, which has a process group of its own), it cannot
    # take the resumed agent off the queue; then it dies, holding nothing.
    for pid in [first.proc.pid, *_descendants(first.proc.pid)]:
        os.kill(pid, signal.SIGSTOP)
    assert approve(system, waiting).status is AgentStatus.PENDING
    kill(first)
    assert ledger.entries() == []
    start_worker(system.env)
    # Rarely the frozen worker had taken the agent as it froze (a loss, counted): the
    # call still runs once, on the next worker.
    assert_ran_once(system, ledger, waiting.id, losses=(0, 1))


def test_a_worker_killed_during_the_approved_call_runs_it_again_under_the_same_key(
        ledger_system: tuple[System, Ledger], start_worker: Any) -> None:
    system, ledger = ledger_system
    first = start_worker(system.env)
    waiting = waiting_agent(system)
    ledger.hold()
    approve(system, waiting)
    system.wait_until(lambda: len(ledger.entries()) == 1, 20, "the approved call to start")
    kill(first)
    ledger.release()
    start_worker(system.env)
    # Its ACT was persisted and its OBSERVE was not: the call runs again (README, Modes),
    # with the key of its first run, so the tool can tell the two apart.
    assert_ran_once(system, ledger, waiting.id, runs=2, losses=(1,))
