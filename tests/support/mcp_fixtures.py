"""The `http_server` fixture: MCP servers of tests/support/mcp_servers.py over Streamable
HTTP, each in a process of its own. Load it as a plugin:

    pytest_plugins = ["tests.support.mcp_fixtures"]
"""

from __future__ import annotations

import socket
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.conftest import Process, cli_env, free_port
from tests.support.api_server import wait_until


@pytest.fixture
def http_server(tmp_path: Path) -> Iterator[Callable[..., str]]:
    """http_server(kind, **env) → the URL of a Streamable HTTP MCP server of that kind,
    with `env` added to its environment."""
    started: list[Process] = []

    def start(kind: str, **env: str) -> str:
        port = free_port()
        process = Process([sys.executable, "-m", "tests.support.mcp_servers", kind, "--http", str(port)],
                          cli_env(**env), tmp_path / f"mcp-{kind}-{port}.log")
        started.append(process)
        wait_until(lambda: _accepts(port), timeout_s=30)
        return f"http://127.0.0.1:{port}/mcp"

    yield start
    for process in started:
        process.stop()


def _accepts(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0
