"""The dashboard's assistants in a real headless Chromium against a real API, worker,
PostgreSQL, Redis and FakeOllama: create and edit one as YAML (bad text said so, the
API's refusals shown), see its versions, pick it in the form (its defaults filled in),
start an agent of it, and delete it."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.integration.test_dashboard import ARTIFACTS, sign_in, start
from tests.support.browser import expect
from tests.support.live_stack import KNOWN_MODEL, LiveStack

pytestmark = pytest.mark.integration
pytest_plugins = [
    "tests.support.api_fixtures", "tests.support.live_stack_fixtures",  # the live_stack fixture
    "tests.support.browser_fixtures",  # the browser and page fixtures
]

RESEARCHER = f"""name: researcher
description: Multiplies carefully.
model: {KNOWN_MODEL}
tools: [calculate]
max_steps: 4
instructions: |
  Show your working.
"""


def save(page: Any, text: str) -> None:
    page.fill("#assistant-text", text)
    page.click("#assistant-save")


def test_create_edit_pick_run_and_delete_an_assistant(page: Any, live_stack: LiveStack) -> None:
    key = live_stack.api.user()
    sign_in(page, key)
    expect(page.locator("#assistant")).to_have_value("agent")
    expect(page.locator("#agent-placeholder")).to_be_visible()

    page.click("#assistants-link")
    expect(page.locator("#assistants-view")).to_be_visible()
    expect(page.locator("#agent-placeholder")).to_be_hidden()
    expect(page.locator(".assistant-row")).to_have_count(1)
    expect(page.locator(".assistant-row .name")).to_have_text("agent")

    # Text that is neither JSON nor YAML, then one the API refuses: each said, nothing made.
    page.click("#assistant-new")
    expect(page.locator("#assistant-text")).to_have_value(re.compile("^name: researcher\n"))
    save(page, "name: [researcher\n")
    expect(page.locator("#assistant-error")).to_contain_text("This is not valid YAML (line 2, column 1")
    save(page, '{"name": "researcher", ')
    expect(page.locator("#assistant-error")).to_contain_text("This is not valid JSON")
    save(page, "name: researcher\ntools: [teleport]\n")
    expect(page.locator("#assistant-error")).to_contain_text("unknown tool(s): teleport")
    save(page, RESEARCHER)
    expect(page.locator("#assistant-title")).to_have_text("researcher · version 1")
    expect(page.locator("#assistant-fields")).to_contain_text("Show your working.")
    expect(page.locator(".assistant-row")).to_have_count(2)

    # An edit shows the configuration as YAML and saves what changed as a new version.
    page.click("#assistant-edit")
    text = page.locator("#assistant-text").input_value()
    assert "max_steps: 4\n" in text and "instructions: |\n  Show your working.\n" in text
    save(page, text)
    expect(page.locator("#assistant-error")).to_contain_text("Nothing changed")
    save(page, text.replace("max_steps: 4", "max_steps: 6"))
    expect(page.locator("#assistant-title")).to_have_text("researcher · version 2")
    expect(page.locator("[data-testid='assistant-version']")).to_have_count(2)
    expect(page.locator("[data-testid='assistant-version']").first).to_contain_text("version 2")
    page.screenshot(path=str(_artifact("dashboard-assistants.png")), full_page=True,
                    animations="disabled")

    # Picked in the form, it fills the form's defaults; the agent is of its version 2.
    page.select_option("#assistant", "researcher")
    expect(page.locator("#model")).to_have_value(KNOWN_MODEL)
    expect(page.locator("#max-steps")).to_have_attribute("placeholder", "6")
    expect(page.locator("#tools-summary")).to_have_text("Tools: 1 of 4")
    agent_id = start(page, "What is 1234 * 902, carefully?")
    expect(page.locator("#assistants-view")).to_be_hidden()  # the agent took its place
    expect(page.locator(".step[data-type='FINAL']")).to_contain_text("1113068")
    with live_stack.api.client(key) as http:
        agent = http.get(f"/api/v1/agents/{agent_id}").json()
        researcher = http.get("/api/v1/assistants/researcher").json()
    assert (agent["assistant_id"], agent["assistant_version"]) == (researcher["assistant_id"], 2)
    assert (agent["tools"], agent["max_steps"]) == (["calculate"], 6)

    # Deleted (after a confirmation), it leaves the list and the picker.
    page.click("#assistants-link")
    expect(page.locator("#agent-view")).to_be_hidden()
    page.click(".assistant-row[data-name='researcher']")
    page.once("dialog", lambda dialog: dialog.accept())
    page.click("#assistant-delete")
    expect(page.locator(".assistant-row")).to_have_count(1)
    expect(page.locator("#assistant")).to_have_value("agent")
    expect(page.locator("#assistant option")).to_have_count(1)
    page.click("#assistants-close")
    expect(page.locator("#agent-view")).to_be_visible()  # back to the agent it hid


def test_the_default_assistant_is_shown_read_only(page: Any, live_stack: LiveStack) -> None:
    sign_in(page, live_stack.api.user())
    page.click("#assistants-link")
    page.click(".assistant-row[data-name='agent']")
    expect(page.locator("#assistant-title")).to_have_text("agent · version 1")
    expect(page.locator("#assistant-fields")).to_contain_text("follows the server's settings")
    expect(page.locator("#assistant-fields")).to_contain_text(KNOWN_MODEL)
    expect(page.locator("#assistant-edit")).to_be_hidden()
    expect(page.locator("#assistant-delete")).to_be_hidden()


def _artifact(name: str) -> Any:
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS / name
