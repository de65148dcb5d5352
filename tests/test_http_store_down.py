"""The HTTP API while its store is down: real HTTP over loopback (uvicorn in a thread, httpx as
the caller) on a store that stops answering.

Valkey: a valkey-server of the test's own (its AOF synced on every write) is stopped and
started again on the same port. SQLite: another connection holds the file's write lock past
the store's busy timeout, or the file is deleted under the store. While the store is away the
API answers 503 problem+json with ``Retry-After`` (``/readyz`` too) and ``/livez`` stays 200;
once it is back, what was acknowledged before is still there and a submit retried with its
``Idempotency-Key`` makes exactly one run.
"""

from __future__ import annotations

import sqlite3
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from http_support import DEADLINE, app_server, http_workflows
from lockgate.http import create_app
from lockgate.stores import SQLiteStore, ValkeyStore
from valkey_server import ValkeyServer

WORKFLOWS = http_workflows().WORKFLOWS
PROBLEM = "application/problem+json"


@pytest.fixture
def valkey() -> Iterator[ValkeyServer]:
    server = ValkeyServer(appendonly=True).start()
    try:
        yield server
    finally:
        server.close()


def quick_store(url: str) -> ValkeyStore:
    """A store that gives up on an absent server quickly: one retry, short timeouts."""
    return ValkeyStore(
        url,
        namespace=f"down-{uuid.uuid4().hex[:8]}",
        retry_attempts=1,
        retry_base=0.05,
        socket_timeout=2.0,
        socket_connect_timeout=0.5,
    )


def assert_unavailable(response: httpx.Response, code: str = "store_unavailable") -> None:
    """A 503 problem naming ``code``, with a ``Retry-After`` a client can wait out."""
    assert response.status_code == 503, response.text
    assert response.headers["content-type"].startswith(PROBLEM)
    assert int(response.headers["Retry-After"]) >= 1
    body: dict[str, Any] = response.json()
    assert body["status"] == 503
    assert body["code"] == code
    assert body["type"] == f"urn:lockgate:error:{code}"
    assert body["detail"]


def wait_status(http: httpx.Client, path: str, status: int) -> httpx.Response:
    """GET ``path`` until it answers ``status``, within the deadline."""
    end = time.monotonic() + DEADLINE
    while True:
        answer = http.get(path)
        if answer.status_code == status:
            return answer
        assert time.monotonic() < end, f"{path} answered {answer.status_code}, not {status}"
        time.sleep(0.02)


def runs_of(http: httpx.Client, name: str) -> list[dict[str, Any]]:
    answer = http.get(f"/{name}/runs", params={"limit": 100})
    assert answer.status_code == 200, answer.text
    runs: list[dict[str, Any]] = answer.json()["runs"]
    return runs


def test_valkey_down_is_503_with_retry_after_and_nothing_is_lost(valkey: ValkeyServer) -> None:
    store = quick_store(valkey.url)
    try:
        with (
            app_server(create_app(store, workflows=WORKFLOWS)) as url,
            httpx.Client(base_url=url, timeout=DEADLINE) as http,
        ):
            before = http.post("/http_wait/runs", json={"order": "before"})
            assert before.status_code == 201, before.text
            kept = before.json()["run_id"]

            valkey.stop(kill=True)
            ready = wait_status(http, "/readyz", 503)
            assert int(ready.headers["Retry-After"]) >= 1
            assert ready.json()["status"] == "unavailable"
            assert http.get("/livez").status_code == 200

            key = {"Idempotency-Key": "order-down"}
            assert_unavailable(http.post("/http_wait/runs", json={"order": "o"}, headers=key))
            assert_unavailable(http.post("/http_collect/events", json={"k": "a", "n": 1}))
            assert_unavailable(http.get(f"/http_wait/runs/{kept}"))
            assert_unavailable(http.get("/http_wait/runs"))
            assert_unavailable(http.post(f"/http_wait/runs/{kept}/signals/go", json={}))
            assert http.get("/livez").status_code == 200

            valkey.start()
            assert wait_status(http, "/readyz", 200).json()["status"] == "ok"
            shown = http.get(f"/http_wait/runs/{kept}")
            assert shown.status_code == 200, shown.text
            assert shown.json()["run"]["run_id"] == kept

            retried = http.post("/http_wait/runs", json={"order": "o"}, headers=key)
            assert retried.status_code == 201, retried.text
            again = http.post("/http_wait/runs", json={"order": "o"}, headers=key)
            assert again.status_code == 200, again.text
            assert again.json()["run_id"] == retried.json()["run_id"]
            orders = sorted(r["run_id"] for r in runs_of(http, "http_wait"))
            assert orders == sorted([kept, retried.json()["run_id"]])
    finally:
        store.close()


def test_valkey_refusing_writes_is_503_with_retry_after_and_reads_still_answer(
    valkey: ValkeyServer,
) -> None:
    """A server out of memory (``maxmemory`` reached under ``noeviction``) refuses every write
    (``-OOM``): the store's refusal, not the caller's mistake. There is no 429 path: nothing in
    lockgate refuses work for load, so a refusing store is a 503 too."""
    import redis

    admin = redis.Redis(host="127.0.0.1", port=valkey.port, socket_timeout=5)
    store = quick_store(valkey.url)
    try:
        with (
            app_server(create_app(store, workflows=WORKFLOWS)) as url,
            httpx.Client(base_url=url, timeout=DEADLINE) as http,
        ):
            kept = http.post("/http_wait/runs", json={"order": "kept"}).json()["run_id"]
            admin.config_set("maxmemory", "1")
            key = {"Idempotency-Key": "order-oom"}
            refused = http.post("/http_wait/runs", json={"order": "o"}, headers=key)
            assert_unavailable(refused)
            assert "maxmemory" in refused.json()["detail"]
            assert_unavailable(http.post("/http_collect/events", json={"k": "a", "n": 1}))
            assert http.get(f"/http_wait/runs/{kept}").status_code == 200
            assert http.get("/readyz").status_code == 200  # reachable: PING still answers

            admin.config_set("maxmemory", "0")
            retried = http.post("/http_wait/runs", json={"order": "o"}, headers=key)
            assert retried.status_code == 201, retried.text
            again = http.post("/http_wait/runs", json={"order": "o"}, headers=key)
            assert again.json()["run_id"] == retried.json()["run_id"]
            listed = sorted(r["run_id"] for r in runs_of(http, "http_wait"))
            assert listed == sorted([kept, retried.json()["run_id"]])
    finally:
        admin.close()
        store.close()


def test_sqlite_locked_past_its_busy_timeout_is_503(tmp_path: Path) -> None:
    db = tmp_path / "lockgate.db"
    store = SQLiteStore(db, busy_timeout_s=0.2)
    holder = sqlite3.connect(db, isolation_level=None)
    try:
        with (
            app_server(create_app(store, workflows=WORKFLOWS)) as url,
            httpx.Client(base_url=url, timeout=DEADLINE) as http,
        ):
            holder.execute("BEGIN IMMEDIATE")  # the write lock, as a stuck writer holds it
            key = {"Idempotency-Key": "order-locked"}
            assert_unavailable(http.post("/http_wait/runs", json={"order": "l"}, headers=key))
            assert_unavailable(http.post("/http_collect/events", json={"k": "a", "n": 1}))
            assert http.get("/livez").status_code == 200
            holder.execute("ROLLBACK")

            retried = http.post("/http_wait/runs", json={"order": "l"}, headers=key)
            assert retried.status_code == 201, retried.text
            again = http.post("/http_wait/runs", json={"order": "l"}, headers=key)
            assert again.json()["run_id"] == retried.json()["run_id"]
            assert [r["run_id"] for r in runs_of(http, "http_wait")] == [retried.json()["run_id"]]
    finally:
        holder.close()
        store.close()


def test_sqlite_file_deleted_is_503_never_a_400(tmp_path: Path) -> None:
    db = tmp_path / "lockgate.db"
    store = SQLiteStore(db)
    try:
        with (
            app_server(create_app(store, workflows=WORKFLOWS)) as url,
            httpx.Client(base_url=url, timeout=DEADLINE) as http,
        ):
            first = http.post("/http_wait/runs", json={"order": "a"})
            assert first.status_code == 201, first.text
            for path in tmp_path.iterdir():
                path.unlink()
            assert wait_status(http, "/readyz", 503).headers["Retry-After"]
            assert_unavailable(
                http.post("/http_wait/runs", json={"order": "b"}), code="store_file_gone"
            )
            assert_unavailable(
                http.get(f"/http_wait/runs/{first.json()['run_id']}"), code="store_file_gone"
            )
            assert http.get("/livez").status_code == 200
    finally:
        store.close()
