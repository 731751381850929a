"""A worker dies under an MCP call: the agent resumes elsewhere and the caller, still
waiting on the MCP server, gets its answer (README, MCP server)."""

from __future__ import annotations

import signal
import uuid
from pathlib import Path
from typing import Any

import anyio

from jarvis_agents.lifecycle import AgentStatus
from tests.conftest import Process
from tests.faults.conftest import System
from tests.faults.test_worker_death import assert_clean_history
from tests.support.mcp_door import launch_mcp, mcp_client, run


def test_sigkill_of_the_worker_mid_call_still_answers_the_caller(
    system: System, fake_ollama: Any, start_worker: Any, started_processes: list[Process],
    tmp_path: Path,
) -> None:
    fake_ollama.latency_s = 1.0
    first = start_worker(system.env)
    url = launch_mcp(system.env, tmp_path / "mcp.log", started_processes)
    user, key = system.repository.users.create("mcp-caller")
    answers: list[Any] = []

    async def call_while_the_worker_dies() -> None:
        async with mcp_client(url, key) as client, anyio.create_task_group() as group:

            async def call() -> None:
                answers.append(await client.call_tool("agent", {"goal": "What is 1234 * 902?"}))

            group.start_soon(call)
            await anyio.to_thread.run_sync(kill_mid_agent)

    def kill_mid_agent() -> None:
        def running() -> list[Any]:
            agents, _ = system.repository.list_agents(user.id, status=None, limit=5, cursor=None)
            return [a for a in agents if len(system.repository.steps_after(a.id)) >= 3]

        system.wait_until(lambda: bool(running()), 20, "the call's agent to take its first steps")
        first.signal(signal.SIGKILL)
        first.proc.wait(10)
        fake_ollama.latency_s = 0.0  # the kill is behind it: the resumed calls need not be slow
        start_worker(system.env)

    run(call_while_the_worker_dies())
    [result] = answers
    assert not result.is_error and result.content[0].text == "1113068", result
    agent = system.repository.get(uuid.UUID(result.meta["jarvis/agent_id"]))
    assert agent is not None and agent.status is AgentStatus.COMPLETED
    assert (agent.attempt, agent.losses) == (2, 1)  # really resumed after a lost worker
    assert_clean_history(system, agent.id)
