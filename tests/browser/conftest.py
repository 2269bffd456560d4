"""The browser tests' fixtures: one Chromium per test module (Debian's, found by
browser_kit; skipped with the reason when absent, a failure when CI requires it) and a
fresh context per test, whose script errors and CSP violations fail the test."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest
from browser_kit import TIMEOUT_MS, VIEWPORT, WATCH_SCRIPT, Watch, need_browser

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page


# One Chromium per module, not per session: Playwright's sync API keeps an event loop
# running in the main thread while it is open, and the tests after these (asyncio
# producers, job.wait_async) call asyncio.run() there.
@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    chromium = need_browser()
    from playwright.sync_api import expect, sync_playwright

    expect.set_options(timeout=TIMEOUT_MS)
    with sync_playwright() as p:
        launched = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture
def watch() -> Watch:
    return Watch()


@pytest.fixture
def page(browser: Browser, watch: Watch) -> Iterator[Page]:
    """A page in a fresh context (its own cookies), at a laptop's size; a test fails if
    any page it opened threw, logged an error, or broke the Content-Security-Policy."""
    context = browser.new_context(viewport=VIEWPORT)  # type: ignore[arg-type]
    context.set_default_timeout(TIMEOUT_MS)
    context.add_init_script(WATCH_SCRIPT)
    opened = context.new_page()
    opened.on("console", watch.on_console)
    opened.on("pageerror", watch.on_page_error)
    opened.on("response", watch.on_response)
    yield opened
    context.close()
    assert not watch.errors, "the page reported errors:\n" + "\n".join(watch.errors)
