"""The readiness report: each dependency's check, and nothing in it that anyone reading
/readyz should not see (a URL, a query string, a credential)."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from sqlalchemy.exc import OperationalError

from jarvis_agents.config import Settings
from jarvis_agents.health import Health
from jarvis_agents.tools.mcp.config import McpServerConfig

DSN = "postgresql+psycopg2://root:pa55word@db:5432/jarvis?sslmode=require"


class DownDatabase:
    """A store whose database refuses, saying its DSN as psycopg2 may."""

    @property
    def engine(self) -> Any:
        def connect() -> Any:
            raise OperationalError("SELECT 1", {}, Exception(f'invalid DSN "{DSN}": refused'))

        return SimpleNamespace(connect=connect)


class DownRedis:
    def ping(self) -> None:
        raise ConnectionError("Error connecting to redis://:pa55word@cache:6379/0.")


class McpServers:
    def readiness(self) -> dict[str, Any]:
        error = "cannot reach https://mcp.example.com/mcp?token=s3cret: 401 Unauthorized"
        return {"servers": {"remote": {"ok": False, "error": error, "tools": 0}},
                "warnings": [f"MCP server 'remote' is not available: {error}"]}


def unreachable_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_the_report_says_what_is_down_and_shows_no_url_or_secret(tmp_path: Path) -> None:
    settings = Settings(
        database_url=DSN, redis_url="redis://:pa55word@cache:6379/0", data_dir=tmp_path,
        ollama_host=f"http://ada:pa55word@127.0.0.1:{unreachable_port()}/?token=s3cret",
        mcp_servers=(McpServerConfig("remote", url="https://mcp.example.com/mcp?token=s3cret"),),
    )
    health = Health(settings=settings, store=DownDatabase(), redis=DownRedis(),  # type: ignore[arg-type]
                    mcp=McpServers())
    readiness = health.readiness(unserved=lambda: ["never asked: the database is down"])
    assert not readiness.ready
    body = readiness.body
    assert body["status"] == "unavailable"
    assert {name: check["ok"] for name, check in body["checks"].items()} == {
        "database": False, "redis": False, "ollama": False}
    assert "refused" in body["checks"]["database"]["error"]
    assert body["checks"]["redis"]["error"] == "Error connecting to <url>."
    assert body["mcp"]["servers"]["remote"] == {
        "ok": False, "error": "cannot reach <url>: 401 Unauthorized", "tools": 0}
    assert body["warnings"] == []  # which models are served: not asked of a database down
    shown = json.dumps(body)
    for secret in ("pa55word", "s3cret", "token", "://", "ada:"):
        assert secret not in shown, secret
