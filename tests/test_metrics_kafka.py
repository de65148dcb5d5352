"""The Kafka paths of a worker's metrics, on a real broker and a real Valkey, a worker in this
process scraped over real HTTP from its health endpoint: consumer lag per partition of a
trigger topic and of a bound topic (held while a window is open or an ordered run blocks, 0
once consumed and committed, dropped for a partition another member takes), the open windows a
trigger topic's consumer holds, the fire delay of each window that fired on its time, and the
runs those fires claimed and ended.

Metrics live in the process-wide registry: the workflows' names are this module's own, and each
test's topics have a fresh prefix, so its series are its own. Every wait is for a state.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from lockgate import (
    Collect,
    Debounce,
    KafkaTopic,
    WorkflowClient,
    WorkflowContext,
    open_store,
    workflow,
)
from lockgate.stores import CompositeStore, KafkaEventLogStore
from lockgate.stores._shards import shard_for
from lockgate.streams import trigger_topic
from lockgate.streams._topics import group_id
from lockgate.streams.bound import bound_group
from lockgate.worker import WorkerOptions, WorkflowWorker
from lockgate.workflow._spec import get_workflow
from test_metrics import Samples, scrape, value
from valkey_server import shared_url

SHARDS = 4
DEADLINE = 60.0
LAG = "lockgate_consumer_lag"


@workflow(name="kmx_collect", trigger=Collect(key="k", max_events=4, window_seconds=600))
async def kmx_collect(
    ctx: WorkflowContext, key: str, events: list[dict[str, Any]], count: int
) -> int:
    return count


@workflow(name="kmx_debounce", trigger=Debounce(key="k", window_seconds=0.2))
async def kmx_debounce(
    ctx: WorkflowContext, key: str, events: list[dict[str, Any]], count: int
) -> int:
    return count


#: Released by the test to let the bound runs end.
RELEASE: dict[str, asyncio.Event] = {}
BOUND_TOPIC = f"kmx-bound-{uuid.uuid4().hex[:8]}"


@workflow(name="kmx_bound", topic=KafkaTopic(BOUND_TOPIC, ordered=True))
async def kmx_bound(ctx: WorkflowContext, value: dict[str, Any]) -> int:
    await RELEASE["bound"].wait()
    return int(value["n"])


@pytest.fixture
def composite(kafka_bootstrap: str) -> Iterator[CompositeStore]:
    store = open_store(
        f"{shared_url()}?namespace=kmx{uuid.uuid4().hex[:8]}&shard_count={SHARDS}",
        journal=f"kafka://{kafka_bootstrap}?topic_prefix=kmx{uuid.uuid4().hex[:8]}",
    )
    assert isinstance(store, CompositeStore)
    yield store
    store.close()


def worker_on(store: CompositeStore, *workflows: Any) -> WorkflowWorker:
    options = WorkerOptions(
        max_concurrent_runs=16,
        claim_poll_interval=0.01,
        timer_poll_interval_s=0.2,
        health_port=0,
        metrics_interval=0.05,
    )
    return WorkflowWorker(workflows=list(workflows), store=store, options=options)


async def metrics_url(worker: WorkflowWorker) -> str:
    await until("the health endpoint listens", lambda: worker.health_address is not None)
    host, port = worker.health_address or ("", 0)
    return f"http://{host}:{port}/metrics"


async def until(what: str, check: Callable[[], bool]) -> None:
    deadline = time.monotonic() + DEADLINE
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting until {what}")
        await asyncio.sleep(0.02)


async def scrape_until(
    url: str,
    what: str,
    check: Callable[[Samples], bool],
    between: Callable[[], object] = lambda: None,
) -> Samples:
    deadline = time.monotonic() + DEADLINE
    samples: Samples = {}
    while True:
        samples = await scrape(url)
        if check(samples):
            return samples
        if time.monotonic() > deadline:
            seen = {k: v for k, v in samples.items() if k[0] == LAG}
            raise AssertionError(f"timed out waiting until {what}; lag series: {seen}")
        between()
        await asyncio.sleep(0.02)


def lags(samples: Samples, topic: str, group: str) -> dict[int, float]:
    """The lag series of ``topic`` and ``group``, by partition."""
    found = {}
    for (name, labels), count in samples.items():
        named = dict(labels)
        if name == LAG and named["topic"] == topic and named["group"] == group:
            found[int(named["partition"])] = count
    return found


def keys_on(partitions: list[int], per_partition: int) -> dict[int, list[str]]:
    """``per_partition`` trigger keys landing on each of ``partitions``."""
    found: dict[int, list[str]] = {p: [] for p in partitions}
    n = 0
    while any(len(keys) < per_partition for keys in found.values()):
        key = f"key{n}"
        p = shard_for(key, SHARDS)
        if p in found and len(found[p]) < per_partition:
            found[p].append(key)
        n += 1
    return found


def topic_of(store: CompositeStore, name: str) -> str:
    journal = store.events
    assert isinstance(journal, KafkaEventLogStore)
    spec = get_workflow(name)
    assert spec is not None
    return trigger_topic(journal.topic_prefix, spec)


async def stop(task: asyncio.Task[None]) -> None:
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_trigger_topic_lag_open_windows_fire_delay_and_runs(
    composite: CompositeStore, kafka_bootstrap: str
) -> None:
    client = WorkflowClient(composite)
    # Collect: three keys on partitions 0, 1, 2 with 3, 2, 1 events, sent before the worker
    # starts; partition 3 gets none. Windows of four events, open ten minutes.
    collect_keys = {p: keys[0] for p, keys in keys_on([0, 1, 2], 1).items()}
    held = {0: 3, 1: 2, 2: 1}
    for p, count in held.items():
        sent = [{"k": collect_keys[p], "n": n} for n in range(count)]
        await client.trigger_many("kmx_collect", sent)
    # Debounce: two keys on partition 0 and one on partition 1, read in one batch, so the two
    # windows of partition 0 fall due at once.
    debounce_keys = keys_on([0, 1], 2)
    quiet = [*debounce_keys[0], debounce_keys[1][0]]
    await client.trigger_many("kmx_debounce", [{"k": k, "n": 0} for k in quiet])

    collect_topic = topic_of(composite, "kmx_collect")
    collect_group = group_id(collect_topic)
    debounce_topic = topic_of(composite, "kmx_debounce")
    worker = worker_on(composite, kmx_collect, kmx_debounce)
    task = asyncio.create_task(worker.run())
    intruder: Consumer | None = None
    try:
        url = await metrics_url(worker)

        # The open windows hold each partition's commit at their first record: its lag is
        # every record sent to it. A partition with no record has no lag.
        def waiting(s: Samples) -> bool:
            return lags(s, collect_topic, collect_group) == {0: 3, 1: 2, 2: 1, 3: 0} and (
                value(s, "lockgate_trigger_buffers_open", workflow="kmx_collect", source="topic")
                == 3
            )

        samples = await scrape_until(url, "the collect windows hold their records", waiting)
        assert value(samples, "lockgate_runs_claimed_total", workflow="kmx_collect") == 0

        # The Debounce windows fired on their time: one delay observed for each.
        def debounced(s: Samples) -> bool:
            return (
                value(s, "lockgate_runs_ended_total", workflow="kmx_debounce", outcome="completed")
                == 3
                and lags(s, debounce_topic, group_id(debounce_topic)) == {0: 0, 1: 0, 2: 0, 3: 0}
                and value(
                    s, "lockgate_trigger_buffers_open", workflow="kmx_debounce", source="topic"
                )
                == 0
            )

        samples = await scrape_until(url, "the debounce windows fired", debounced)
        delay = "lockgate_trigger_fire_delay_seconds"
        assert value(samples, f"{delay}_count", workflow="kmx_debounce") == 3
        assert value(samples, f"{delay}_sum", workflow="kmx_debounce") < 10
        assert value(samples, "lockgate_runs_claimed_total", workflow="kmx_debounce") == 3

        # Fill each Collect window: each fires at once (full, not late), and the commits move
        # past every record.
        for p, count in held.items():
            sent = [{"k": collect_keys[p], "n": n} for n in range(count, 4)]
            await client.trigger_many("kmx_collect", sent)

        def fired(s: Samples) -> bool:
            return (
                lags(s, collect_topic, collect_group) == {0: 0, 1: 0, 2: 0, 3: 0}
                and value(
                    s, "lockgate_trigger_buffers_open", workflow="kmx_collect", source="topic"
                )
                == 0
                and value(
                    s, "lockgate_runs_ended_total", workflow="kmx_collect", outcome="completed"
                )
                == 3
            )

        samples = await scrape_until(url, "the collect windows fired", fired)
        assert value(samples, "lockgate_runs_claimed_total", workflow="kmx_collect") == 3
        assert value(samples, f"{delay}_count", workflow="kmx_collect") == 0

        # Another member joins the group: the partitions it takes leave this worker, and
        # their lag series with them.
        intruder = Consumer(
            {
                "bootstrap.servers": kafka_bootstrap,
                "group.id": collect_group,
                "enable.auto.commit": False,
                "partition.assignment.strategy": "cooperative-sticky",
                "session.timeout.ms": 6000,
            }
        )
        intruder.subscribe([collect_topic])
        joined = intruder

        def split(s: Samples) -> bool:
            taken = {tp.partition for tp in joined.assignment()}
            kept = lags(s, collect_topic, collect_group)
            return bool(taken) and set(kept) == set(range(SHARDS)) - taken

        samples = await scrape_until(
            url, "the taken partitions' series are dropped", split, lambda: joined.poll(0)
        )
        assert set(lags(samples, collect_topic, collect_group).values()) == {0}
    finally:
        if intruder is not None:
            intruder.close()
        await stop(task)


def make_topic(bootstrap: str, name: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(timeout=30)


async def test_bound_topic_lag_while_ordered_runs_block_then_zero(
    composite: CompositeStore, kafka_bootstrap: str
) -> None:
    RELEASE["bound"] = asyncio.Event()
    make_topic(kafka_bootstrap, BOUND_TOPIC, 2)
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "enable.idempotence": True})
    for partition, n in [(0, 0), (0, 1), (0, 2), (1, 3)]:
        producer.produce(BOUND_TOPIC, value=json.dumps({"n": n}).encode(), partition=partition)
    assert producer.flush(30) == 0
    journal = composite.events
    assert isinstance(journal, KafkaEventLogStore)
    group = bound_group(journal.topic_prefix, "kmx_bound")

    worker = worker_on(composite, kmx_bound)
    task = asyncio.create_task(worker.run())
    try:
        url = await metrics_url(worker)

        # Ordered: each partition's first run blocks, holding its commit at its first record.
        def blocked(s: Samples) -> bool:
            return (
                lags(s, BOUND_TOPIC, group) == {0: 3, 1: 1}
                and value(s, "lockgate_attempts_running", workflow="kmx_bound") == 2
            )

        samples = await scrape_until(url, "the first runs block", blocked)
        assert value(samples, "lockgate_runs_claimed_total", workflow="kmx_bound") == 2
        RELEASE["bound"].set()

        def drained(s: Samples) -> bool:
            return (
                lags(s, BOUND_TOPIC, group) == {0: 0, 1: 0}
                and value(s, "lockgate_runs_ended_total", workflow="kmx_bound", outcome="completed")
                == 4
            )

        samples = await scrape_until(url, "every record's run ended and committed", drained)
        assert value(samples, "lockgate_runs_claimed_total", workflow="kmx_bound") == 4
    finally:
        await stop(task)
