"""The README's quick start without a model server, as written: the shipped demo model
(`jarvis-agents demo-model`, the installed command), `PORT=… make up` on the port asked,
and the example goals completed against it in each mode."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import Process, cli_env, free_port
from tests.integration.test_up import processes_with
from tests.support.api_server import wait_until

pytestmark = pytest.mark.integration

# The command `pip install` puts beside the interpreter, not `python -m`: what a user runs.
JARVIS = str(Path(sys.executable).parent / "jarvis-agents")


def jarvis(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([JARVIS, *args], env=env, check=False, capture_output=True, text=True,
                          timeout=60)
    assert "Traceback" not in done.stderr, done.stderr
    return done


def test_the_demo_model_and_make_up_on_port_run_the_readme_goals(tmp_path: Path) -> None:
    # As the README says, with Ollama's port taken: both told another OLLAMA_HOST.
    model_host, port = f"127.0.0.1:{free_port()}", free_port()
    data_dir = tmp_path / "jarvis-data"
    env = cli_env(JARVIS_DATA_DIR=str(data_dir), OLLAMA_HOST=model_host, PORT=str(port))
    demo = Process(["make", "demo-model", f"VENV={sys.prefix}"], env, tmp_path / "demo.log")
    started = [demo]
    try:
        demo.wait_for(f"demo model server (Ollama's API) at http://{model_host}", timeout_s=60)
        assert f"for `jarvis-agents up`: OLLAMA_HOST=http://{model_host}" in demo.output()
        up = Process(["make", "up", f"VENV={sys.prefix}"], env, tmp_path / "up.log")  # terminal 2
        started.insert(0, up)
        up.wait_for("Press Ctrl-C", timeout_s=120)
        assert f"dashboard and API at http://127.0.0.1:{port}/" in up.output()

        for mode, used in (("auto", "native"), ("native", "native"), ("react", "react")):
            run = jarvis("run", "--mode", mode, "What is 1234 * 902?", env=env)
            assert run.returncode == 0, run.stdout + run.stderr
            assert "calculate" in run.stdout and "FINAL    1234 * 902 = 1113068." in run.stdout
            agent_id = run.stdout.split()[1]
            assert json.loads(jarvis("show", "--json", agent_id, env=env).stdout)["mode"] == used
        told = jarvis("run", "What time is it in Tokyo?", env=env)
        assert told.returncode == 0, told.stdout + told.stderr
        assert "getTime" in told.stdout and "time zone Asia/Tokyo" in told.stdout
    finally:
        for process in started:  # Ctrl-C, as in a terminal: make and its command get it
            process.signal(signal.SIGINT)
            process.proc.wait(60)
            process.stop()
    assert "Traceback" not in demo.output()
    wait_until(lambda: processes_with(str(data_dir)) == [], timeout_s=10)


def test_the_demo_model_on_a_busy_port_is_one_line() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = jarvis("demo-model", "--port", str(port), env=cli_env())
    assert done.returncode == 1 and done.stdout == ""
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith(f"error: cannot listen on 127.0.0.1:{port}: "), line
