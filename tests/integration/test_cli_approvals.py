"""Approvals from the command line against a real stack: `approve ID`, and `run` asking in
a terminal (a pseudo-terminal here) or telling how to answer when piped."""

from __future__ import annotations

import os
import pty
import re
import select
import subprocess
import time

import pytest

from tests.integration.test_cli import CLI, agent, assert_one_line_error, jarvis, spawn
from tests.support.api_server import wait_until
from tests.support.live_stack import LiveStack

pytestmark = pytest.mark.integration
pytest_plugins = ["tests.support.api_fixtures", "tests.support.live_stack_fixtures"]

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def waiting(stack: LiveStack, goal: str = "What is 1234 * 902?") -> str:
    result = jarvis(stack, "run", "--detach", "--approve-tool", "calculate", goal)
    assert result.returncode == 0, result.stderr
    agent_id = result.stdout.strip()
    wait_until(lambda: agent(stack, agent_id)["status"] == "WAITING")
    return agent_id


def observations(stack: LiveStack, agent_id: str) -> list[str]:
    with stack.api.client(stack.api_key) as http:
        steps = http.get(f"/api/v1/agents/{agent_id}/steps").json()["steps"]
    return [s["content"] for s in steps if s["type"] == "OBSERVE"]


def test_approve_with_an_edited_input_runs_the_edited_call(live_stack: LiveStack) -> None:
    agent_id = waiting(live_stack)
    shown = jarvis(live_stack, "show", agent_id)
    assert "status:       WAITING" in shown.stdout
    assert 'calculate("1234 * 902") since' in shown.stdout and "jarvis-agents approve" in shown.stdout

    result = jarvis(live_stack, "approve", agent_id, "--input", "2*3")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f'approved calculate("2*3") for agent {agent_id}'
    assert agent(live_stack, agent_id, wait_s=20)["status"] == "COMPLETED"
    assert observations(live_stack, agent_id) == ["6"]


def test_deny_with_a_reason_and_answers_that_do_not_fit(live_stack: LiveStack) -> None:
    agent_id = waiting(live_stack)
    assert_one_line_error(jarvis(live_stack, "approve", agent_id, "--deny", "--input", "1"),
                          "--input goes with an approval")
    result = jarvis(live_stack, "approve", agent_id, "--deny", "--reason", "not now")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f'denied calculate("1234 * 902") for agent {agent_id}'
    assert agent(live_stack, agent_id, wait_s=20)["status"] == "COMPLETED"
    assert observations(live_stack, agent_id) == ["denied: not now"]
    assert_one_line_error(jarvis(live_stack, "approve", agent_id),
                          f"agent {agent_id} is COMPLETED, not waiting for an approval")
    assert_one_line_error(jarvis(live_stack, "approve", "00000000-0000-0000-0000-000000000000"),
                          "no agent with id")


def test_run_in_a_terminal_asks_and_sends_the_answer(live_stack: LiveStack) -> None:
    primary, secondary = pty.openpty()
    process = subprocess.Popen(
        [*CLI, "run", "--approve-tool", "calculate", "What is 1234 * 902?"],
        env=live_stack.client_env(TERM="dumb"), stdin=secondary, stdout=secondary,
        stderr=secondary, close_fds=True,
    )
    os.close(secondary)
    seen = ""

    def read_until(text: str, timeout_s: float = 30) -> None:
        nonlocal seen
        deadline = time.monotonic() + timeout_s
        while text not in ANSI.sub("", seen):
            left_s = deadline - time.monotonic()
            assert left_s > 0, f"no {text!r} in {seen!r}"
            if not select.select([primary], [], [], left_s)[0]:
                continue  # nothing within the deadline: the assert above says what was seen
            try:
                seen += os.read(primary, 4096).decode(errors="replace")
            except OSError:  # the process closed the terminal
                break

    try:
        read_until('approve calculate("1234 * 902")? [y/N]')
        os.write(primary, b"y\n")
        read_until("COMPLETED")
        assert process.wait(timeout=30) == 0
    finally:
        if process.poll() is None:
            process.kill()
        os.close(primary)
    text = ANSI.sub("", seen)
    assert "OBSERVE  calculate → 1113068" in text and "FINAL    1113068" in text


def test_run_piped_says_how_to_answer_and_goes_on_once_answered(live_stack: LiveStack) -> None:
    process = spawn(live_stack, "run", "--approve-tool", "calculate", "What is 1234 * 902?")
    try:
        assert process.stderr is not None
        hint = process.stderr.readline()
        match = re.search(r'waiting for an approval of calculate\("1234 \* 902"\): '
                          r"jarvis-agents approve ([0-9a-f-]{36}) \[--deny\]", hint)
        assert match, hint
        assert jarvis(live_stack, "approve", match.group(1)).returncode == 0
        out, err = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, err
    assert "WAITING  calculate(\"1234 * 902\") needs an approval" in out
    assert "FINAL    1113068" in out and "Traceback" not in err
