"""The dashboard: one static page at `/` and its assets, no build step, no CDN.

The page itself needs no API key (CONTRACT §2); it asks the user for one and calls
the API with it, so everything it shows is as protected as the API. The strict
Content-Security-Policy keeps the key in localStorage out of reach of injected
scripts: only our own script runs, and it only talks to this origin.
"""

from __future__ import annotations

from pathlib import Path

from flask import Blueprint, Response, send_from_directory

from api.auth import public

STATIC_DIR = Path(__file__).resolve().parent / "static"
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
        "img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}

# Literal asset routes: they win over an app-wide `/static/<path>` rule, if there is one.
dashboard = Blueprint("dashboard", __name__)


@dashboard.get("/")
@public
def index() -> Response:
    return _send("index.html")


@dashboard.get("/static/dashboard.css")
@public
def stylesheet() -> Response:
    return _send("dashboard.css")


@dashboard.get("/static/dashboard.js")
@public
def script() -> Response:
    return _send("dashboard.js")


def _send(name: str) -> Response:
    # no-cache: the browser revalidates (ETag), so a deploy is picked up at once.
    response = send_from_directory(STATIC_DIR, name, max_age=0)
    response.headers["Cache-Control"] = "no-cache"
    response.headers.update(SECURITY_HEADERS)
    return response
