"""A whole system for client-side tests: a real API, a real worker, PostgreSQL, Redis and
a FakeOllama, shared by one test module (the CLI and dashboard tests only add agents).

    pytest_plugins = ["tests.support.api_fixtures", "tests.support.live_stack_fixtures"]

The model follows the calculator script; a goal containing "slow" makes each of its
replies take SLOW_TURN_S, long enough to watch or cancel the agent while it runs.
"""

from __future__ import annotations

import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from tests.conftest import Process, cli_env
from tests.support.api_server import CALC_SCRIPT, Api
from tests.support.fake_ollama import FakeOllama

SLOW_TURN_S = 2.0
KNOWN_MODEL = "test-model"


@dataclass
class LiveStack:
    api: Api
    api_key: str
    fake: FakeOllama
    worker: Process
    started: list[Process]
    logs: Path

    @property
    def url(self) -> str:
        return self.api.url

    def restart_api(self) -> None:
        """Stop the API (its open streams drop) and start it again on the same port."""
        self.api.process.stop()
        port = urlsplit(self.api.url).port
        process = Process(
            [sys.executable, "-m", "jarvis_agents.cli", "api", "--port", str(port)],
            cli_env(**self.api.env), self.logs / f"api-{len(self.started)}.log",
        )
        self.started.append(process)
        process.wait_for("API listening on", timeout_s=30)
        self.api.process = process

    def client_env(self, **overrides: str) -> dict[str, str]:
        """The environment of a `jarvis-agents` client command talking to this stack."""
        return cli_env(**{"JARVIS_URL": self.api.url, "JARVIS_API_KEY": self.api_key, **overrides})


def calc_responder(stopping: threading.Event) -> Any:
    script = FakeOllama.by_turn(CALC_SCRIPT)

    def respond(request: dict[str, Any]) -> str:
        goal = next((m.get("content", "") for m in request.get("messages", []) if m.get("role") == "user"), "")
        if "slow" in goal:
            stopping.wait(SLOW_TURN_S)
        return script(request)

    return respond
