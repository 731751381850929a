"""`jarvis-agents up` from nothing: embedded SQLite and Redis, one agent, clean Ctrl-C."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.conftest import ROOT, Process, cli_env, free_port
from tests.faults.conftest import CALC
from tests.support.api_server import wait_until


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
        assert f"http://127.0.0.1:{port}/" in output
        assert "sqlite:///" in output and "redis://127.0.0.1:" in output
        key = re.search(r"API key \(saved to .*\): (\S+)", output)
        assert key is not None and (data_dir / "api_key").read_text().strip() == key.group(1)
        assert "Ollama is not reachable" not in output
        # The CLI finds the saved key by itself.
        run = subprocess.run(
            [sys.executable, "-m", "jarvis_agents.cli", "run", "What is 1234 * 902?"],
            env={**env, "JARVIS_URL": f"http://127.0.0.1:{port}"}, cwd=ROOT,
            check=False, capture_output=True, text=True, timeout=60)
        assert run.returncode == 0, run.stdout + run.stderr
        assert "calculate" in run.stdout and "1113068" in run.stdout
        assert "COMPLETED" in run.stdout and "Traceback" not in run.stderr
        assert processes_with(str(data_dir))  # sanity: the children are found
    finally:
        os.kill(up.proc.pid, signal.SIGINT)
        code = up.proc.wait(40)
        up.stop()
    assert code == 0, up.output()[-2000:]
    # No child process left behind (one that is exiting may need a moment to go).
    wait_until(lambda: processes_with(str(data_dir)) == [], timeout_s=5)


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
