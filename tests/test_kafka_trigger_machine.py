"""Trigger topics under random histories, on the real broker: events produced (some on a
partition other than their key's, as a producer with its own partitioner sends them), the clock
moved, a consumer killed (no fire, no commit), partitions moved between consumers (the revoke,
commit and re-read a rebalance makes). Against a model: every event produced lands in exactly
one fire, and one key's fires from one partition come in offset order.

The consumers are :class:`TriggerConsumer`s driven step by step on a manual clock, assigned
their partitions by the machine (``reassign``) rather than by the group's coordinator, so a
history of many rebalances runs in seconds; the group path is what the worker-process tests
use. Their store is a MemoryStore (the fires and marks are the store's, as on any backend).
"""

from __future__ import annotations

import collections
import json
import time
import uuid
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, rule, run_state_machine_as_test

from lockgate import Collect, Debounce, ManualClock, MemoryStore, WorkflowContext, workflow
from lockgate._errors import StoreUnavailable
from lockgate.stores._shards import shard_for
from lockgate.stores.kafka import KafkaEventLogStore
from lockgate.streams import TriggerConsumer
from lockgate.streams.triggers._consumer import PRUNE_EVERY
from lockgate.workflow._spec import get_workflow, trigger_policy
from test_kafka_triggers import every_run

PARTITIONS = 2
KEYS = ["a", "b", "c", "d", "e"]


@workflow(name="ktm_collect", trigger=Collect(key="k", max_events=3, window_seconds=10))
async def ktm_collect(ctx: WorkflowContext, key: str, events: list[Any], count: int) -> None:
    return None


@workflow(name="ktm_debounce", trigger=Debounce(key="k", window_seconds=4, max_wait_seconds=9))
async def ktm_debounce(ctx: WorkflowContext, key: str, events: list[Any], count: int) -> None:
    return None


class TriggerTopicMachine(RuleBasedStateMachine):
    bootstrap: str = ""

    @initialize(mode=st.sampled_from(["ktm_collect", "ktm_debounce"]))
    def start(self, mode: str) -> None:
        spec = get_workflow(mode)
        assert spec is not None
        self.spec = spec
        self.clock = ManualClock()
        self.store = MemoryStore(clock=self.clock)
        self.journal = KafkaEventLogStore(
            self.bootstrap, topic_prefix=f"ktm{uuid.uuid4().hex[:8]}", shard_count=PARTITIONS
        )
        self.producer = Producer({"bootstrap.servers": self.bootstrap, "enable.idempotence": True})
        self.consumers: dict[str, TriggerConsumer] = {}
        self.owners: dict[int, str] = {}
        self.sent: dict[str, list[int]] = collections.defaultdict(list)
        self.n = 0
        self.names = iter(f"c{i}" for i in range(10_000))
        self.watermarks = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "ktm-marks"})
        self._join(next(self.names), list(range(PARTITIONS)))
        self.topic = self.consumers[self.owners[0]].topic

    def _join(self, name: str, partitions: list[int]) -> None:
        consumer = TriggerConsumer(
            self.store, self.journal, self.spec, worker_id=name, clock=self.clock
        )
        consumer.open(partitions=partitions)
        self.consumers[name] = consumer
        for partition in partitions:
            self.owners[partition] = name

    # -- rules -----------------------------------------------------------------------------------

    @rule(key=st.sampled_from(KEYS), count=st.integers(1, 5), elsewhere=st.booleans())
    def produce(self, key: str, count: int, elsewhere: bool) -> None:
        home = shard_for(key, PARTITIONS)
        partition = (home + 1) % PARTITIONS if elsewhere else home
        for _ in range(count):
            value = json.dumps({"k": key, "n": self.n}).encode()
            self.producer.produce(self.topic, value=value, key=key.encode(), partition=partition)
            self.sent[key].append(self.n)
            self.n += 1
        assert self.producer.flush(30) == 0
        self._pump()

    @rule(seconds=st.sampled_from([1.0, 3.0, 5.0, 11.0]))
    def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)
        self._pump()

    @rule(partition=st.integers(0, PARTITIONS - 1))
    def move(self, partition: int) -> None:
        """A rebalance: the partition goes to another consumer, one joining if there is none."""
        old = self.owners[partition]
        others = [name for name in self.consumers if name != old]
        if not others:
            new = next(self.names)
            self._reassign(old, [p for p, o in self.owners.items() if o == old and p != partition])
            self._join(new, [partition])
        else:
            new = others[0]
            self._reassign(old, [p for p, o in self.owners.items() if o == old and p != partition])
            self._reassign(new, [p for p, o in self.owners.items() if o == new] + [partition])
        self.owners[partition] = new
        self._pump()

    @rule(data=st.data())
    def kill(self, data: st.DataObject) -> None:
        """A consumer dies (SIGKILL: nothing fired or committed); its partitions go to a new
        one, which reads them from their commits."""
        victim = data.draw(st.sampled_from(sorted(self.consumers)))
        self.consumers.pop(victim).crash()
        orphaned = [p for p, o in self.owners.items() if o == victim]
        self._join(next(self.names), orphaned)
        self._pump()

    def _reassign(self, name: str, partitions: list[int]) -> None:
        consumer = self.consumers[name]
        consumer.reassign(partitions)
        if not partitions:
            consumer.close()
            del self.consumers[name]

    def _pump(self) -> None:
        """Step every consumer until each has read its partitions to their ends."""
        deadline = time.monotonic() + 30
        while True:
            for consumer in self.consumers.values():
                consumer.step(timeout=0.01)
            if all(self._caught_up(c) for c in self.consumers.values()):
                for consumer in self.consumers.values():
                    consumer.step(timeout=0)  # fire what the last records made due
                return
            assert time.monotonic() < deadline, "the consumers did not catch up"

    def _caught_up(self, consumer: TriggerConsumer) -> bool:
        for partition, position in consumer.positions().items():
            _, high = self.watermarks.get_watermark_offsets(
                TopicPartition(self.topic, partition), cached=False
            )
            if (position or 0) < high:
                return False
        return True

    # -- the model -------------------------------------------------------------------------------

    def teardown(self) -> None:
        if not hasattr(self, "consumers"):
            return
        try:
            self.clock.advance(1000)  # every window is due
            self._pump()
            self._check()
        finally:
            for consumer in self.consumers.values():
                consumer.close()
            self.watermarks.close()
            self.journal.close()

    def _check(self) -> None:
        runs = every_run(self.store, self.spec.name)  # in the order they were fired
        got: dict[str, list[int]] = collections.defaultdict(list)
        last: dict[tuple[str, str], int] = {}
        for info in runs:
            params = info.params
            trigger = self.store.load_run(self.spec.name, info.run_id)[0].payload["provenance"][
                "trigger"
            ]
            key, source = params["key"], trigger["source"]
            assert trigger["first"] > last.get((key, source), -1), "a key's fires out of order"
            last[(key, source)] = trigger["last"]
            got[key].extend(e["n"] for e in params["events"])
            if self.spec.name == "ktm_collect":
                assert params["count"] <= 3
        for key in KEYS:
            assert sorted(got.get(key, [])) == self.sent.get(key, []), f"key {key}"


def test_every_event_lands_in_exactly_one_fire_whatever_the_history(kafka_bootstrap: str) -> None:
    TriggerTopicMachine.bootstrap = kafka_bootstrap
    run_state_machine_as_test(
        TriggerTopicMachine,
        settings=settings(
            max_examples=12,
            stateful_step_count=12,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )


class AwayStore(MemoryStore):
    """A MemoryStore whose fires and marks fail as a store that does not answer, while
    ``away`` is set."""

    away = False

    def fire_batch(self, *args: Any, **kwargs: Any) -> Any:
        if self.away:
            raise StoreUnavailable("the store is away (the test says so)")
        return super().fire_batch(*args, **kwargs)

    def fired_through(self, *args: Any, **kwargs: Any) -> Any:
        if self.away:
            raise StoreUnavailable("the store is away (the test says so)")
        return super().fired_through(*args, **kwargs)


def test_fires_wait_for_a_store_that_is_away_with_reading_paused_and_lose_nothing(
    kafka_bootstrap: str,
) -> None:
    spec = get_workflow("ktm_collect")
    assert spec is not None
    clock = ManualClock()
    store = AwayStore(clock=clock)
    journal = KafkaEventLogStore(
        kafka_bootstrap, topic_prefix=f"ktm{uuid.uuid4().hex[:8]}", shard_count=PARTITIONS
    )
    consumer = TriggerConsumer(store, journal, spec, worker_id="away", clock=clock)
    consumer.open(partitions=list(range(PARTITIONS)))
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "enable.idempotence": True})

    def send(first: int, count: int) -> None:
        for n in range(first, first + count):
            value = json.dumps({"k": "a", "n": n}).encode()
            producer.produce(
                consumer.topic, value=value, key=b"a", partition=shard_for("a", PARTITIONS)
            )
        assert producer.flush(30) == 0

    def steps(until: Any) -> None:
        deadline = time.monotonic() + 30
        while not until():
            consumer.step(timeout=0.05)
            clock.advance(0.1)
            assert time.monotonic() < deadline

    try:
        send(0, 3)
        steps(lambda: consumer.fires == 1)  # known key, one full batch
        store.away = True
        send(3, 6)
        steps(lambda: consumer._holding)  # a fire failed: reading pauses
        assert consumer.fires == 1
        store.away = False
        steps(lambda: consumer.fires == 3)
        assert not consumer._holding
        send(9, 3)
        steps(lambda: consumer.fires == 4)  # reading again
    finally:
        consumer.close()
        journal.close()
    got = sorted(e["n"] for info in every_run(store, spec.name) for e in info.params["events"])
    assert got == list(range(12))


def test_marks_of_records_retention_deleted_are_forgotten_here_and_in_the_store(
    kafka_bootstrap: str,
) -> None:
    spec = get_workflow("ktm_collect")
    assert spec is not None
    clock = ManualClock()
    store = MemoryStore(clock=clock)
    journal = KafkaEventLogStore(
        kafka_bootstrap, topic_prefix=f"ktm{uuid.uuid4().hex[:8]}", shard_count=1
    )
    consumer = TriggerConsumer(store, journal, spec, worker_id="prune", clock=clock)
    consumer.open(partitions=[0])
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "enable.idempotence": True})
    for n, key in enumerate("aaabbb"):  # a at offsets 0..2, b at 3..5: both fire full
        producer.produce(consumer.topic, value=json.dumps({"k": key, "n": n}).encode(), partition=0)
    assert producer.flush(30) == 0
    source = f"{consumer.topic}/0"
    keys = {"a": trigger_policy(spec, "a"), "b": trigger_policy(spec, "b")}
    try:
        deadline = time.monotonic() + 30
        while consumer.fires < 2:
            consumer.step(timeout=0.05)
            assert time.monotonic() < deadline
        assert store.fired_through(spec.name, source, keys) == {"a": 2, "b": 5}
        admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
        deleted = admin.delete_records([TopicPartition(consumer.topic, 0, 3)])  # as retention does
        for done in deleted.values():
            done.result(30)
        clock.advance(PRUNE_EVERY + 1)
        consumer.step(timeout=0)
    finally:
        consumer.close()
        journal.close()
    assert store.fired_through(spec.name, source, keys) == {"b": 5}  # a's records are gone
