"""A trigger consumer fires the windows of one pass together (``Store.fire_batches``: one call
per partition, one Valkey script per shard) and still puts every event in exactly one run: a key
with several batches in a pass fires them in order, a batch another owner fired part of fires
the rest, a group the store refuses is fired again batch by batch so that only the batch at
fault is dead-lettered, and on Valkey with a Kafka journal the windows that fall due together
are made in one script per shard, each run's ``run:init`` acknowledged in the journal topic.

Real broker, real Valkey; the consumers are stepped on a manual clock, given their partitions
(``open(partitions=...)``) as the trigger machine tests do."""

from __future__ import annotations

import collections
import json
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from confluent_kafka import Producer

from lockgate import (
    Collect,
    CompositeStore,
    Debounce,
    ManualClock,
    MemoryStore,
    Store,
    StoreUnavailable,
    ValkeyLifecycleStore,
    WorkflowContext,
    workflow,
)
from lockgate.stores import BatchToFire, FiredBatch, KafkaEventLogStore
from lockgate.stores._shards import shard_for
from lockgate.stores.kafka._codec import decode
from lockgate.streams import TriggerConsumer
from lockgate.streams.triggers._consumer import FIRE_BYTES_TOGETHER, FIRES_TOGETHER, fire_groups
from lockgate.streams.triggers._windows import Batch
from lockgate.workflow._spec import WorkflowSpec, spec_of
from test_kafka_trigger_processes import read_records
from test_kafka_triggers import every_run
from valkey_server import shared_url

PARTITIONS = 4


@workflow(name="ktg_collect", trigger=Collect(key="k", max_events=2, window_seconds=60))
async def ktg_collect(ctx: WorkflowContext, key: str, events: list[Any], count: int) -> None:
    return None


@workflow(name="ktg_debounce", trigger=Debounce(key="k", window_seconds=5))
async def ktg_debounce(ctx: WorkflowContext, key: str, events: list[Any], count: int) -> None:
    return None


COLLECT = spec_of(ktg_collect)
DEBOUNCE = spec_of(ktg_debounce)


def send(bootstrap: str, topic: str, events: list[tuple[str, int]]) -> None:
    """``(key, n)`` events, each on its key's partition, in one produce batch."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for key, n in events:
        value = json.dumps({"k": key, "n": n}).encode()
        producer.produce(topic, value=value, key=key.encode(), partition=shard_for(key, PARTITIONS))
    assert producer.flush(30) == 0


def step_until(consumer: TriggerConsumer, clock: ManualClock, done: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 60
    while not done():
        consumer.step(timeout=0.05)
        clock.advance(0.01)
        assert time.monotonic() < deadline, "the consumer did not get there in time"


def fired_events(store: Store, spec: WorkflowSpec) -> dict[str, list[int]]:
    """Per key, the ``n`` of every event in its runs, the runs in their offsets' order."""
    runs = sorted(
        every_run(store, spec.name),
        key=lambda info: info.params["events"][0]["n"],
    )
    found: dict[str, list[int]] = collections.defaultdict(list)
    for info in runs:
        found[info.params["key"]].extend(event["n"] for event in info.params["events"])
    return dict(found)


def consumer_of(store: Store, spec: WorkflowSpec, bootstrap: str, clock: ManualClock) -> Any:
    journal = KafkaEventLogStore(
        bootstrap, topic_prefix=f"ktg{uuid.uuid4().hex[:8]}", shard_count=PARTITIONS
    )
    consumer = TriggerConsumer(store, journal, spec, worker_id="ktg", clock=clock)
    consumer.open(partitions=list(range(PARTITIONS)))
    return consumer, journal


class RacingStore(MemoryStore):
    """A MemoryStore on which, at the first group fire, another owner fires the first event
    of the group's first batch just before (as a member that froze past its session does)."""

    raced: BatchToFire | None = None
    groups: list[int]

    def fire_batches(self, name: str, batches: Sequence[BatchToFire]) -> list[FiredBatch]:
        self.groups.append(len(batches))
        if self.raced is None and batches:
            head = self.raced = batches[0]
            self.fire_batch(
                name,
                head.key,
                [dict(head.events[0])],
                policy=head.policy,
                source=head.source,
                first=head.first,
                last=head.first,
            )
        return super().fire_batches(name, batches)


def test_a_keys_batches_of_one_pass_and_the_rest_of_a_raced_batch_fire_in_order_once(
    kafka_bootstrap: str,
) -> None:
    clock = ManualClock()
    store = RacingStore(clock=clock)
    store.groups = []
    consumer, journal = consumer_of(store, COLLECT, kafka_bootstrap, clock)
    keys = [f"key{n}" for n in range(6)]
    # Each key gets 5 events at once: two full batches in one pass, and one left open.
    sent = [(key, n) for n in range(5) for key in keys]
    try:
        send(kafka_bootstrap, consumer.topic, sent)
        step_until(consumer, clock, lambda: consumer.fires >= 2 * len(keys))
        clock.advance(61)  # the open windows end
        step_until(consumer, clock, lambda: consumer.fires >= 3 * len(keys))
        consumer.step(timeout=0.2)
    finally:
        consumer.close()
        journal.close()
    assert store.raced is not None
    assert max(store.groups) > 1  # the pass's heads went to the store together
    # Every event in exactly one run, each key's runs in offset order: the raced batch's
    # first event is a run of its own (the other owner's), the rest of it the next one.
    assert fired_events(store, COLLECT) == {key: [0, 1, 2, 3, 4] for key in keys}
    runs = every_run(store, COLLECT.name)
    assert len(runs) == 3 * len(keys) + 1
    assert consumer.fires == 3 * len(keys)  # the other owner's fire is not this consumer's


def keys_beside(key: str, count: int) -> list[str]:
    """``count`` other keys on ``key``'s partition: their batches fire in its group call."""
    partition = shard_for(key, PARTITIONS)
    near = (k for k in (f"key{n}" for n in range(1_000)) if shard_for(k, PARTITIONS) == partition)
    return [next(near) for _ in range(count)]


class RefusingStore(MemoryStore):
    """A MemoryStore that refuses (not as an outage) every batch of key ``bad``."""

    def fire_batch(self, name: str, key: str, *args: Any, **kwargs: Any) -> FiredBatch:
        if key == "bad":
            raise ValueError("the test refuses key 'bad'")
        return super().fire_batch(name, key, *args, **kwargs)


def test_a_group_the_store_refuses_is_fired_batch_by_batch_and_only_the_bad_one_set_aside(
    kafka_bootstrap: str,
) -> None:
    clock = ManualClock()
    store = RefusingStore(clock=clock)
    consumer, journal = consumer_of(store, DEBOUNCE, kafka_bootstrap, clock)
    # Keys on bad's partition fire in its group: some before it in the group call (fired
    # there, then again one by one: the same runs), some after it.
    partition, near = shard_for("bad", PARTITIONS), keys_beside("bad", 8)
    others = [f"other{n}" for n in range(8)]
    keys = [*near[:4], "bad", *near[4:8], *others]
    try:
        send(kafka_bootstrap, consumer.topic, [(key, n) for n, key in enumerate(keys)])
        step_until(consumer, clock, lambda: consumer.positions().get(partition, 0) >= 9)
        clock.advance(6)
        step_until(consumer, clock, lambda: consumer.fires >= len(keys) - 1)
        consumer.step(timeout=0.2)
    finally:
        consumer.close()
        journal.close()
    got = fired_events(store, DEBOUNCE)
    assert got == {key: [n] for n, key in enumerate(keys) if key != "bad"}
    assert consumer.fires == len(keys) - 1
    dead = read_records(kafka_bootstrap, f"{consumer.topic}.dlq", 1)
    assert [json.loads(m.value()) for m in dead] == [{"k": "bad", "n": keys.index("bad")}]


class PartlyAwayStore(MemoryStore):
    """A MemoryStore of which the part that holds key ``away`` is away (as one node of a
    cluster, or a journal write refused, would be) until ``back`` is set."""

    back = False

    def fire_batch(self, name: str, key: str, *args: Any, **kwargs: Any) -> FiredBatch:
        if key == "away" and not self.back:
            raise StoreUnavailable("the part of the store holding key 'away' is away")
        return super().fire_batch(name, key, *args, **kwargs)


def test_a_part_of_the_store_away_holds_back_only_the_keys_it_holds(
    kafka_bootstrap: str,
) -> None:
    clock = ManualClock()
    store = PartlyAwayStore(clock=clock)
    consumer, journal = consumer_of(store, DEBOUNCE, kafka_bootstrap, clock)
    partition, near = shard_for("away", PARTITIONS), keys_beside("away", 6)
    keys = [*near[:3], "away", *near[3:6]]  # all in one group call with "away"
    try:
        send(kafka_bootstrap, consumer.topic, [(key, n) for n, key in enumerate(keys)])
        step_until(consumer, clock, lambda: consumer.positions().get(partition, 0) >= len(keys))
        clock.advance(6)
        step_until(consumer, clock, lambda: consumer.fires >= len(keys) - 1)
        assert "away" not in fired_events(store, DEBOUNCE)
        store.back = True
        clock.advance(1)
        step_until(consumer, clock, lambda: consumer.fires >= len(keys))
    finally:
        consumer.close()
        journal.close()
    assert fired_events(store, DEBOUNCE) == {key: [n] for n, key in enumerate(keys)}
    assert consumer.fires == len(keys)


def test_windows_due_together_fire_in_one_script_per_shard_on_valkey_with_a_kafka_journal(
    kafka_bootstrap: str,
) -> None:
    clock = ManualClock()
    lifecycle = ValkeyLifecycleStore(
        shared_url(), namespace=f"ktg{uuid.uuid4().hex[:12]}", clock=clock, shard_count=PARTITIONS
    )
    journal = KafkaEventLogStore(
        kafka_bootstrap, topic_prefix=f"ktg{uuid.uuid4().hex[:8]}", shard_count=PARTITIONS
    )
    store = CompositeStore(lifecycle=lifecycle, events=journal)
    consumer = TriggerConsumer(store, journal, DEBOUNCE, worker_id="ktg", clock=clock)
    consumer.open(partitions=list(range(PARTITIONS)))
    keys = [f"key{n}" for n in range(120)]
    try:
        send(kafka_bootstrap, consumer.topic, [(key, n) for n, key in enumerate(keys)])
        step_until(consumer, clock, lambda: sum(consumer.positions().values()) >= len(keys))
        clock.advance(6)  # every window is due at once
        consumer.step(timeout=0)
        assert consumer.fires == len(keys)  # all in the one pass
        runs = every_run(store, DEBOUNCE.name)
        # One script per shard made them: their submits carry that script's time.
        assert len({info.submitted_at for info in runs}) <= PARTITIONS
        assert fired_events(store, DEBOUNCE) == {key: [n] for n, key in enumerate(keys)}
        # Each fired run's run:init is in the journal topic, on its shard's partition
        # (acknowledged before the fire returned), read back by a log of its own.
        reader = KafkaEventLogStore(
            kafka_bootstrap, topic_prefix=journal.topic_prefix, shard_count=PARTITIONS
        )
        try:
            inits = {
                (partition, event.run_id, event.run_seq)
                for partition, message in reader.read_whole_topic()
                if (event := decode(message.value())).kind == "run:init"
            }
        finally:
            reader.close()
        assert inits == {
            (shard_for(info.params["key"], PARTITIONS), info.run_id, 1) for info in runs
        }
    finally:
        consumer.close()
        store.close()


def test_a_pass_is_cut_into_groups_by_count_and_by_bytes_in_order() -> None:
    def batch(n: int, size: int) -> Batch:
        return Batch(0, f"k{n}", (n,), ({"n": n},), None, size)

    many = [batch(n, 10) for n in range(FIRES_TOGETHER + 3)]
    assert [len(g) for g in fire_groups(many)] == [FIRES_TOGETHER, 3]
    big = FIRE_BYTES_TOGETHER // 3
    sized = [batch(0, big), batch(1, big), batch(2, big), batch(3, big), batch(4, 10 * big)]
    groups = fire_groups(sized)
    assert [[b.key for b in g] for g in groups] == [["k0", "k1", "k2"], ["k3"], ["k4"]]
    assert [b for g in groups for b in g] == sized
    assert fire_groups([]) == []
