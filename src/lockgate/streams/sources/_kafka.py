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
import threading
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

from lockgate._errors import ConfigurationError, StoreUnavailable
from lockgate.streams._topics import TOPIC_NAME, committed_offsets, dlq_topic
from lockgate.streams._values import Undecodable, decoder_for, record_of
from lockgate.streams.sources._kafka_dead import SourceDeadLetters
from lockgate.streams.sources._memory import check_offset, check_timeout
from lockgate.workflow._record import KafkaRecord
from lockgate.workflow._source import Batch

with contextlib.suppress(ImportError):  # the extra may be missing: KafkaSource() says so
    from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

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
        #: How many partitions the topic has (its dead-letter topic needs as many).
        self._width = 0
        self._assigned = False
        #: Where a partition starts once assigned, for seeks made before that.
        self._starts: dict[int, int] = {}
        #: Records read ahead, per partition in turn order (a partition served goes last).
        self._buffered: dict[int, list[Message]] = {}
        self._dead = SourceDeadLetters(self._client, self.dlq, timeout=REQUEST_TIMEOUT)
        self._closed = False
        # One call at a time: a close waits for a poll still running on a worker thread (its
        # task cancelled) instead of closing the consumer under it.
        self._lock = threading.RLock()

    # -- the Source protocol -------------------------------------------------------------------

    def poll(self, timeout_ms: int = 5000) -> Batch[KafkaRecord[Any]] | None:
        """The next batch: up to ``batch_size`` records of one partition, read ahead ones
        first; None when no record came within ``timeout_ms``."""
        timeout = check_timeout(timeout_ms) / 1000
        with self._lock:
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
            return self._take() if self._buffered else None

    def seek(self, source_id: str, partition: int, offset: int) -> None:
        """Read ``partition`` from ``offset`` on; what was read ahead of it is dropped."""
        offset = check_offset("seek offset", offset)
        with self._lock:
            consumer = self._check(source_id, partition)
            self._buffered.pop(partition, None)
            if not self._assigned:
                self._starts[partition] = offset
                return
            place = TopicPartition(self.topic, partition, offset)
            try:
                consumer.seek(place)
            except KafkaException:
                # A partition assigned but not fetching yet cannot seek (librdkafka's
                # _STATE): assigning it again at the offset does the same.
                consumer.incremental_unassign([TopicPartition(self.topic, partition)])
                consumer.incremental_assign([place])

    def commit(self, source_id: str, partition: int, offset: int) -> None:
        """Commit ``offset`` for ``partition`` in Kafka, synchronously."""
        offset = check_offset("commit offset", offset)
        try:
            with self._lock:
                consumer = self._check(source_id, partition)
                self._dead.settle(partition, offset)
                consumer.commit(
                    offsets=[TopicPartition(self.topic, partition, offset)], asynchronous=False
                )
        except KafkaException as exc:
            raise StoreUnavailable(
                f"Kafka did not take the commit of {self.topic!r} partition {partition} at "
                f"offset {offset} for group {self.group_id!r}: {exc}"
            ) from exc

    def get_committed(self, source_id: str, partition: int) -> int | None:
        with self._lock:
            consumer = self._check(source_id, partition)
            (found,) = committed_offsets(
                consumer, [TopicPartition(self.topic, partition)], REQUEST_TIMEOUT
            )
        return found.offset if found.offset >= 0 else None

    def partitions(self) -> list[tuple[str, int]]:
        with self._lock:
            self._open()
            return [(self.topic, p) for p in self._partitions]

    @property
    def dead_lettered(self) -> int:
        """Records copied to the dead-letter topic since the source was made."""
        return self._dead.sent

    # -- life ----------------------------------------------------------------------------------

    def close(self) -> None:
        """Send what dead-letter copies are left and close the connections (again: no-op)."""
        with self._lock:
            self._closed = True
            consumer, self._consumer = self._consumer, None
            try:
                if self._dead.close() > 0:
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
        self._width = present[-1] + 1
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
        failure: Exception | None = None
        for message in messages:
            error = message.error()
            if error is not None:
                failure = failure or self._failure(error)
                continue
            partition = message.partition()
            assert partition is not None
            self._buffered.setdefault(partition, []).append(message)
        if failure is not None:  # raised once the records that came with it are kept
            raise failure

    def _failure(self, error: KafkaError) -> Exception | None:
        """What an error the consumer reported in place of a record raises: the topic gone,
        or a client that cannot go on; None for the others, logged (librdkafka retries)."""
        if error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
            return ConfigurationError(
                f"topic {self.topic!r} is gone from {self.bootstrap_servers}: {error.str()}"
            )
        if error.fatal():
            return StoreUnavailable(f"the consumer of {self.topic!r} failed: {error.str()}")
        log.warning("source %s: %s", self.topic, error.str())
        return None

    def _take(self) -> Batch[KafkaRecord[Any]]:
        """The next partition's run of buffered records as a batch; the rest stays buffered
        (that partition's behind the others)."""
        partition = next(iter(self._buffered))
        messages = self._buffered.pop(partition)
        run, rest = messages[: self.batch_size], messages[self.batch_size :]
        if rest:
            self._buffered[partition] = rest
        try:
            records = self._decoded(partition, run)
        except Exception:
            # Handed out later, once the dead-letter copies are in: the partition's records
            # go back to the front, to be read (and copied) again.
            self._buffered.pop(partition, None)
            self._buffered = {partition: messages, **self._buffered}
            raise
        end = _offset(run[-1]) + 1
        return Batch(self.topic, partition, _offset(run[0]), records, end_offset=end)

    def _decoded(self, partition: int, run: list[Message]) -> list[KafkaRecord[Any]]:
        """The records of ``run`` that decode; the others copied to the dead-letter topic,
        and acknowledged there."""
        records = []
        for message in run:
            try:
                records.append(record_of(message, self._decode))
            except Undecodable as refused:
                log.warning(
                    "source %s: the record at partition %d offset %d does not decode (%s: %s); "
                    "copied to %s",
                    self.topic,
                    partition,
                    _offset(message),
                    refused.reason,
                    refused.detail,
                    self.dlq,
                )
                self._dead.send(message, refused.reason, refused.detail, self._width)
        if len(records) < len(run):
            self._dead.settle(partition, _offset(run[-1]) + 1)
        return records

    def _check(self, source_id: str, partition: int) -> Consumer:
        """The consumer, once ``source_id`` and ``partition`` are known to be the source's."""
        if source_id != self.topic:
            raise ValueError(f"this KafkaSource reads {self.topic!r}, not {source_id!r}")
        consumer = self._open()
        if partition not in self._partitions:
            raise ValueError(
                f"KafkaSource {self.topic!r} reads partitions {self._partitions}, not {partition!r}"
            )
        return consumer
