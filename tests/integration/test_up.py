"""`jarvis-agents up` from nothing: embedded SQLite and Redis, one agent, clean Ctrl-C."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import threading
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from jarvis_agents.cli.local_stack import LocalStack, model_advice
from jarvis_agents.config import Settings
from jarvis_agents.errors import JarvisError
from jarvis_agents.lifecycle import AgentStatus
from jarvis_agents.store import open_repository
from tests.conftest import ROOT, Process, cli_env, free_port
from tests.faults.conftest import CALC
from tests.support.api_server import wait_until

pytestmark = pytest.mark.long


def processes_with(marker: str) -> list[int]:
    """PIDs whose environment or command line mentions `marker` (our data dir)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            blob = (entry / "environ").read_bytes() + (entry / "cmdline").read_bytes()
            state = (entry / "stat").read_text().split()[2]
        except OSError:
            continue
        if marker.encode() in blob and state != "Z":
            found.append(int(entry.name))
    return found


def test_up_runs_an_agent_end_to_end_and_stops_cleanly(tmp_path: Path, fake_ollama: Any) -> None:
    fake_ollama.responder = fake_ollama.by_turn(CALC)
    data_dir = tmp_path / "jarvis-data"
    port = free_port()
    env = cli_env(JARVIS_DATA_DIR=str(data_dir), OLLAMA_HOST=fake_ollama.url, JARVIS_MODEL="test-model")
    up = Process([sys.executable, "-m", "jarvis_agents.cli", "up", "--port", str(port)], env,
                 tmp_path / "up.log")
    try:
        up.wait_for("Press Ctrl-C", timeout_s=90)
        output = up.output()
        key = says_only_what_a_user_needs(output, port, data_dir)
        assert (data_dir / "api_key").read_text().strip() == key
        assert "database: sqlite:///" in output and "redis:    redis://127.0.0.1:" in output
        assert "Ollama is not reachable" not in output
        # The CLI finds the saved key and URL by itself: no JARVIS_URL, another port than 8000.
        run = subprocess.run(
            [sys.executable, "-m", "jarvis_agents.cli", "run", "What is 1234 * 902?"],
            env=env, cwd=ROOT, check=False, capture_output=True, text=True, timeout=60)
        assert run.returncode == 0, run.stdout + run.stderr
        assert "calculate" in run.stdout and "1113068" in run.stdout
        assert "COMPLETED" in run.stdout and "Traceback" not in run.stderr
        # MCP at the API's URL (the MCP server beside it answers): the example finds the URL
        # and the key by itself.
        assert f"MCP server (your assistants as tools): http://127.0.0.1:{port}/mcp" in output
        example = subprocess.run(
            [sys.executable, "examples/mcp_client.py", "What is 1234 * 902?"],
            env=env, cwd=ROOT, check=False, capture_output=True, text=True, timeout=60)
        assert example.returncode == 0, example.stdout + example.stderr
        assert example.stdout.startswith("your assistants: agent\n"), example.stdout
        assert "iteration 1: calling calculate" in example.stdout and "1113068" in example.stdout
        assert processes_with(str(data_dir))  # sanity: the children are found
    finally:
        os.kill(up.proc.pid, signal.SIGINT)
        code = up.proc.wait(40)
        up.stop()
    assert code == 0, up.output()[-2000:]
    # No child process left behind (one that is exiting may need a moment to go).
    wait_until(lambda: processes_with(str(data_dir)) == [], timeout_s=5)


def says_only_what_a_user_needs(output: str, port: int, data_dir: Path) -> str:
    """`up`'s output starts with the URL and the key, and has nothing of its children's
    (Celery's banner, its warnings, log lines): those are in their logs. Returns the key."""
    lines = output.splitlines()
    assert lines[0] == f"jarvis-agents is running: dashboard and API at http://127.0.0.1:{port}/", output
    key = re.fullmatch(rf"API key \(saved to {re.escape(str(data_dir))}/api_key\): (jrv_\S+)", lines[1])
    assert key is not None, output
    for noise in ("celery@", "[config]", "Warning", "INFO", "API listening", "MCP server listening"):
        assert noise not in output, f"{noise!r} in what `up` printed:\n{output}"
    logs = data_dir / "logs"
    assert f"logs:     {logs}" in lines
    worker_log = (logs / "worker.log").read_text()
    assert "celery@" in worker_log and "ready." in worker_log
    assert "API listening on" in (logs / "api.log").read_text()
    assert "MCP server listening on" in (logs / "mcp.log").read_text()
    return key.group(1)


def test_up_shows_the_database_and_redis_without_their_passwords(
    tmp_path: Path, pg_url: str, redis_url: str, fake_ollama: Any
) -> None:
    data_dir = tmp_path / "jarvis-data"
    port = free_port()
    # The tests' PostgreSQL trusts, and their Redis's default user takes any password: both
    # accept the URLs as given, passwords and all.
    user = urlsplit(pg_url).username
    assert user and urlsplit(pg_url).password is None
    database = pg_url.replace(f"://{user}@", f"://{user}:db-s3cret@", 1)
    redis = redis_url.replace("redis://", "redis://default:redis-s3cret@", 1)
    env = cli_env(JARVIS_DATA_DIR=str(data_dir), DATABASE_URL=database, REDIS_URL=redis,
                  OLLAMA_HOST=fake_ollama.url, JARVIS_MODEL="test-model")
    up = Process([sys.executable, "-m", "jarvis_agents.cli", "up", "--port", str(port)], env,
                 tmp_path / "up.log")
    try:
        up.wait_for("Press Ctrl-C", timeout_s=90)
        output = up.output()
        says_only_what_a_user_needs(output, port, data_dir)
        assert "s3cret" not in output
        assert f"database: {pg_url.replace(f'://{user}@', f'://{user}:***@', 1)}" in output
        assert f"redis:    {redis_url.replace('redis://', 'redis://default:***@', 1)}" in output
    finally:
        os.kill(up.proc.pid, signal.SIGINT)
        code = up.proc.wait(40)
        up.stop()
    assert code == 0, up.output()[-2000:]


def test_a_child_that_stops_while_starting_is_said_in_one_line_below_its_last_words(
    tmp_path: Path,
) -> None:
    said: list[str] = []
    stack = LocalStack(Settings.from_env({"JARVIS_DATA_DIR": str(tmp_path)}), free_port(),
                       echo=said.append)
    log = tmp_path / "worker.log"
    stack._spawn("worker", [sys.executable, "-c", "print('first'); print('the reason'); raise SystemExit(3)"],
                 cli_env(), log=log)
    try:
        with pytest.raises(JarvisError) as raised:
            stack._wait(lambda: False, "never", timeout_s=30)
    finally:
        stack.stop()
    assert said == ["  first", "  the reason"]
    assert str(raised.value) == f"the worker exited with code 3 while starting (its log: {log})"


def test_up_explains_a_missing_ollama(tmp_path: Path) -> None:
    port = free_port()
    env = cli_env(JARVIS_DATA_DIR=str(tmp_path / "d"), OLLAMA_HOST=f"http://127.0.0.1:{free_port()}")
    up = Process([sys.executable, "-m", "jarvis_agents.cli", "up", "--port", str(port)], env,
                 tmp_path / "up.log")
    try:
        up.wait_for("Press Ctrl-C", timeout_s=90)
        assert "Ollama is not reachable" in up.output() and "ollama pull" in up.output()
    finally:
        os.kill(up.proc.pid, signal.SIGINT)
        assert up.proc.wait(40) == 0
        up.stop()


def test_a_busy_port_is_said_before_anything_starts(tmp_path: Path) -> None:
    data_dir = tmp_path / "jarvis-data"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(
            [sys.executable, "-m", "jarvis_agents.cli", "up", "--port", str(port)],
            env=cli_env(JARVIS_DATA_DIR=str(data_dir)), cwd=ROOT, check=False,
            capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    assert result.stdout == "" and "Traceback" not in result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(f"error: port {port} on 127.0.0.1 is already in use"), line
    assert "jarvis-agents up --port " in line
    assert not (data_dir / "jarvis.db").exists()  # no database made, no worker started on it


def test_ctrl_c_says_what_it_waits_for_and_a_second_one_hands_the_agents_back(
    tmp_path: Path, fake_ollama: Any
) -> None:
    released = threading.Event()
    fake_ollama.responder = lambda request: released.wait(120) and "FINAL_ANSWER: late"
    data_dir = tmp_path / "jarvis-data"
    port = free_port()
    env = cli_env(JARVIS_DATA_DIR=str(data_dir), OLLAMA_HOST=fake_ollama.url, JARVIS_MODEL="test-model",
                  JARVIS_SHUTDOWN_GRACE="300")
    up = Process([sys.executable, "-m", "jarvis_agents.cli", "up", "--port", str(port)], env,
                 tmp_path / "up.log")
    try:
        up.wait_for("Press Ctrl-C", timeout_s=90)
        key = (data_dir / "api_key").read_text().strip()
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", headers={"Authorization": f"Bearer {key}"},
                          timeout=30) as http:
            ids = [http.post("/api/v1/agents", json={"goal": f"wait {n}"}).json()["id"] for n in (1, 2)]
            wait_until(lambda: all(http.get(f"/api/v1/agents/{i}").json()["status"] == "RUNNING"
                                   for i in ids), timeout_s=30)
        os.kill(up.proc.pid, signal.SIGINT)
        up.wait_for("waiting up to 300 s for 2 running agents", timeout_s=30)
        os.kill(up.proc.pid, signal.SIGINT)  # not 300 s: now
        code = up.proc.wait(60)
    finally:
        released.set()
        up.stop()
    assert code == 0, up.output()[-2000:]
    assert "press Ctrl-C again to hand them back now" in up.output()
    # Handed back: still RUNNING, owned by no worker, for the next start to resume at once.
    store = open_repository(Settings.from_env({"JARVIS_DATA_DIR": str(data_dir)}), pool_size=1)
    try:
        for agent_id in ids:
            agent = store.get(uuid.UUID(agent_id))
            assert agent is not None and agent.status is AgentStatus.RUNNING
            assert agent.heartbeat_at is None, "not handed back: it would wait to be found stale"
    finally:
        store.engine.dispose()
    wait_until(lambda: processes_with(str(data_dir)) == [], timeout_s=5)


def test_the_model_advice_follows_the_default_models_provider(tmp_path: Path, fake_ollama: Any) -> None:
    no_server = f"http://127.0.0.1:{free_port()}"
    openai_only = Settings.from_env({
        "JARVIS_DATA_DIR": str(tmp_path), "OLLAMA_HOST": no_server,
        "JARVIS_MODEL": "openai/test-model", "OPENAI_BASE_URL": f"{fake_ollama.url}/v1",
    })
    assert model_advice(openai_only) is None  # no word about an Ollama it does not use
    fake_ollama.models = ["other-model"]
    advice = model_advice(openai_only)
    assert advice is not None and "Ollama" not in advice and "'test-model'" in advice
    unconfigured = Settings.from_env({"JARVIS_DATA_DIR": str(tmp_path), "OLLAMA_HOST": no_server,
                                      "JARVIS_PROVIDER": "openai"})
    advice = model_advice(unconfigured)
    assert advice is not None and "OPENAI_BASE_URL" in advice and "Ollama" not in advice
    ollama_down = Settings.from_env({"JARVIS_DATA_DIR": str(tmp_path), "OLLAMA_HOST": no_server})
    assert "Ollama is not reachable" in (model_advice(ollama_down) or "")
