"""The `live_stack` fixture (see tests/support/live_stack.py); load it as a plugin:

    pytest_plugins = ["tests.support.api_fixtures", "tests.support.live_stack_fixtures"]
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator

import pytest

from tests.conftest import Process, cli_env
from tests.support.api_server import launch
from tests.support.fake_ollama import FakeOllama
from tests.support.live_stack import KNOWN_MODEL, LiveStack, calc_responder


@pytest.fixture(scope="module")
def live_stack(
    shared_api_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LiveStack]:
    """The stack, on the module's PostgreSQL database and Redis (`shared_api_env`)."""
    stopping = threading.Event()
    fake = FakeOllama(responder=calc_responder(stopping)).start()
    env = {
        **shared_api_env,
        "OLLAMA_HOST": fake.url,
        "JARVIS_MODEL": KNOWN_MODEL,
        "JARVIS_HEARTBEAT_INTERVAL": "1",
        "JARVIS_HEARTBEAT_STALE": "10",
    }
    logs = tmp_path_factory.mktemp("live-stack")
    started: list[Process] = []
    worker = Process(
        [sys.executable, "-m", "jarvis_agents.cli", "worker", "--concurrency", "20"],
        cli_env(**env), logs / "worker.log",
    )
    started.append(worker)
    try:
        api = launch(env, logs / "api.log", started)  # the worker starts meanwhile
        worker.wait_for("ready.", timeout_s=60)
        yield LiveStack(api=api, api_key=api.user(), fake=fake, worker=worker,
                        started=started, logs=logs)
    finally:
        stopping.set()
        for process in started:
            process.stop()
        fake.stop()
