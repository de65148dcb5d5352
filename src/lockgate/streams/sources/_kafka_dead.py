"""A :class:`~lockgate.streams.sources.KafkaSource`'s dead-letter side: the copies of the
records that do not decode, sent to ``{topic}.dlq`` by a producer of the source's own.

The topic and the producer are made at the first copy (most streams never need them). A copy
goes to its record's partition number, so a dead-letter topic made here gets the topic's
partition count, and one that exists with fewer partitions is refused.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Mapping
from typing import Any

from lockgate._errors import ConfigurationError, StoreUnavailable
from lockgate.streams._dead_letters import DeadLetters

with contextlib.suppress(ImportError):  # the extra may be missing: KafkaSource() says so
    from confluent_kafka import KafkaException, Message, Producer
    from confluent_kafka.admin import AdminClient
    from confluent_kafka.cimpl import NewTopic


class SourceDeadLetters:
    """The dead-letter copies of one source's records (``client``: its Kafka settings)."""

    def __init__(self, client: Mapping[str, Any], topic: str, *, timeout: float) -> None:
        self._client = dict(client)
        self.topic = topic
        self._timeout = timeout
        self._producer: Producer | None = None
        self._dead: DeadLetters | None = None
        #: Records copied since the source was made.
        self.sent = 0

    def send(self, message: Message, reason: str, detail: str, partitions: int) -> None:
        """Copy ``message`` with why it did not decode (``partitions``: how many the topic it
        came from has)."""
        if self._dead is None:
            self._prepare(partitions)
        assert self._dead is not None
        source = f"{message.topic()}/{message.partition()}/{message.offset()}"
        self._dead.send(message, reason, detail, source)
        self.sent += 1

    def settle(self, partition: int, offset: int) -> None:
        """Wait until Kafka acknowledged every copy of ``partition`` below ``offset``;
        :class:`StoreUnavailable` when it does not within the timeout."""
        if self._dead is None or self._producer is None:
            return
        deadline = time.monotonic() + self._timeout
        while True:
            self._producer.flush(max(0.0, deadline - time.monotonic()))
            held = self._dead.held_at(partition)  # sends a failed copy again
            if held is None or held >= offset:
                return
            if time.monotonic() > deadline:
                raise StoreUnavailable(
                    f"the dead-letter topic {self.topic!r} did not acknowledge the copy of "
                    f"partition {partition} offset {held}"
                )
            time.sleep(0.05)

    def close(self) -> int:
        """Send what copies are left; how many were not."""
        producer, self._producer = self._producer, None
        return 0 if producer is None else int(producer.flush(self._timeout))

    def _prepare(self, partitions: int) -> None:
        admin = AdminClient(dict(self._client))
        try:
            found = self._partition_count(admin)
            if found is None:
                future = admin.create_topics([NewTopic(self.topic, partitions, -1)])[self.topic]
                with contextlib.suppress(KafkaException):  # made meanwhile by another source
                    future.result(timeout=self._timeout)
                deadline = time.monotonic() + self._timeout
                while found is None and time.monotonic() < deadline:
                    found = self._partition_count(admin)  # listed a moment after it is made
                    if found is None:
                        time.sleep(0.05)
        except KafkaException as exc:
            raise StoreUnavailable(
                f"Kafka did not list or make the dead-letter topic {self.topic!r}: {exc}"
            ) from exc
        if found is None:
            raise StoreUnavailable(f"the dead-letter topic {self.topic!r} could not be made")
        if found < partitions:
            raise ConfigurationError(
                f"the dead-letter topic {self.topic!r} has {found} partitions; its copies need "
                f"{partitions} (one per partition of the topic they come from)"
            )
        self._producer = Producer({**self._client, "acks": "all", "linger.ms": 5})
        self._dead = DeadLetters(self._producer, self.topic)

    def _partition_count(self, admin: AdminClient) -> int | None:
        listed = admin.list_topics(timeout=self._timeout).topics.get(self.topic)
        if listed is None or listed.error is not None:
            return None
        return len(listed.partitions)
