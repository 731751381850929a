"""What the operator's endpoints report of the system (README, HTTP API and Metrics):
whether its dependencies answer (/readyz), and the database's figures (/metrics).

The readiness checks run at once, each bounded, and what they say is fit for anyone to
read: `/readyz` needs no key, so every string of its report goes out without URLs,
credentials or query strings (a model server's address, an MCP server's URL with its
token, a database error quoting its DSN). How often the checks run is the caller's
business: the API keeps one report per process for a few seconds (api/health.py).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from sqlalchemy import text

from jarvis_agents.config import Settings
from jarvis_agents.llm.readiness import ModelReadiness, check_default_model, default_provider
from jarvis_agents.redaction import without_urls
from jarvis_agents.store.repository import Repository
from jarvis_agents.store.statistics import Statistics

log = logging.getLogger(__name__)

CHECK_TIMEOUT_S = 3.0
SERVER_NAMES = {"ollama": "the Ollama server", "openai": "the OpenAI-compatible server"}


@dataclass(frozen=True)
class DatabaseFigures:
    """Agents by status, the PENDING ones by model: (how many, oldest created_at), the
    FAILED ones by stop reason, and when the oldest ended agent kept ended."""

    by_status: dict[str, int]
    pending: dict[str, tuple[int, datetime]]
    failed: dict[str, int]
    oldest_ended: datetime | None = None

    @classmethod
    def read(cls, statistics: Statistics) -> DatabaseFigures:
        return cls(statistics.status_counts(), statistics.pending_by_model(),
                   statistics.failed_by_reason(), statistics.oldest_ended_at())


@dataclass(frozen=True)
class Readiness:
    """One look at the dependencies: whether the system is ready, and the report."""

    ready: bool
    body: dict[str, Any]


class McpReadiness(Protocol):
    def readiness(self) -> dict[str, Any]: ...


class Health:
    """The system's health as the operator's endpoints read it."""

    def __init__(
        self, *, settings: Settings, store: Repository, redis: Any, mcp: McpReadiness,
    ) -> None:
        self.settings = settings
        self.store = store
        self.redis = redis
        self.mcp = mcp

    def database_figures(self) -> DatabaseFigures:
        """The database's figures, read now (a few aggregate queries; never the steps)."""
        return DatabaseFigures.read(self.store.statistics)

    def readiness(self, *, unserved: Callable[[], list[str]] = list) -> Readiness:
        """Check the database, Redis and the default model's server at once, each within
        CHECK_TIMEOUT_S; `unserved` says which models strand their agents (a warning)."""
        settings = self.settings
        model: list[ModelReadiness] = []  # filled by its check, if it answers in time
        provider = default_provider(settings)  # the check's name: "ollama" or "openai"
        checks = _run_parallel({
            "database": self._check_database,
            "redis": self._check_redis,
            provider: lambda: _check_model(settings, model),
        })
        checks[provider].setdefault("model", settings.model)
        checks[provider].setdefault("model_pulled", False)
        ready = all(check["ok"] for check in checks.values())
        warnings = [_not_served(found) for found in model if found.reachable and not found.available]
        if checks["database"]["ok"] and checks["redis"]["ok"]:
            warnings += _warnings_of(unserved)
        body: dict[str, Any] = {"status": "ready" if ready else "unavailable", "checks": checks,
                                "warnings": warnings}
        if settings.mcp_servers:
            # A server down costs its tools only: reported beside the checks, never a 503.
            body["mcp"] = self.mcp.readiness()
        return Readiness(ready, _shown(body))

    def _check_database(self) -> dict[str, Any]:
        with self.store.engine.connect() as connection:
            connection.execute(text("SELECT 1"))
        return {"ok": True, "error": None}

    def _check_redis(self) -> dict[str, Any]:
        self.redis.ping()
        return {"ok": True, "error": None}


def _check_model(settings: Settings, found: list[ModelReadiness]) -> dict[str, Any]:
    """The default model's server answers (required); whether it has the model (reported)."""
    readiness = check_default_model(settings, timeout_s=CHECK_TIMEOUT_S - 0.5)
    found.append(readiness)
    return {"ok": readiness.reachable, "error": readiness.error, "model": readiness.model,
            "model_pulled": readiness.available}


def _not_served(found: ModelReadiness) -> str:
    """The warning for a default model its server does not have: agents would fail."""
    if found.provider == "ollama":
        remedy = f"run `ollama pull {found.name}` there"
    else:
        remedy = "serve it there"
    server = SERVER_NAMES.get(found.provider, "its server")
    return (f"the default model '{found.model}' is not on {server}: agents that do not "
            f"name another model will fail; {remedy}, or set JARVIS_MODEL to a model it has")


def _warnings_of(unserved: Callable[[], list[str]]) -> list[str]:
    """The models with PENDING agents and no live worker (routing): a warning, not a 503."""
    try:
        return unserved()
    except Exception as exc:  # noqa: BLE001 - the checks say what is down
        log.warning("readyz: could not tell which models are served: %s", exc)
        return []


def _run_parallel(checks: dict[str, Callable[[], dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Run the checks at once: readiness answers in the time of the slowest, bounded."""
    results: dict[str, dict[str, Any]] = {}

    def run(name: str, check: Callable[[], dict[str, Any]]) -> None:
        try:
            results[name] = check()
        except Exception as exc:  # noqa: BLE001 - a failed check is the answer, not an error
            results[name] = {"ok": False, "error": _first_line(exc)}

    threads = [threading.Thread(target=run, args=item, daemon=True) for item in checks.items()]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + CHECK_TIMEOUT_S
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    answer = {}
    for name in checks:
        answer[name] = results.get(name) or {"ok": False, "error": f"no answer within {CHECK_TIMEOUT_S:g} s"}
    return answer


def _first_line(exc: BaseException) -> str:
    text_ = str(getattr(exc, "orig", None) or exc).strip()
    return text_.splitlines()[0] if text_ else type(exc).__name__


def _shown(value: Any) -> Any:
    """`value` with every string in it stripped of URLs, credentials and query strings."""
    if isinstance(value, str):
        return without_urls(value)
    if isinstance(value, Mapping):
        return {key: _shown(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_shown(item) for item in value]
    return value
