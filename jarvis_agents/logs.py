"""Logging for every process: JSON lines when not on a TTY, and the agent id on each record.

The runner sets the agent id in a context variable while it runs an agent, so any
log line written on that thread — the executor's, the model adapter's, a tool's —
carries `agent_id` without passing it around.
"""

from __future__ import annotations

import contextvars
import json
import logging
import sys
from datetime import UTC, datetime

current_agent_id: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "jarvis_agent_id", default=None
)

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s%(agent)s: %(message)s"


class AgentIdFilter(logging.Filter):
    """Adds `agent_id` (or None) to every record."""

    def filter(self, record: logging.LogRecord) -> bool:
        agent_id = current_agent_id.get()
        record.agent_id = agent_id
        record.agent = f" [agent {agent_id}]" if agent_id else ""
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, agent_id, exception."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "agent_id": getattr(record, "agent_id", None),
            "process": record.process,
            "thread": record.threadName,
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


def configure_logging(*, json_lines: bool | None = None, level: int = logging.INFO) -> None:
    """Install one stderr handler on the root logger; JSON unless stderr is a TTY."""
    if json_lines is None:
        json_lines = not sys.stderr.isatty()
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(AgentIdFilter())
    handler.setFormatter(JsonFormatter() if json_lines else logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    for existing in list(root.handlers):
        root.removeHandler(existing)
    root.addHandler(handler)
    root.setLevel(level)
    # One line per HTTP request or migration plugin is noise at INFO.
    for noisy in ("httpx", "httpcore", "alembic"):
        logging.getLogger(noisy).setLevel(max(level, logging.WARNING))
