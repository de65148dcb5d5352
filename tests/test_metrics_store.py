"""Store error and retry counters, scraped over real HTTP while a real store goes away.

``lockgate_store_retries_total{backend="valkey"}`` counts each retry a ValkeyStore makes inside
itself; ``lockgate_store_errors_total{operation}`` counts store calls that got no answer in the
end: a worker's by the store method (``attempt`` for an attempt's own calls), the API's by
``http:<route>``. A valkey-server of the test's own is stopped under a worker running in this
process (scraped from its health endpoint) and under the API (scraped from its ``/metrics``).
Counters are process-wide and cumulative, so each test compares a scrape before with one after.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator

import httpx
import pytest

from http_support import DEADLINE, app_server, http_workflows
from lockgate import WorkflowContext, workflow
from lockgate.http import create_app
from lockgate.stores import ValkeyStore
from lockgate.worker import WorkerOptions, WorkflowWorker
from test_metrics import Samples, parse, scrape, scrape_until, value
from valkey_server import ValkeyServer

WORKFLOWS = http_workflows().WORKFLOWS
ERRORS = "lockgate_store_errors_total"
RETRIES = "lockgate_store_retries_total"


@workflow(name="mxs_ok")
async def mxs_ok(ctx: WorkflowContext, n: int) -> int:
    return n + 1


@pytest.fixture
def valkey() -> Iterator[ValkeyServer]:
    server = ValkeyServer(appendonly=True).start()
    try:
        yield server
    finally:
        server.close()


def quick_store(url: str, *, retry_attempts: int = 2) -> ValkeyStore:
    return ValkeyStore(
        url,
        namespace=f"mxs-{uuid.uuid4().hex[:8]}",
        lock_ttl=5.0,
        retry_attempts=retry_attempts,
        retry_base=0.02,
        socket_timeout=2.0,
        socket_connect_timeout=0.5,
    )


def errors_by_operation(samples: Samples) -> dict[str, float]:
    return {
        dict(labels)["operation"]: count
        for (name, labels), count in samples.items()
        if name == ERRORS
    }


def test_the_api_counts_its_store_errors_and_the_stores_retries(valkey: ValkeyServer) -> None:
    store = quick_store(valkey.url, retry_attempts=2)
    try:
        with (
            app_server(create_app(store, workflows=WORKFLOWS)) as url,
            httpx.Client(base_url=url, timeout=DEADLINE) as http,
        ):
            before = parse(http.get("/metrics").text)
            valkey.stop(kill=True)
            for _ in range(3):
                assert http.post("/http_wait/runs", json={"order": "x"}).status_code == 503
            assert http.get("/http_wait/runs/r-1").status_code == 503
            assert http.get("/readyz").status_code == 503
            assert http.get("/livez").status_code == 200  # asks nothing of the store
            after = parse(http.get("/metrics").text)  # /metrics asks nothing of the store
    finally:
        store.close()
    grew = {
        op: count - errors_by_operation(before).get(op, 0.0)
        for op, count in errors_by_operation(after).items()
        if count > errors_by_operation(before).get(op, 0.0)
    }
    assert grew == {"http:submit": 3, "http:show": 1, "http:readyz": 1}
    # Each call gave up after its 2 retries: at least 2 per failed request.
    retried = value(after, RETRIES, backend="valkey") - value(before, RETRIES, backend="valkey")
    assert retried >= 2 * 5


async def test_a_worker_counts_its_store_errors_by_method_and_the_stores_retries(
    valkey: ValkeyServer,
) -> None:
    store = quick_store(valkey.url, retry_attempts=1)
    worker = WorkflowWorker(
        workflows=[mxs_ok],
        store=store,
        options=WorkerOptions(health_port=0, claim_poll_interval=0.02, timer_poll_interval_s=0.05),
    )
    task = asyncio.create_task(worker.run())
    try:
        end = time.monotonic() + DEADLINE
        while worker.health_address is None:
            assert time.monotonic() < end, "the health endpoint never listened"
            await asyncio.sleep(0.02)
        host, port = worker.health_address
        url = f"http://{host}:{port}/metrics"
        handle = await worker.client.submit("mxs_ok", {"n": 1})
        assert await handle.result(timeout=DEADLINE) == 2
        before = await scrape(url)

        valkey.stop(kill=True)

        def claims_failed(samples: Samples) -> bool:
            grew = value(samples, ERRORS, operation="claim_next_runs_loaded") - value(
                before, ERRORS, operation="claim_next_runs_loaded"
            )
            return grew >= 2

        after = await scrape_until(url, "the worker's claims failed twice", claims_failed)
        retried = value(after, RETRIES, backend="valkey") - value(before, RETRIES, backend="valkey")
        assert retried >= 2  # one retry inside each failed claim, at least

        valkey.start()
        again = await worker.client.submit("mxs_ok", {"n": 2})
        assert await again.result(timeout=DEADLINE) == 3
        async with httpx.AsyncClient() as http:
            assert (await http.get(f"http://{host}:{port}/readyz", timeout=10)).status_code == 200
    finally:
        worker.stop()
        await task
        store.close()
