"""Trigger topics on a real broker and a real Valkey, workers in this process: events sent with
``client.trigger`` and ``trigger_many`` become Collect runs, each event in exactly one run; a
second worker joining takes partitions over without losing or doubling an event; the status
shows owners, commits, lag and open windows.

``test_kafka_trigger_processes`` runs worker processes (SIGKILL, rebalances, a broker
restart, Debounce timing, the dead-letter topic)."""

from __future__ import annotations

import asyncio
import collections
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from lockgate import (
    Collect,
    ConfigurationError,
    Debounce,
    RunStatus,
    WorkflowClient,
    WorkflowContext,
    open_store,
    workflow,
)
from lockgate.stores import CompositeStore, KafkaEventLogStore, RunInfo, Store
from lockgate.streams import trigger_status, trigger_topic
from lockgate.worker import WorkerOptions, WorkflowWorker
from lockgate.workflow._spec import get_workflow
from valkey_server import shared_url

SHARDS = 4


@workflow(name="kt_collect", trigger=Collect(key="k", max_events=5, window_seconds=0.5))
async def kt_collect(
    ctx: WorkflowContext, key: str, events: list[dict[str, Any]], count: int
) -> int:
    return count


@pytest.fixture
def composite(kafka_bootstrap: str) -> Iterator[CompositeStore]:
    store = open_store(
        f"{shared_url()}?namespace=kt{uuid.uuid4().hex[:8]}&shard_count={SHARDS}",
        journal=f"kafka://{kafka_bootstrap}?topic_prefix=kt{uuid.uuid4().hex[:8]}",
    )
    assert isinstance(store, CompositeStore)
    yield store
    store.close()


def options() -> WorkerOptions:
    return WorkerOptions(
        max_concurrent_runs=16, claim_poll_interval=0.01, timer_poll_interval_s=0.2
    )


async def serving(store: CompositeStore, *workflows: Any, worker_id: str) -> asyncio.Task[None]:
    worker = WorkflowWorker(
        workflows=list(workflows), store=store, worker_id=worker_id, options=options()
    )
    return asyncio.create_task(worker.run())


async def stop(task: asyncio.Task[None]) -> None:
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


def every_run(store: Store, name: str) -> list[RunInfo]:
    """Every run of ``name``, the oldest first (``list_runs`` pages the newest first)."""
    found: list[RunInfo] = []
    cursor = None
    while True:
        page, cursor = store.list_runs(name, limit=500, cursor=cursor)
        found.extend(page)
        if not cursor:
            return found[::-1]


def runs_of(store: Store, name: str) -> list[dict[str, Any]]:
    """The params of every completed run of ``name``."""
    return [info.params for info in every_run(store, name) if info.status == RunStatus.COMPLETE]


async def until(what: str, check: Callable[[], bool], seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


def each_once(runs: list[dict[str, Any]], sent: dict[str, list[int]]) -> None:
    """Every event sent (``key -> ns``) is in exactly one run, in its key's runs in order."""
    got: dict[str, list[int]] = collections.defaultdict(list)
    for params in runs:
        assert params["count"] == len(params["events"])
        for event in params["events"]:
            assert event["k"] == params["key"]
            got[params["key"]].append(event["n"])
    assert {k: sorted(v) for k, v in got.items()} == {k: sorted(v) for k, v in sent.items()}
    for key, ns in got.items():
        assert len(ns) == len(set(ns)), f"key {key} has an event twice"


async def test_events_sent_with_client_trigger_fire_collect_batches_each_event_once(
    composite: CompositeStore,
) -> None:
    worker = await serving(composite, kt_collect, worker_id="kt-w1")
    client = WorkflowClient(composite)
    sent: dict[str, list[int]] = collections.defaultdict(list)
    for n in range(60):
        key = f"key{n % 4}"
        assert await client.trigger("kt_collect", {"k": key, "n": n}) is None
        sent[key].append(n)
    try:
        await until(
            "all 60 events in runs",
            lambda: sum(p["count"] for p in runs_of(composite, "kt_collect")) >= 60,
        )
    finally:
        await stop(worker)
    runs = runs_of(composite, "kt_collect")
    each_once(runs, sent)
    assert all(p["count"] <= 5 for p in runs)
    assert len(runs) == 12  # 15 events a key, in batches of five


async def test_a_worker_joining_mid_stream_of_trigger_many_batches_loses_and_doubles_nothing(
    kafka_bootstrap: str,
) -> None:
    namespace, prefix = f"kt{uuid.uuid4().hex[:8]}", f"kt{uuid.uuid4().hex[:8]}"

    def store() -> CompositeStore:
        opened = open_store(
            f"{shared_url()}?namespace={namespace}&shard_count={SHARDS}",
            journal=f"kafka://{kafka_bootstrap}?topic_prefix={prefix}",
        )
        assert isinstance(opened, CompositeStore)
        return opened

    first, second, sender = store(), store(), store()
    client = WorkflowClient(sender)
    sent: dict[str, list[int]] = collections.defaultdict(list)
    workers = [await serving(first, kt_collect, worker_id="kt-first")]
    try:
        for n in range(1500):
            key = f"k{n % 60}"
            sent[key].append(n)
            if n % 25 == 0:
                await client.trigger_many(
                    "kt_collect", [{"k": f"k{m % 60}", "n": m} for m in range(n, n + 25)]
                )
                await asyncio.sleep(0.02)
            if n == 500:
                workers.append(await serving(second, kt_collect, worker_id="kt-second"))
        await until(
            "every event in a run",
            lambda: sum(p["count"] for p in runs_of(sender, "kt_collect")) >= 1500,
        )
        await asyncio.sleep(1.0)  # a doubled event would be fired by now too
    finally:
        for task in workers:
            await stop(task)
    runs = runs_of(sender, "kt_collect")
    each_once(runs, sent)
    assert all(p["count"] <= 5 for p in runs)
    for opened in (first, second, sender):
        opened.close()


@workflow(name="kt_status", trigger=Debounce(key="k", window_seconds=600))
async def kt_status(
    ctx: WorkflowContext, key: str, events: list[dict[str, Any]], count: int
) -> int:
    return count


async def test_trigger_status_shows_owners_commits_lag_and_open_windows(
    composite: CompositeStore,
) -> None:
    spec = get_workflow("kt_status")
    assert spec is not None
    worker = await serving(composite, kt_status, worker_id="kt-owner")
    client = WorkflowClient(composite)
    try:
        await client.trigger_many("kt_status", [{"k": "x", "n": n} for n in range(4)])
        await client.trigger("kt_status", {"k": "y", "n": 0})

        def shown() -> bool:
            statuses = trigger_status(composite, spec)
            return sum(len(s.windows) for s in statuses) == 2 and all(
                s.owner == "kt-owner" for s in statuses
            )

        await until("both windows open, every partition owned", shown, 30)
        statuses = trigger_status(composite, spec)
    finally:
        await stop(worker)
    assert [s.partition for s in statuses] == list(range(SHARDS))
    windows = {w.key: w for s in statuses for w in s.windows}
    assert windows["x"].count == 4
    assert windows["y"].count == 1
    assert windows["x"].due_at > time.time() + 500
    for status in statuses:
        assert status.end == status.lag + (status.committed or 0)
        if status.windows:
            assert status.lag >= sum(w.count for w in status.windows)


async def test_two_workers_own_disjoint_partitions_and_claim_from_their_own_first(
    kafka_bootstrap: str,
) -> None:
    namespace, prefix = f"kt{uuid.uuid4().hex[:8]}", f"kt{uuid.uuid4().hex[:8]}"
    stores = [
        open_store(
            f"{shared_url()}?namespace={namespace}&shard_count={SHARDS}",
            journal=f"kafka://{kafka_bootstrap}?topic_prefix={prefix}",
        )
        for _ in range(2)
    ]
    workers = [
        WorkflowWorker(
            workflows=[kt_collect], store=store, worker_id=f"kt-own{i}", options=options()
        )
        for i, store in enumerate(stores)
    ]
    tasks = [asyncio.create_task(worker.run()) for worker in workers]
    try:

        def split() -> bool:
            owned = [w._rt.owned.get("kt_collect", []) for w in workers]
            return all(owned) and sorted(owned[0] + owned[1]) == list(range(SHARDS))

        await until("the partitions split between the two", split, 60)
        for worker in workers:
            owned = worker._rt.owned["kt_collect"]
            assert sorted(worker._rt.prefer("kt_collect")) == owned
            assert worker._rt.prefer("kt_collect")[0] in owned
    finally:
        for task in tasks:
            await stop(task)
        for store in stores:
            store.close()


def test_a_trigger_topic_with_another_partition_count_is_refused_and_bad_names_too(
    composite: CompositeStore, kafka_bootstrap: str
) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    from lockgate import TriggerTopicMismatch
    from lockgate.streams.triggers._produce import producer_for

    spec = get_workflow("kt_collect")
    assert spec is not None
    journal = composite.events
    assert isinstance(journal, KafkaEventLogStore)
    topic = trigger_topic(journal.topic_prefix, spec)
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    admin.create_topics([NewTopic(topic, 1)])[topic].result(30)
    with pytest.raises(TriggerTopicMismatch) as refused:
        producer_for(journal).prepare(topic)
    assert (refused.value.partitions, refused.value.expected) == (1, SHARDS)
    with pytest.raises(ConfigurationError, match=r"topic=\.\.\."):
        Collect(key="k", max_events=2, window_seconds=1, topic="has spaces")
    with pytest.raises(ConfigurationError, match=r"topic=\.\.\."):
        Debounce(key="k", window_seconds=1, topic="x" * 246)  # no room left for ".dlq"
