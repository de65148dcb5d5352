"""A bound consumer whose store lost its data (an SQLite file emptied in place: its marker row
is gone) holds the records of the runs it can no longer find: on an ordered topic it neither
commits past them nor starts the next record's run, since a rebuild may bring those runs
back, until the store is marked again. A real :class:`BoundConsumer` on the real broker; no
worker runs the runs, so they stay open."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from lockgate import KafkaTopic, SQLiteStore, WorkflowContext, workflow
from lockgate.stores import KafkaEventLogStore
from lockgate.streams._topics import committed_offsets
from lockgate.streams.bound import BoundConsumer
from lockgate.workflow._spec import spec_of
from test_store_marker import empty_in_place

TOPIC = f"bsl-{uuid.uuid4().hex[:8]}"
RECORDS = 3
WAIT_S = 60.0
#: Longer than the consumer takes to ask the store about open runs and commit (0.25 s, 0.5 s).
HOLD_S = 2.0


@workflow(name="bsl_bound", topic=KafkaTopic(TOPIC, ordered=True))
async def bsl_bound(ctx: WorkflowContext, value: Any) -> Any:
    return value


@pytest.fixture
def journal(kafka_bootstrap: str) -> Iterator[KafkaEventLogStore]:
    made = KafkaEventLogStore(kafka_bootstrap, topic_prefix=f"bsl{uuid.uuid4().hex[:8]}")
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    admin.create_topics([NewTopic(TOPIC, 1, 1)])[TOPIC].result(timeout=30)
    yield made
    made.close()


def committed(bootstrap: str, group: str) -> int:
    reader = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        # Asked again while a just-started broker's group coordinator is not ready.
        (found,) = committed_offsets(reader, [TopicPartition(TOPIC, 0)], 30)
        return int(found.offset)
    finally:
        reader.close()


def runs(store: SQLiteStore) -> list[Any]:
    return store.list_runs("bsl_bound")[0]


def step_for(consumer: BoundConsumer, seconds: float) -> None:
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        consumer.step()


def test_a_bound_consumer_holds_the_records_of_runs_gone_with_the_stores_data(
    tmp_path: Path, journal: KafkaEventLogStore, kafka_bootstrap: str
) -> None:
    path = tmp_path / "bsl.db"
    store = SQLiteStore(path)
    store.ensure_marker()
    consumer = BoundConsumer(store, journal, spec_of(bsl_bound), worker_id="bsl")
    consumer.open()
    try:
        deadline = time.monotonic() + WAIT_S
        while not consumer.assigned.is_set():
            consumer.step()
            assert time.monotonic() < deadline, "no assignment"
        producer = Producer({"bootstrap.servers": kafka_bootstrap})
        for n in range(RECORDS):
            producer.produce(TOPIC, value=f'{{"n": {n}}}'.encode())
        producer.flush(30)
        while not runs(store):
            consumer.step()
            assert time.monotonic() < deadline, "the first record made no run"
        step_for(consumer, HOLD_S)
        # Ordered: the first record's run is open, so it holds the commit and the next record.
        assert len(runs(store)) == 1
        assert committed(kafka_bootstrap, consumer.group) <= 0
        empty_in_place(path)
        assert store.read_marker() is None
        step_for(consumer, HOLD_S)
        # Its run is not found, but the store lost its data: the run may come back.
        assert runs(store) == []
        assert committed(kafka_bootstrap, consumer.group) <= 0
        store.ensure_marker()  # marked anew (a store init, or a worker starting on it)
        # Now a run not found ended: the next record's run starts, and holds the commit.
        while committed(kafka_bootstrap, consumer.group) != 1:
            step_for(consumer, 0.5)
            assert time.monotonic() < deadline + WAIT_S, "the first record was never let go"
        assert [info.params for info in runs(store)] == [{"value": {"n": 1}}]
    finally:
        consumer.close()
        store.close()
