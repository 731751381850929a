"""The dashboard blueprint: the page and its assets are public, strict about scripts, and
their references resolve; everything else still needs the key."""

from __future__ import annotations

import re

import pytest
from flask import Flask

from api import auth, errors
from api.dashboard import STATIC_DIR, dashboard


class NoUsers:
    def user_by_api_key(self, api_key: str) -> None:
        return None


@pytest.fixture
def http() -> object:
    app = Flask(__name__, static_folder=None)
    errors.register_error_handlers(app)
    auth.install(app, auth.UserCache(NoUsers()))  # type: ignore[arg-type]
    app.register_blueprint(dashboard)
    app.add_url_rule("/api/v1/tools", "tools", lambda: {"tools": []})
    return app.test_client()


def test_the_page_and_assets_are_served_without_a_key(http) -> None:
    page = http.get("/")
    assert page.status_code == 200 and page.mimetype == "text/html"
    assert page.headers["Cache-Control"] == "no-cache"
    referenced = re.findall(r'(?:href|src)="(/static/[^"]+)"', page.get_data(as_text=True))
    assert sorted(referenced) == ["/static/dashboard.css", "/static/dashboard.js"]
    for path, mimetype in zip(sorted(referenced), ["text/css", "text/javascript"], strict=True):
        asset = http.get(path)
        assert asset.status_code == 200 and asset.mimetype == mimetype
        assert asset.get_data() == (STATIC_DIR / path.rsplit("/", 1)[1]).read_bytes()


def test_only_our_own_scripts_may_run_on_the_page(http) -> None:
    headers = http.get("/").headers
    policy = headers["Content-Security-Policy"]
    assert "script-src 'self'" in policy and "connect-src 'self'" in policy
    assert "default-src 'none'" in policy and "frame-ancestors 'none'" in policy
    assert headers["X-Content-Type-Options"] == "nosniff"
    assert headers["Referrer-Policy"] == "no-referrer"


def test_the_api_still_needs_a_key(http) -> None:
    response = http.get("/api/v1/tools")
    assert response.status_code == 401
    assert response.get_json()["error"]["code"] == "unauthorized"
    assert http.get("/static/other.js").status_code == 404


def test_the_page_has_the_elements_the_browser_tests_use() -> None:
    html = (STATIC_DIR / "index.html").read_text()
    for element_id in ("api-key", "sign-in", "sign-out", "goal", "max-steps", "start", "agents",
                       "steps", "cancel", "agent-status", "connection"):
        assert f'id="{element_id}"' in html, element_id
    assert "<script>" not in html and "style=" not in html  # nothing inline: CSP forbids it
    assert "http://" not in html and "https://" not in html  # no CDN
