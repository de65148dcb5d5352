"""The console's windows page with a Kafka journal, over real HTTP (uvicorn on loopback, httpx
signed in), against the real broker and Valkey: a worker consuming a Collect workflow's trigger
topic, records sent to partitions the test knows, and the page's rows for each partition (its
owner, committed offset and lag). A broker that does not answer is said so on the page. A run
a record of a bound topic started names that record on its page."""

from __future__ import annotations

import asyncio
import json
import logging
import re
import socket
import time
import uuid
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from http_support import DEADLINE, app_server
from lockgate import (
    Collect,
    RunStatus,
    WorkflowClient,
    WorkflowContext,
    open_store,
    workflow,
)
from lockgate.http import create_app
from lockgate.stores import CompositeStore
from lockgate.stores._shards import shard_for
from lockgate.streams import trigger_topic
from lockgate.streams._group_view import GroupViewer
from lockgate.streams.bound import bound_run_id
from lockgate.worker import WorkerOptions, WorkflowWorker
from lockgate.workflow._spec import get_workflow
from test_console_http import TABLE, hooks, signed_in
from valkey_server import shared_url

SHARDS = 4
ROW = re.compile(r'<tr data-testid="partition"[^>]*>')
WORKER = "console-kafka-w1"


@workflow(name="ck_collect", trigger=Collect(key="k", max_events=2, window_seconds=600))
async def ck_collect(
    ctx: WorkflowContext, key: str, events: list[dict[str, Any]], count: int
) -> int:
    return count


@pytest.fixture
def urls(kafka_bootstrap: str) -> tuple[str, str]:
    store = f"{shared_url()}?namespace=ck{uuid.uuid4().hex[:8]}&shard_count={SHARDS}"
    journal = f"kafka://{kafka_bootstrap}?topic_prefix=ck{uuid.uuid4().hex[:8]}"
    return store, journal


def composite(urls: tuple[str, str]) -> CompositeStore:
    store = open_store(urls[0], journal=urls[1])
    assert isinstance(store, CompositeStore)
    return store


@pytest.fixture
def served(urls: tuple[str, str]) -> Iterator[tuple[str, Any]]:
    """The console over a store of its own on ``urls``: its base URL, and its app."""
    store = composite(urls)
    try:
        app = create_app(store, workflows=[ck_collect], tokens=TABLE)
        with app_server(app) as url:
            yield url, app
    finally:
        store.close()


def rows(page: str) -> dict[int, dict[str, str]]:
    """The partition rows of ``page`` by partition, each its ``data-`` attributes."""
    found = {}
    for tag in ROW.findall(page):
        attributes = dict(re.findall(r'data-([a-z]+)="([^"]*)"', tag))
        found[int(attributes["partition"])] = attributes
    return found


def keys_on_distinct_partitions() -> tuple[str, int, str, int]:
    """Two trigger keys whose records land on two different partitions, and those."""
    first = "fired"
    for n in range(100):
        other = f"held{n}"
        if shard_for(other, SHARDS) != shard_for(first, SHARDS):
            return first, shard_for(first, SHARDS), other, shard_for(other, SHARDS)
    raise AssertionError("no two keys on two partitions")


async def test_the_windows_page_shows_each_partitions_owner_commit_and_lag(
    served: tuple[str, Any], urls: tuple[str, str]
) -> None:
    url, _ = served
    fired, fired_at, held, held_at = keys_on_distinct_partitions()
    store = composite(urls)
    worker = WorkflowWorker(
        workflows=[ck_collect],
        store=store,
        worker_id=WORKER,
        options=WorkerOptions(claim_poll_interval=0.01, timer_poll_interval_s=0.2),
    )
    task = asyncio.create_task(worker.run())
    try:
        client = WorkflowClient(store)
        # Two events fill a batch of the first key (a run fires, the commit passes them);
        # one of the other key stays in its open window (the commit waits at its record).
        await client.trigger_many("ck_collect", [{"k": fired, "n": 0}, {"k": fired, "n": 1}])
        await client.trigger("ck_collect", {"k": held, "n": 2})
        spec = get_workflow("ck_collect")
        assert spec is not None
        topic = trigger_topic(store.events.topic_prefix, spec)  # type: ignore[attr-defined]
        want = {
            p: {"owner": WORKER, "committed": "2", "lag": "0"}
            if p == fired_at
            else {"owner": WORKER, "committed": "0", "lag": "1"}
            if p == held_at
            else {"owner": WORKER, "lag": "0"}
            for p in range(SHARDS)
        }
        async with signed_in(url, "read") as http:
            end = time.monotonic() + DEADLINE
            while True:
                answer = await http.get("/console/windows")
                assert answer.status_code == 200, answer.text
                shown = rows(answer.text)
                got = {p: {k: row[k] for k in want[p]} for p, row in shown.items()}
                if got == want:
                    break
                assert time.monotonic() < end, f"the page showed {shown}, not {want}"
                await asyncio.sleep(0.2)
        assert {row["topic"] for row in shown.values()} == {topic}
        assert {row["workflow"] for row in shown.values()} == {"ck_collect"}
        assert not hooks(answer.text, "kafka-unavailable")
        assert f'<a href="/console/workers">{WORKER}</a>' in answer.text
    finally:
        worker.stop()
        await task
        store.close()


#: A topic of this session's own: a broker kept between sessions keeps the last one's records.
BOUND = f"ck-orders-{uuid.uuid4().hex[:8]}"


@workflow(name="ck_bound", topic=BOUND)
async def ck_bound(ctx: WorkflowContext, value: Any) -> Any:
    return value


async def test_a_bound_runs_page_shows_the_record_that_started_it(
    urls: tuple[str, str], kafka_bootstrap: str
) -> None:
    """A real record on partition 1 of a bound topic, its run served by a worker here, and the
    run's page naming the record's topic, partition, offset and key."""
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    admin.create_topics([NewTopic(BOUND, 2, 1)])[BOUND].result(timeout=30)
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    producer.produce(BOUND, key=b"cust-7", value=json.dumps({"n": 1}).encode(), partition=1)
    assert producer.flush(30) == 0
    run_id = bound_run_id(BOUND, 1, 0)
    store = composite(urls)
    worker = WorkflowWorker(
        workflows=[ck_bound],
        store=store,
        worker_id=WORKER,
        options=WorkerOptions(claim_poll_interval=0.01),
    )
    task = asyncio.create_task(worker.run())
    try:
        end = time.monotonic() + DEADLINE
        while True:
            info = await asyncio.to_thread(store.get_run, "ck_bound", run_id)
            if info is not None and info.status == RunStatus.COMPLETE:
                break
            assert time.monotonic() < end, f"the record's run did not complete: {info}"
            await asyncio.sleep(0.1)
    finally:
        worker.stop()
        await task
    try:
        with app_server(create_app(store, workflows=[ck_bound], tokens=TABLE)) as url:
            async with signed_in(url, "read") as http:
                page = await http.get(f"/console/runs/ck_bound/{quote(run_id, safe='')}")
    finally:
        store.close()
    assert page.status_code == 200, page.text
    [tag] = hooks(page.text, "run-record")
    assert f'data-topic="{BOUND}" data-partition="1" data-offset="0"' in tag
    assert "key <code>cust-7</code>" in page.text


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


async def test_a_broker_that_does_not_answer_is_said_so_on_the_page(
    served: tuple[str, Any],
) -> None:
    url, app = served
    async with signed_in(url, "read") as http:
        first = await http.get("/console/windows")
        assert first.status_code == 200
        # No worker has made the trigger topic yet: the page says so, Kafka answered.
        assert hooks(first.text, "topic-missing")
        assert not hooks(first.text, "kafka-unavailable")
        # The console's Kafka client now names a port nothing listens on.
        dead = {
            "bootstrap.servers": f"127.0.0.1:{closed_port()}",
            "logger": logging.getLogger("lockgate.kafka"),  # its refusals off stderr
        }
        app.state.lockgate_console.kafka = GroupViewer(dead, timeout=0.5)
        answer = await http.get("/console/windows")
    assert answer.status_code == 200
    assert hooks(answer.text, "kafka-unavailable")
    assert "Kafka did not answer" in answer.text
    assert not hooks(answer.text, "partition")
