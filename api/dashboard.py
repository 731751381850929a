"""The dashboard: one static page at `/` for a user's agents, one at `/operator` for the
whole system, and their assets; no build step, no CDN.

The page itself needs no API key (docs/api.md §2); it asks the user for one and calls
the API with it, so everything it shows is as protected as the API. The strict
Content-Security-Policy keeps the key in localStorage out of reach of injected
scripts: only our own script runs, and it only talks to this origin.
"""

from __future__ import annotations

from pathlib import Path

from flask import Blueprint, Response, render_template, request, send_from_directory

from api.auth import public
from api.context import ctx

STATIC_DIR = Path(__file__).resolve().parent / "static"
# The page's assets: the stylesheet, and the script's modules (it imports the others).
ASSETS = ("dashboard.css", "dashboard.js", "actions.js", "approval.js", "assistants.js",
          "delegation.js", "form.js", "page.js", "schedules.js", "sse.js", "thread.js", "views.js",
          "operator.css", "operator.js", "metrics.js")
# The operator page's chart library, vendored (static/vendor/uplot/VERSION says whence).
CHART_DIR = STATIC_DIR / "vendor" / "uplot"
CHART_ASSETS = ("uPlot.iife.min.js", "uPlot.min.css")
# The YAML library of the Assistants view, vendored (static/vendor/js-yaml/VERSION).
YAML_DIR = STATIC_DIR / "vendor" / "js-yaml"
YAML_MODULE = "js-yaml.esm.min.mjs"
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
        "img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}

# Literal asset routes: they win over an app-wide `/static/<path>` rule, if there is one.
dashboard = Blueprint("dashboard", __name__, template_folder="static")


@dashboard.get("/")
@public
def index() -> Response:
    # The one value the page is given: the default model, filled in the form's model field.
    page = Response(render_template("index.html", default_model=ctx().settings.model),
                    content_type="text/html; charset=utf-8")
    page.add_etag()
    return _secure(page.make_conditional(request))


@dashboard.get("/operator")
@public
def operator() -> Response:
    """Figures from /metrics and /readyz, which need no key either: the page asks none."""
    page = Response(render_template("operator.html"), content_type="text/html; charset=utf-8")
    page.add_etag()
    return _secure(page.make_conditional(request))


@dashboard.get(f"/static/vendor/uplot/<any({', '.join(repr(name) for name in CHART_ASSETS)}):name>")
@public
def chart_asset(name: str) -> Response:
    return _secure(send_from_directory(CHART_DIR, name, max_age=0))


@dashboard.get(f"/static/vendor/js-yaml/{YAML_MODULE}")
@public
def yaml_module() -> Response:
    # Said explicitly: a module script needs a JavaScript type, and .mjs is not known everywhere.
    return _secure(send_from_directory(YAML_DIR, YAML_MODULE, max_age=0, mimetype="text/javascript"))


@dashboard.get(f"/static/<any({', '.join(repr(name) for name in ASSETS)}):name>")
@public
def asset(name: str) -> Response:
    return _secure(send_from_directory(STATIC_DIR, name, max_age=0))


def _secure(response: Response) -> Response:
    # no-cache: the browser revalidates (ETag), so a deploy is picked up at once.
    response.headers["Cache-Control"] = "no-cache"
    response.headers.update(SECURITY_HEADERS)
    return response
