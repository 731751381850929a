"""Liveness, readiness and Prometheus metrics: the operator's endpoints, no API key."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from flask import Blueprint, Response, jsonify
from prometheus_client import generate_latest
from sqlalchemy import text

from api.auth import public
from api.context import ctx
from api.system import SystemFigures
from jarvis_agents.config import Settings
from jarvis_agents.llm.readiness import ModelReadiness, check_default_model, default_provider
from jarvis_agents.store.repository import Repository

log = logging.getLogger(__name__)

bp = Blueprint("health", __name__)

CHECK_TIMEOUT_S = 3.0
PROMETHEUS_TEXT = "text/plain; version=0.0.4; charset=utf-8"


@bp.get("/healthz")
@public
def healthz() -> Response:
    return jsonify({"status": "ok"})


@bp.get("/readyz")
@public
def readyz() -> Response:
    context = ctx()
    settings = context.settings
    model: list[ModelReadiness] = []  # filled by its check, if it answers in time
    provider = default_provider(settings)  # the check's name: "ollama" or "openai"
    checks = _run_parallel({
        "database": lambda: _check_database(context.repository),
        "redis": lambda: _check_redis(context.redis),
        provider: lambda: _check_model(settings, model),
    })
    checks[provider].setdefault("model", settings.model)
    checks[provider].setdefault("model_pulled", False)
    ready = all(check["ok"] for check in checks.values())
    warnings = [_not_served(found) for found in model if found.reachable and not found.available]
    if checks["database"]["ok"] and checks["redis"]["ok"]:
        warnings += _unserved(context.system)
    body: dict[str, Any] = {"status": "ready" if ready else "unavailable", "checks": checks,
                            "warnings": warnings}
    if context.settings.mcp_servers:
        # A server down costs its tools only: reported beside the checks, never a 503.
        body["mcp"] = context.tools.readiness()
    response = jsonify(body)
    response.status_code = 200 if ready else 503
    return response


@bp.get("/metrics")
@public
def metrics() -> Response:
    body = generate_latest(ctx().metrics_registry)  # the system's figures and this process's
    return Response(body, status=200, content_type=PROMETHEUS_TEXT)


# --- readiness checks ---------------------------------------------------------------


def _check_database(repository: Repository) -> dict[str, Any]:
    with repository.engine.connect() as connection:
        connection.execute(text("SELECT 1"))
    return {"ok": True, "error": None}


def _check_redis(redis_client: Any) -> dict[str, Any]:
    redis_client.ping()
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
    return (f"the default model '{found.model}' is not on {found.server}: agents that do "
            f"not name another model will fail; {remedy}, or set JARVIS_MODEL to a model "
            "it has")


def _unserved(system: SystemFigures) -> list[str]:
    """The models with PENDING agents and no live worker (routing): a warning, not a 503."""
    try:
        return system.unserved_warnings()
    except Exception as exc:  # noqa: BLE001 - the checks above say what is down
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
