"""A real headless Chromium (Debian's, driven by Playwright) for the page tests: where it
is, how it is started, and Playwright's `expect`. The fixtures are in
tests/support/browser_fixtures.py, a pytest plugin."""

from __future__ import annotations

import os
from typing import Any

CHROMIUM = os.environ.get("JARVIS_TEST_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]
TIMEOUT_MS = 20_000


def expect(locator: Any) -> Any:
    from playwright.sync_api import expect as playwright_expect

    return playwright_expect(locator)
