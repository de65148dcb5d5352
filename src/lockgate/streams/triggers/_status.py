"""What a triggered workflow's topic looks like now, per partition: which worker owns it, how
far its group committed, its lag, and the windows still open on it.

Asked of Kafka and the store alone (no worker is asked): the owner from the group's
membership, the committed offset and the end from the broker, and the open windows from the
records past the commit that no fired-through mark covers. A window's due time is computed
from its records' timestamps; its owner started it when it read the first, so the owner fires
it a little later than shown when it read the records late (after a takeover).
"""

from __future__ import annotations

import contextlib
import uuid
from dataclasses import dataclass, field

from lockgate._errors import ConfigurationError, StoreUnavailable
from lockgate.stores._base import Store
from lockgate.stores.kafka import KafkaEventLogStore
from lockgate.stores.kafka._topic import watermarks
from lockgate.streams._topics import committed_offsets, group_id, kafka_journal, trigger_topic
from lockgate.streams.triggers._consumer import offset_of, source_of
from lockgate.streams.triggers._records import Event, read_record
from lockgate.workflow._spec import WorkflowSpec, trigger_policy

with contextlib.suppress(ImportError):  # the extra may be missing: no journal is made then
    from confluent_kafka import Consumer, KafkaException, TopicPartition
    from confluent_kafka.admin import AdminClient

#: Records of one partition read past its commit, at most, to find its open windows.
SCAN_MOST = 200_000


@dataclass(frozen=True)
class OpenWindow:
    key: str
    count: int
    due_at: float


@dataclass(frozen=True)
class PartitionStatus:
    """One partition of a trigger topic: ``owner`` the worker id of the group member that
    owns it (None: no member), ``committed`` the group's offset (None: never committed),
    ``end`` the next offset to be written, ``lag`` the records past the commit."""

    partition: int
    owner: str | None
    committed: int | None
    end: int
    lag: int
    windows: list[OpenWindow] = field(default_factory=list)


def trigger_status(
    store: Store, spec: WorkflowSpec, *, timeout: float = 10.0
) -> list[PartitionStatus]:
    """The status of ``spec``'s trigger topic on ``store`` (a store with a Kafka journal), a
    :class:`PartitionStatus` per partition."""
    journal = kafka_journal(store)
    if journal is None or spec.trigger is None:
        raise ConfigurationError(
            "trigger status needs a store with a Kafka journal and a Collect or Debounce workflow"
        )
    topic = trigger_topic(journal.topic_prefix, spec)
    group = group_id(topic)
    owners = _owners(journal, group, topic, timeout)
    consumer = Consumer(
        {
            **journal.client_config,
            "group.id": group,  # asked for its offsets only, never joined
            "enable.auto.commit": False,
            "client.id": f"lockgate-status-{uuid.uuid4().hex[:6]}",
        }
    )
    try:
        listed = consumer.list_topics(topic, timeout=timeout).topics.get(topic)
        if listed is None or listed.error is not None or not listed.partitions:
            raise ConfigurationError(
                f"the trigger topic {topic!r} does not exist yet: a worker serving "
                f"{spec.name!r} makes it at start, and so does the first trigger sent"
            )
        partitions = sorted(listed.partitions)
        committed = {
            tp.partition: (tp.offset if tp.offset >= 0 else None)
            for tp in committed_offsets(
                consumer, [TopicPartition(topic, p) for p in partitions], timeout
            )
        }
        statuses = []
        for partition in partitions:
            low, high = watermarks(consumer, topic, partition, timeout)
            done = committed[partition]
            start = max(done, low) if done is not None else low  # retention may have passed it
            windows = _open_windows(store, consumer, spec, topic, partition, start, high, timeout)
            statuses.append(
                PartitionStatus(
                    partition,
                    owners.get(partition),
                    done,
                    high,
                    max(0, high - start),
                    windows,
                )
            )
        return statuses
    except KafkaException as exc:
        raise StoreUnavailable(f"Kafka did not answer for {topic!r}: {exc}") from exc
    finally:
        consumer.close()


def _owners(journal: KafkaEventLogStore, group: str, topic: str, timeout: float) -> dict[int, str]:
    admin = AdminClient(dict(journal.client_config))
    try:
        described = admin.describe_consumer_groups([group])[group].result(timeout=timeout)
    except KafkaException:
        return {}
    owners = {}
    for member in described.members:
        assignment = member.assignment
        for tp in assignment.topic_partitions if assignment is not None else []:
            if tp.topic == topic:
                owners[tp.partition] = member.client_id
    return owners


def _open_windows(
    store: Store,
    consumer: Consumer,
    spec: WorkflowSpec,
    topic: str,
    partition: int,
    start: int,
    end: int,
    timeout: float,
) -> list[OpenWindow]:
    """The windows the records of ``partition`` from ``start`` to ``end`` leave open: each
    key's records past its fired-through mark."""
    if start >= end:
        return []
    consumer.assign([TopicPartition(topic, partition, start)])
    seen: dict[str, list[float]] = {}
    read = 0
    stop = min(end, start + SCAN_MOST)
    offsets: dict[str, list[int]] = {}
    while read < stop - start:
        # consume() waits until it has as many as asked for: ask for no more than are left.
        messages = consumer.consume(min(1000, stop - start - read), timeout=timeout)
        if not messages:
            break
        last = start
        for message in messages:
            if message.error() is not None:
                continue
            last = offset_of(message)
            if last >= stop:
                continue
            read += 1
            record = read_record(spec, message.value(), message.key())
            if isinstance(record, Event):
                seen.setdefault(record.key, []).append(message.timestamp()[1] / 1000.0)
                offsets.setdefault(record.key, []).append(last)
        if last >= stop - 1:
            break
    consumer.unassign()
    policies = {key: trigger_policy(spec, key) for key in seen}
    marks = store.fired_through(spec.name, source_of(topic, partition), policies)
    windows = []
    for key, times in seen.items():
        mark = marks.get(key, -1)
        kept = [t for t, o in zip(times, offsets[key], strict=True) if o > mark]
        if not kept:
            continue
        policy, due = policies[key], None
        for at in kept:
            due = policy.due_at(kept[0], at, due)
        assert due is not None
        windows.append(OpenWindow(key, len(kept), due))
    return sorted(windows, key=lambda w: w.due_at)
