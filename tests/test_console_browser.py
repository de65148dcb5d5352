"""The console in a real browser: Playwright driving Debian's Chromium, headless, against
``lockgate serve`` and a worker as processes of their own, with real runs, on SQLite and on
Valkey.

Each store's scene is made once (module scope) over the HTTP API: a run parked on a signal, a
run holding a ``Limit`` key's one slot and one queued behind it, a run that took a ``Rate``
key's one token and one waiting for the next, a run whose step failed once, and open
``Collect`` and ``Debounce`` buffers. The SQLite pass photographs each page at a laptop's size
into ``docs/console/``, the pictures ``docs/console.md`` shows."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
import pytest_asyncio
from playwright.async_api import expect

from browser_support import DOCS_SCREENSHOTS, LAPTOP, SCREENSHOTS_ENV, ConsoleErrors
from http_support import DEADLINE, PROCS, ServeProcess, env
from lockgate.http import hash_token
from valkey_server import shared_url

#: The browser lives on the session's event loop; so do the tests that drive it.
on_the_browsers_loop = pytest.mark.asyncio(loop_scope="session")

ADMIN = "console-admin-token"
READER = "console-read-token"
ACTIONS = ("signal", "cancel", "terminate", "pause", "resume")
WORKER = [sys.executable, str(PROCS / "worker_main.py")]
MS = DEADLINE * 1000  # Playwright's timeouts are in milliseconds
expect.set_options(timeout=MS)


@dataclass
class Scene:
    """A live console and what the test made on it."""

    store: str
    url: str
    tmp: Path
    waiting: str  # console_wait, parked on its signal
    holding: str  # console_held, holds tenant acme's one slot
    gated: str  # console_held, queued behind it
    rated: str  # console_rated, took tenant globex's one token
    rate_gated: str  # console_rated, waits for the next token
    flaky: str  # console_flaky, its step failed once then succeeded

    def api(self) -> httpx.Client:
        return httpx.Client(
            base_url=self.url, headers={"Authorization": f"Bearer {ADMIN}"}, timeout=DEADLINE
        )


def submit(http: httpx.Client, name: str, params: dict[str, Any]) -> str:
    made = http.post(f"/{name}/runs", json=params)
    assert made.status_code == 201, made.text
    run_id: str = made.json()["run_id"]
    return run_id


def status_of(http: httpx.Client, name: str, run_id: str) -> str:
    shown = http.get(f"/{name}/runs/{run_id}")
    assert shown.status_code == 200, shown.text
    status: str = shown.json()["run"]["status"]
    return status


def wait_status(http: httpx.Client, name: str, run_id: str, *wanted: str) -> str:
    """Poll the run until its status is one of ``wanted``, within the deadline."""
    end = time.monotonic() + DEADLINE
    while (status := status_of(http, name, run_id)) not in wanted:
        assert time.monotonic() < end, f"{name} {run_id} still {status}, not {wanted}"
        time.sleep(0.05)
    return status


def make_scene(store: str, url: str, tmp: Path) -> Scene:
    release = str(tmp / "release")
    with httpx.Client(
        base_url=url, headers={"Authorization": f"Bearer {ADMIN}"}, timeout=DEADLINE
    ) as http:
        waiting = submit(http, "console_wait", {"order": "o-1"})
        flaky = submit(http, "console_flaky", {})
        held = [submit(http, "console_held", {"tenant": "acme", "release": release})]
        wait_status(http, "console_held", held[0], "in_progress")
        held.append(submit(http, "console_held", {"tenant": "acme", "release": release}))
        rated = submit(http, "console_rated", {"tenant": "globex"})
        wait_status(http, "console_rated", rated, "complete")
        rate_gated = submit(http, "console_rated", {"tenant": "globex"})
        for name, event in (
            ("console_collect", {"k": "acme", "n": 1}),
            ("console_debounce", {"doc": "d-42"}),
        ):
            fired = http.post(f"/{name}/events", json=event)
            assert fired.status_code == 202, fired.text
            assert fired.json()["run_id"] is None  # held in the buffer
        wait_status(http, "console_wait", waiting, "signal_waiting")
        wait_status(http, "console_flaky", flaky, "complete")
        assert status_of(http, "console_held", held[1]) == "pending"
        assert status_of(http, "console_rated", rate_gated) == "pending"
    return Scene(store, url, tmp, waiting, held[0], held[1], rated, rate_gated, flaky)


@pytest.fixture(scope="module", params=["sqlite", "valkey"])
def scene(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Scene]:
    store: str = request.param
    tmp = tmp_path_factory.mktemp(f"console-{store}")
    if store == "sqlite":
        url = f"sqlite:///{tmp / 'lockgate.db'}"
    else:
        url = f"{shared_url()}?namespace=cb{uuid.uuid4().hex[:10]}"
    tokens = tmp / "tokens"
    tokens.write_text(
        f"read,write,admin {hash_token(ADMIN)} operator\nread {hash_token(READER)} viewer\n"
    )
    serve = ServeProcess(
        ["console_workflows:WORKFLOWS", "--store", url, "--tokens", str(tokens)],
        tmp / "serve.log",
    )
    log = (tmp / "worker.log").open("wb")
    worker_id = f"console-{store}-1"
    worker = subprocess.Popen(
        [*WORKER, "--store", url, "--workflows", "console_workflows", "--worker-id", worker_id],
        stderr=log,
        env=env(),
        cwd=PROCS,
    )
    try:
        made = make_scene(store, serve.url, tmp)
        yield made
        (tmp / "release").touch()
        with made.api() as http:
            wait_status(http, "console_held", made.gated, "complete")
    finally:
        (tmp / "release").touch()
        worker.terminate()
        assert worker.wait(DEADLINE) == 0, (tmp / "worker.log").read_text()
        log.close()
        assert serve.stop() == 0, (tmp / "serve.log").read_text()


@pytest_asyncio.fixture(loop_scope="session")
async def context(browser: Any, scene: Scene) -> AsyncIterator[Any]:
    """A fresh browser context (no cookies) at a laptop's size, on the scene's server."""
    made = await browser.new_context(viewport=LAPTOP, base_url=scene.url)
    made.set_default_timeout(MS)
    yield made
    await made.close()


async def sign_in(context: Any, token: str, next_path: str = "/console/") -> Any:
    """A page of ``context`` signed in with ``token``, on ``next_path``, by keyboard."""
    page = await context.new_page()
    await page.goto(f"/console/sign-in?next={quote(next_path)}")
    field = page.get_by_test_id("sign-in").locator("input[name=token]")
    await field.fill(token)
    async with page.expect_navigation():
        await field.press("Enter")
    assert page.url == scene_url(page, next_path)
    return page


def scene_url(page: Any, path: str) -> str:
    origin = re.match(r"https?://[^/]+", page.url)
    assert origin is not None
    return origin.group(0) + path


#: The pictures the tests take, each shown by ``docs/console.md``.
PHOTOS = (
    "sign-in",
    "overview",
    "runs",
    "run",
    "run-retried",
    "confirm",
    "gates",
    "windows",
    "workers",
)


async def photograph(scene: Scene, page: Any, name: str) -> None:
    """The SQLite pass takes a laptop-sized picture of the page, for the docs when
    ``LOCKGATE_CONSOLE_SCREENSHOTS`` names their folder (see ``browser_support``)."""
    assert name in PHOTOS
    if scene.store == "sqlite":
        folder = Path(os.environ.get(SCREENSHOTS_ENV) or scene.tmp / "screenshots")
        picture = await page.screenshot(path=str(folder / f"{name}.png"))
        assert picture.startswith(b"\x89PNG")


def run_path(name: str, run_id: str) -> str:
    return f"/console/runs/{name}/{run_id}"


@on_the_browsers_loop
async def test_every_page_shows_what_the_scene_made(context: Any, scene: Scene) -> None:
    errors = ConsoleErrors(context)
    page = await sign_in(context, ADMIN)
    await page.keyboard.press("Tab")  # the first stop of every page: past the header
    await expect(page.locator(":focus")).to_have_text("Skip to content")

    main = page.locator("main")
    for name in ("console_wait", "console_held", "console_rated", "console_flaky"):
        await expect(main).to_contain_text(name)
    await photograph(scene, page, "overview")

    await page.goto("/console/runs")
    rows = page.get_by_test_id("run-row")
    await expect(rows.first).to_be_visible()
    shown = {await rows.nth(i).get_attribute("data-run-id") for i in range(await rows.count())}
    made = {scene.waiting, scene.holding, scene.gated, scene.rated, scene.rate_gated, scene.flaky}
    assert made <= shown
    await photograph(scene, page, "runs")

    await page.goto("/console/runs?workflow=console_held&status=pending")
    await expect(rows).to_have_count(1)
    assert await rows.first.get_attribute("data-run-id") == scene.gated

    await page.goto(f"/console/search?q={scene.waiting}")
    assert page.url == scene_url(page, run_path("console_wait", scene.waiting))
    await expect(page.get_by_test_id("run-status")).to_contain_text(re.compile("signal.waiting"))
    await expect(page.get_by_test_id("timeline-entry").first).to_be_visible()

    await page.goto(run_path("console_held", scene.gated))
    await expect(page.get_by_test_id("run-status")).to_contain_text("pending")
    await expect(page.get_by_test_id("run-gate")).to_contain_text("Limit")
    await expect(page.get_by_test_id("run-gate")).to_contain_text("acme")
    await expect(page.get_by_test_id("run-waiting")).to_contain_text("acme")
    await photograph(scene, page, "run")

    await page.goto(run_path("console_rated", scene.rate_gated))
    await expect(page.get_by_test_id("run-gate")).to_contain_text("Rate")
    await expect(page.get_by_test_id("run-gate")).to_contain_text("globex")
    await expect(page.get_by_test_id("run-waiting")).to_contain_text("globex")

    await page.goto(run_path("console_flaky", scene.flaky))
    await expect(page.get_by_test_id("run-status")).to_contain_text("complete")
    await expect(page.get_by_test_id("timeline")).to_contain_text("503")  # the failed try's error
    await photograph(scene, page, "run-retried")

    await page.goto("/console/gates")
    await expect(page.get_by_test_id("limit-key").filter(has_text="acme")).to_have_count(1)
    await expect(page.get_by_test_id("rate-key").filter(has_text="globex")).to_have_count(1)
    await photograph(scene, page, "gates")

    await page.goto("/console/windows")
    await expect(page.get_by_test_id("buffer").filter(has_text="acme")).to_have_count(1)
    await expect(page.get_by_test_id("buffer").filter(has_text="d-42")).to_have_count(1)
    await photograph(scene, page, "windows")

    await page.goto("/console/workers")
    worker = page.get_by_test_id("worker").filter(has_text=f"console-{scene.store}-1")
    await expect(worker).to_have_count(1)
    await photograph(scene, page, "workers")

    assert errors.take() == []


def new_waiting_run(scene: Scene) -> str:
    with scene.api() as http:
        run_id = submit(http, "console_wait", {"order": "to-cancel"})
        wait_status(http, "console_wait", run_id, "signal_waiting")
    return run_id


def status_now(scene: Scene, run_id: str, *wanted: str) -> str:
    with scene.api() as http:
        return wait_status(http, "console_wait", run_id, *wanted)


@on_the_browsers_loop
async def test_cancel_from_the_run_page_ends_the_run(context: Any, scene: Scene) -> None:
    run_id = await asyncio.to_thread(new_waiting_run, scene)
    errors = ConsoleErrors(context)
    page = await sign_in(context, ADMIN, run_path("console_wait", run_id))

    async with page.expect_navigation():
        await page.get_by_test_id("action-cancel").click()
    assert page.url == scene_url(page, f"{run_path('console_wait', run_id)}/confirm/cancel")
    await photograph(scene, page, "confirm")
    yes = await page.get_by_test_id("confirm").bounding_box()
    no = await page.get_by_role("link", name="No, back to the run").bounding_box()
    assert yes is not None
    assert no is not None
    assert no["x"] - (yes["x"] + yes["width"]) >= 16  # room between the two choices
    async with page.expect_navigation():
        await page.get_by_test_id("confirm").click()
    assert page.url == scene_url(page, run_path("console_wait", run_id))
    assert await asyncio.to_thread(status_now, scene, run_id, "cancelled") == "cancelled"
    # The page catches up by itself: its live refresh, no reload.
    await expect(page.get_by_test_id("run-status")).to_contain_text("cancelled")
    assert errors.take() == []


@on_the_browsers_loop
async def test_a_request_without_a_session_is_sent_to_sign_in(context: Any, scene: Scene) -> None:
    errors = ConsoleErrors(context)
    page = await context.new_page()
    wanted = "/console/runs?status=pending"
    answer = await page.request.get(wanted, max_redirects=0)
    assert answer.status == 303
    assert answer.headers["location"].startswith("/console/sign-in?next=")

    await page.goto(wanted)
    assert page.url.startswith(scene_url(page, "/console/sign-in?next="))
    field = page.get_by_test_id("sign-in").locator("input[name=token]")
    await expect(field).to_be_visible()
    await photograph(scene, page, "sign-in")

    await field.fill("not-a-token")
    async with page.expect_response(lambda r: r.request.method == "POST") as refused:
        await field.press("Enter")
    assert (await refused.value).status == 401
    await expect(field).to_be_visible()
    # The browser reports the 401 it was answered; nothing else may go wrong.
    assert errors.take() == [
        f"console {scene_url(page, '/console/sign-in')}: Failed to load resource: "
        "the server responded with a status of 401 (Unauthorized)"
    ]
    assert "lockgate_console" not in {c["name"] for c in await context.cookies()}

    await field.fill(ADMIN)
    async with page.expect_navigation():
        await field.press("Enter")
    assert page.url == scene_url(page, wanted)
    await expect(page.get_by_test_id("run-row").first).to_be_visible()
    (cookie,) = [c for c in await context.cookies() if c["name"] == "lockgate_console"]
    assert cookie["httpOnly"]
    assert cookie["sameSite"] == "Strict"
    assert cookie["path"] == "/console"
    assert ADMIN not in cookie["value"]
    assert errors.take() == []


@on_the_browsers_loop
async def test_a_read_token_sees_no_actions_and_a_forged_post_is_refused(
    context: Any, scene: Scene
) -> None:
    errors = ConsoleErrors(context)
    path = run_path("console_wait", scene.waiting)
    page = await sign_in(context, READER, path)
    await expect(page.get_by_test_id("timeline-entry").first).to_be_visible()
    for action in ACTIONS:
        await expect(page.get_by_test_id(f"action-{action}")).to_have_count(0)
    csrf = page.locator("input[name=csrf]")
    token = await csrf.first.input_value() if await csrf.count() else ""
    forged = await page.request.post(f"{path}/cancel", form={"csrf": token}, max_redirects=0)
    assert forged.status == 403

    # An admin's session is refused too: without its CSRF token, or from another site.
    other = await context.browser.new_context(base_url=scene.url)
    admin = await sign_in(other, ADMIN, f"{path}/confirm/cancel")
    real = await admin.locator("form input[name=csrf]").first.input_value()
    post = admin.request.post
    assert (await post(f"{path}/cancel", form={}, max_redirects=0)).status == 403
    assert (await post(f"{path}/cancel", form={"csrf": "x" + real}, max_redirects=0)).status == 403
    foreign = await post(
        f"{path}/cancel",
        form={"csrf": real},
        headers={"Origin": "http://elsewhere.example"},
        max_redirects=0,
    )
    assert foreign.status == 403
    await other.close()

    assert await asyncio.to_thread(status_now, scene, scene.waiting, "signal_waiting")
    assert errors.take() == []


@on_the_browsers_loop
async def test_the_pages_read_without_javascript(browser: Any, scene: Scene) -> None:
    plain = await browser.new_context(
        viewport=LAPTOP, base_url=scene.url, java_script_enabled=False
    )
    try:
        page = await sign_in(plain, ADMIN, run_path("console_held", scene.gated))
        await expect(page.get_by_test_id("run-gate")).to_contain_text("Limit")
        await page.goto("/console/runs?workflow=console_wait")
        await expect(page.get_by_test_id("run-row").first).to_be_visible()
        await expect(page.locator("script:not([src])")).to_have_count(0)  # no inline script
    finally:
        await plain.close()


def test_the_docs_show_every_picture_the_tests_take() -> None:
    page = (DOCS_SCREENSHOTS.parent / "console.md").read_text()
    shown = re.findall(r"!\[[^\]]*\]\(console/([\w-]+)\.png\)", page)
    assert sorted(shown) == sorted(PHOTOS)
    assert all((DOCS_SCREENSHOTS / f"{name}.png").is_file() for name in PHOTOS)
