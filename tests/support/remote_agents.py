"""A remote agent for remote delegates' tests (README, Agents that call agents): a second
jarvis (its own API, worker, database and Redis database) serving A2A, and the
JARVIS_A2A_AGENTS file naming it, as `far`, with the key of a user of its own."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.conftest import free_port, held_redis_db, new_pg_database, stop_all, worker_process
from tests.support.api_server import Api, launch


@contextmanager
def far_stack(ollama_url: str, logs: Path) -> Iterator[tuple[Api, str]]:
    """The remote side, and the key of its user. Its agents ask before they calculate."""
    with new_pg_database() as database_url, held_redis_db() as redis_url:
        env = {"DATABASE_URL": database_url, "REDIS_URL": redis_url, "OLLAMA_HOST": ollama_url,
               "JARVIS_HEARTBEAT_INTERVAL": "1", "JARVIS_APPROVE_TOOLS": "calculate"}
        started = [worker_process(env, logs / "worker.log")]
        try:
            api = launch(env, logs / "api.log", started)
            started[0].wait_for("ready.", timeout_s=60)
            yield api, api.user()
        finally:
            stop_all(started)


def agents_file(far: tuple[Api, str], path: Path, **relays: str) -> dict[str, str]:
    """Write the file naming `far` (and `gone`, an address nothing listens on, and each
    of `relays`: a name and the URL of a relay in front of `far`); the environment that
    points a stack at it."""
    api, key = far
    headers = {"Authorization": f"Bearer {key}"}
    path.write_text(json.dumps({"agents": {
        "far": {"url": f"{api.url}/.well-known/agent-card.json", "headers": headers},
        "gone": {"url": f"http://127.0.0.1:{free_port()}/.well-known/agent-card.json"},
        **{name: {"url": f"{url}/.well-known/agent-card.json", "headers": headers}
           for name, url in relays.items()},
    }}))
    return {"JARVIS_A2A_AGENTS": str(path)}
