"""Reading a run's records from its partition of the journal topic: :class:`PartitionReads`,
the part of :class:`~lockgate.stores.kafka.KafkaEventLogStore` that reads a partition on from
where a journal has read up to (``_read_on``), finds the partition of a run nothing locates
(``_search``), and decides, record by record, what of it to believe (``_take``).

A record of the run whose ``lg-*`` headers are not UTF-8, whose MAC does not verify (a journal
key set) or whose epoch the fold refuses is dropped and counted (``Doubts``), and the read
moves past it. A record whose value does not decode stops the read at it
(:class:`JournalRecordUndecodable`), before the offset moves: a reader of the run is told that
its journal cannot be read whole, rather than given it with a hole.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from lockgate._errors import JournalRecordUndecodable, StoreUnavailable
from lockgate.stores._shards import shard_for
from lockgate.stores.kafka._codec import (
    RUN_ID_HEADER,
    SCHEMA_HEADER,
    WORKFLOW_HEADER,
    NotARunEvent,
    decode,
    header_map,
    mac_problem,
    undecodable_header,
)
from lockgate.stores.kafka._journal import Journal, Run
from lockgate.stores.kafka._topic import watermarks
from lockgate.stores.kafka._trust import Doubts

with contextlib.suppress(ImportError):  # without the extra, KafkaEventLogStore says so
    from confluent_kafka import KafkaError, KafkaException, Message, TopicPartition

#: Seconds after a failed read of the topic during which further reads fail at once.
READ_FAILURE_HOLD = 1.0


class PartitionReads:
    """``_read_on``, ``_search`` and ``_take`` (see the store's module docstring, Reads)."""

    if TYPE_CHECKING:  # the store's, which this is a part of
        topic: str
        shard_count: int
        read_timeout: float
        topic_reads: int
        journal_secret: bytes | None
        locate: Callable[[str, str], int] | None
        _consumer: Any
        _read_lock: threading.Lock
        _read_failed_at: float | None
        _doubts: Doubts

        def _ensure_topic(self) -> None: ...

    def _search(self, run: Run) -> int:
        """The partition holding ``run``'s records, with no ``locate``: its run id's, else the
        first that has any (0 when none does)."""
        home = shard_for(run[1], self.shard_count)
        for partition in [home, *(p for p in range(self.shard_count) if p != home)]:
            probe = Journal(partition, self._low(partition))
            self._read_on(probe, run)
            if probe.events:
                return partition
        return home

    def _low(self, partition: int) -> int:
        low, _high = self._watermarks(partition)
        return low

    def _watermarks(self, partition: int) -> tuple[int, int]:
        self._ensure_topic()
        self.topic_reads += 1
        return watermarks(self._consumer, self.topic, partition, self.read_timeout)

    def _read_on(self, journal: Journal, run: Run, *, until: int | None = None) -> None:
        """Read the journal's partition from ``journal.next_offset`` to its end now, keeping
        the run's records; with ``until``, no further than it takes to hold every event up to
        that ``run_seq``."""
        failed = self._read_failed_at
        if failed is not None and time.monotonic() - failed < READ_FAILURE_HOLD:
            # Reads queued behind one that just failed fail at once, rather than each waiting
            # out the timeout in turn (a batch claim's runs, while leases run down).
            raise StoreUnavailable(f"Kafka failed a read of {self.topic!r} just now")
        try:
            self._read_partition_on(journal, run, until)
        except StoreUnavailable:
            self._read_failed_at = time.monotonic()
            raise
        self._read_failed_at = None

    def _read_partition_on(self, journal: Journal, run: Run, until: int | None) -> None:
        _low, high = self._watermarks(journal.partition)
        if journal.next_offset >= high:
            return
        self._consumer.assign([TopicPartition(self.topic, journal.partition, journal.next_offset)])
        deadline = time.monotonic() + self.read_timeout
        consumed = False  # a record of this assignment came: the position is this read's now
        try:
            while journal.next_offset < high:
                if until is not None and journal.holds_through(until):
                    return
                if time.monotonic() > deadline:
                    raise StoreUnavailable(
                        f"Kafka did not hand back {self.topic!r}[{journal.partition}] up to "
                        f"offset {high} within {self.read_timeout}s"
                    )
                # consume() waits for all num_messages (or the timeout): ask for just the
                # records left, so the last batch returns when it lands.
                wanted = min(500, high - journal.next_offset)
                batch = self._consumer.consume(num_messages=wanted, timeout=0.05)
                for msg in batch:
                    consumed = True
                    self._take(msg, journal, run)
                if not batch and consumed:
                    # Offsets with no record (control records) show as the position. Before a
                    # record of this assignment came, the position may still be where the
                    # shared consumer's last read of the partition ended: trusting it then
                    # would skip this read's records.
                    position = self._consumer.position(
                        [TopicPartition(self.topic, journal.partition)]
                    )
                    journal.next_offset = max(journal.next_offset, min(position[0].offset, high))
        except KafkaException as exc:
            raise StoreUnavailable(f"Kafka failed a journal read: {exc}") from exc
        finally:
            self._consumer.unassign()

    def _take(self, msg: Message, journal: Journal, run: Run) -> None:
        err = msg.error()
        if err is not None:
            if err.code() == KafkaError._PARTITION_EOF:
                return
            raise KafkaException(err)
        headers = header_map(msg.headers())
        if (headers.get(WORKFLOW_HEADER), headers.get(RUN_ID_HEADER)) == run:
            bad = undecodable_header(msg.headers())
            if bad is not None:
                # Not lockgate's (it writes its headers as text): dropped, and the offset
                # moves past it, so later reads of the partition go on.
                self._doubts.dropped(run, "header", detail=f"its {bad} header is not UTF-8")
                journal.next_offset = max(journal.next_offset, (msg.offset() or 0) + 1)
                return
            problem = (
                mac_problem(self.journal_secret, msg) if self.journal_secret is not None else None
            )
            if problem is not None:
                self._doubts.dropped(run, "mac", detail=problem)
                journal.next_offset = max(journal.next_offset, (msg.offset() or 0) + 1)
                return
            value = msg.value()
            try:
                event = decode(value, headers.get(SCHEMA_HEADER)) if value is not None else None
            except NotARunEvent as exc:
                # Before the offset moves past it: every later read stops at it again.
                where = (msg.topic() or "", msg.partition() or 0, msg.offset() or 0)
                raise JournalRecordUndecodable(*where, str(exc)) from exc
            if journal.first is None:
                journal.first = msg.offset()
            if event is not None and not journal.keep(event):
                self._doubts.dropped(run, "epoch")
        journal.next_offset = max(journal.next_offset, (msg.offset() or 0) + 1)

    def read_whole_topic(
        self, progress: Callable[[int, int], None] | None = None
    ) -> Iterator[tuple[int, Message]]:
        """Every record of the journal topic as ``(partition, message)``, each partition from
        its low watermark to the high watermark it had when the read began, in offset order,
        holding the store's reader meanwhile (``lockgate store rebuild`` reads it so);
        ``progress`` is told records read and records in all. :class:`StoreUnavailable` when
        Kafka does not hand a partition back within ``read_timeout``."""
        consumer = self._consumer
        with self._read_lock:
            bounds = [self._watermarks(p) for p in range(self.shard_count)]
            total, read = sum(high - low for low, high in bounds), 0
            for partition, (low, high) in enumerate(bounds):
                if low >= high:
                    continue
                consumer.assign([TopicPartition(self.topic, partition, low)])
                try:
                    at, deadline = low, time.monotonic() + self.read_timeout
                    consumed = False  # as in _read_partition_on: a stale position skips
                    while at < high:
                        batch = consumer.consume(num_messages=min(500, high - at), timeout=0.1)
                        for msg in batch:
                            err = msg.error()
                            if err is not None:
                                if err.code() == KafkaError._PARTITION_EOF:
                                    continue
                                raise KafkaException(err)
                            offset = msg.offset() or 0
                            if offset >= high:
                                continue
                            read += offset + 1 - at
                            at = offset + 1
                            yield partition, msg
                        if batch:
                            consumed = True
                            deadline = time.monotonic() + self.read_timeout
                            if progress is not None:
                                progress(read, total)
                        else:
                            if consumed:  # offsets skipped (control records) show as the position
                                position = consumer.position(
                                    [TopicPartition(self.topic, partition)]
                                )
                                at = max(at, min(position[0].offset, high))
                            if time.monotonic() > deadline:
                                raise StoreUnavailable(
                                    f"Kafka did not hand back {self.topic!r}[{partition}] up "
                                    f"to offset {high} within {self.read_timeout}s"
                                )
                except KafkaException as exc:
                    raise StoreUnavailable(f"Kafka failed the rebuild's read: {exc}") from exc
                finally:
                    consumer.unassign()
            if progress is not None:
                progress(total, total)
