"""The browser the console's tests drive: Debian's Chromium under Playwright, headless, one
for the whole session (the ``browser`` fixture in ``conftest.py``).

Playwright's async API, on the session's event loop: its sync API keeps an event loop running
on the main thread for as long as it is started, which would break every asyncio test after it
in the session. So the browser tests are async, with ``loop_scope="session"``.

Playwright cannot download its own browser here, so it launches the system's
(``/usr/bin/chromium``, ``apt-get install chromium``; ``make test`` installs it when it runs as
root; ``LOCKGATE_TEST_CHROMIUM`` names another binary). A machine without one fails those
tests saying what to install: a skip would hide them."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

CHROMIUM_ENV = "LOCKGATE_TEST_CHROMIUM"
DEFAULT_CHROMIUM = "/usr/bin/chromium"
#: A laptop's screen: the pages are checked, and photographed for the docs, at this size.
LAPTOP = {"width": 1366, "height": 768}
#: The pictures ``docs/console.md`` shows.
DOCS_SCREENSHOTS = Path(__file__).resolve().parents[1] / "docs" / "console"
#: Set to a folder, the screenshots the tests take go there: ``LOCKGATE_CONSOLE_SCREENSHOTS=
#: docs/console`` renews the docs' pictures. Unset, they go to a temporary folder, so a test
#: run leaves the work tree as it was.
SCREENSHOTS_ENV = "LOCKGATE_CONSOLE_SCREENSHOTS"
LAUNCH_ARGS = [
    # Chromium's sandbox needs user namespaces, which root in a container does not get; it
    # refuses to start as root without this.
    "--no-sandbox",
    # A container's /dev/shm is often 64 MB, too small for the renderer: use /tmp instead.
    "--disable-dev-shm-usage",
    "--disable-gpu",
]


def chromium_path() -> str:
    """The Chromium to launch; fails the test, saying what to install, when there is none."""
    path = os.environ.get(CHROMIUM_ENV, DEFAULT_CHROMIUM)
    if not os.access(path, os.X_OK):
        pytest.fail(
            f"no Chromium at {path}: the console's browser tests drive Debian's Chromium; "
            f"install it (as root: apt-get update && apt-get install -y chromium; `make test` "
            f"does so when it runs as root) or set {CHROMIUM_ENV} to a Chromium binary"
        )
    return path


@asynccontextmanager
async def chromium() -> AsyncIterator[Any]:
    """A headless Chromium under Playwright's async API, closed on exit."""
    try:
        from playwright.async_api import async_playwright
    except ImportError:
        pytest.fail("Playwright is missing: pip install -e '.[dev]' (it brings `playwright`)")
    path = chromium_path()
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(
            executable_path=path, headless=True, args=LAUNCH_ARGS
        )
        try:
            yield browser
        finally:
            await browser.close()


class ConsoleErrors:
    """What a page said went wrong: its console's ``error`` messages and its uncaught
    exceptions, from every page of a browser context."""

    def __init__(self, context: Any) -> None:
        self.seen: list[str] = []
        context.on("page", self._watch)
        for page in context.pages:
            self._watch(page)

    def _watch(self, page: Any) -> None:
        page.on("console", self._console)
        page.on("pageerror", lambda error: self.seen.append(f"pageerror {page.url}: {error}"))

    def _console(self, message: Any) -> None:
        if message.type == "error":
            self.seen.append(f"console {message.location.get('url', '')}: {message.text}")

    def take(self) -> list[str]:
        """The errors seen since the last call."""
        seen, self.seen = self.seen, []
        return seen
