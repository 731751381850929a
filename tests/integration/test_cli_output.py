"""What the CLI says where a new user found it wrong: a reply cut by Ctrl-C, an agent
cancelled before its first step, a thread id that is not one."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import time

import pytest

from tests.integration.test_cli import CLI, UUID, agent, assert_one_line_error, detach, jarvis
from tests.support.api_server import wait_until
from tests.support.live_stack import LiveStack

pytestmark = pytest.mark.integration
pytest_plugins = ["tests.support.api_fixtures", "tests.support.live_stack_fixtures"]


def read_until(process: subprocess.Popen[bytes], text: str, timeout_s: float = 30) -> str:
    """What the process wrote until `text` appears, lines or not (a reply being written
    has no newline yet)."""
    assert process.stdout is not None
    seen = b""
    deadline = time.monotonic() + timeout_s
    while text.encode() not in seen:
        left = deadline - time.monotonic()
        assert left > 0, f"no {text!r} in {seen!r}"
        if select.select([process.stdout], [], [], left)[0]:
            chunk = os.read(process.stdout.fileno(), 4096)
            assert chunk, f"output ended before {text!r}: {seen!r}"
            seen += chunk
    return seen.decode()


def test_ctrl_c_mid_reply_ends_the_replys_line_before_saying_it_cancelled(
    live_stack: LiveStack,
) -> None:
    live_stack.fake.chunk_delay_s = 0.3  # a reply takes seconds to write: Ctrl-C lands in it
    # stdout and stderr into one pipe, as a terminal shows them.
    process = subprocess.Popen([*CLI, "run", "--tokens", "What is 1234 * 902?"],
                               env=live_stack.client_env(), stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT)
    try:
        seen = read_until(process, "THOUGHT:")
        process.send_signal(signal.SIGINT)
        rest, _ = process.communicate(timeout=30)
    finally:
        live_stack.fake.chunk_delay_s = 0.0
        if process.poll() is None:
            process.kill()
    output = seen + rest.decode()
    agent_id = UUID.search(output).group(0)  # type: ignore[union-attr]

    assert process.returncode == 130, output
    lines = output.splitlines()
    assert f"cancelled agent {agent_id}" in lines, output  # a line of its own
    cut = next(line for line in lines if line.startswith("THOUGHT:"))
    assert "cancelled" not in cut and "INPUT:" not in cut, output  # the reply, cut mid-way
    assert agent(live_stack, agent_id)["status"] == "CANCELLED"


def test_steps_of_an_agent_cancelled_before_its_first_step_say_so(live_stack: LiveStack) -> None:
    agent_id = detach(live_stack, "slow: cancelled before any step")  # its model takes 2 s
    assert jarvis(live_stack, "cancel", agent_id).returncode == 0
    wait_until(lambda: agent(live_stack, agent_id)["status"] == "CANCELLED")

    shown = jarvis(live_stack, "steps", agent_id)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout == ""
    assert shown.stderr.strip() == "no steps: the agent was cancelled before its first step"
    assert jarvis(live_stack, "steps", "--json", agent_id).stdout.strip() == '{"steps": []}'


def test_steps_after_the_last_one_of_an_ended_agent_are_none_not_none_yet(
    live_stack: LiveStack,
) -> None:
    agent_id = detach(live_stack, "What is 1234 * 902?")
    assert agent(live_stack, agent_id, wait_s=30)["status"] == "COMPLETED"
    shown = jarvis(live_stack, "steps", "--after", "5", agent_id)
    assert (shown.returncode, shown.stderr.strip()) == (0, "no steps after 5")


def test_a_malformed_thread_id_is_called_a_thread_id(live_stack: LiveStack) -> None:
    assert_one_line_error(jarvis(live_stack, "list", "--thread", "bad"),
                          "'bad' is not a thread id (expected a UUID")
