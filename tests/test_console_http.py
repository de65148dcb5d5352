"""The web console over real HTTP, without a browser: uvicorn on loopback in a thread, an
SQLite file shared with a worker in the test's event loop, httpx as the browser (it keeps the
cookie). Sign-in, the cookie, scopes, CSRF and Origin, an admin's cancel through the confirm
form, search (a chain's root leads to its live run), every page and its test hooks, escaping."""

from __future__ import annotations

import asyncio
import html
import os
import re
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, suppress
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from http_support import DEADLINE, app_server, http_workflows
from lockgate import (
    ConfigurationError,
    InlineWorkflowRunner,
    ManualClock,
    MemoryStore,
    RetryPolicy,
    WorkflowContext,
    step,
    workflow,
)
from lockgate.client import WorkflowClient
from lockgate.console._timeline import timeline
from lockgate.http import TokenTable, create_app
from lockgate.journal import RunStatus
from lockgate.journal._events import STEP_SECONDS_HEADER
from lockgate.stores import SQLiteStore
from lockgate.worker import WorkerOptions, WorkflowWorker
from lockgate.workflow._record import RECORD_METADATA, KafkaRecord


@workflow(name="console_chain", version="1")
async def console_chain(ctx: WorkflowContext, left: int) -> int:
    """Hands on ``left`` times, then waits for the signal ``go``."""
    if left > 0:
        await ctx.continue_as_new({"left": left - 1})
    await ctx.wait_for_signal("go")
    return left


WORKFLOWS = [*http_workflows().WORKFLOWS, console_chain]
TOKENS = {"read": "r-token", "read,write": "rw-token", "write": "w-token", "read,admin": "a-token"}
TABLE = TokenTable.parse("\n".join(f"{scope} {token}" for scope, token in TOKENS.items()))
CSRF = re.compile(r'name="csrf" value="([^"]+)"')
FORM_ACTION = re.compile(r'<form method="post" action="([^"]+)"')


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "console.db"


@pytest.fixture
def base_url(db: Path) -> Iterator[str]:
    store = SQLiteStore(db)
    try:
        with app_server(create_app(store, workflows=WORKFLOWS, tokens=TABLE)) as url:
            yield url
    finally:
        store.close()


@pytest.fixture
async def client(db: Path) -> AsyncIterator[WorkflowClient]:
    store = SQLiteStore(db)
    yield WorkflowClient(store)
    store.close()


@pytest.fixture
async def worker(db: Path) -> AsyncIterator[WorkflowWorker]:
    store = SQLiteStore(db, heartbeat_interval=0.05)
    served = WorkflowWorker(
        workflows=WORKFLOWS,
        store=store,
        options=WorkerOptions(claim_poll_interval=0.02, timer_poll_interval_s=0.05),
    )
    task = asyncio.create_task(served.run())
    yield served
    served.stop()
    await task
    store.close()


def browser(base_url: str) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=base_url, timeout=DEADLINE)


@asynccontextmanager
async def signed_in(base_url: str, scope: str) -> AsyncIterator[httpx.AsyncClient]:
    """A browser signed in with the token of ``scope``."""
    async with browser(base_url) as http:
        answer = await http.post(
            "/console/sign-in", data={"token": TOKENS[scope], "next": "/console/runs"}
        )
        assert answer.status_code == 303, answer.text
        assert answer.headers["location"] == "/console/runs"
        yield http


async def csrf_of(http: httpx.AsyncClient, path: str = "/console/") -> str:
    page = await http.get(path)
    assert page.status_code == 200, page.text
    found = CSRF.search(page.text)
    assert found, "the page holds no CSRF token"
    return found.group(1)


async def until_status(client: WorkflowClient, name: str, run_id: str, want: RunStatus) -> None:
    end = time.monotonic() + DEADLINE
    while (status := await client.status(name, run_id)) != want:
        assert time.monotonic() < end, f"{run_id} stayed {status}, never {want}"
        await asyncio.sleep(0.02)


def hooks(text: str, testid: str) -> list[str]:
    return re.findall(rf'<[^>]*data-testid="{testid}"[^>]*>', text)


async def test_a_request_without_a_session_is_sent_to_sign_in(base_url: str) -> None:
    async with browser(base_url) as http:
        for path in ("/console/", "/console/runs?status=pending", "/console/gates"):
            answer = await http.get(path)
            assert answer.status_code == 303, path
            target = urlsplit(answer.headers["location"])
            assert target.path == "/console/sign-in"
            assert httpx.QueryParams(target.query)["next"] == path
        form = await http.get("/console/sign-in?next=/console/runs")
        assert form.status_code == 200
        assert hooks(form.text, "sign-in")
        assert 'name="token"' in form.text
        # The API itself still wants its bearer token.
        assert (await http.get("/http_wait/runs")).status_code == 401


async def test_sign_in_sets_an_opaque_strict_http_only_cookie(base_url: str) -> None:
    async with browser(base_url) as http:
        answer = await http.post("/console/sign-in", data={"token": TOKENS["read"], "next": ""})
        assert answer.status_code == 303
        assert answer.headers["location"] == "/console/"
        cookie = answer.headers["set-cookie"]
        name, _, rest = cookie.partition("=")
        value = rest.split(";", 1)[0]
        attributes = {part.strip().lower() for part in cookie.split(";")[1:]}
        assert name == "lockgate_console"
        assert TOKENS["read"] not in cookie
        assert len(value) >= 40
        assert "httponly" in attributes
        assert "samesite=strict" in attributes
        assert "path=/console" in attributes
        assert "secure" not in attributes  # plain http here; https sets it
        assert (await http.get("/console/")).status_code == 200
        # Another site's next is not followed.
        away = await http.post(
            "/console/sign-in", data={"token": TOKENS["read"], "next": "https://evil.example/"}
        )
        assert away.headers["location"] == "/console/"


async def test_a_bad_token_is_401_with_the_form_again(base_url: str) -> None:
    async with browser(base_url) as http:
        answer = await http.post("/console/sign-in", data={"token": "nope", "next": "/console/"})
        assert answer.status_code == 401
        assert hooks(answer.text, "sign-in")
        assert "not one this server accepts" in answer.text
        assert "set-cookie" not in answer.headers
        assert (await http.get("/console/")).status_code == 303


async def test_a_read_session_sees_no_buttons_and_its_forged_post_is_403(
    base_url: str, client: WorkflowClient
) -> None:
    run = await client.submit("http_wait", {"order": "r1"})
    page = f"/console/runs/http_wait/{run.run_id}"
    async with signed_in(base_url, "write") as http:
        assert (await http.get(page)).status_code == 403  # pages need 'read'
    for scope in ("read", "read,write"):
        async with signed_in(base_url, scope) as http:
            shown = await http.get(page)
            assert shown.status_code == 200
            assert not re.search(r'data-testid="action-', shown.text)
            assert (await http.get(f"{page}/confirm/cancel")).status_code == 403
            csrf = await csrf_of(http, page)
            forged = await http.post(f"{page}/cancel", data={"csrf": csrf})
            assert forged.status_code == 403
    assert await client.status("http_wait", run.run_id) == RunStatus.PENDING
    async with signed_in(base_url, "read,admin") as http:
        shown = (await http.get(page)).text
        for action in ("signal", "cancel", "terminate", "pause"):
            assert hooks(shown, f"action-{action}"), action


async def test_a_post_without_the_csrf_token_or_from_another_origin_is_403(
    base_url: str, client: WorkflowClient
) -> None:
    run = await client.submit("http_wait", {"order": "c1"})
    action = f"/console/runs/http_wait/{run.run_id}/cancel"
    async with signed_in(base_url, "read,admin") as http:
        csrf = await csrf_of(http)
        assert (await http.post(action, data={})).status_code == 403
        assert (await http.post(action, data={"csrf": csrf + "x"})).status_code == 403
        other = await http.post(
            action, data={"csrf": csrf}, headers={"Origin": "http://evil.example"}
        )
        assert other.status_code == 403
        assert (await http.post("/console/sign-out", data={})).status_code == 403
        assert await client.status("http_wait", run.run_id) == RunStatus.PENDING
        same = urlsplit(base_url).netloc
        out = await http.post(
            "/console/sign-out", data={"csrf": csrf}, headers={"Origin": f"http://{same}"}
        )
        assert out.status_code == 303
        assert (await http.get("/console/")).status_code == 303  # the session is gone


async def test_a_session_whose_token_lacks_read_can_still_sign_out(base_url: str) -> None:
    async with signed_in(base_url, "write") as http:
        refused = await http.get("/console/runs")
        assert refused.status_code == 403
        assert "sign-out" in "".join(FORM_ACTION.findall(refused.text))
        found = CSRF.search(refused.text)
        assert found, "the refusal page offers no sign-out form"
        out = await http.post("/console/sign-out", data={"csrf": found.group(1)})
        assert out.status_code == 303
        assert out.headers["location"] == "/console/sign-in"
        assert (await http.get("/console/runs")).status_code == 303  # the session is gone


async def test_an_admin_cancels_a_run_through_the_confirm_form(
    base_url: str, client: WorkflowClient, worker: WorkflowWorker
) -> None:
    run = await client.submit("http_wait", {"order": "to-cancel"})
    await until_status(client, "http_wait", run.run_id, RunStatus.SIGNAL_WAITING)
    page = f"/console/runs/http_wait/{run.run_id}"
    async with signed_in(base_url, "read,admin") as http:
        shown = await http.get(page)
        link = re.search(r'data-testid="action-cancel" href="([^"]+)"', shown.text)
        assert link is not None
        confirm = await http.get(html.unescape(link.group(1)))
        assert confirm.status_code == 200
        assert hooks(confirm.text, "confirm")
        target = FORM_ACTION.findall(confirm.text)[-1]
        csrf = CSRF.findall(confirm.text)[-1]
        done = await http.post(html.unescape(target), data={"csrf": csrf, "reason": "console test"})
        assert done.status_code == 303
        assert done.headers["location"] == page
        await until_status(client, "http_wait", run.run_id, RunStatus.CANCELLED)
        after = await http.get(page)
        assert re.search(r'data-testid="run-status">cancelled<', after.text)
        assert not hooks(after.text, "action-cancel")  # an ended run offers no action


async def test_search_by_id_and_by_a_chain_root_leads_to_the_live_run(
    base_url: str, client: WorkflowClient, worker: WorkflowWorker
) -> None:
    plain = await client.submit("http_wait", {"order": "s1"})
    root = await client.submit("console_chain", {"left": 2})
    end = time.monotonic() + DEADLINE
    while (await client.status("console_chain", root.run_id)) != RunStatus.SIGNAL_WAITING:
        assert time.monotonic() < end
        await asyncio.sleep(0.02)
    async with signed_in(base_url, "read") as http:
        found = await http.get("/console/search", params={"q": plain.run_id})
        assert found.status_code == 303
        assert found.headers["location"] == f"/console/runs/http_wait/{plain.run_id}"
        chained = await http.get("/console/search", params={"q": root.run_id})
        assert chained.status_code == 303
        tail = chained.headers["location"].rsplit("/", 1)[1]
        assert tail != root.run_id
        shown = await http.get(chained.headers["location"])
        assert re.search(r'data-testid="run-status">signal_waiting<', shown.text)
        # The root's own page says it handed on, and links on.
        root_page = await http.get(f"/console/runs/console_chain/{root.run_id}")
        assert re.search(r'data-testid="run-status">continued<', root_page.text)
        missing = await http.get("/console/search", params={"q": "no-such-run"})
        assert missing.status_code == 404


async def test_every_page_answers_200_with_its_hooks(
    base_url: str, client: WorkflowClient, tmp_path: Path
) -> None:
    record = str(tmp_path / "record")
    gated = [
        await client.submit("http_limited", {"tenant": "acme", "record": record}) for _ in range(2)
    ]
    other = await client.submit("http_limited", {"tenant": "zeta", "record": record})
    waiting = await client.submit("http_wait", {"order": "w"})
    async with signed_in(base_url, "read,admin") as http:
        overview = await http.get("/console/")
        assert overview.status_code == 200
        assert 'data-workflow="http_limited"' in overview.text
        listed = await http.get("/console/runs")
        ids = re.findall(r'data-testid="run-row" data-run-id="([^"]+)"', listed.text)
        assert {r.run_id for r in [*gated, other, waiting]} <= set(ids)
        by_gate = await http.get("/console/runs", params={"gate": "acme"})
        shown = set(re.findall(r'data-run-id="([^"]+)"', by_gate.text))
        assert shown == {r.run_id for r in gated}
        by_status = await http.get(
            "/console/runs", params={"workflow": "http_wait", "status": "pending"}
        )
        assert re.findall(r'data-run-id="([^"]+)"', by_status.text) == [waiting.run_id]
        recent = await http.get("/console/runs", params={"since": "1h", "workflow": "http_wait"})
        assert waiting.run_id in recent.text
        old = await http.get("/console/runs", params={"since": "2000-01-01T00:00"})
        assert waiting.run_id in old.text
        future = await http.get("/console/runs", params={"since": "2999-01-01T00:00"})
        assert not hooks(future.text, "run-row")
        run = await http.get(f"/console/runs/http_limited/{gated[0].run_id}")
        assert run.status_code == 200
        for testid in ("run-status", "run-gate", "run-waiting", "timeline", "timeline-entry"):
            assert hooks(run.text, testid), testid
        gate = re.search(r'data-testid="run-gate">(.*?)</div>', run.text, re.S)
        assert gate is not None
        assert "Limit tenant=acme" in gate.group(1)
        for path in ("/console/gates", "/console/windows", "/console/workers"):
            page = await http.get(path)
            assert page.status_code == 200, path
            assert "<main" in page.text
        asset = await http.get("/console/static/console.js")
        assert asset.status_code == 200
        assert "javascript" in asset.headers["content-type"]
        assert (await http.get("/console/static/nothing.js")).status_code == 404
        for bad in ({"status": "bogus"}, {"since": "yesterday"}, {"cursor": "!!"}):
            assert (await http.get("/console/runs", params=bad)).status_code == 400, bad
        assert (await http.get("/console/runs/nope/x")).status_code == 404
        assert (await http.get(f"/console/runs/http_wait/{gated[0].run_id}")).status_code == 404


async def test_a_bound_runs_page_shows_the_record_it_came_from(
    base_url: str, client: WorkflowClient
) -> None:
    """The record's place and key, as a bound topic's consumer keeps them in the run's metadata
    (``test_console_kafka`` has a run a real record started); a run no record started shows
    none."""
    stamp = datetime(2026, 3, 1, 12, 30, 5, tzinfo=UTC)
    record = KafkaRecord("orders.v1", 3, 1041, {"n": 1}, key="<u&1>", timestamp=stamp)
    keyed = await client.submit(
        "http_wait", {"order": "a"}, metadata={RECORD_METADATA: record.to_metadata()}
    )
    keyless = KafkaRecord("orders.v1", 0, 7, None, key=None)
    unkeyed = await client.submit(
        "http_wait", {"order": "b"}, metadata={RECORD_METADATA: keyless.to_metadata()}
    )
    plain = await client.submit("http_wait", {"order": "c"})
    async with signed_in(base_url, "read") as http:
        page = (await http.get(f"/console/runs/http_wait/{keyed.run_id}")).text
        [tag] = hooks(page, "run-record")
        assert 'data-topic="orders.v1" data-partition="3" data-offset="1041"' in tag
        shown = re.search(r'data-testid="run-record"[^>]*>(.*?)</dd>', page, re.S)
        assert shown is not None
        assert shown.group(1) == (
            "topic <code>orders.v1</code>, partition 3, offset 1041, key "
            "<code>&lt;u&amp;1&gt;</code>, written 2026-03-01 12:30:05 UTC"
        )
        page = (await http.get(f"/console/runs/http_wait/{unkeyed.run_id}")).text
        shown = re.search(r'data-testid="run-record"[^>]*>(.*?)</dd>', page, re.S)
        assert shown is not None
        assert shown.group(1) == "topic <code>orders.v1</code>, partition 0, offset 7, no key"
        page = (await http.get(f"/console/runs/http_wait/{plain.run_id}")).text
        assert not hooks(page, "run-record")


async def test_a_filter_that_matches_little_pages_on_with_a_cursor(
    base_url: str, client: WorkflowClient
) -> None:
    from lockgate.console._queries import LIST_PAGE, MAX_LIST_READS

    rare = await client.submit("http_wait", {"order": "rare"}, owner="rare-owner")
    # Enough runs after it that one console page's reads run out before reaching it.
    many = LIST_PAGE * MAX_LIST_READS + 5
    await asyncio.gather(*(client.submit("http_wait", {"order": str(i)}) for i in range(many)))
    async with signed_in(base_url, "read") as http:
        first = await http.get("/console/runs", params={"workflow": "http_wait", "status": "error"})
        assert "No more matches in the last" in first.text
        assert not hooks(first.text, "run-row")
        link = re.search(r'data-testid="next-page"', first.text)
        assert link is not None
        nxt = re.search(r'href="(/console/runs\?[^"]+)" data-testid="next-page"', first.text)
        assert nxt is not None
        second = await http.get(html.unescape(nxt.group(1)))
        assert second.status_code == 200
        assert "End of the runs" in second.text
        # The owner is matched over bounded store pages too: its one run, older than a page's
        # reads, is found by going on, and shown once.
        found: list[str] = []
        url = "/console/runs?owner=rare-owner"
        for _ in range(5):
            owned = await http.get(url)
            found += re.findall(r'data-run-id="([^"]+)"', owned.text)
            more = re.search(r'href="(/console/runs\?[^"]+)" data-testid="next-page"', owned.text)
            if more is None:
                break
            url = html.unescape(more.group(1))
        assert found == [rare.run_id]


async def test_params_are_escaped(base_url: str, client: WorkflowClient) -> None:
    run = await client.submit("http_wait", {"order": "<script>alert(1)</script>"})
    async with signed_in(base_url, "read") as http:
        for path in (f"/console/runs/http_wait/{run.run_id}", "/console/runs"):
            page = await http.get(path)
            assert "<script>alert(1)" not in page.text
        page = await http.get(f"/console/runs/http_wait/{run.run_id}")
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page.text
        assert "default-src 'self'" in page.headers["content-security-policy"]


async def test_without_tokens_an_anonymous_session_still_needs_the_csrf_token(
    tmp_path: Path,
) -> None:
    store = SQLiteStore(tmp_path / "open.db")
    try:
        run = await WorkflowClient(store).submit("http_wait", {"order": "o"})
        with app_server(create_app(store, workflows=WORKFLOWS)) as url:
            async with browser(url) as http:
                page = await http.get(f"/console/runs/http_wait/{run.run_id}")
                assert page.status_code == 200
                assert "lockgate_console" in page.headers["set-cookie"]
                assert hooks(page.text, "action-pause")
                action = f"/console/runs/http_wait/{run.run_id}/pause"
                assert (await http.post(action, data={})).status_code == 403
                confirm = await http.get(f"/console/runs/http_wait/{run.run_id}/confirm/pause")
                csrf = CSRF.search(confirm.text)
                assert csrf is not None
                # A name that is not loopback (DNS rebinding: another site's name pointed at
                # this machine) is refused, page and action alike.
                rebound = {"Host": "attacker.example"}
                assert (await http.get("/console/", headers=rebound)).status_code == 403
                refused = await http.post(action, data={"csrf": csrf.group(1)}, headers=rebound)
                assert refused.status_code == 403
                assert store.get_pause_requested_at("http_wait", run.run_id) is None
                done = await http.post(action, data={"csrf": csrf.group(1)})
                assert done.status_code == 303
                assert store.get_pause_requested_at("http_wait", run.run_id) is not None
    finally:
        store.close()


async def page_until(http: httpx.AsyncClient, path: str, testid: str) -> str:
    """GET ``path`` until it shows a ``testid`` row, within the deadline."""
    end = time.monotonic() + DEADLINE
    while True:
        page = await http.get(path)
        assert page.status_code == 200, page.text
        if hooks(page.text, testid):
            return page.text
        assert time.monotonic() < end, f"{path} never showed a {testid} row"
        await asyncio.sleep(0.05)


async def test_gates_windows_and_workers_show_what_the_store_reports(
    base_url: str, client: WorkflowClient, tmp_path: Path
) -> None:
    record = str(tmp_path / "record")
    for _ in range(3):
        await client.submit("http_limited", {"tenant": "acme", "record": record})
    await client.submit("http_limited", {"tenant": "zeta", "record": record})
    await client.trigger("http_collect", {"n": 1}, key="bucket-a")
    async with signed_in(base_url, "read") as http:
        gates = await page_until(http, "/console/gates", "limit-key")
        rows = re.findall(r'<tr data-testid="limit-key" data-key="([^"]+)">(.*?)</tr>', gates, re.S)
        assert [key for key, _ in rows] == ["acme", "zeta"]  # the most queued first
        assert "0 / 2" in rows[0][1]
        assert "<td>3</td>" in rows[0][1]
        windows = await page_until(http, "/console/windows", "buffer")
        assert 'data-testid="buffer" data-key="bucket-a"' in windows
        assert "not-reported" not in windows
        assert hooks(windows, "kafka-not-configured")  # SQLite: no Kafka journal
        assert not hooks(windows, "partition")


async def test_the_workers_page_shows_a_live_worker(base_url: str, worker: WorkflowWorker) -> None:
    async with signed_in(base_url, "read") as http:
        page = await page_until(http, "/console/workers", "worker")
        ids = re.findall(r'data-testid="worker" data-worker-id="([^"]+)"', page)
        assert len(ids) == 1
        assert f"pid {os.getpid()}" in page


def test_a_workflow_named_console_is_refused_beside_the_console() -> None:
    """Its API paths (``/console/runs``) would be the console's, which signs in its own way:
    served beside it, a POST there would skip the bearer token."""

    @workflow(name="console")
    async def console(ctx: WorkflowContext) -> None:
        return None

    with pytest.raises(ConfigurationError, match="--no-console"):
        create_app(MemoryStore(), workflows=[console])
    assert create_app(MemoryStore(), workflows=[console], console=False) is not None


def open_buffers_cell(page: str, workflow: str) -> str:
    """The overview row of ``workflow``."""
    row = re.search(
        rf'<tr data-testid="workflow-row" data-workflow="{workflow}">(.*?)</tr>', page, re.S
    )
    assert row is not None, f"no row of {workflow}"
    return row.group(1)


async def test_the_overview_shows_a_triggered_workflows_open_buffers(
    base_url: str, client: WorkflowClient
) -> None:
    from lockgate.console._queries import OVERVIEW_BUFFERS

    await client.trigger_many("http_collect", [{"n": 1}, {"n": 2}], key="bucket-a")
    await client.trigger("http_collect", {"n": 3}, key="bucket-b")
    async with signed_in(base_url, "read") as http:
        page = (await http.get("/console/")).text
        collect = open_buffers_cell(page, "http_collect")
        assert 'data-testid="open-buffers" data-buffers="2" data-events="3"' in collect
        assert "2 open, 3 event(s) held" in collect
        assert "next due" in collect
        assert "open-buffers" not in open_buffers_cell(page, "http_wait")  # no trigger
        # Past the overview's bound it counts the first ones and says there are more.
        for n in range(OVERVIEW_BUFFERS):
            await client.trigger("http_collect", {"n": n}, key=f"more-{n}")
        page = (await http.get("/console/")).text
        collect = open_buffers_cell(page, "http_collect")
        assert f'data-buffers="{OVERVIEW_BUFFERS}"' in collect
        assert f"{OVERVIEW_BUFFERS}+ open" in collect


async def test_a_step_try_says_how_long_it_took() -> None:
    """Each try of a named step carries its duration (``lg-step-seconds``) on the attempt's
    clock, and the run page's timeline shows it."""
    clock = ManualClock()
    store = MemoryStore(clock=clock)

    @step(name="console_timed_step", retry=RetryPolicy(max_attempts=2, initial_backoff=0.0))
    async def timed(n: int) -> int:
        clock.advance(0.25 if n == 0 else 1.5)
        if n == 0:
            raise ValueError("fails")
        return n

    @workflow(name="console_timed")
    async def console_timed(ctx: WorkflowContext) -> int:
        with suppress(ValueError):
            await timed(0)
        return await timed(7)

    runner = InlineWorkflowRunner(store=store, clock=clock)
    await runner.start()
    try:
        handle = await runner.client.submit("console_timed", {})
        assert await handle.result(timeout=DEADLINE) == 7
    finally:
        await runner.aclose()
    events = store.load_run("console_timed", handle.run_id)
    seconds = [
        float(e.headers[STEP_SECONDS_HEADER])
        for e in events
        if e.kind in ("step:done", "step:error")
    ]
    assert seconds == [0.25, 0.25, 1.5], [(e.kind, dict(e.headers)) for e in events]
    titles = [entry.title for group in timeline(events) for entry in group.entries]
    assert "named console_timed_step failed in 250 ms (will retry)" in titles, titles
    assert "named console_timed_step failed in 250 ms (gave up)" in titles, titles
    assert "named console_timed_step done in 1.5 s" in titles, titles


async def test_paging_neither_repeats_nor_skips_when_runs_arrive(
    base_url: str, client: WorkflowClient
) -> None:
    """A page ends where a store page ends, so its cursor is the store's keyset bound: runs
    submitted between two pages do not push rows of the first onto the second."""
    from lockgate.console._queries import PAGE_ROWS

    first_runs = [
        (await client.submit("http_wait", {"order": f"p{i}"})).run_id for i in range(PAGE_ROWS + 20)
    ]
    async with signed_in(base_url, "read") as http:
        one = await http.get("/console/runs", params={"workflow": "http_wait"})
        shown = re.findall(r'data-run-id="([^"]+)"', one.text)
        nxt = re.search(r'href="(/console/runs\?[^"]+)" data-testid="next-page"', one.text)
        assert nxt is not None
        for i in range(10):  # arrive between the two pages
            await client.submit("http_wait", {"order": f"late{i}"})
        two = await http.get(html.unescape(nxt.group(1)))
        shown_two = re.findall(r'data-run-id="([^"]+)"', two.text)
    assert len(shown) == PAGE_ROWS
    assert not set(shown) & set(shown_two)
    newest_first = list(reversed(first_runs))
    assert shown + shown_two[:20] == newest_first[: PAGE_ROWS + 20]
