"""A trigger consumer's copies of the records that are no event to its dead-letter topic.

Each copy is held until Kafka acknowledged it, and a partition is never committed past a
record whose copy is not in yet: a copy that failed is sent again, so a bad record is never
lost, only (if a worker dies between the copy and the commit) copied twice. A record too big
to copy whole goes without its value, its headers saying so.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from dataclasses import dataclass
from typing import Any

with contextlib.suppress(ImportError):  # the extra may be missing: no journal is made then
    from confluent_kafka import KafkaException, Message

log = logging.getLogger("lockgate.triggers")

REASON_HEADER = "lockgate.dlq.reason"
DETAIL_HEADER = "lockgate.dlq.detail"
SOURCE_HEADER = "lockgate.dlq.source"
#: Set (to "1") on a copy sent without its value, the record being too big to copy whole.
TRUNCATED_HEADER = "lockgate.dlq.truncated"
#: Tries of a produce that finds the producer's local queue full, 10 ms apart.
FULL_TRIES = 500


def place_of(message: Message) -> tuple[int, int]:
    """The partition and offset of a consumed record (a record always has both; an error
    message has neither)."""
    partition, offset = message.partition(), message.offset()
    assert partition is not None
    assert offset is not None
    return partition, offset


@dataclass
class Copy:
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes]]
    failed: bool = False


class DeadLetters:
    """The copies one consumer sends to ``topic`` through ``producer`` (the process's shared
    producer, whose own thread serves the reports)."""

    def __init__(self, producer: Any, topic: str) -> None:
        self._producer = producer
        self.topic = topic
        self._lock = threading.Lock()
        self._pending: dict[int, dict[int, Copy]] = {}

    def send(self, message: Message, reason: str, detail: str, source: str) -> None:
        """Copy ``message``, a record that is no event, with why."""
        partition, offset = place_of(message)
        self.send_value(partition, offset, message.key(), message.value(), reason, detail, source)

    def send_value(
        self,
        partition: int,
        offset: int,
        key: bytes | None,
        value: bytes | None,
        reason: str,
        detail: str,
        source: str,
    ) -> None:
        """Copy the record at ``offset`` of ``partition`` (its ``key`` and ``value``)."""
        # An error's message may quote what it was given, a lone surrogate even: escaped.
        headers = [
            (REASON_HEADER, reason.encode()),
            (DETAIL_HEADER, detail.encode("utf-8", "backslashreplace")),
            (SOURCE_HEADER, source.encode("utf-8", "backslashreplace")),
        ]
        copy = Copy(partition, offset, key, value, headers)
        with self._lock:
            self._pending.setdefault(partition, {})[offset] = copy
        self._produce(copy)

    def held_at(self, partition: int) -> int | None:
        """The oldest offset of ``partition`` whose copy is not acknowledged (None: none); a
        copy that failed is sent again first."""
        with self._lock:
            pending = list(self._pending.get(partition, {}).values())
        for copy in pending:
            if copy.failed:
                copy.failed = False
                self._produce(copy)
        return min((c.offset for c in pending), default=None)

    def _produce(self, copy: Copy) -> None:
        for _ in range(FULL_TRIES):
            try:
                self._producer.produce(
                    self.topic,
                    value=copy.value,
                    key=copy.key,
                    partition=copy.partition,
                    headers=copy.headers,
                    on_delivery=self._reporter(copy),
                )
                return
            except BufferError:
                time.sleep(0.01)  # the local queue is full: the reports thread drains it
            except KafkaException as exc:
                if copy.value is None and copy.key is None:
                    # Even its headers cannot go (a partition the topic lacks, say): said,
                    # and let go of, rather than holding the partition's commit for ever.
                    log.error(
                        "dead-letter topic %s: the record at partition %d offset %d cannot "
                        "be copied there, and is skipped: %s",
                        self.topic,
                        copy.partition,
                        copy.offset,
                        exc,
                    )
                    with self._lock:
                        self._pending.get(copy.partition, {}).pop(copy.offset, None)
                    return
                log.warning(
                    "dead-letter topic %s: the record at offset %d is sent without its %s: %s",
                    self.topic,
                    copy.offset,
                    "value" if copy.value is not None else "key",
                    exc,
                )
                if copy.value is not None:
                    copy.value = None
                else:
                    copy.key = None
                if (TRUNCATED_HEADER, b"1") not in copy.headers:
                    copy.headers.append((TRUNCATED_HEADER, b"1"))
        copy.failed = True  # tried again at the next commit

    def _reporter(self, copy: Copy) -> Any:
        def report(err: Any, msg: Any) -> None:
            with self._lock:
                if err is None:
                    self._pending.get(copy.partition, {}).pop(copy.offset, None)
                    return
                copy.failed = True
            log.warning(
                "dead-letter topic %s: a copy failed, to be sent again: %s", self.topic, err
            )

        return report

    def forget(self, partition: int) -> None:
        """The partition went to another consumer: its copies no longer hold a commit here."""
        with self._lock:
            self._pending.pop(partition, None)
