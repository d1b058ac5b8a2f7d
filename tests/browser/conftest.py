"""A live portal and Debian's Chromium driven by Playwright's sync API.

The browser is started once per session; every test gets fresh browser contexts (cookies,
storage), a fresh database (`transactional_db`, so the live server thread sees committed rows)
and the fixed world from tests/support/world.py. Users sign in through the real login form.
"""

from __future__ import annotations

import os
import shutil
import threading
import time
from pathlib import Path

import pytest

from tests.support.world import PASSWORD, World, build_world

SCREENSHOTS = Path(__file__).resolve().parent.parent / "_artifacts" / "screenshots"
README_SCREENSHOTS = Path(__file__).resolve().parents[2] / "docs" / "screenshots"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]
USERNAMES = {
    "viewer": "alpha-viewer",
    "member": "alpha-member",
    "tenant_admin": "alpha-tenant_admin",
    "other_member": "beta-member",
    "platform_admin": "platform-admin",
}


@pytest.fixture(scope="session")
def chromium():
    """Debian's Chromium (never a downloaded browser); skipped where it is not installed."""
    executable = shutil.which("chromium")
    if executable is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is not installed (apt-get install chromium)")
        pytest.skip("chromium is not installed (apt-get install chromium)")
    sync_api = pytest.importorskip("playwright.sync_api")
    # Playwright's sync API keeps an asyncio loop on this thread, which Django's ORM guard takes
    # for an async context; the ORM calls in these tests are plain synchronous code.
    previous = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, headless=True, args=CHROMIUM_ARGS)
        yield browser
        browser.close()
    if previous is None:
        os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
    else:
        os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = previous


class Portal:
    """The live server, the world in its database, and signed-in pages per role."""

    def __init__(self, url: str, world: World, browser):
        self.url, self.world, self.browser = url, world, browser
        self.contexts = []

    def page(self, role: str, *, width: int = 1280, height: int = 900):
        """A new browser context signed in as `role` through the login form."""
        context = self.browser.new_context(viewport={"width": width, "height": height}, base_url=self.url)
        context.set_default_timeout(10_000)
        self.contexts.append(context)
        page = context.new_page()
        page.goto(self.login_path)
        page.get_by_label("Username").fill(USERNAMES[role])
        page.get_by_label("Password").fill(PASSWORD)
        page.get_by_role("button", name="Sign in").click()
        page.wait_for_url(f"{self.url}/")
        return page

    @property
    def login_path(self) -> str:
        from django.urls import reverse

        return reverse("login")

    def close(self) -> None:
        for context in self.contexts:
            context.close()


class InFlight:
    """Requests the live server is still answering. A closed browser context stops sending, but a
    request it sent last (htmx loading a fragment after the test's final click) runs on in a server
    thread; a database flush racing it deadlocked once under CI load and left the next test's rows
    behind. Teardown waits for the count to reach zero before `transactional_db` flushes."""

    def __init__(self):
        self.count, self.lock = 0, threading.Lock()

    def started(self, **_kwargs) -> None:
        with self.lock:
            self.count += 1

    def finished(self, **_kwargs) -> None:
        with self.lock:
            self.count -= 1

    def wait(self, timeout: float = 30.0) -> int:
        """Wait until no request is in flight; the number still running when the time ran out."""
        deadline = time.monotonic() + timeout
        while self.count > 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        return self.count


@pytest.fixture
def portal(live_server, transactional_db, chromium, monkeypatch):
    """A fresh world behind the live server. Reconciles run eagerly in the server thread (with no
    cluster configured they record that on the deployment) instead of going to a shared broker
    where another checkout's worker could pick them up."""
    from django.core.signals import request_finished, request_started

    from portal.celery import app

    monkeypatch.setitem(app.conf, "task_always_eager", True)
    in_flight = InFlight()
    request_started.connect(in_flight.started, weak=False, dispatch_uid="browser-in-flight-started")
    request_finished.connect(in_flight.finished, weak=False, dispatch_uid="browser-in-flight-finished")
    portal = Portal(live_server.url, build_world(), chromium)
    try:
        yield portal
    finally:
        portal.close()
        still_running = in_flight.wait()
        request_started.disconnect(dispatch_uid="browser-in-flight-started")
        request_finished.disconnect(dispatch_uid="browser-in-flight-finished")
        assert still_running <= 0, f"the live server still answers {still_running} request(s) after 30 s"


def screenshot(page, name: str) -> Path:
    """Save a full-page screenshot under tests/_artifacts/screenshots/ (git-ignored)."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    # A full-page capture stretches the viewport and leaves Chromium's scroll offset stale: a
    # button it then reports in view moves when the next mousedown settles the layout, and the
    # click lands beside it. Back to the top, the next action scrolls to its target afresh.
    page.evaluate("window.scrollTo(0, 0)")
    return path


def readme_screenshot(page, name: str) -> Path:
    """A window-sized screenshot for the README: into docs/screenshots/ (committed) when
    UPDATE_README_SCREENSHOTS=1, else beside the other artifacts, so a test run does not rewrite
    committed images unasked."""
    folder = README_SCREENSHOTS if os.environ.get("UPDATE_README_SCREENSHOTS") == "1" else SCREENSHOTS / "readme"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.png"
    page.screenshot(path=str(path))
    return path
