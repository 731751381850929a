"""The MCP tools the workers have, published in Redis, and read by the API.

Why the API reads what the workers publish rather than running MCP clients of its own:
the workers are the processes that call the tools, so what they reached is what an
agent can use (a stdio server may be installed, or a URL reachable, on the workers'
hosts only); the API would otherwise start a second copy of every stdio server that
never runs a call; and the API serves requests under gevent, where an asyncio loop
thread and child processes' pipes are not at home. Reading one Redis key per worker
never waits on a slow MCP server.

Each worker process with MCP servers writes `jarvis:tools:<worker id>` (its servers'
states and tools, JSON) with a TTL, on every change and every few seconds, and keeps
its id in the sorted set `jarvis:tools:workers` scored by when it expires. A worker that
dies without withdrawing drops out when its TTL passes.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from jarvis_agents.tools.mcp.config import McpServerConfig

log = logging.getLogger(__name__)

KEY_PREFIX = "jarvis:tools:"
INDEX_KEY = "jarvis:tools:workers"
TTL_S = 30  # three publishing intervals (provider.PUBLISH_INTERVAL_S)
CACHE_S = 1.0


class RedisPublisher:
    """Writes one worker process's MCP servers and tools to Redis."""

    def __init__(self, redis: Any, *, worker_id: str | None = None, ttl_s: int = TTL_S) -> None:
        self.redis = redis
        self.worker_id = worker_id or f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.ttl_s = ttl_s

    def publish(self, servers: dict[str, dict[str, Any]]) -> None:
        body = json.dumps({"worker": self.worker_id, "at": time.time(), "servers": servers})
        with self.redis.pipeline(transaction=False) as pipe:
            pipe.set(KEY_PREFIX + self.worker_id, body, ex=self.ttl_s)
            pipe.zadd(INDEX_KEY, {self.worker_id: time.time() + self.ttl_s})
            pipe.zremrangebyscore(INDEX_KEY, "-inf", time.time())
            pipe.execute()

    def withdraw(self) -> None:
        with self.redis.pipeline(transaction=False) as pipe:
            pipe.delete(KEY_PREFIX + self.worker_id)
            pipe.zrem(INDEX_KEY, self.worker_id)
            pipe.execute()


@dataclass
class ServerReport:
    """One MCP server as the live workers report it."""

    ok: bool = False
    errors: list[str] = field(default_factory=list)
    tools: list[dict[str, Any]] = field(default_factory=list)
    workers: int = 0


class PublishedTools:
    """The tools an agent may use, as the API sees them: its own built-ins and plug-ins,
    and the MCP tools the live workers publish."""

    def __init__(self, redis: Any, *, static: Iterable[dict[str, Any]],
                 servers: Iterable[McpServerConfig] = (), cache_s: float = CACHE_S) -> None:
        self.redis = redis
        self.static = list(static)
        self.configured = [server.name for server in servers]
        self.cache_s = cache_s
        self._cached: tuple[float, dict[str, ServerReport]] | None = None

    def describe(self) -> list[dict[str, Any]]:
        """Every tool, built-ins and plug-ins first; MCP tools of the servers that are up."""
        tools = {tool["name"].lower(): tool for tool in self.static}
        for report in self.reports().values():
            for tool in report.tools if report.ok else ():
                tools.setdefault(tool["name"].lower(), tool)
        return list(tools.values())

    def names(self) -> list[str]:
        return [str(tool["name"]) for tool in self.describe()]

    def canonical(self, name: str) -> str | None:
        """The name as listed, or None when no tool is called `name`.

        A name `<server>__…` of a configured server that no live worker has reported up
        yet is accepted as given: its tools are not known until it answers, and an agent
        created meanwhile gets the tool once its worker has it.
        """
        key = name.strip().lower()
        for tool in self.describe():
            if tool["name"].lower() == key:
                return str(tool["name"])
        reports = self.reports()
        for server in self.configured:
            report = reports.get(server)
            if key.startswith(f"{server.lower()}__") and len(key) > len(server) + 2 and (
                report is None or not report.ok
            ):
                return name.strip()
        return None

    def readiness(self) -> dict[str, Any]:
        """Each configured server's state, and a warning per server that is not up."""
        reports = self.reports()
        servers: dict[str, Any] = {}
        warnings: list[str] = []
        for name in self.configured:
            report = reports.get(name, ServerReport())
            error = None if report.ok else (
                report.errors[0] if report.errors else "no running worker has reported it")
            servers[name] = {"ok": report.ok, "error": error, "tools": len(report.tools)}
            if error is not None:
                warnings.append(f"MCP server '{name}' is not available: {error}")
        return {"servers": servers, "warnings": warnings}

    def reports(self) -> dict[str, ServerReport]:
        """The live workers' reports, merged by server; at most `cache_s` old."""
        if not self.configured:  # no MCP servers: nothing to read
            return {}
        now = time.monotonic()
        if self._cached is not None and now - self._cached[0] < self.cache_s:
            return self._cached[1]
        try:
            reports = self._read()
        except Exception as exc:  # noqa: BLE001 - Redis away: list what this process knows
            log.warning("cannot read the published MCP tools: %s", exc)
            reports = {}
        self._cached = (now, reports)
        return reports

    def _read(self) -> dict[str, ServerReport]:
        workers = self.redis.zrangebyscore(INDEX_KEY, time.time(), "+inf")
        if not workers:
            return {}
        keys = [KEY_PREFIX + (w.decode() if isinstance(w, bytes) else w) for w in workers]
        snapshots = [json.loads(raw) for raw in self.redis.mget(keys) if raw]
        snapshots.sort(key=lambda snapshot: snapshot.get("at", 0), reverse=True)  # newest first
        reports: dict[str, ServerReport] = {}
        for snapshot in snapshots:
            for name, server in (snapshot.get("servers") or {}).items():
                report = reports.setdefault(name, ServerReport())
                report.workers += 1
                if server.get("ok") and not report.ok:
                    report.ok, report.tools = True, list(server.get("tools") or [])
                elif not server.get("ok") and server.get("error"):
                    report.errors.append(str(server["error"]))
        return reports
