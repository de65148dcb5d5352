"""Bad input at the HTTP API's edge, over real HTTP (uvicorn on loopback, an SQLite store):
lone surrogates refused at every JSON boundary and harmless when a store already holds them,
cursors past the store's range, and names and ids holding ``/`` reached percent-encoded."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from http_support import DEADLINE, app_server, http_workflows
from lockgate import WorkflowContext, workflow
from lockgate.client import WorkflowClient
from lockgate.http import create_app
from lockgate.journal import RunStatus
from lockgate.stores import SQLiteStore
from lockgate.worker import WorkerOptions, WorkflowWorker


@workflow(name="team/orders", version="1")
async def slashed(ctx: WorkflowContext, order: str) -> dict[str, Any]:
    """A workflow whose name holds ``/``; waits for the signal ``go``."""
    go = await ctx.wait_for_signal("go")
    return {"order": order, "go": go}


WORKFLOWS = [*http_workflows().WORKFLOWS, slashed]
JSON = {"content-type": "application/json"}
PROBLEM = "application/problem+json"
#: A JSON text whose string is a lone surrogate, as a client may send it.
LONE = b'"\\ud800"'


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "bounds.db"


@pytest.fixture
def store(db: Path) -> Iterator[SQLiteStore]:
    opened = SQLiteStore(db, heartbeat_interval=0.05)
    yield opened
    opened.close()


@pytest.fixture
def base_url(store: SQLiteStore) -> Iterator[str]:
    with app_server(create_app(store, workflows=WORKFLOWS)) as url:
        yield url


@pytest.fixture
async def http(base_url: str) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=base_url, timeout=DEADLINE) as client:
        yield client


def problem_of(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith(PROBLEM)
    body: dict[str, Any] = response.json()
    assert body["code"] == code, body
    return body


async def test_a_lone_surrogate_is_refused_at_every_json_boundary_with_422(
    http: httpx.AsyncClient, store: SQLiteStore
) -> None:
    submitted = await http.post(
        "/http_wait/runs", content=b'{"order": ' + LONE + b"}", headers=JSON
    )
    body = problem_of(submitted, 422, "invalid_text")
    assert body["field"] == "body.order"
    assert "lone surrogate" in body["detail"]
    assert (await http.get("/http_wait/runs")).json()["runs"] == []  # nothing was queued

    run_id = (await http.post("/http_wait/runs", json={"order": "a"})).json()["run_id"]
    signal = await http.post(
        f"/http_wait/runs/{run_id}/signals/go", content=b'{"x": [1, ' + LONE + b"]}", headers=JSON
    )
    assert problem_of(signal, 422, "invalid_text")["field"] == "body.x[1]"
    update = await http.post(
        f"/http_wait/runs/{run_id}/updates/bump", content=b'{"by": ' + LONE + b"}", headers=JSON
    )
    problem_of(update, 422, "invalid_text")
    event = await http.post(
        "/http_collect/events", content=b'{"k": "a", "n": ' + LONE + b"}", headers=JSON
    )
    problem_of(event, 422, "invalid_text")
    key = await http.post("/http_collect/events", content=b'{"\\udfff": 1, "k": "a"}', headers=JSON)
    problem_of(key, 422, "invalid_text")
    listed = await http.get("/http_wait/runs")
    assert listed.status_code == 200
    assert [r["run_id"] for r in listed.json()["runs"]] == [run_id]


async def test_runs_a_store_already_holds_with_a_lone_surrogate_do_not_break_any_reader(
    http: httpx.AsyncClient, store: SQLiteStore
) -> None:
    # Written straight to the store, as a version that did not refuse them would have.
    store.submit_run("http_wait", "old-1", {"order": "x\ud800y"}, metadata={"m": "\udfff"})
    store.submit_run("http_wait", "fine-1", {"order": "plain"})
    listed = await http.get("/http_wait/runs")
    assert listed.status_code == 200, listed.text
    runs = {r["run_id"]: r for r in listed.json()["runs"]}
    assert runs["old-1"]["params"] == {"order": "x\ufffdy"}
    assert runs["old-1"]["metadata"] == {"m": "\ufffd"}
    assert runs["fine-1"]["params"] == {"order": "plain"}
    shown = await http.get("/http_wait/runs/old-1")
    assert shown.status_code == 200, shown.text
    events = await http.get("/http_wait/runs/old-1/events")
    assert events.status_code == 200, events.text
    assert events.json()["events"][0]["payload"]["params"] == {"order": "x\ufffdy"}
    page = await http.get("/console/runs/http_wait/old-1")
    assert page.status_code == 200, page.text
    assert "x\ufffdy" in page.text


async def test_a_cursor_past_the_stores_range_is_a_400_not_a_500(
    http: httpx.AsyncClient, store: SQLiteStore
) -> None:
    store.submit_run("http_wait", "r-1", {"order": "a"})
    for cursor in ("99999999999999999999999999", "9223372036854775808", "abc", "-1", "1.5"):
        answer = await http.get("/http_wait/runs", params={"cursor": cursor})
        problem_of(answer, 400, "invalid_cursor")
    edge = await http.get("/http_wait/runs", params={"cursor": "9223372036854775807"})
    assert edge.status_code == 200
    assert [r["run_id"] for r in edge.json()["runs"]] == ["r-1"]


async def test_a_run_id_and_a_workflow_name_holding_a_slash_are_reached_percent_encoded(
    http: httpx.AsyncClient, store: SQLiteStore
) -> None:
    client = WorkflowClient(store)
    tricky = ["a/b", "a/events", "x/result", "50%/off", "a%2Fb"]
    for run_id in tricky:
        await client.submit("team/orders", {"order": run_id}, run_id=run_id)
    await client.submit("team/orders", {"order": "a"}, run_id="a")
    name = quote("team/orders", safe="")
    listed = await http.get(f"/{name}/runs")
    assert listed.status_code == 200, listed.text
    assert {r["run_id"] for r in listed.json()["runs"]} == {*tricky, "a"}
    for run_id in [*tricky, "a"]:
        path = f"/{name}/runs/{quote(run_id, safe='')}"
        shown = await http.get(path)
        assert shown.status_code == 200, (run_id, shown.text)
        assert shown.json()["run"]["run_id"] == run_id
        assert shown.json()["run"]["params"] == {"order": run_id}
        events = await http.get(f"{path}/events")
        assert events.status_code == 200, (run_id, events.text)
        assert events.json()["events"][0]["run_id"] == run_id
    sent = await http.post(f"/{name}/runs/{quote('a/events', safe='')}/signals/go", json={"v": 1})
    assert sent.status_code == 200, sent.text

    worker = WorkflowWorker(
        workflows=WORKFLOWS,
        store=store,
        options=WorkerOptions(claim_poll_interval=0.02, timer_poll_interval_s=0.05),
    )
    served = asyncio.create_task(worker.run())
    try:
        done = await http.get(
            f"/{name}/runs/{quote('a/events', safe='')}/result", params={"wait": DEADLINE}
        )
        assert done.json()["done"] is True, done.text
        assert done.json()["result"] == {"order": "a/events", "go": {"v": 1}}
        # The run "a" is another run: its signal was not the one sent above.
        assert await client.status("team/orders", "a") != RunStatus.COMPLETE
    finally:
        worker.stop()
        await served


async def test_the_consoles_links_reach_a_run_whose_id_and_name_hold_a_slash(
    http: httpx.AsyncClient, store: SQLiteStore
) -> None:
    client = WorkflowClient(store)
    await client.submit("team/orders", {"order": "o"}, run_id="eu/7")
    listed = await http.get("/console/runs")
    assert listed.status_code == 200
    link = "/console/runs/team%2Forders/eu%2F7"
    assert f'href="{link}"' in listed.text
    page = await http.get(link)
    assert page.status_code == 200, page.text
    assert "eu/7" in page.text
    confirm = await http.get(f"{link}/confirm/cancel")
    assert confirm.status_code == 200, confirm.text
    assert f'action="{link}/cancel"' in confirm.text


async def test_the_consoles_signal_form_refuses_a_lone_surrogate_with_422(
    http: httpx.AsyncClient, store: SQLiteStore
) -> None:
    client = WorkflowClient(store)
    run = await client.submit("http_wait", {"order": "c"})
    link = f"/console/runs/http_wait/{run.run_id}"
    form = await http.get(f"{link}/confirm/signal")
    assert form.status_code == 200, form.text
    found = re.search(r'name="csrf" value="([^"]+)"', form.text)
    assert found, "the confirm page holds no CSRF token"
    sent = await http.post(
        f"{link}/signal",
        data={"csrf": found.group(1), "signal": "go", "payload": '{"x": "\\ud800"}'},
    )
    assert sent.status_code == 422, sent.text
    assert "lone surrogate" in sent.text
    # Nothing was buffered: a good signal is the one the run gets.
    good = await http.post(
        f"{link}/signal", data={"csrf": found.group(1), "signal": "go", "payload": '{"x": 1}'}
    )
    assert good.status_code == 303, good.text
    worker = WorkflowWorker(
        workflows=WORKFLOWS,
        store=store,
        options=WorkerOptions(claim_poll_interval=0.02, timer_poll_interval_s=0.05),
    )
    served = asyncio.create_task(worker.run())
    try:
        result = await asyncio.wait_for(run.result(), DEADLINE)
        assert result["go"] == {"x": 1}
    finally:
        worker.stop()
        await served
