"""lockgate's own producer of trigger events: ``client.trigger`` and ``lockgate trigger`` on a
store whose journal is Kafka.

A record's value is the event as UTF-8 JSON and its key the trigger key; it goes to the
partition of the key's shard (the one partition function every lockgate process and any other
producer share, ``stores/kafka/_partition.py``), so one partition's owner holds the key's
window. A send returns once Kafka acknowledged the record (idempotent, ``acks=all``): an event
acknowledged to its sender is in the topic.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
import weakref
from collections.abc import Callable, Iterable
from typing import Any

from lockgate._errors import StoreUnavailable
from lockgate.stores._shards import shard_for
from lockgate.stores.kafka import KafkaEventLogStore
from lockgate.stores.kafka._delivery import Delivery
from lockgate.stores.kafka._topic import prepare_topic
from lockgate.streams._topics import dlq_topic

with contextlib.suppress(ImportError):  # the extra may be missing: no journal is made then
    from confluent_kafka.admin import AdminClient

#: Records one send hands to the producer before it waits for their acknowledgements.
SEND_BATCH = 1_000


class TriggerProducer:
    """Sends events to trigger topics through ``journal``'s Kafka (its producer, settings and
    shard count), for as long as ``journal`` is open; topics it has not sent to yet are made
    (or checked) first."""

    def __init__(self, journal: KafkaEventLogStore) -> None:
        self._journal = journal
        self._producer = journal.producer
        self._prepared: set[str] = set()
        self._lock = threading.Lock()

    @property
    def partitions(self) -> int:
        return self._journal.shard_count

    def prepare(self, topic: str) -> None:
        """Create ``topic`` (and its dead-letter topic) with one partition per shard, or check
        the ones there (:class:`TriggerTopicMismatch` for another count)."""
        with self._lock:
            if topic in self._prepared:
                return
        prepare_trigger_topics(self._journal, topic)
        with self._lock:
            self._prepared.add(topic)

    def send(self, topic: str, key: str, event: dict[str, Any]) -> None:
        """Send one event and wait for Kafka's acknowledgement."""
        self.send_all(topic, [(key, event)])

    def send_all(
        self,
        topic: str,
        events: Iterable[tuple[str, dict[str, Any]]],
        progress: Callable[[int], None] | None = None,
    ) -> int:
        """Send ``(key, event)`` pairs in order, each acknowledged before this returns; calls
        ``progress(acknowledged so far)`` after each batch. How many were sent."""
        self.prepare(topic)
        sent = 0
        batch: list[tuple[str, dict[str, Any]]] = []
        for pair in events:
            batch.append(pair)
            if len(batch) >= SEND_BATCH:
                sent += self._send_batch(topic, batch)
                batch = []
                if progress is not None:
                    progress(sent)
        if batch:
            sent += self._send_batch(topic, batch)
        if progress is not None:
            progress(sent)
        return sent

    def _send_batch(self, topic: str, batch: list[tuple[str, dict[str, Any]]]) -> int:
        delivery = Delivery(len(batch))
        timeout = self._journal.delivery_timeout
        for key, event in batch:
            value = json.dumps(event, allow_nan=False, separators=(",", ":")).encode()
            partition = shard_for(key, self.partitions)
            while True:
                try:
                    self._producer.produce(
                        topic,
                        value=value,
                        key=key.encode(),
                        partition=partition,
                        on_delivery=delivery.report,
                    )
                    break
                except BufferError:
                    time.sleep(0.01)  # the local queue is full: the reports thread drains it
        if not delivery.wait(timeout + 5.0):
            raise StoreUnavailable(
                f"Kafka did not acknowledge {delivery.left} trigger event(s) to {topic!r} "
                f"within {timeout:g} s"
            )
        if delivery.errors:
            raise StoreUnavailable(
                f"Kafka refused {len(delivery.errors)} trigger event(s) to {topic!r}: "
                f"{delivery.errors[0]}"
            )
        return len(batch)


_producers: weakref.WeakKeyDictionary[KafkaEventLogStore, TriggerProducer] = (
    weakref.WeakKeyDictionary()
)
_producers_lock = threading.Lock()


def producer_for(journal: KafkaEventLogStore) -> TriggerProducer:
    """The trigger producer of ``journal`` (one per journal store, so topics are prepared
    once)."""
    with _producers_lock:
        producer = _producers.get(journal)
        if producer is None:
            producer = _producers[journal] = TriggerProducer(journal)
        return producer


def prepare_trigger_topics(journal: KafkaEventLogStore, topic: str) -> None:
    """Make (or check) ``topic`` and its dead-letter topic: one partition per shard of the
    journal's store, the broker's default retention (a trigger event's life ends with its
    fire)."""
    admin = AdminClient(dict(journal.client_config))
    for name in (topic, dlq_topic(topic)):
        prepare_topic(
            admin,
            name,
            bootstrap=journal.bootstrap_servers,
            partitions=journal.shard_count,
            replication_factor=journal.replication_factor,
            config={"cleanup.policy": "delete"},
            timeout=journal.read_timeout,
            journal=False,
        )
