"""`jarvis-agents worker` as its operator reads it (and `up` shows it): what a warm
shutdown says it does with the agents it runs."""

from __future__ import annotations

import signal
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Process, cli_env
from tests.support.api_server import wait_until

pytestmark = pytest.mark.integration
pytest_plugins = ["tests.support.api_fixtures"]


def test_a_shutdown_counts_its_running_agents_in_words(
    api_env: dict[str, str], start_api: Any, start_worker: Any, fake_ollama: Any
) -> None:
    released = threading.Event()
    fake_ollama.responder = lambda request: released.wait(60) and "FINAL_ANSWER: late"
    env = {**api_env, "JARVIS_SHUTDOWN_GRACE": "1"}
    api = start_api(env)
    worker = start_worker(env)
    try:
        with api.client(api.user()) as http:
            agent_id = http.post("/api/v1/agents", json={"goal": "wait"}).json()["id"]
            wait_until(lambda: http.get(f"/api/v1/agents/{agent_id}").json()["status"] == "RUNNING")
        worker.signal(signal.SIGTERM)
        worker.wait_for("shutting down:")
        worker.proc.wait(30)
    finally:
        released.set()
    assert "shutting down: 1 running agent is handed back in 1 s" in worker.output(), worker.output()


def test_the_worker_runs_its_own_package_whatever_folder_it_is_started_in(
    api_env: dict[str, str], tmp_path: Path, started_processes: list[Any]
) -> None:
    """A `workers/` folder in the current directory (a checkout beside an installed copy)
    is not what the supervised worker imports."""
    impostor = tmp_path / "here" / "workers"
    impostor.mkdir(parents=True)
    (impostor / "__init__.py").write_text("")
    marker = tmp_path / "impostor-ran"
    (impostor / "main.py").write_text(
        f"import pathlib, sys\npathlib.Path({str(marker)!r}).write_text('ran')\nsys.exit(3)\n")
    command = Path(sys.executable).with_name("jarvis-agents")
    worker = Process([str(command), "worker", "--concurrency", "4"], cli_env(**api_env),
                     tmp_path / "worker.log", cwd=impostor.parent)
    started_processes.append(worker)
    worker.wait_for("ready.", timeout_s=60)
    assert not marker.exists(), worker.output()
