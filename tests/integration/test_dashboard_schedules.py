"""The dashboard's schedules in a real headless Chromium against a real API, worker,
PostgreSQL, Redis and FakeOllama: the list shows each schedule's next run, and, once a
due time has fired, its last agent (a click opens it) and its skipped count."""

from __future__ import annotations

from typing import Any

import pytest

from tests.integration.test_api_schedules import due_now
from tests.integration.test_dashboard import sign_in
from tests.support.api_server import wait_until
from tests.support.browser import expect
from tests.support.live_stack import LiveStack

pytestmark = pytest.mark.integration
pytest_plugins = [
    "tests.support.api_fixtures", "tests.support.live_stack_fixtures",  # the live_stack fixture
    "tests.support.browser_fixtures",  # the browser and page fixtures
]


def test_the_list_shows_next_run_last_agent_and_skipped(page: Any, live_stack: LiveStack) -> None:
    key = live_stack.api.user()
    with live_stack.api.client(key) as http:
        made = http.post("/api/v1/schedules", json={
            "goal": "Nightly digest", "cron": "0 3 * * *", "timezone": "UTC"}).json()
    sign_in(page, key)
    row = page.locator(f'[data-testid="schedule-row"][data-id="{made["id"]}"]')
    expect(row).to_contain_text("Nightly digest")
    expect(row).to_contain_text("0 3 * * * (UTC) · next")
    expect(row).to_contain_text("skipped 0")
    expect(row.locator('[data-testid="schedule-last-agent"]')).to_have_count(0)

    due_now(live_stack.api.env, made["id"])
    with live_stack.api.client(key) as http:
        def fired() -> str | None:
            return http.get(f"/api/v1/schedules/{made['id']}").json()["last_agent_id"]

        agent_id = wait_until(fired, 15)
    page.reload()
    last = row.locator('[data-testid="schedule-last-agent"]')
    expect(last).to_be_visible()
    last.click()
    expect(page.locator("#agent-goal")).to_have_text("Nightly digest")
    expect(page.locator(f'.agent-row[data-id="{agent_id}"]')).to_have_attribute(
        "aria-selected", "true")
