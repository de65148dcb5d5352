"""What a bound workflow's topic looks like now, per partition: the worker that owns it, how far
its group committed, the partition's end and the lag between (the consumer group's view,
``streams/_group_view.py``), the workflow's runs of the partition's records still in flight or
waiting (the store), and how many of its records went to the dead-letter topic (that topic).

Asked of Kafka and the store alone, never of a worker, and bounded both ways, so that it can
be asked of a deployment of any size:

- runs: the workflow's newest :data:`RUNS_MOST` runs are read (``list_runs``, newest first),
  and those not ended are counted by their record's partition (a bound run carries its record
  in its metadata, and its id is ``{topic}:{partition}:{offset}``). The consumer keeps only a
  few runs per partition unfinished, so the ones in flight are among the newest; a run parked
  long ago (a long sleep) behind more than that many newer runs is not counted, and the status
  says the read was cut;
- dead letters: ``{topic}.dlq`` is read from its start, at most :data:`DEAD_MOST` records and
  for at most the journal's ``read_timeout``, and its copies counted by the partition their
  ``lockgate.dlq.source`` header names (a copy made twice, by a worker that died before its
  commit, counts once); a read cut short says so too.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from dataclasses import dataclass
from typing import Any

from lockgate._errors import ConfigurationError, StoreUnavailable
from lockgate.journal._events import RunStatus
from lockgate.stores._base import Store
from lockgate.stores._types import RunInfo
from lockgate.stores.kafka import KafkaEventLogStore
from lockgate.stores.kafka._topic import watermarks
from lockgate.streams._dead_letters import SOURCE_HEADER
from lockgate.streams._group_view import GroupViewer
from lockgate.streams._topic_admin import admin_for_journal, create_command
from lockgate.streams._topics import dlq_topic
from lockgate.streams.bound._consumer import bound_group
from lockgate.workflow._record import RECORD_METADATA

with contextlib.suppress(ImportError):  # the extra may be missing: no journal is made then
    from confluent_kafka import Consumer, KafkaException, TopicPartition

#: The workflow's runs read, at most, newest first, for the runs in flight and waiting.
RUNS_MOST = 10_000
#: Runs asked of the store in one page.
RUNS_PAGE = 500
#: Dead-letter records read, at most.
DEAD_MOST = 100_000


@dataclass(frozen=True)
class BoundPartition:
    """One partition of a bound topic: ``owner`` the worker id of the group member that owns
    it (None: no member), ``committed`` the group's offset (None: never committed), ``end`` the
    next offset to be written, ``lag`` the records past the commit; ``in_flight`` the runs of
    its records running now, ``waiting`` those submitted and not running (queued, or parked on
    a sleep, a signal, a pause or a question); ``dead_lettered`` its records in the
    dead-letter topic."""

    partition: int
    owner: str | None
    committed: int | None
    end: int
    lag: int
    in_flight: int
    waiting: int
    dead_lettered: int


@dataclass(frozen=True)
class BoundStatus:
    """``workflow``'s bound ``topic`` read by ``group``, per partition. ``runs_read`` is how
    many of the workflow's runs were read; ``runs_cut`` says older ones were left unread
    (:data:`RUNS_MOST`); ``dead_cut`` says the dead-letter topic was not read to its end (its
    counts are then at least those shown)."""

    workflow: str
    topic: str
    group: str
    dlq: str
    partitions: tuple[BoundPartition, ...]
    runs_read: int
    runs_cut: bool
    dead_cut: bool


def bound_status(
    store: Store,
    journal: KafkaEventLogStore,
    workflow: str,
    topic: str,
    *,
    runs_most: int = RUNS_MOST,
    dead_most: int = DEAD_MOST,
) -> BoundStatus:
    """The status of ``workflow``'s bound ``topic`` (see the module docstring).
    :class:`ConfigurationError` when the topic does not exist, :class:`StoreUnavailable` when
    Kafka or the store does not answer."""
    group = bound_group(journal.topic_prefix, workflow)
    view = GroupViewer(journal.client_config, timeout=journal.read_timeout).view(topic, group)
    if not view.exists:
        command = create_command(admin_for_journal(journal), topic)
        raise ConfigurationError(
            f"topic {topic!r} does not exist: create it with `{command}` (workflow "
            f"{workflow!r} is bound to it)"
        )
    running, waiting, read, cut = _open_runs(store, workflow, topic, runs_most)
    dlq = dlq_topic(topic)
    dead, dead_cut = _dead_letters(journal, dlq, dead_most)
    partitions = tuple(
        BoundPartition(
            p.partition,
            p.owner,
            p.committed,
            p.end,
            p.lag,
            running.get(p.partition, 0),
            waiting.get(p.partition, 0),
            dead.get(p.partition, 0),
        )
        for p in view.partitions
    )
    return BoundStatus(workflow, topic, group, dlq, partitions, read, cut, dead_cut)


def _partition_of(info: RunInfo, topic: str) -> int | None:
    """The partition of the record ``info``'s run was made for, if it is one of ``topic``."""
    record = info.metadata.get(RECORD_METADATA) if isinstance(info.metadata, dict) else None
    if isinstance(record, dict):
        partition = record.get("partition")
        if record.get("topic") == topic and isinstance(partition, int):
            return partition
        return None
    head, _, rest = info.run_id.partition(":")  # no metadata: the id says it
    number = rest.partition(":")[0]
    return int(number) if head == topic and number.isdigit() else None


def _open_runs(
    store: Store, workflow: str, topic: str, most: int
) -> tuple[dict[int, int], dict[int, int], int, bool]:
    """Per partition, the runs in flight and the runs waiting among the workflow's newest
    ``most``; how many runs were read, and whether older ones were left."""
    running: dict[int, int] = {}
    waiting: dict[int, int] = {}
    read, cursor = 0, None
    while read < most:
        page, cursor = store.list_runs(workflow, limit=min(RUNS_PAGE, most - read), cursor=cursor)
        read += len(page)
        for info in page:
            status = RunStatus(info.status)
            if status.is_terminal:
                continue
            partition = _partition_of(info, topic)
            if partition is None:
                continue
            counts = running if status == RunStatus.IN_PROGRESS else waiting
            counts[partition] = counts.get(partition, 0) + 1
        if cursor is None:
            return running, waiting, read, False
    return running, waiting, read, cursor is not None


def _dead_letters(journal: KafkaEventLogStore, dlq: str, most: int) -> tuple[dict[int, int], bool]:
    """Per source partition, the distinct records copied to ``dlq`` (none when it does not
    exist yet); whether the read stopped before the topic's end."""
    deadline = time.monotonic() + journal.read_timeout
    consumer: Any = Consumer(
        {
            **journal.client_config,
            "group.id": f"lockgate-status-{uuid.uuid4().hex[:8]}",  # assigned, never joined
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 50,
        }
    )
    try:
        listed = consumer.list_topics(timeout=journal.read_timeout).topics.get(dlq)
        if listed is None or listed.error is not None or not listed.partitions:
            return {}, False
        ends: dict[int, int] = {}
        starts = []
        for partition in sorted(listed.partitions):
            low, high = watermarks(consumer, dlq, partition, journal.read_timeout)
            if high > low:
                ends[partition] = high
                starts.append(TopicPartition(dlq, partition, low))
        if not starts:
            return {}, False
        consumer.assign(starts)
        seen: dict[int, set[str]] = {}
        read = 0
        while ends and read < most and time.monotonic() < deadline:
            for message in consumer.consume(1000, timeout=0.2):
                if message.error() is not None:
                    continue
                read += 1
                partition, offset = message.partition(), message.offset()
                if partition in ends and offset >= ends[partition] - 1:
                    del ends[partition]
                source = dict(message.headers() or []).get(SOURCE_HEADER)
                place = _source_partition(source)
                if place is not None:
                    seen.setdefault(place, set()).add(bytes(source or b"").decode(errors="replace"))
        return {p: len(sources) for p, sources in seen.items()}, bool(ends)
    except KafkaException as exc:
        raise StoreUnavailable(f"Kafka did not answer for {dlq!r}: {exc}") from exc
    finally:
        consumer.close()


def _source_partition(source: bytes | None) -> int | None:
    """The partition a ``lockgate.dlq.source`` header (``topic/partition/offset``) names."""
    if not source:
        return None
    parts = source.decode(errors="replace").rsplit("/", 2)
    return int(parts[1]) if len(parts) == 3 and parts[1].isdigit() else None
