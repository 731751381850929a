"""The CLI's client commands against a real API, worker, PostgreSQL, Redis and FakeOllama:
what a user sees, the exit codes of run/watch, and one-line errors without tracebacks."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time

import pytest

from tests.conftest import cli_env, free_port
from tests.support.live_stack import KNOWN_MODEL, LiveStack

pytestmark = pytest.mark.integration
pytest_plugins = ["tests.support.api_fixtures", "tests.support.live_stack_fixtures"]  # the live_stack fixture

UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
CLI = [sys.executable, "-m", "jarvis_agents.cli"]
# What `run` prints of the calculator agent's steps.
CALC_LINES = [
    "THINK    I need to compute",
    "ACT      calculate(1234 * 902)",
    "OBSERVE  calculate → 1113068",
    "THINK    done",
    "FINAL    1113068",
]


def jarvis(stack: LiveStack, *args: str, timeout_s: float = 60, **env: str) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([*CLI, *args], check=False, env=stack.client_env(**env), capture_output=True,
                            text=True, timeout=timeout_s)
    assert "Traceback" not in result.stderr, result.stderr
    assert "\x1b" not in result.stdout + result.stderr, "control codes written to a pipe"
    return result


def spawn(stack: LiveStack, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([*CLI, *args], env=stack.client_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def assert_one_line_error(result: subprocess.CompletedProcess[str], text: str) -> None:
    assert result.returncode != 0, result
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert text in lines[0], result.stderr
    assert result.stdout == ""


def detach(stack: LiveStack, goal: str) -> str:
    result = jarvis(stack, "run", "--detach", goal)
    assert result.returncode == 0, result.stderr
    assert UUID.fullmatch(result.stdout.strip()), result.stdout
    return result.stdout.strip()


def agent(stack: LiveStack, agent_id: str, *, wait_s: float | None = None) -> dict:
    with stack.api.client(stack.api_key, timeout=90) as http:
        params = {"wait": wait_s} if wait_s else None
        response = http.get(f"/api/v1/agents/{agent_id}", params=params)
        response.raise_for_status()
        return response.json()


def wait_for_line(process: subprocess.Popen[str], pattern: str, timeout_s: float = 30) -> list[str]:
    """Read stdout lines until one matches; returns every line read."""
    seen: list[str] = []
    deadline = time.monotonic() + timeout_s
    assert process.stdout is not None
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            raise AssertionError(f"stdout ended before {pattern!r}: {seen}")
        seen.append(line.rstrip("\n"))
        if re.search(pattern, line):
            return seen
    raise AssertionError(f"{pattern!r} not seen within {timeout_s} s: {seen}")


# --- run ------------------------------------------------------------------------------------


def test_run_shows_thoughts_tool_call_observation_answer_and_time(live_stack: LiveStack) -> None:
    result = jarvis(live_stack, "run", "What is 1234 * 902?")

    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stderr == ""
    lines = result.stdout.splitlines()
    assert UUID.search(lines[0]) and lines[0].startswith("agent ")
    assert lines[1:6] == CALC_LINES
    assert re.fullmatch(r"COMPLETED in \d+\.\d s, 2 steps", lines[6]), lines
    assert len(lines) == 7


def test_run_takes_a_mode_and_an_output_schema(live_stack: LiveStack, tmp_path) -> None:
    schema = tmp_path / "schema.json"
    schema.write_text('{"type": "integer"}')
    result = jarvis(live_stack, "run", "--detach", "--mode", "react", "--output-schema",
                    f"@{schema}", "What is 1234 * 902?")
    assert result.returncode == 0, result.stderr
    done = agent(live_stack, result.stdout.strip(), wait_s=30)
    assert (done["mode"], done["output_schema"], done["output"]) == ("react", {"type": "integer"},
                                                                     1113068)
    assert_one_line_error(jarvis(live_stack, "run", "--output-schema", "{", "x"), "--output-schema")


def test_run_json_prints_each_event_as_one_json_line(live_stack: LiveStack) -> None:
    result = jarvis(live_stack, "run", "--json", "--max-steps", "3", "What is 1234 * 902?")

    assert result.returncode == 0, result.stderr
    events = [json.loads(line) for line in result.stdout.splitlines()]
    assert [e["event"] for e in events] == ["think", "act", "observe", "think", "final", "done"]
    assert [e.get("seq") for e in events] == [1, 2, 3, 4, 5, None]
    assert events[1]["tool"] == "calculate" and events[1]["content"] == "1234 * 902"
    assert events[2]["content"] == "1113068"
    done = events[-1]
    assert done == {"event": "done", "agent_id": events[0]["agent_id"], "status": "COMPLETED",
                    "stop_reason": "final_answer"}
    assert agent(live_stack, done["agent_id"])["max_steps"] == 3


def test_run_detach_prints_only_the_id_and_the_read_commands_show_the_agent(live_stack: LiveStack) -> None:
    agent_id = detach(live_stack, "Detached: what is 1234 * 902?")
    assert agent(live_stack, agent_id, wait_s=30)["status"] == "COMPLETED"

    shown = jarvis(live_stack, "show", agent_id, TZ="Asia/Tokyo")
    assert shown.returncode == 0, shown.stderr
    assert f"id:           {agent_id}" in shown.stdout
    assert re.search(r"created_at:   \d{4}-\d\d-\d\d \d\d:\d\d:\d\d JST$", shown.stdout, re.MULTILINE), shown.stdout
    assert "status:       COMPLETED" in shown.stdout
    assert "final_answer: 1113068" in shown.stdout
    assert json.loads(jarvis(live_stack, "show", "--json", agent_id).stdout)["final_answer"] == "1113068"

    steps = jarvis(live_stack, "steps", agent_id)
    assert steps.returncode == 0, steps.stderr
    assert [line.split()[:2] for line in steps.stdout.splitlines()] == [
        ["1", "THINK"], ["2", "ACT"], ["3", "OBSERVE"], ["4", "THINK"], ["5", "FINAL"],
    ]
    assert "calculate(1234 * 902)" in steps.stdout
    later = json.loads(jarvis(live_stack, "steps", "--json", "--after", "3", agent_id).stdout)
    assert [s["seq"] for s in later["steps"]] == [4, 5]

    listed = jarvis(live_stack, "list", "--status", "completed", "--limit", "100", TZ="Asia/Tokyo")
    assert listed.returncode == 0, listed.stderr
    header, *rows = listed.stdout.splitlines()
    assert header.split() == ["ID", "STATUS", "STEPS", "CREATED", "GOAL"]
    row = next(r for r in rows if r.startswith(agent_id))
    assert row.split()[1:3] == ["COMPLETED", "2"] and row.endswith("Detached: what is 1234 * 902?")
    assert row.split()[5] == "JST", row  # the local time, its zone named
    page = json.loads(jarvis(live_stack, "list", "--json", "--limit", "1").stdout)
    assert len(page["agents"]) == 1 and "next_cursor" in page

    watched = jarvis(live_stack, "watch", agent_id)  # an ended agent: replay, then done
    assert watched.returncode == 0, watched.stderr
    assert "FINAL    1113068" in watched.stdout and "COMPLETED in" in watched.stdout


def test_a_failing_agent_exits_1_with_its_error(live_stack: LiveStack) -> None:
    live_stack.fake.fail_next(status=400, message="the prompt is too long")
    result = jarvis(live_stack, "run", "What is 1234 * 902?")

    assert result.returncode == 1, result.stdout + result.stderr
    assert "refused the request (HTTP 400): the prompt is too long" in result.stdout
    assert re.search(r"^FAILED \(model_error\) in \d+\.\d s", result.stdout, re.MULTILINE), result.stdout
    assert "Traceback" not in result.stderr

    live_stack.fake.fail_next(status=400, message="the prompt is too long")
    as_json = jarvis(live_stack, "run", "--json", "again")
    assert as_json.returncode == 1
    assert json.loads(as_json.stdout.splitlines()[-1])["status"] == "FAILED"


def test_a_model_its_server_does_not_have_is_refused_before_any_agent_is_made(
    live_stack: LiveStack,
) -> None:
    result = jarvis(live_stack, "run", "--model", "no-such-model", "What is 1234 * 902?")
    assert_one_line_error(result, "the model 'no-such-model' is not available on the Ollama server")


def ctrl_c_mid_run(process: subprocess.Popen[str]) -> tuple[list[str], str, str]:
    """Press Ctrl-C once the agent's ACT is shown (its next model turn takes 2 s); the
    lines read before, then the rest of stdout and stderr."""
    try:
        seen = wait_for_line(process, r"^ACT ")
        process.send_signal(signal.SIGINT)
        stdout, stderr = process.communicate(timeout=30)
    finally:
        process.kill()
        process.wait()
    return seen, stdout, stderr


def test_ctrl_c_during_run_cancels_the_agent_and_exits_130(live_stack: LiveStack) -> None:
    process = spawn(live_stack, "run", "slow: what is 1234 * 902?")
    seen, stdout, stderr = ctrl_c_mid_run(process)
    agent_id = UUID.search(seen[0]).group(0)  # type: ignore[union-attr]

    assert process.returncode == 130, stdout + stderr
    assert f"cancelled agent {agent_id}" in stderr and "Traceback" not in stderr
    assert agent(live_stack, agent_id)["status"] == "CANCELLED"


def test_watch_follows_a_running_agent_live_and_cancel_ends_it(live_stack: LiveStack) -> None:
    agent_id = detach(live_stack, "slow: watch me compute 1234 * 902")
    watcher = spawn(live_stack, "watch", agent_id)
    try:
        seen = wait_for_line(watcher, r"^ACT ")  # live: the agent is still running
        assert seen[0].startswith(f"watching agent {agent_id}")
        assert agent(live_stack, agent_id)["status"] == "RUNNING"

        cancelled = jarvis(live_stack, "cancel", agent_id)
        assert cancelled.returncode == 0, cancelled.stderr
        assert cancelled.stdout.strip() == f"cancelled agent {agent_id}"
        stdout, stderr = watcher.communicate(timeout=30)
    finally:
        watcher.kill()
        watcher.wait()

    assert watcher.returncode == 130, stdout + stderr
    assert "CANCELLED" in stdout and stderr == ""
    assert agent(live_stack, agent_id)["status"] == "CANCELLED"
    assert_one_line_error(jarvis(live_stack, "cancel", agent_id), "already CANCELLED")


def test_ctrl_c_during_watch_stops_watching_quietly_and_the_agent_goes_on(live_stack: LiveStack) -> None:
    agent_id = detach(live_stack, "slow: watch me, then stop watching")
    watcher = spawn(live_stack, "watch", agent_id)
    _, stdout, stderr = ctrl_c_mid_run(watcher)

    assert watcher.returncode == 130, stdout + stderr
    assert stderr.strip() == "", stderr  # no "error: aborted": stopping is not a failure
    assert agent(live_stack, agent_id, wait_s=30)["status"] == "COMPLETED"


def test_tools_lists_the_built_in_tools_and_where_each_comes_from(live_stack: LiveStack) -> None:
    result = jarvis(live_stack, "tools")
    assert result.returncode == 0, result.stderr
    header, *rows = result.stdout.splitlines()
    assert header.split() == ["NAME", "SOURCE", "DESCRIPTION"]
    names = [line.split()[0] for line in rows]
    assert names == ["calculate", "getTime", "getWeather", "search"]
    assert [line.split()[1] for line in rows] == ["builtin"] * 4
    tools = json.loads(jarvis(live_stack, "tools", "--json").stdout)["tools"]
    assert {t["name"] for t in tools} == set(names) and all(t["description"] for t in tools)


# --- errors: one line on stderr, a non-zero exit, never a traceback ------------------------

UNKNOWN = "0b9e4d3a-7c21-4f6e-8a5d-1c3f2e9b7a60"  # fixed: it names parametrized tests


@pytest.mark.parametrize("args", [["show", UNKNOWN], ["steps", UNKNOWN], ["watch", UNKNOWN], ["cancel", UNKNOWN]])
def test_an_unknown_id_is_one_line(live_stack: LiveStack, args: list[str]) -> None:
    assert_one_line_error(jarvis(live_stack, *args), f"no agent with id {UNKNOWN}")


@pytest.mark.parametrize("command", ["show", "steps", "watch", "cancel"])
def test_a_malformed_id_is_one_line(live_stack: LiveStack, command: str) -> None:
    assert_one_line_error(jarvis(live_stack, command, "not-a-uuid"), "is not an agent id")


@pytest.mark.parametrize("args", [["list"], ["tools"], ["run", "hi"], ["show", UNKNOWN], ["watch", UNKNOWN]])
def test_a_bad_key_is_one_line(live_stack: LiveStack, args: list[str]) -> None:
    assert_one_line_error(jarvis(live_stack, *args, JARVIS_API_KEY="jrv_wrong"), "the API key was refused")


@pytest.mark.parametrize("args", [["list"], ["run", "hi"], ["run", "--detach", "hi"], ["watch", UNKNOWN], ["tools"]])
def test_an_unreachable_api_is_one_line(live_stack: LiveStack, args: list[str]) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    result = jarvis(live_stack, *args, JARVIS_URL=url)
    assert_one_line_error(result, f"cannot reach the jarvis-agents API at {url}: connection refused")
    assert "jarvis-agents up" in result.stderr


def test_bad_requests_are_one_line(live_stack: LiveStack, tmp_path) -> None:
    assert_one_line_error(jarvis(live_stack, "run", "--tool", "teleport", "hi"), "unknown tool")
    assert_one_line_error(jarvis(live_stack, "run", "--max-steps", "0", "hi"), "--max-steps")
    assert_one_line_error(jarvis(live_stack, "list", "--status", "DONE"), "--status")
    assert_one_line_error(jarvis(live_stack, "list", "--cursor", "garbage"), "cursor")
    assert_one_line_error(jarvis(live_stack, "run", "   "), "goal")
    assert_one_line_error(jarvis(live_stack, "list", JARVIS_URL="ftp://example"), "JARVIS_URL")
    no_key = subprocess.run(
        [*CLI, "list"], check=False, capture_output=True, text=True, timeout=30,
        env=cli_env(JARVIS_URL=live_stack.url, JARVIS_DATA_DIR=str(tmp_path)),
    )
    assert_one_line_error(no_key, "no API key")


def test_the_key_and_url_saved_by_up_are_used_when_none_is_set(live_stack: LiveStack, tmp_path) -> None:
    (tmp_path / "api_key").write_text(live_stack.api_key + "\n")
    (tmp_path / "api_url").write_text(live_stack.url + "\n")  # `up --port P` on another port
    result = subprocess.run(
        [*CLI, "tools"], check=False, capture_output=True, text=True, timeout=30,
        env=cli_env(JARVIS_DATA_DIR=str(tmp_path)),
    )
    assert result.returncode == 0, result.stderr
    assert "calculate" in result.stdout
    elsewhere = f"http://127.0.0.1:{free_port()}"  # JARVIS_URL, when set, still wins
    assert_one_line_error(jarvis(live_stack, "tools", JARVIS_URL=elsewhere, JARVIS_DATA_DIR=str(tmp_path)),
                          elsewhere)


# --- threads and forks ----------------------------------------------------------------------


def test_run_continue_and_thread_ask_follow_ups_and_fork_re_runs_from_a_step(live_stack: LiveStack) -> None:
    first = jarvis(live_stack, "run", "--json", "What is 1234 * 902?")
    assert first.returncode == 0, first.stderr
    first_id = json.loads(first.stdout.splitlines()[-1])["agent_id"]

    follow_up = jarvis(live_stack, "run", "--continue", "And what was that again?")
    assert follow_up.returncode == 0, follow_up.stdout + follow_up.stderr
    header = follow_up.stdout.splitlines()[0]
    assert header.endswith(f"(thread {first_id})"), header
    second_id = UUID.search(header).group(0)  # type: ignore[union-attr]
    assert agent(live_stack, second_id)["parent_id"] == first_id

    third = jarvis(live_stack, "run", "--detach", "--thread", first_id, "And once more?")
    assert third.returncode == 0, third.stderr
    done = agent(live_stack, third.stdout.strip(), wait_s=20)
    assert (done["thread_id"], done["parent_id"]) == (first_id, second_id)
    assert done["context"] == {"turns": 2, "left_out": 0}
    listed = jarvis(live_stack, "list", "--json", "--thread", first_id)
    assert [a["id"] for a in json.loads(listed.stdout)["agents"]] == [done["id"], second_id, first_id]

    forked = jarvis(live_stack, "fork", first_id, "--after", "3", "--model", KNOWN_MODEL)
    assert forked.returncode == 0, forked.stdout + forked.stderr
    lines = forked.stdout.splitlines()
    assert f"forked from {first_id} after step 3" in lines[0]
    assert lines[1:6] == CALC_LINES

    assert_one_line_error(jarvis(live_stack, "run", "--thread", "nope", "hi"), "`thread_id` must be a UUID")
    assert_one_line_error(jarvis(live_stack, "fork", first_id, "--after", "2"),
                          "the nearest valid values are 0 or 3")
    assert_one_line_error(jarvis(live_stack, "run", "--continue", "--thread", first_id, "hi"),
                          "not both")


# --- live tokens -------------------------------------------------------------------------


def test_run_with_tokens_prints_the_replies_as_written_then_the_steps(live_stack: LiveStack) -> None:
    result = jarvis(live_stack, "run", "--tokens", "What is 1234 * 902?")
    assert result.returncode == 0, result.stderr
    # In a pipe the text cannot be erased: it stays, each reply ended by a newline.
    assert "THOUGHT: I need to compute\nACTION: calculate\nINPUT: 1234 * 902\n" in result.stdout
    lines = result.stdout.splitlines()
    assert [line for line in lines if line in CALC_LINES] == CALC_LINES
    as_json = jarvis(live_stack, "run", "--json", "--tokens", "What is 1234 * 902?")
    events = [json.loads(line) for line in as_json.stdout.splitlines()]
    written = "".join(e["delta"] for e in events if e["event"] == "token" and e["step"] == 0)
    assert written == "THOUGHT: I need to compute\nACTION: calculate\nINPUT: 1234 * 902"
    assert [e["event"] for e in events if e["event"] != "token"] == [
        "think", "act", "observe", "think", "final", "done"]


def test_run_with_tokens_prints_a_reply_asked_for_again_once(live_stack: LiveStack) -> None:
    live_stack.fake.chunk_delay_s = 0.05  # a few batches of tokens go out before the cut
    live_stack.fake.drop_next(1, after_chunks=6)
    try:
        result = jarvis(live_stack, "run", "--tokens", "What is 1234 * 902?")
    finally:
        live_stack.fake.chunk_delay_s = 0.0
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("THOUGHT: I need") == 1, result.stdout
    assert "THOUGHT: I need to compute\nACTION: calculate\nINPUT: 1234 * 902\n" in result.stdout


def run_on_a_terminal(stack: LiveStack, *args: str, timeout_s: float = 60) -> str:
    """What `jarvis-agents ARGS` writes to a terminal (a pseudo-terminal), control codes and all."""
    import os
    import pty

    leader, follower = pty.openpty()
    process = subprocess.Popen([*CLI, *args], env=stack.client_env(TERM="xterm", COLUMNS="200"),
                               stdin=follower, stdout=follower, stderr=follower)
    os.close(follower)
    out = b""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the process has exited and closed its side
            break
        if not chunk:
            break
        out += chunk
    os.close(leader)
    assert process.wait(timeout=10) == 0, out
    return out.decode(errors="replace").replace("\r\n", "\n")


def test_run_on_a_terminal_shows_the_reply_live_then_replaces_it_with_the_steps(
    live_stack: LiveStack,
) -> None:
    live_stack.fake.chunk_delay_s = 0.02
    try:
        shown = run_on_a_terminal(live_stack, "run", "What is 1234 * 902?")
        quiet = run_on_a_terminal(live_stack, "run", "--no-tokens", "What is 1234 * 902?")
    finally:
        live_stack.fake.chunk_delay_s = 0.0
    # Colours, the cursor shown or hidden and the spinner's frames (each erased by the
    # next line), not the moves and erasures.
    shown, quiet = (re.sub(r"[\u2800-\u28ff] [^\r\n]*\r\x1b\[2K", "",
                           re.sub(r"\x1b\[[0-9;?]*[mlh]", "", text)) for text in (shown, quiet))
    written = shown.index("THOUGHT: I need to compute\nACTION: calculate\nINPUT: 1234 * 902")
    erased = shown.index("\r\x1b[2A\x1b[J", written)  # the 3 lines erased, then the steps
    assert shown.index("THINK    I need to compute\nACT      calculate(1234 * 902)") > erased
    assert shown.count("calculate(1234 * 902)") == 1
    assert shown.index("FINAL_ANSWER: 1113068\r\x1b[1A\x1b[J") < shown.index("FINAL    1113068")
    assert "INPUT: 1234" not in quiet and "calculate(1234 * 902)" in quiet


def test_watch_with_tokens_shows_the_replies_of_an_agent_started_elsewhere(live_stack: LiveStack) -> None:
    agent_id = detach(live_stack, "slow: what is 1234 * 902?")  # each reply takes SLOW_TURN_S
    result = jarvis(live_stack, "watch", "--json", "--tokens", agent_id)
    assert result.returncode == 0, result.stderr
    events = [json.loads(line) for line in result.stdout.splitlines()]
    written = "".join(e["delta"] for e in events if e["event"] == "token" and e["step"] == 1)
    assert written == "THOUGHT: done\nFINAL_ANSWER: 1113068"  # the second reply, whole
    assert events[-1]["event"] == "done"
