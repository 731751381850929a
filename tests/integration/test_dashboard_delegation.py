"""The dashboard shows agents that call agents (README, Agents that call agents): a
caller's `ask_<name>` step links to the child it started, and the child links back to
its caller. A real headless Chromium against a real API, worker and FakeOllama."""

from __future__ import annotations

from typing import Any

import pytest

from tests.integration.test_dashboard import sign_in
from tests.support.browser import expect
from tests.support.delegation_team import Team, role
from tests.support.live_stack import LiveStack

pytestmark = pytest.mark.integration
pytest_plugins = [
    "tests.support.api_fixtures", "tests.support.live_stack_fixtures",  # the live_stack fixture
    "tests.support.browser_fixtures",  # the browser and page fixtures
]


def test_a_callers_step_links_to_its_child_and_the_child_back(page: Any, live_stack: LiveStack) -> None:
    responder = live_stack.fake.responder
    team = Team()
    team.gate.clear()  # the researcher waits: the boss is seen WAITING on it first
    live_stack.fake.responder = team
    try:
        key = live_stack.api.user()
        with live_stack.api.client(key) as http:
            for name, delegates in (("researcher", []), ("boss", ["researcher"])):
                made = http.post("/api/v1/assistants", json={
                    "name": name, "description": f"The {name}.", "instructions": role(name),
                    "delegates": delegates})
                assert made.status_code == 201, made.text
            boss = http.post("/api/v1/agents", json={"goal": "What boils?", "assistant": "boss"}).json()
        sign_in(page, key)
        page.locator(".agent-row", has_text="What boils?").click()
        expect(page.locator("#agent-status")).to_have_text("WAITING")
        expect(page.locator("#agent-waiting-text")).to_have_text("Waiting on the agents it called…")
        expect(page.locator("#approval")).to_be_hidden()
        team.gate.set()
        expect(page.locator("#agent-status")).to_have_text("COMPLETED")
        link = page.locator('[data-testid="child-link"]')
        expect(link).to_have_count(1)
        link.click()
        expect(page.locator("#agent-goal")).to_have_text("Find the boiling point of water")
        origin = page.locator("#agent-origin")
        expect(origin).to_contain_text(f"Called by {boss['id'][:8]} (depth 1)")
        origin.locator("a").click()
        expect(page.locator("#agent-goal")).to_have_text("What boils?")
    finally:
        team.gate.set()
        live_stack.fake.responder = responder
