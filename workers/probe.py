"""A worker's Celery node name, and the health check that finds it: `jarvis-agents ping-worker`.

A worker names itself `celery@<host>-<pid>`: several worker processes on one machine stay
distinct nodes (Celery's remote control addresses one by its name: workers.main), and the
process its supervisor starts again after a crash has a new pid. So the check asks every
node of this host, by pattern, rather than one name a container cannot know, and passes
when one of them answers over the broker (README: Health checks).
"""

from __future__ import annotations

import os
import re
import socket

from kombu.exceptions import OperationalError

from jarvis_agents.config import Settings
from jarvis_agents.errors import DependencyUnavailable
from workers.celery_app import create_celery


def node_name(host: str | None = None, pid: int | None = None) -> str:
    """This process's node name (a worker's, when a worker calls it)."""
    return f"celery@{host or socket.gethostname()}-{pid or os.getpid()}"


def host_pattern(host: str) -> str:
    """A regular expression for the node names of `host`'s workers, and of no other host's
    (`web-1` must not match the workers of `web-1-2`)."""
    return rf"celery@{re.escape(host)}-\d+$"


def ping_host_workers(settings: Settings, *, timeout_s: float, host: str | None = None) -> list[str]:
    """The workers of `host` (this machine's, by default) that answered a ping within
    `timeout_s`: at most one, as the first answer ends the wait."""
    app = create_celery(settings)
    try:
        replies = app.control.ping(timeout=timeout_s, limit=1, matcher="pcre",
                                   pattern=host_pattern(host or socket.gethostname()))
    except (OperationalError, OSError) as exc:
        raise DependencyUnavailable(f"the task queue (Redis) is unreachable: {exc}") from None
    finally:
        app.close()
    return [name for reply in replies for name in reply]
