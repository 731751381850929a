"""The dashboard blueprint: the page and its assets are public, strict about scripts, and
their references resolve; everything else still needs the key."""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest
from flask import Flask

from api import auth, errors
from api.dashboard import STATIC_DIR, dashboard
from jarvis_agents.accounts import ApiKeys


class NoUsers:
    def by_key_hash(self, key_hash: str) -> None:
        return None

    def live_key_hashes(self, key_hashes: object) -> set[str]:
        return set()


@pytest.fixture
def http() -> object:
    app = Flask(__name__, static_folder=None)
    app.extensions["jarvis"] = SimpleNamespace(settings=SimpleNamespace(model="qwen2.5:7b <&>"))
    errors.register_error_handlers(app)
    auth.install(app, ApiKeys(NoUsers()))
    app.register_blueprint(dashboard)
    app.add_url_rule("/api/v1/tools", "tools", lambda: {"tools": []})
    return app.test_client()


def test_the_page_and_assets_are_served_without_a_key(http) -> None:
    page = http.get("/")
    assert page.status_code == 200 and page.mimetype == "text/html"
    assert page.headers["Cache-Control"] == "no-cache"
    referenced = re.findall(r'(?:href|src)="(/static/[^"]+)"', page.get_data(as_text=True))
    assert sorted(referenced) == ["/static/dashboard.css", "/static/dashboard.js"]
    # The script's modules, and theirs: every one is served, as a script.
    scripts, seen = ["dashboard.js"], set()
    while scripts:
        name = scripts.pop()
        seen.add(name)
        scripts += [m for m in re.findall(r'from "\./([\w-]+\.js)"', (STATIC_DIR / name).read_text())
                    if m not in seen]
    assert len(seen) > 1
    for name in ["dashboard.css", *sorted(seen)]:
        asset = http.get(f"/static/{name}")
        assert asset.status_code == 200, name
        assert asset.mimetype == ("text/css" if name.endswith(".css") else "text/javascript")
        assert asset.get_data() == (STATIC_DIR / name).read_bytes()
    assert http.get("/", headers={"If-None-Match": page.headers["ETag"]}).status_code == 304


def test_the_form_has_the_default_model_filled_in(http) -> None:
    page = http.get("/").get_data(as_text=True)
    assert 'id="model"' in page
    assert 'value="qwen2.5:7b &lt;&amp;&gt;"' in page  # escaped: the page is HTML


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
    for element_id in ("api-key", "sign-in", "sign-out", "goal", "model", "tools", "max-steps", "start",
                       "agents", "steps", "cancel", "agent-status", "agent-failure", "connection"):
        assert f'id="{element_id}"' in html, element_id
    assert "<script>" not in html and "style=" not in html  # nothing inline: CSP forbids it
    assert "http://" not in html and "https://" not in html  # no CDN
