"""Liveness, readiness and Prometheus metrics: the operator's endpoints, no API key.

`/readyz` needs no key, so anyone may ask it as often as they like: its checks
(jarvis_agents.health) run at most once per READY_FRESH_S per process, whoever asks,
and every caller meanwhile gets the same report (README, HTTP API).
"""

from __future__ import annotations

import logging
from typing import Any

from flask import Blueprint, Response, jsonify
from prometheus_client import generate_latest

from api.auth import public
from api.context import ctx
from api.scrape_cache import ScrapeCache
from jarvis_agents.health import CHECK_TIMEOUT_S, Health, Readiness

log = logging.getLogger(__name__)

bp = Blueprint("health", __name__)

PROMETHEUS_TEXT = "text/plain; version=0.0.4; charset=utf-8"
READY_FRESH_S = 5.0
# A caller waits for a check in flight, which its own bound ends; a report older
# than this (the checks stuck) is not given.
READY_WAIT_S = CHECK_TIMEOUT_S + 1.0
READY_MAX_AGE_S = READY_FRESH_S + READY_WAIT_S

__all__ = ["CHECK_TIMEOUT_S", "bp", "readiness_cache"]


def readiness_cache(health: Health, unserved: Any) -> ScrapeCache[Readiness]:
    """The process's one readiness report, renewed once it is READY_FRESH_S old."""
    return ScrapeCache(lambda: health.readiness(unserved=unserved), fresh_s=READY_FRESH_S,
                       max_age_s=READY_MAX_AGE_S, wait_s=READY_WAIT_S)


@bp.get("/healthz")
@public
def healthz() -> Response:
    return jsonify({"status": "ok"})


@bp.get("/readyz")
@public
def readyz() -> Response:
    try:
        readiness = ctx().readiness.get()
    except Exception as exc:  # noqa: BLE001 - the checks themselves never raise; stuck ones
        log.warning("readyz: no readiness report: %s", exc)
        readiness = Readiness(False, {
            "status": "unavailable", "checks": {},
            "warnings": [f"the checks have not answered within {READY_WAIT_S:g} s"]})
    response = jsonify(readiness.body)
    response.status_code = 200 if readiness.ready else 503
    return response


@bp.get("/metrics")
@public
def metrics() -> Response:
    body = generate_latest(ctx().metrics_registry)  # the system's figures and this process's
    return Response(body, status=200, content_type=PROMETHEUS_TEXT)
