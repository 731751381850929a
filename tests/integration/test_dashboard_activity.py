"""The line under the selected agent's steps, in a real headless Chromium against a real
stack: it says what the agent does now, as its status and its latest event say, never what
it did one event before; and a cancel says when it came."""

from __future__ import annotations

from typing import Any

import pytest

from tests.integration.test_dashboard import sign_in, start
from tests.support.browser import expect
from tests.support.live_stack import LiveStack

pytestmark = pytest.mark.integration
pytest_plugins = [
    "tests.support.api_fixtures", "tests.support.live_stack_fixtures",  # the live_stack fixture
    "tests.support.browser_fixtures",  # the browser and page fixtures
]

RUNNING = ("Thinking…", "Writing…", "Running calculate…")
SAYS = {"PENDING": ("Waiting for a worker…",), "WAITING": ("Waiting for your approval…",),
        "RUNNING": RUNNING}


def record_activity(page: Any) -> None:
    """From now on, `window.said` gets every text the line under the steps is given, in
    order, and `window.shown` [status badge, line] as the page shows them once its script
    has made a change (the line only while it is shown)."""
    page.evaluate("""() => {
      window.said = [];
      window.shown = [];
      const badge = document.getElementById("agent-status");
      const line = document.getElementById("agent-waiting");
      const text = document.getElementById("agent-waiting-text");
      new MutationObserver((changes) => {
        for (const change of changes) {
          // Each text is a new node: it still holds what it said, even if replaced since.
          if (change.target === text) window.said.push(...[...change.addedNodes].map((n) => n.data));
        }
        if (!line.hidden) window.shown.push([badge.dataset.status, text.textContent]);
      }).observe(document.getElementById("agent-view"),
                 { childList: true, subtree: true, characterData: true, attributes: true });
    }""")


def once_each(seen: list[Any]) -> list[Any]:
    """`seen` without repeats in a row."""
    return [item for i, item in enumerate(seen) if i == 0 or seen[i - 1] != item]


def shown(page: Any) -> list[tuple[str, str]]:
    return once_each([tuple(pair) for pair in page.evaluate("window.shown")])


def assert_each_line_fits_its_status(seen: list[tuple[str, str]]) -> None:
    wrong = [(status, line) for status, line in seen if line not in SAYS.get(status, ())]
    assert not wrong, seen


def test_the_line_follows_the_status_tokens_and_steps(page: Any, live_stack: LiveStack) -> None:
    live_stack.fake.chunk_delay_s = 0.15  # a reply takes a second or more to write
    try:
        sign_in(page, live_stack.api_key)
        record_activity(page)
        start(page, "slow: what is 1234 * 902?")  # each reply comes after 2 s of thought
        # While the reply is written, the line says so.
        expect(page.locator('[data-testid="writing"]')).to_contain_text("THOUGHT:")
        expect(page.locator("#agent-waiting-text")).to_have_text("Writing…")
        expect(page.locator("#agent-status")).to_have_attribute("data-status", "COMPLETED")
        expect(page.locator("#agent-waiting")).to_be_hidden()
    finally:
        live_stack.fake.chunk_delay_s = 0.0
    assert_each_line_fits_its_status(shown(page))
    said = once_each(page.evaluate("window.said"))
    # Thought, then the reply written, its steps (its thought, the call, then thought
    # again), the next reply written and its thought; nothing once the answer is there.
    assert said[said[0] == "Waiting for a worker…":] == [
        "Thinking…", "Writing…", "Thinking…", "Running calculate…", "Thinking…", "Writing…",
        "Thinking…"], said


def test_the_line_follows_an_approval(page: Any, live_stack: LiveStack) -> None:
    sign_in(page, live_stack.api_key)
    with live_stack.api.client(live_stack.api_key) as http:
        gated = http.post("/api/v1/agents", json={"goal": "Gated: what is 1234 * 902?",
                                                  "approve_tools": ["calculate"]}).json()["id"]
    row = page.locator(f".agent-row[data-id='{gated}']")
    expect(row).to_have_attribute("data-status", "WAITING")
    record_activity(page)
    row.click()
    expect(page.locator("#agent-waiting-text")).to_have_text("Waiting for your approval…")
    page.click("#approve")
    expect(page.locator("#agent-status")).to_have_attribute("data-status", "COMPLETED")
    seen = shown(page)
    assert_each_line_fits_its_status(seen)
    assert seen[0] == ("WAITING", "Waiting for your approval…")
    assert [status for status, _ in seen[1:]] and "WAITING" not in dict(seen[1:]), seen


def test_a_cancel_before_the_first_step_says_so(page: Any, live_stack: LiveStack) -> None:
    sign_in(page, live_stack.api_key)
    start(page, "slow: cancelled before it says anything")  # its model answers after 2 s
    page.click("#cancel")
    cancelled = page.locator(".step[data-type='CANCELLED']")
    expect(cancelled.locator(".step-body")).to_have_text("The agent was cancelled before its first step.")
    label, body = (cancelled.locator(part).bounding_box() for part in (".step-label", ".step-body"))
    assert label is not None and body is not None
    assert label["x"] + label["width"] <= body["x"], (label, body)  # side by side, apart
