"""The HTTP API over real HTTP: uvicorn on loopback in a thread, an SQLite file shared with a
worker running in the test's event loop, httpx as the caller."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from http_support import DEADLINE, app_server, http_workflows
from lockgate.http import create_app
from lockgate.stores import SQLiteStore
from lockgate.worker import WorkerOptions, WorkflowWorker

WORKFLOWS = http_workflows().WORKFLOWS

PROBLEM = "application/problem+json"


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "lockgate.db"


@pytest.fixture
def base_url(db: Path) -> Iterator[str]:
    store = SQLiteStore(db)
    try:
        with app_server(create_app(store, workflows=WORKFLOWS)) as url:
            yield url
    finally:
        store.close()


@pytest.fixture
async def http(base_url: str) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=base_url, timeout=DEADLINE) as client:
        yield client


@pytest.fixture
async def worker(db: Path, base_url: str) -> AsyncIterator[WorkflowWorker]:
    store = SQLiteStore(db)
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


async def until(http: httpx.AsyncClient, path: str, check: Any) -> dict[str, Any]:
    """GET ``path`` until ``check(body)`` holds, within the deadline."""
    end = time.monotonic() + DEADLINE
    while True:
        body: dict[str, Any] = (await http.get(path)).json()
        if check(body):
            return body
        assert time.monotonic() < end, f"{path} never satisfied the check: {body}"
        await asyncio.sleep(0.02)


def assert_problem(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith(PROBLEM)
    body: dict[str, Any] = response.json()
    assert body["status"] == status
    assert body["code"] == code
    assert body["type"] == f"urn:lockgate:error:{code}"
    assert body["title"]
    assert body["detail"]
    return body


async def test_submit_idempotency_same_body_same_run_other_body_409(
    http: httpx.AsyncClient,
) -> None:
    key = {"Idempotency-Key": "order-1"}
    first = await http.post("/http_wait/runs", json={"order": "a"}, headers=key)
    assert first.status_code == 201
    assert first.json()["created"] is True
    again = await http.post("/http_wait/runs", json={"order": "a"}, headers=key)
    assert again.status_code == 200
    assert again.json() == {**first.json(), "created": False}
    other = await http.post("/http_wait/runs", json={"order": "b"}, headers=key)
    assert_problem(other, 409, "idempotency_conflict")
    plain = await http.post("/http_wait/runs", json={"order": "a"})
    assert plain.status_code == 201
    assert plain.json()["run_id"] != first.json()["run_id"]


async def test_bad_input_names_the_field(http: httpx.AsyncClient) -> None:
    wrong_type = await http.post("/http_wait/runs", json={"order": 3})
    assert assert_problem(wrong_type, 422, "invalid_params")["field"] == "body.order"
    missing = await http.post("/http_wait/runs", json={})
    assert assert_problem(missing, 422, "invalid_params")["field"] == "body.order"
    not_object = await http.post("/http_wait/runs", json=[1, 2])
    assert assert_problem(not_object, 422, "invalid_request")["field"] == "body"
    broken = await http.post(
        "/http_wait/runs", content=b"{not json", headers={"content-type": "application/json"}
    )
    assert assert_problem(broken, 422, "invalid_request")["field"].startswith("body")
    bad_wait = await http.get("/http_wait/runs/x/result", params={"wait": -1})
    assert assert_problem(bad_wait, 422, "invalid_request")["field"] == "query.wait"
    bad_status = await http.get("/http_wait/runs", params={"status": "sideways"})
    assert assert_problem(bad_status, 422, "invalid_request")["field"] == "query.status"


async def test_unknown_workflow_and_run_are_404(http: httpx.AsyncClient) -> None:
    assert assert_problem(await http.get("/nope/runs"), 404, "not_found")["field"] == "name"
    assert_problem(await http.post("/nope/runs", json={}), 404, "not_found")
    for path in ("", "/events", "/result"):
        assert_problem(await http.get(f"/http_wait/runs/missing{path}"), 404, "not_found")
    for path in ("signals/go", "cancel", "pause", "unpause", "terminate", "queries/state"):
        assert_problem(await http.post(f"/http_wait/runs/missing/{path}"), 404, "not_found")
    no_trigger = await http.post("/http_wait/events", json={"k": "a"})
    assert_problem(no_trigger, 404, "not_found")


async def test_submit_signal_long_poll_result(
    http: httpx.AsyncClient, worker: WorkflowWorker
) -> None:
    run_id = (await http.post("/http_wait/runs", json={"order": "a", "amount": 2})).json()["run_id"]
    shown = await until(
        http, f"/http_wait/runs/{run_id}", lambda b: b["run"]["status"] == "signal_waiting"
    )
    assert shown["run"]["params"] == {"order": "a", "amount": 2}
    assert shown["gates"] == {}
    early = (await http.get(f"/http_wait/runs/{run_id}/result", params={"wait": 0})).json()
    assert early == {
        "run_id": run_id,
        "status": "signal_waiting",
        "done": False,
        "result": None,
        "error": None,
        "interrupt": None,
    }
    poll = asyncio.create_task(http.get(f"/http_wait/runs/{run_id}/result", params={"wait": 50}))
    started = time.monotonic()
    await asyncio.sleep(0)
    updated = await http.post(f"/http_wait/runs/{run_id}/updates/bump", json={"by": 5})
    assert updated.status_code == 200, updated.text
    assert updated.json()["done"] is True
    assert updated.json()["result"] == 5
    queried = await http.post(f"/http_wait/runs/{run_id}/queries/state", json={})
    assert queried.json() == {"result": {"order": "a", "bumped": 5}}
    sent = await http.post(
        f"/http_wait/runs/{run_id}/signals/go", json={"ok": True}, headers={"Idempotency-Key": "s1"}
    )
    assert sent.json()["outcome"] in ("delivered", "buffered")
    done = (await poll).json()
    assert time.monotonic() - started < 45  # answered by the run ending, not the wait running out
    assert done["done"] is True
    assert done["status"] == "complete"
    assert done["result"] == {"order": "a", "amount": 2, "go": {"ok": True}, "bumped": 5}
    events = (await http.get(f"/http_wait/runs/{run_id}/events")).json()["events"]
    assert events[0]["kind"] == "run:init"
    assert events[-1]["kind"] == "run:complete"
    assert [e["run_seq"] for e in events] == list(range(1, len(events) + 1))
    later = (await http.get(f"/http_wait/runs/{run_id}/events", params={"after": 1})).json()
    assert later["events"] == events[1:]
    finished = await http.post(f"/http_wait/runs/{run_id}/signals/go", json={})
    assert_problem(finished, 409, "invalid_request")
    assert_problem(await http.post(f"/http_wait/runs/{run_id}/cancel"), 409, "invalid_request")


async def test_list_runs_filters_by_status_and_pages(
    http: httpx.AsyncClient, worker: WorkflowWorker
) -> None:
    ids = [
        (await http.post("/http_small/runs", json={"text": "x" * n})).json()["run_id"]
        for n in range(5)
    ]
    for run_id in ids:
        await until(http, f"/http_small/runs/{run_id}/result", lambda b: b["done"])
    waiting = (await http.post("/http_wait/runs", json={"order": "z"})).json()["run_id"]
    seen: list[str] = []
    cursor = None
    while True:
        params: dict[str, Any] = {"limit": 2, **({"cursor": cursor} if cursor else {})}
        page = (await http.get("/http_small/runs", params=params)).json()
        assert len(page["runs"]) <= 2
        seen += [run["run_id"] for run in page["runs"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert sorted(seen) == sorted(ids)
    complete = (await http.get("/http_small/runs", params={"status": "complete"})).json()
    assert sorted(r["run_id"] for r in complete["runs"]) == sorted(ids)
    none = (await http.get("/http_small/runs", params={"status": "cancelled"})).json()
    assert none == {"runs": [], "next_cursor": None}
    other = (await http.get("/http_wait/runs")).json()["runs"]
    assert [r["run_id"] for r in other] == [waiting]


async def test_collect_fires_on_the_third_event(
    http: httpx.AsyncClient, worker: WorkflowWorker
) -> None:
    answers = [
        await http.post("/http_collect/events", json={"k": "acme", "n": n}) for n in (1, 2, 3)
    ]
    assert [a.status_code for a in answers] == [202, 202, 202]
    assert [a.json()["run_id"] for a in answers[:2]] == [None, None]
    fired = answers[2].json()["run_id"]
    assert fired
    result = (await http.get(f"/http_collect/runs/{fired}/result", params={"wait": 50})).json()
    assert result["result"] == 6
    not_object = await http.post("/http_collect/events", json=[1])
    assert assert_problem(not_object, 422, "invalid_request")["field"] == "body"


async def test_cancel_pause_unpause_terminate(
    http: httpx.AsyncClient, worker: WorkflowWorker
) -> None:
    first = (await http.post("/http_wait/runs", json={"order": "p"})).json()["run_id"]
    await until(http, f"/http_wait/runs/{first}", lambda b: b["run"]["status"] == "signal_waiting")
    paused = await http.post(f"/http_wait/runs/{first}/pause")
    assert paused.status_code == 202
    assert paused.json() == {"run_id": first, "accepted": "pause"}
    await http.post(f"/http_wait/runs/{first}/signals/go", json={})
    await until(http, f"/http_wait/runs/{first}", lambda b: b["run"]["status"] == "paused")
    assert (await http.post(f"/http_wait/runs/{first}/unpause")).status_code == 202
    await until(http, f"/http_wait/runs/{first}/result", lambda b: b["status"] == "complete")

    second = (await http.post("/http_wait/runs", json={"order": "c"})).json()["run_id"]
    cancelled = await http.post(f"/http_wait/runs/{second}/cancel", json={"reason": "test"})
    assert cancelled.status_code == 202
    outcome = (await http.get(f"/http_wait/runs/{second}/result", params={"wait": 50})).json()
    assert outcome["done"] is True
    assert outcome["status"] == "cancelled"
    assert outcome["error"] is not None

    third = (await http.post("/http_wait/runs", json={"order": "t"})).json()["run_id"]
    ended = await http.post(f"/http_wait/runs/{third}/terminate", json={"reason": "x"})
    assert ended.json() == {"run_id": third, "outcome": "terminated", "ended": []}
    again = await http.post(f"/http_wait/runs/{third}/terminate")
    assert again.json()["outcome"] == "already_ended"
    assert (await http.get(f"/http_wait/runs/{third}")).json()["run"]["status"] == "terminated"


async def test_resume_answers_an_interrupt(http: httpx.AsyncClient, worker: WorkflowWorker) -> None:
    run_id = (await http.post("/http_ask/runs", json={"question": "ship?"})).json()["run_id"]
    asked = await until(http, f"/http_ask/runs/{run_id}/result", lambda b: b["interrupt"])
    assert asked["status"] == "interrupted"
    assert asked["interrupt"]["payload"]["question"] == "ship?"
    wait_id = asked["interrupt"]["wait_id"]
    wrong = await http.post(f"/http_ask/runs/{run_id}/resume", json={"action": "respond"})
    assert_problem(wrong, 400, "invalid_request")
    stale = await http.post(
        f"/http_ask/runs/{run_id}/resume", json={"action": "approve", "wait_id": "other"}
    )
    assert_problem(stale, 409, "run_not_waiting")
    answered = await http.post(
        f"/http_ask/runs/{run_id}/resume", json={"action": "approve", "wait_id": wait_id}
    )
    assert answered.status_code == 202, answered.text
    done = (await http.get(f"/http_ask/runs/{run_id}/result", params={"wait": 50})).json()
    assert done["result"] == {"action": "approve", "value": None}


async def test_probes_and_metrics_count_requests_by_route_template(
    http: httpx.AsyncClient,
) -> None:
    assert (await http.get("/livez")).json() == {"status": "ok", "error": None}
    assert (await http.get("/readyz")).json() == {"status": "ok", "error": None}

    def count(text: str, route: str, method: str, status: str) -> float:
        line = (
            f'lockgate_http_requests_total{{method="{method}",route="{route}",status="{status}"}}'
        )
        for row in text.splitlines():
            if row.startswith(line + " "):
                return float(row.split()[-1])
        return 0.0

    before = (await http.get("/metrics")).text
    for _ in range(3):
        await http.get("/http_wait/runs/nope")
    await http.post("/http_small/runs", json={"text": "a"})
    after = (await http.get("/metrics")).text
    route = "/{name}/runs/{run_id}"
    assert count(after, route, "GET", "404") - count(before, route, "GET", "404") == 3
    assert (
        count(after, "/{name}/runs", "POST", "201") - count(before, "/{name}/runs", "POST", "201")
        == 1
    )
    assert "/http_wait/runs/nope" not in after
    assert (
        'lockgate_http_request_duration_seconds_bucket{le="+Inf",method="GET",route="/{name}/runs/{run_id}"}'
        in after
    )
