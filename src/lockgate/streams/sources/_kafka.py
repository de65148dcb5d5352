"""A Kafka topic as a :class:`~lockgate.streams.sources.Source`: :class:`KafkaSource`.

The source reads explicit partitions (``assign``, never ``subscribe``), so it starts at once,
with no consumer-group rebalance to wait for, and no other member of the group can take a
partition from it. Its group exists only to keep its committed offsets in Kafka. A record
whose value does not decode is copied to ``{topic}.dlq`` with the reason in its headers, and
the batch moves past it; the copy is acknowledged before the batch is handed out, so the
stream never depends on a copy that may still be lost.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

from lockgate._errors import ConfigurationError, StoreUnavailable
from lockgate.streams._dead_letters import DeadLetters
from lockgate.streams._topics import TOPIC_NAME, committed_offsets, dlq_topic
from lockgate.streams._values import KafkaRecord, Undecodable, decoder_for, record_of
from lockgate.streams.sources._memory import check_offset, check_timeout
from lockgate.streams.sources._source import Batch

with contextlib.suppress(ImportError):  # the extra may be missing: KafkaSource() says so
    from confluent_kafka import (
        Consumer,
        KafkaError,
        KafkaException,
        Message,
        Producer,
        TopicPartition,
    )
    from confluent_kafka.admin import AdminClient
    from confluent_kafka.cimpl import NewTopic

log = logging.getLogger("lockgate.sources")

#: Seconds a request to Kafka (metadata, a commit, committed offsets, dead-letter copies) may
#: take before the source reports Kafka unavailable.
REQUEST_TIMEOUT = 10.0


def _offset(message: Message) -> int:
    offset = message.offset()
    assert offset is not None  # a record always has one
    return offset


class KafkaSource:
    """Batches of ``topic``'s records, each batch from one partition and at most
    ``batch_size`` records long. A record is a ``KafkaRecord`` (topic, partition, offset, key,
    timestamp, headers) whose value is decoded as JSON or, given ``avro_schema`` (a schema
    file), as Avro. A batch covers consecutive offsets of its partition, from its ``offset``
    to its ``end_offset``; a record in that range that did not decode is in the dead-letter
    topic instead of the batch, and a batch all of whose records went there is empty.

    ``partitions`` limits it to those partitions (all of the topic's by default). Offsets are
    committed in Kafka under ``group_id`` (``lockgate.source.{topic}`` by default); a
    partition never committed is read from its oldest record. ``config`` adds
    confluent-kafka settings (security, for one) to the consumer and to the dead-letter
    producer.

    Nothing connects until the source is first used, so a workflow that replays without
    reading (a query) costs no connection. Close it (it is a context manager) to let go of
    its connections. :class:`ConfigurationError` when the topic does not exist or lacks a
    partition asked for; :class:`StoreUnavailable` when Kafka does not answer.
    """

    def __init__(
        self,
        topic: str,
        *,
        bootstrap_servers: str,
        group_id: str | None = None,
        partitions: list[int] | None = None,
        batch_size: int = 500,
        avro_schema: str | Path | None = None,
        config: Mapping[str, Any] | None = None,
    ) -> None:
        try:
            import confluent_kafka  # noqa: F401
        except ImportError as exc:  # pragma: no cover - the extra is installed in tests
            raise ConfigurationError(
                "KafkaSource needs confluent-kafka: pip install 'lockgate[kafka]'"
            ) from exc
        if not isinstance(topic, str) or not TOPIC_NAME.fullmatch(topic) or topic in (".", ".."):
            raise ConfigurationError(
                f"KafkaSource topic {topic!r} is no name Kafka takes: 1-245 of A-Z a-z 0-9 . _ -"
            )
        if not isinstance(bootstrap_servers, str) or not bootstrap_servers:
            raise ConfigurationError("KafkaSource(bootstrap_servers=...) must name a broker")
        if group_id is not None and (not isinstance(group_id, str) or not group_id):
            raise ConfigurationError("KafkaSource(group_id=...) must be a non-empty string")
        if partitions is not None and (
            not isinstance(partitions, list)
            or not partitions
            or any(isinstance(p, bool) or not isinstance(p, int) or p < 0 for p in partitions)
        ):
            raise ConfigurationError(
                f"KafkaSource(partitions=...) must be a non-empty list of partition numbers, "
                f"got {partitions!r}"
            )
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ConfigurationError(
                f"KafkaSource(batch_size=...) must be an integer >= 1, got {batch_size!r}"
            )
        self.source_id = topic
        self.topic = topic
        self.dlq = dlq_topic(topic)
        self.group_id = group_id or f"lockgate.source.{topic}"
        self.batch_size = batch_size
        self.bootstrap_servers = bootstrap_servers
        self._decode = decoder_for(avro_schema)
        self._client: dict[str, Any] = {"bootstrap.servers": bootstrap_servers, **(config or {})}
        self._asked = sorted(set(partitions)) if partitions is not None else None
        self._consumer: Consumer | None = None
        self._partitions: list[int] = []
        self._assigned = False
        #: Where a partition starts once assigned, for seeks made before that.
        self._starts: dict[int, int] = {}
        #: Records read ahead, per partition in turn order (a partition served goes last).
        self._buffered: dict[int, list[Message]] = {}
        self._producer: Producer | None = None
        self._dead: DeadLetters | None = None
        self._closed = False
        #: Records copied to the dead-letter topic since the source was made.
        self.dead_lettered = 0

    # -- the Source protocol -------------------------------------------------------------------

    def poll(self, timeout_ms: int = 5000) -> Batch[KafkaRecord[Any]] | None:
        """The next batch: up to ``batch_size`` records of one partition, read ahead ones
        first; None when no record came within ``timeout_ms``."""
        timeout = check_timeout(timeout_ms) / 1000
        consumer = self._open()
        if not self._assigned:
            consumer.assign(
                [
                    TopicPartition(self.topic, p, self._starts[p])
                    if p in self._starts
                    else TopicPartition(self.topic, p)  # from the group's commit
                    for p in self._partitions
                ]
            )
            self._assigned, self._starts = True, {}
        if not self._buffered:
            self._fetch(consumer, timeout)
        if not self._buffered:
            return None
        return self._take()

    def seek(self, source_id: str, partition: int, offset: int) -> None:
        """Read ``partition`` from ``offset`` on; what was read ahead of it is dropped."""
        self._check(source_id, partition)
        offset = check_offset("seek offset", offset)
        consumer = self._open()
        self._buffered.pop(partition, None)
        if not self._assigned:
            self._starts[partition] = offset
            return
        place = TopicPartition(self.topic, partition, offset)
        try:
            consumer.seek(place)
        except KafkaException:
            # A partition assigned but not fetching yet cannot seek (librdkafka's _STATE):
            # assigning it again at the offset does the same.
            consumer.incremental_unassign([TopicPartition(self.topic, partition)])
            consumer.incremental_assign([place])

    def commit(self, source_id: str, partition: int, offset: int) -> None:
        """Commit ``offset`` for ``partition`` in Kafka, synchronously."""
        self._check(source_id, partition)
        offset = check_offset("commit offset", offset)
        consumer = self._open()
        self._settle_dead_letters(partition, offset)
        try:
            consumer.commit(
                offsets=[TopicPartition(self.topic, partition, offset)], asynchronous=False
            )
        except KafkaException as exc:
            raise StoreUnavailable(
                f"Kafka did not take the commit of {self.topic!r} partition {partition} at "
                f"offset {offset} for group {self.group_id!r}: {exc}"
            ) from exc

    def get_committed(self, source_id: str, partition: int) -> int | None:
        self._check(source_id, partition)
        consumer = self._open()
        (found,) = committed_offsets(
            consumer, [TopicPartition(self.topic, partition)], REQUEST_TIMEOUT
        )
        return found.offset if found.offset >= 0 else None

    def partitions(self) -> list[tuple[str, int]]:
        self._open()
        return [(self.topic, p) for p in self._partitions]

    # -- life ----------------------------------------------------------------------------------

    def close(self) -> None:
        """Send what dead-letter copies are left and close the connections (again: no-op)."""
        self._closed = True
        producer, self._producer = self._producer, None
        consumer, self._consumer = self._consumer, None
        try:
            if producer is not None and producer.flush(REQUEST_TIMEOUT) > 0:
                log.warning("source %s: closed with dead-letter copies not sent", self.topic)
        finally:
            if consumer is not None:
                consumer.close()

    def __enter__(self) -> KafkaSource:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"KafkaSource({self.topic!r}, group_id={self.group_id!r})"

    # -- reading -------------------------------------------------------------------------------

    def _open(self) -> Consumer:
        """The consumer, made at first use with the topic's partitions read from Kafka."""
        if self._consumer is not None:
            return self._consumer
        if self._closed:
            raise ConfigurationError(f"KafkaSource {self.topic!r} is closed")
        consumer = Consumer(
            {
                **self._client,
                "group.id": self.group_id,
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "enable.partition.eof": False,
            }
        )
        try:
            # The whole listing, not the one topic: asking for a missing topic by name may
            # have a broker that creates topics on demand create it.
            listed = consumer.list_topics(timeout=REQUEST_TIMEOUT).topics.get(self.topic)
        except KafkaException as exc:
            consumer.close()
            raise StoreUnavailable(
                f"Kafka at {self.bootstrap_servers} did not answer for topic {self.topic!r}: {exc}"
            ) from exc
        if listed is None or listed.error is not None or not listed.partitions:
            consumer.close()
            raise ConfigurationError(
                f"topic {self.topic!r} does not exist at {self.bootstrap_servers}: create it "
                f"(kafka-topics.sh --create --topic {self.topic}) before reading it"
            )
        present = sorted(listed.partitions)
        missing = sorted(set(self._asked or []) - set(present))
        if missing:
            consumer.close()
            raise ConfigurationError(
                f"topic {self.topic!r} has partitions 0-{present[-1]}; it has no partition "
                f"{', '.join(map(str, missing))}"
            )
        self._partitions = self._asked or present
        self._consumer = consumer
        return consumer

    def _fetch(self, consumer: Consumer, timeout: float) -> None:
        """Buffer what records came, waiting up to ``timeout`` for the first one only."""
        messages = consumer.consume(self.batch_size, timeout=0)
        if not messages:
            first = consumer.poll(timeout)
            if first is None:
                return
            more = consumer.consume(self.batch_size - 1, timeout=0) if self.batch_size > 1 else []
            messages = [first, *more]
        for message in messages:
            error = message.error()
            if error is not None:
                self._refuse(error)
                continue
            partition = message.partition()
            assert partition is not None
            self._buffered.setdefault(partition, []).append(message)

    def _refuse(self, error: KafkaError) -> None:
        """An error the consumer reported in place of a record: raised when the topic is
        gone or the client cannot go on; else logged (librdkafka retries the others)."""
        if error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
            raise ConfigurationError(
                f"topic {self.topic!r} is gone from {self.bootstrap_servers}: {error.str()}"
            )
        if error.fatal():
            raise StoreUnavailable(f"the consumer of {self.topic!r} failed: {error.str()}")
        log.warning("source %s: %s", self.topic, error.str())

    def _take(self) -> Batch[KafkaRecord[Any]]:
        """The next partition's run of buffered records as a batch; the rest stays buffered
        (that partition's behind the others)."""
        partition = next(iter(self._buffered))
        messages = self._buffered.pop(partition)
        run, rest = messages[: self.batch_size], messages[self.batch_size :]
        if rest:
            self._buffered[partition] = rest
        records = []
        dead = False
        for message in run:
            try:
                records.append(record_of(message, self._decode))
            except Undecodable as refused:
                self._dead_letter(message, refused)
                dead = True
        end = _offset(run[-1]) + 1
        if dead:
            try:
                self._settle_dead_letters(partition, end)
            except StoreUnavailable:
                # Handed out later, once the copies are in: the partition's records go back
                # to the front, to be read (and copied) again.
                self._buffered.pop(partition, None)
                self._buffered = {partition: messages, **self._buffered}
                raise
        return Batch(self.topic, partition, _offset(run[0]), records, end_offset=end)

    # -- dead letters --------------------------------------------------------------------------

    def _dead_letter(self, message: Message, refused: Undecodable) -> None:
        if self._dead is None:
            self._prepare_dead_letters()
        assert self._dead is not None
        where = f"{self.topic}/{message.partition()}/{message.offset()}"
        log.warning(
            "source %s: the record at %s does not decode (%s: %s); copied to %s",
            self.topic,
            where,
            refused.reason,
            refused.detail,
            self.dlq,
        )
        self._dead.send(message, refused.reason, refused.detail, where)
        self.dead_lettered += 1

    def _prepare_dead_letters(self) -> None:
        """Make the dead-letter topic when missing, with the topic's partition count (a copy
        goes to its record's partition number), and the producer that sends the copies."""
        admin = AdminClient(dict(self._client))
        needed = max(self._partitions) + 1
        try:
            found = self._partition_count(admin)
            if found is None:
                future = admin.create_topics([NewTopic(self.dlq, needed, -1)])[self.dlq]
                with contextlib.suppress(KafkaException):  # made meanwhile by another source
                    future.result(timeout=REQUEST_TIMEOUT)
                deadline = time.monotonic() + REQUEST_TIMEOUT
                while found is None and time.monotonic() < deadline:
                    found = self._partition_count(admin)  # listed a moment after it is made
                    if found is None:
                        time.sleep(0.05)
        except KafkaException as exc:
            raise StoreUnavailable(
                f"Kafka did not list or make the dead-letter topic {self.dlq!r}: {exc}"
            ) from exc
        if found is None:
            raise StoreUnavailable(f"the dead-letter topic {self.dlq!r} could not be made")
        if found < needed:
            raise ConfigurationError(
                f"the dead-letter topic {self.dlq!r} has {found} partitions; copies of "
                f"{self.topic!r} need {needed} (one per partition of the topic)"
            )
        self._producer = Producer({**self._client, "acks": "all", "linger.ms": 5})
        self._dead = DeadLetters(self._producer, self.dlq)

    def _partition_count(self, admin: AdminClient) -> int | None:
        listed = admin.list_topics(timeout=REQUEST_TIMEOUT).topics.get(self.dlq)
        if listed is None or listed.error is not None:
            return None
        return len(listed.partitions)

    def _settle_dead_letters(self, partition: int, offset: int) -> None:
        """Wait until Kafka acknowledged every copy of ``partition`` below ``offset``;
        :class:`StoreUnavailable` when it does not within REQUEST_TIMEOUT."""
        if self._dead is None or self._producer is None:
            return
        deadline = time.monotonic() + REQUEST_TIMEOUT
        while True:
            self._producer.flush(max(0.0, deadline - time.monotonic()))
            held = self._dead.held_at(partition)  # sends a failed copy again
            if held is None or held >= offset:
                return
            if time.monotonic() > deadline:
                raise StoreUnavailable(
                    f"the dead-letter topic {self.dlq!r} did not acknowledge the copy of "
                    f"{self.topic!r} partition {partition} offset {held}"
                )
            time.sleep(0.05)

    def _check(self, source_id: str, partition: int) -> None:
        if source_id != self.topic:
            raise ValueError(f"this KafkaSource reads {self.topic!r}, not {source_id!r}")
        self._open()
        if partition not in self._partitions:
            raise ValueError(
                f"KafkaSource {self.topic!r} reads partitions {self._partitions}, not {partition!r}"
            )
