"""The `browser` and `page` fixtures (see tests/support/browser.py); load it as a plugin,
beside the live_stack fixtures:

    pytest_plugins = [..., "tests.support.live_stack_fixtures", "tests.support.browser_fixtures"]
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import missing
from tests.support.browser import CHROMIUM, CHROMIUM_ARGS, TIMEOUT_MS
from tests.support.live_stack import LiveStack


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not (Path(CHROMIUM).is_file() or shutil.which(CHROMIUM)):
        missing("Chromium", f"{CHROMIUM} not found (apt-get install -y chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture
def page(browser: Any, live_stack: LiveStack) -> Iterator[Any]:
    """A page on the live stack's API; fails the test on any JavaScript error."""
    context = browser.new_context(viewport={"width": 1280, "height": 900}, base_url=live_stack.url)
    context.set_default_timeout(TIMEOUT_MS)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    yield page
    context.close()
    assert errors == [], f"JavaScript errors on the page: {errors}"
