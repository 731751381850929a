"""The operator page in a real headless Chromium against a real API, worker, PostgreSQL,
Redis and FakeOllama: the figures appear without a key, follow agents as they finish, and
the charts are drawn by the vendored chart library, on a desktop and on a phone."""

from __future__ import annotations

import re
import time
from typing import Any

import httpx
import pytest

from tests.conftest import ROOT
from tests.support.browser import expect
from tests.support.live_stack import LiveStack

pytestmark = pytest.mark.integration
pytest_plugins = [
    "tests.support.api_fixtures", "tests.support.live_stack_fixtures",  # the live_stack fixture
    "tests.support.browser_fixtures",  # the browser and page fixtures
]

# /metrics reads the database at most every 10 s (api.scrape_cache): a figure can take
# that long, plus a poll, to change on the page.
FIGURES_MS = 30_000
ARTIFACTS = ROOT / "test-artifacts"


def wait_for_figure(page: Any, selector: str, *, at_least: int) -> None:
    """Until the number shown at `selector` is at least `at_least` (the page's CSP
    forbids Playwright's string predicates: they are evaluated)."""
    deadline = time.monotonic() + FIGURES_MS / 1000
    while (shown := page.locator(selector).inner_text()) == "–" or int(shown) < at_least:
        assert time.monotonic() < deadline, f"{selector} shows {shown}, not {at_least} or more"
        page.wait_for_timeout(200)


def test_figures_follow_the_agents_without_a_key(page: Any, live_stack: LiveStack) -> None:
    page.goto("/operator")
    expect(page.locator("#updated")).not_to_have_text("never")
    expect(page.locator("#metrics-error")).to_be_hidden()
    assert page.evaluate("localStorage.getItem('jarvis.apiKey')") is None  # no key asked

    auth = {"Authorization": f"Bearer {live_stack.api_key}"}
    with httpx.Client(base_url=live_stack.url, headers=auth) as http:
        before = int(page.locator("#status-COMPLETED").inner_text())
        ids = [http.post("/api/v1/agents", json={"goal": f"what is 1234 * 902? ({n})"}).json()["id"]
               for n in range(3)]
        for agent_id in ids:
            assert http.get(f"/api/v1/agents/{agent_id}", params={"wait": 30}).json()["status"] == "COMPLETED"
    wait_for_figure(page, "#status-COMPLETED", at_least=before + 3)
    # Both charts are drawn (uPlot's canvas) and the rate chart has seen the burst.
    expect(page.locator("#rate-chart canvas")).to_have_count(1)
    expect(page.locator("#latency-chart canvas")).to_have_count(1)
    expect(page.locator("#queues tr")).not_to_have_count(0)
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=ARTIFACTS / "operator.png", full_page=True)

    page.set_viewport_size({"width": 375, "height": 800})  # a phone: one column, no overflow
    deadline = time.monotonic() + 5
    while not page.evaluate("document.documentElement.scrollWidth <= window.innerWidth"):
        assert time.monotonic() < deadline, "the page is wider than a phone's screen"
        page.wait_for_timeout(100)


def test_the_agents_page_links_to_the_operator_page(page: Any) -> None:
    page.goto("/")
    page.click("a[href='/operator']")
    expect(page).to_have_url(re.compile(r"/operator$"))
    expect(page.locator("h1")).to_contain_text("operations")


def ticks(page: Any, chart: str) -> tuple[list[str], list[str]]:
    """The x and y tick labels the chart drew, as its aria-label says them."""
    said = page.locator(f"#{chart}").get_attribute("aria-label") or ""
    found = re.fullmatch(r"[^:]+: \S+ (.*) at (.*)", said)
    assert found, said
    return found.group(2).split(", "), found.group(1).split(", ")


def test_the_charts_axes_read_times_of_today_and_distinct_figures(
    browser: Any, live_stack: LiveStack
) -> None:
    context = browser.new_context(viewport={"width": 1280, "height": 900}, locale="en-GB",
                                  base_url=live_stack.url)
    try:
        page = context.new_page()
        page.goto("/operator")
        updated = page.locator("#updated")
        expect(updated).not_to_have_text("never")
        # The second reading is the charts' first point: the case that read "Apr 2027".
        expect(updated).not_to_have_text(updated.inner_text(), timeout=FIGURES_MS)
        now_s = page.evaluate("(() => { const d = new Date();"
                              " return d.getHours() * 3600 + d.getMinutes() * 60 + d.getSeconds(); })()")
        for chart in ("rate-chart", "latency-chart"):
            times, figures = ticks(page, chart)
            assert len(times) >= 2 and len(set(times)) == len(times), times
            for shown in times:
                hours, minutes, seconds = (int(part) for part in shown.split(":"))
                ago_s = (now_s - (hours * 3600 + minutes * 60 + seconds)) % 86400
                assert ago_s <= 600 or ago_s >= 86400 - 60, (shown, times)  # the last minutes
            assert len(figures) >= 2 and len(set(figures)) == len(figures), figures
            assert [float(f) for f in figures] == sorted(float(f) for f in figures), figures
    finally:
        context.close()
