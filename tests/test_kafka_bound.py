"""Workflows bound to a Kafka topic (``@workflow(topic=KafkaTopic(...))``): the declaration's
checks (no broker), and, on a real broker and a real Valkey with workers in this process, one
run per record with the record's place in ``ctx.record``, records that start no run on the
dead-letter topic with the rest of their partition flowing on, Avro values, ``ordered``, and
``max_concurrency``. ``test_kafka_bound_processes`` runs worker processes (SIGKILL)."""

from __future__ import annotations

import asyncio
import json
import struct
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from lockgate import (
    Collect,
    ConfigurationError,
    InlineWorkflowRunner,
    KafkaTopic,
    Limit,
    Rate,
    RunStatus,
    WorkflowClient,
    WorkflowContext,
    open_store,
    workflow,
)
from lockgate.cli import main
from lockgate.stores import CompositeStore, MemoryStore
from lockgate.stores._shards import shard_for
from lockgate.streams._dead_letters import DETAIL_HEADER, REASON_HEADER, SOURCE_HEADER
from lockgate.streams.bound import bound_group, bound_run_id, partition_shard_key
from lockgate.worker import WorkerOptions, WorkflowWorker
from lockgate.workflow._spec import spec_of
from test_kafka_triggers import every_run, until
from valkey_server import shared_url

SHARDS = 4

# -- the declaration -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "gate",
    [
        {"concurrency": Limit(key="value", max=2)},
        {"rate_limit": Rate(key="value", per_second=5)},
        {"trigger": Collect(key="k", max_events=5, window_seconds=1)},
    ],
    ids=["concurrency", "rate_limit", "trigger"],
)
def test_a_bound_workflow_refuses_gates_and_triggers_naming_max_concurrency(
    gate: dict[str, Any],
) -> None:
    with pytest.raises(ConfigurationError) as refused:

        @workflow(name=f"kb_refused_{next(iter(gate))}", topic="orders", **gate)
        async def refused_body(ctx: WorkflowContext, value: Any, **rest: Any) -> None:
            return None

    message = str(refused.value)
    assert "max_concurrency" in message
    assert "partition count" in message
    assert f"{next(iter(gate))}=" in message


def test_a_bound_workflow_must_take_the_value() -> None:
    with pytest.raises(ConfigurationError, match="'value'"):

        @workflow(name="kb_no_value", topic="orders")
        async def no_value(ctx: WorkflowContext, order: Any) -> None:
            return None


def test_a_bound_workflow_takes_nothing_else_without_a_default() -> None:
    with pytest.raises(ConfigurationError, match="'region' a default"):

        @workflow(name="kb_more_params", topic="orders")
        async def more(ctx: WorkflowContext, value: Any, region: str) -> None:
            return None

    @workflow(name="kb_defaults_ok", topic="orders")
    async def defaults(ctx: WorkflowContext, value: Any, region: str = "eu") -> None:
        return None


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"name": "bad topic"}, "Kafka topic name"),
        ({"name": "x" * 250}, "Kafka topic name"),
        ({"name": "orders", "max_concurrency": 0}, "max_concurrency"),
        ({"name": "orders", "max_concurrency": True}, "max_concurrency"),
        ({"name": "orders", "ordered": "yes"}, "ordered"),
        ({"name": "orders", "avro_schema": "/nonexistent/order.avsc"}, "cannot be read"),
    ],
)
def test_kafka_topic_checks_its_options(options: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigurationError, match=match):
        KafkaTopic(**options)


def test_an_avro_schema_that_is_no_schema_is_refused_at_declaration(tmp_path: Path) -> None:
    schema = tmp_path / "bad.avsc"
    schema.write_text('{"type": "no-such-type"}')
    with pytest.raises(ConfigurationError, match="not an Avro schema"):
        KafkaTopic("orders", avro_schema=schema)


def test_a_plain_topic_name_binds_with_the_defaults() -> None:
    @workflow(name="kb_plain_name", topic="orders.v1")
    async def plain(ctx: WorkflowContext, value: Any) -> None:
        return None

    assert spec_of(plain).topic == KafkaTopic("orders.v1")
    assert spec_of(plain).topic.dlq == "orders.v1.dlq"  # type: ignore[union-attr]


def test_a_worker_without_a_kafka_journal_refuses_a_bound_workflow() -> None:
    @workflow(name="kb_no_journal", topic="orders")
    async def no_journal(ctx: WorkflowContext, value: Any) -> None:
        return None

    with pytest.raises(ConfigurationError, match="--journal"):
        WorkflowWorker(workflows=[no_journal], store=MemoryStore())


def test_the_run_id_names_topic_partition_and_offset() -> None:
    assert bound_run_id("orders", 3, 1041) == "orders:3:1041"
    long = bound_run_id("t" * 249, 1, 2)
    assert len(long) <= 256
    assert long.endswith(":1:2")
    assert long != bound_run_id("t" * 248 + "u", 1, 2)


async def test_ctx_record_outside_a_bound_run_says_what_it_is_for(
    runner: InlineWorkflowRunner,
) -> None:
    @workflow(name="kb_not_bound")
    async def not_bound(ctx: WorkflowContext) -> str:
        try:
            ctx.record  # noqa: B018
        except ConfigurationError as exc:
            return str(exc)
        return "no error"

    handle = await runner.client.submit("kb_not_bound")
    await runner.run(handle.name, handle.run_id)
    assert "bound to a topic" in await handle.result(timeout=5)


# -- on a broker ---------------------------------------------------------------------------------

SEEN: dict[str, list[dict[str, Any]]] = {}
#: A topic of this session's own: a broker kept between sessions keeps the last one's records.
ORDERS = f"kb-orders-{uuid.uuid4().hex[:8]}"


@workflow(name="kb_orders", topic=KafkaTopic(ORDERS, max_concurrency=8))
async def kb_orders(ctx: WorkflowContext, value: dict[str, Any]) -> int:
    record = ctx.record
    SEEN.setdefault(ctx.run_id, []).append(
        {
            "topic": record.topic,
            "partition": record.partition,
            "offset": record.offset,
            "key": record.key,
            "headers": dict(record.headers),
            "timestamp": record.timestamp,
            "value": record.value,
        }
    )
    if value.get("fail"):
        await ctx.step(reserve, int(value["n"]))  # journaled: a retry is seeded with it
        raise ValueError("this order fails")
    return int(value["n"]) * 2


def reserve(n: int) -> int:
    return n


@pytest.fixture
def urls(kafka_bootstrap: str) -> tuple[str, str]:
    """A fresh store's ``--store`` and ``--journal``."""
    return (
        f"{shared_url()}?namespace=kb{uuid.uuid4().hex[:8]}&shard_count={SHARDS}",
        f"kafka://{kafka_bootstrap}?topic_prefix=kb{uuid.uuid4().hex[:8]}",
    )


@pytest.fixture
def composite(urls: tuple[str, str]) -> Iterator[CompositeStore]:
    store = open_store(urls[0], journal=urls[1])
    assert isinstance(store, CompositeStore)
    yield store
    store.close()


def make_topic(bootstrap: str, name: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(timeout=30)


def produce(
    bootstrap: str, topic: str, records: list[tuple[int, bytes | None, bytes | None]]
) -> None:
    """(partition, key, value) records, acknowledged."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for partition, key, value in records:
        producer.produce(
            topic, value=value, key=key, partition=partition, headers=[("origin", b"test")]
        )
    assert producer.flush(30) == 0


def numbered(count: int, *, partitions: int) -> list[tuple[int, bytes | None, bytes | None]]:
    """Records ``{"n": 0}`` to ``{"n": count - 1}``, partition ``n % partitions``."""
    return [(n % partitions, None, json.dumps({"n": n}).encode()) for n in range(count)]


def bound_to(name: str, *, workflow_name: str | None = None, **options: Any) -> Any:
    """A fresh workflow (``kb_{name}`` unless named) bound to the topic ``name``, noting each
    run's start and end (``TIMELINE``) and how many run at once (``PEAK``)."""
    label = workflow_name or f"kb_{name}"

    @workflow(name=label, topic=KafkaTopic(name, **options))
    async def bound(ctx: WorkflowContext, value: Any) -> Any:
        place = (ctx.record.partition, ctx.record.offset)
        TIMELINE.setdefault(label, []).append(("start", *place))
        RUNNING[label] = RUNNING.get(label, 0) + 1
        PEAK[label] = max(PEAK.get(label, 0), RUNNING[label])
        try:
            await ctx.step(asyncio.sleep, 0.02, name="work")
        finally:
            RUNNING[label] -= 1
            TIMELINE[label].append(("end", *place))
        return value

    return bound


#: Per workflow, ("start" or "end", partition, offset) of each run, in the order they came.
TIMELINE: dict[str, list[tuple[str, int, int]]] = {}
RUNNING: dict[str, int] = {}
PEAK: dict[str, int] = {}


def serving(store: CompositeStore, *workflows: Any, worker_id: str) -> asyncio.Task[None]:
    options = WorkerOptions(max_concurrent_runs=32, claim_poll_interval=0.01)
    worker = WorkflowWorker(
        workflows=list(workflows), store=store, worker_id=worker_id, options=options
    )
    return asyncio.create_task(worker.run())


async def stopped(task: asyncio.Task[None]) -> None:
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


def dead_letters(bootstrap: str, topic: str, count: int) -> list[Any]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": uuid.uuid4().hex,
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe([topic])
    found: list[Any] = []
    deadline = time.monotonic() + 60
    try:
        while len(found) < count and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                found.append(message)
    finally:
        consumer.close()
    return found


async def test_each_record_is_one_run_and_bad_records_go_to_the_dlq(
    composite: CompositeStore,
    kafka_bootstrap: str,
    urls: tuple[str, str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    make_topic(kafka_bootstrap, ORDERS, 3)
    tag = uuid.uuid4().hex[:6]
    good = [(n % 3, f"k{n}".encode(), json.dumps({"n": n, "tag": tag}).encode()) for n in range(30)]
    bad = [(1, b"bad1", b"{not json"), (2, b"bad2", None), (1, b"bad3", b"NaN")]
    failing = [(0, b"fails", json.dumps({"n": -1, "fail": True, "tag": tag}).encode())]
    produce(kafka_bootstrap, ORDERS, good[:10] + bad + good[10:] + failing)
    task = serving(composite, kb_orders, worker_id="kb-w1")
    try:
        await until(
            "31 runs ended",
            lambda: (
                len(ended := [i for i in every_run(composite, "kb_orders")]) == 31
                and all(info.status.is_terminal for info in ended)
            ),
        )
    finally:
        await stopped(task)
    mine = every_run(composite, "kb_orders")
    assert len(mine) == 31  # one per good record: none for the three bad ones
    by_n = {i.params["value"]["n"]: i for i in mine}
    assert sorted(by_n) == [-1, *range(30)]
    for n in range(30):
        info = by_n[n]
        assert info.status == RunStatus.COMPLETE
        seen = SEEN[info.run_id][0]
        assert info.run_id == bound_run_id(ORDERS, seen["partition"], seen["offset"])
        assert seen["partition"] == n % 3
        assert seen["key"] == f"k{n}"
        assert seen["headers"] == {"origin": "test"}
        assert seen["timestamp"] is not None
        assert seen["value"] == {"n": n, "tag": tag}
        assert await composite_result(composite, info.run_id) == n * 2
    failed = by_n[-1]
    assert failed.status == RunStatus.ERROR  # left in the store, for `runs list --status error`
    argv = ["runs", "list", "kb_orders", "--status", "error", "--json"]
    code = await asyncio.to_thread(main, [*argv, "--store", urls[0], "--journal", urls[1]])
    listed = [json.loads(line)["run_id"] for line in capsys.readouterr().out.splitlines()]
    assert (code, listed) == (0, [failed.run_id])
    retry = await WorkflowClient(composite).retry("kb_orders", failed.run_id)
    assert retry.run_id == f"{failed.run_id}.retry1"
    retried = composite.get_run("kb_orders", retry.run_id)
    assert retried is not None
    assert retried.metadata == failed.metadata  # its record: ctx.record works in the retry
    assert retried.params == failed.params
    seeded = composite.load_run("kb_orders", retry.run_id)  # the copy in the Kafka journal
    assert [e.kind for e in seeded][:3] == ["run:init", "step:pending", "step:done"]
    assert seeded[2].payload["step_id"] == "reserve"
    dlq = dead_letters(kafka_bootstrap, f"{ORDERS}.dlq", 3)
    reasons = {
        m.key(): dict((k, v.decode()) for k, v in m.headers())
        for m in dlq
        if m.key() in (b"bad1", b"bad2", b"bad3")
    }
    assert {k: h[REASON_HEADER] for k, h in reasons.items()} == {
        b"bad1": "not-json",
        b"bad2": "no-value",
        b"bad3": "not-json",
    }
    assert all(h[SOURCE_HEADER].startswith(f"{ORDERS}/") for h in reasons.values())
    assert all(h[DETAIL_HEADER] for h in reasons.values())


async def composite_result(store: CompositeStore, run_id: str) -> Any:
    return await WorkflowClient(store).result("kb_orders", run_id, timeout=10)


async def test_a_record_read_again_after_a_restart_starts_no_second_run(
    composite: CompositeStore, kafka_bootstrap: str
) -> None:
    topic = f"kb-again-{uuid.uuid4().hex[:6]}"
    make_topic(kafka_bootstrap, topic, 2)
    bound = bound_to(topic)
    produce(
        kafka_bootstrap, topic, [(n % 2, None, json.dumps({"n": n}).encode()) for n in range(20)]
    )
    task = serving(composite, bound, worker_id="kb-first")
    await until("20 runs completed", lambda: completed(composite, bound) == 20)
    await stopped(task)
    # Forget the group's commits: a new member reads every record again.
    group = bound_group(composite.events.topic_prefix, f"kb_{topic}")  # type: ignore[attr-defined]
    rewind = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": group})
    rewind.commit(offsets=[TopicPartition(topic, p, 0) for p in (0, 1)], asynchronous=False)
    rewind.close()
    produce(kafka_bootstrap, topic, [(0, None, json.dumps({"n": 20}).encode())])
    task = serving(composite, bound, worker_id="kb-second")
    await until("the 21st run completed", lambda: completed(composite, bound) == 21)
    await asyncio.sleep(0.5)  # a second run of a record read again would be made by now
    await stopped(task)
    runs = every_run(composite, f"kb_{topic}")
    assert len(runs) == 21
    assert sorted(r.params["value"]["n"] for r in runs) == list(range(21))


def completed(store: CompositeStore, fn: Any) -> int:
    name = spec_of(fn).name
    return sum(1 for r in every_run(store, name) if r.status == RunStatus.COMPLETE)


async def test_ordered_runs_of_a_partition_start_one_at_a_time_in_offset_order(
    composite: CompositeStore, kafka_bootstrap: str
) -> None:
    topic = f"kb-ordered-{uuid.uuid4().hex[:6]}"
    make_topic(kafka_bootstrap, topic, 2)
    bound = bound_to(topic, ordered=True, max_concurrency=8)
    produce(
        kafka_bootstrap, topic, [(n % 2, None, json.dumps({"n": n}).encode()) for n in range(30)]
    )
    task = serving(composite, bound, worker_id="kb-ordered")
    try:
        await until("30 runs completed", lambda: completed(composite, bound) == 30)
    finally:
        await stopped(task)
    timeline = TIMELINE[f"kb_{topic}"]
    for partition in (0, 1):
        mine = [(what, o) for what, p, o in timeline if p == partition]
        # Each run starts after the one before it ended: start 0, end 0, start 1, end 1, ...
        assert mine == [(what, o) for o in range(15) for what in ("start", "end")]
    assert PEAK[f"kb_{topic}"] == 2  # the two partitions side by side, one run each


async def test_max_concurrency_bounds_the_runs_in_flight(
    composite: CompositeStore, kafka_bootstrap: str
) -> None:
    topic = f"kb-capped-{uuid.uuid4().hex[:6]}"
    make_topic(kafka_bootstrap, topic, 4)
    bound = bound_to(topic, max_concurrency=3)
    produce(
        kafka_bootstrap, topic, [(n % 4, None, json.dumps({"n": n}).encode()) for n in range(40)]
    )
    task = serving(composite, bound, worker_id="kb-capped")
    try:
        await until("40 runs completed", lambda: completed(composite, bound) == 40)
    finally:
        await stopped(task)
    assert 1 < PEAK[f"kb_{topic}"] <= 3


async def test_avro_values_are_decoded_with_the_schema_file(
    composite: CompositeStore, kafka_bootstrap: str, tmp_path: Path
) -> None:
    import io

    import fastavro

    schema = {
        "type": "record",
        "name": "Order",
        "fields": [{"name": "n", "type": "long"}, {"name": "item", "type": "string"}],
    }
    path = tmp_path / "order.avsc"
    path.write_text(json.dumps(schema))
    topic = f"kb-avro-{uuid.uuid4().hex[:6]}"
    make_topic(kafka_bootstrap, topic, 1)
    bound = bound_to(topic, avro_schema=str(path))
    values = []
    for n in range(5):
        buffer = io.BytesIO()
        fastavro.schemaless_writer(buffer, fastavro.parse_schema(schema), {"n": n, "item": "x"})
        values.append((0, None, buffer.getvalue()))
    values.append((0, b"junk", struct.pack(">q", 7) + b"\xff" * 9))
    produce(kafka_bootstrap, topic, values)
    task = serving(composite, bound, worker_id="kb-avro")
    try:
        await until("5 runs completed", lambda: completed(composite, bound) == 5)
    finally:
        await stopped(task)
    runs = every_run(composite, f"kb_{topic}")
    assert sorted(r.params["value"]["n"] for r in runs) == list(range(5))
    [junk] = dead_letters(kafka_bootstrap, f"{topic}.dlq", 1)
    assert dict(junk.headers())[REASON_HEADER] == b"not-avro"


async def test_a_partitions_runs_share_its_shard_and_its_owner_claims_there_first(
    composite: CompositeStore, kafka_bootstrap: str
) -> None:
    topic = f"kb-shards-{uuid.uuid4().hex[:6]}"
    make_topic(kafka_bootstrap, topic, 4)
    bound = bound_to(topic)
    produce(kafka_bootstrap, topic, numbered(20, partitions=4))
    worker = WorkflowWorker(
        workflows=[bound],
        store=composite,
        worker_id="kb-shards",
        options=WorkerOptions(max_concurrent_runs=8, claim_poll_interval=0.01),
    )
    task = asyncio.create_task(worker.run())
    name = f"kb_{topic}"
    homes = {p: shard_for(partition_shard_key(topic, p), SHARDS) for p in range(4)}
    try:
        await until("20 runs completed", lambda: completed(composite, bound) == 20)
        # The one worker owns every partition: its claims try their shards first.
        assert worker._rt.owned[name] == sorted(set(homes.values()))
        assert set(worker._rt.prefer(name)) == set(homes.values())
    finally:
        await stopped(task)
    for run in every_run(composite, name):
        partition = run.metadata["lockgate.record"]["partition"]
        shard = composite.lifecycle.shard_of(name, run.run_id)  # type: ignore[attr-defined]
        assert shard == homes[partition]


async def test_two_workflows_bound_to_one_topic_each_run_every_record(
    composite: CompositeStore, kafka_bootstrap: str
) -> None:
    topic = f"kb-fanout-{uuid.uuid4().hex[:6]}"
    make_topic(kafka_bootstrap, topic, 2)
    first = bound_to(topic, workflow_name=f"kb_{topic}_a")
    second = bound_to(topic, workflow_name=f"kb_{topic}_b")
    produce(kafka_bootstrap, topic, numbered(12, partitions=2))
    task = serving(composite, first, second, worker_id="kb-fanout")
    try:
        await until(
            "12 runs of each completed",
            lambda: completed(composite, first) == 12 and completed(composite, second) == 12,
        )
    finally:
        await stopped(task)
    for fn in (first, second):
        runs = every_run(composite, spec_of(fn).name)
        assert sorted(r.params["value"]["n"] for r in runs) == list(range(12))
