"""What lockgate's consumer-group members (a trigger topic's, a bound topic's) share besides
their records: an event loop of their own for the store's calls, commits that never pass a
dead-lettered record whose copy Kafka has not acknowledged, and the log of their partitions."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine, Mapping
from typing import Any, TypeVar

from lockgate.metrics import _hooks as metrics
from lockgate.streams._dead_letters import DeadLetters

with contextlib.suppress(ImportError):  # the extra may be missing: no journal is made then
    from confluent_kafka import Consumer, KafkaException, TopicPartition

T = TypeVar("T")


class GroupMember:
    """One worker's member of the consumer group of ``topic``. ``kind`` names the topic in
    log lines (``"trigger topic"``), ``log`` is the logger they go to."""

    def __init__(
        self,
        topic: str,
        *,
        kind: str,
        worker_id: str,
        dead: DeadLetters,
        log: logging.Logger,
        on_assigned: Callable[[list[int]], None],
    ) -> None:
        self.topic = topic
        self.kind = kind
        self.worker_id = worker_id
        self._dead = dead
        self._log = log
        self._on_assigned = on_assigned
        #: The offset each owned partition was last committed at.
        self._committed: dict[int, int] = {}
        #: The consumer group, once a consumer is made (it labels the lag metric).
        self._group = ""
        self._loop: asyncio.AbstractEventLoop | None = None

    def _new_consumer(self, client_config: Mapping[str, Any], group: str, **extra: Any) -> Any:
        """A consumer in ``group``, committing only by hand, reading a partition with no commit
        from its start, rebalancing cooperatively, found gone within seconds; ``extra`` is
        added (fetch settings, a caller's own)."""
        self._group = group
        return Consumer(
            {
                **client_config,
                "group.id": group,
                "client.id": self.worker_id,
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "partition.assignment.strategy": "cooperative-sticky",
                "session.timeout.ms": 6000,
                "heartbeat.interval.ms": 1000,
                **extra,
            }
        )

    def _run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Run ``coroutine`` on the member's own event loop."""
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
        return self._loop.run_until_complete(coroutine)

    def _close_loop(self) -> None:
        loop, self._loop = self._loop, None
        if loop is not None:
            loop.run_until_complete(loop.shutdown_asyncgens())  # the store's loop clients
            loop.close()

    def _commit_at(self, consumer: Consumer, wanted: Mapping[int, int | None]) -> None:
        """Commit each partition of ``wanted`` at its offset (None: nothing to commit), held
        back to its oldest record whose dead-letter copy is not in yet, if it moved on; then
        tell the metrics each one's lag."""
        self._commit_offsets(consumer, wanted)
        if metrics.enabled():
            self._report_lag(consumer, list(wanted))

    def _report_lag(self, consumer: Consumer, partitions: list[int]) -> None:
        """The lag of each of ``partitions``: its end as the consumer last fetched it (no
        broker round trip) less the group's commit (its start when never committed)."""
        for partition in partitions:
            try:
                low, high = consumer.get_watermark_offsets(
                    TopicPartition(self.topic, partition), cached=True
                )
            except KafkaException:
                continue
            if high < 0:
                continue  # nothing fetched from it yet
            committed = self._committed.get(partition, low)
            metrics.consumer_lag(self.topic, partition, self._group, max(0, high - committed))

    def _commit_offsets(self, consumer: Consumer, wanted: Mapping[int, int | None]) -> None:
        offsets = []
        for partition, at in wanted.items():
            held = self._dead.held_at(partition)
            if at is not None and held is not None:
                at = min(at, held)
            if at is not None and at > self._committed.get(partition, -1):
                offsets.append(TopicPartition(self.topic, partition, at))
        if not offsets:
            return
        try:
            consumer.commit(offsets=offsets, asynchronous=False)
        except KafkaException as exc:
            self._log.debug("%s %s: commit failed: %s", self.kind, self.topic, exc)
            return
        for tp in offsets:
            self._committed[tp.partition] = tp.offset

    def _forget(self, partition: int) -> None:
        """``partition`` is no longer this member's."""
        self._committed.pop(partition, None)
        self._dead.forget(partition)
        metrics.consumer_lag(self.topic, partition, self._group, None)

    def _changed(self, what: str, partitions: list[TopicPartition], owned: list[int]) -> None:
        """Log that ``partitions`` were ``what`` (``"assigned to"``) this worker, and tell
        the worker the partitions it ``owned`` now."""
        if partitions:
            self._log.info(
                "%s %s: partition(s) %s %s %s",
                self.kind,
                self.topic,
                sorted(tp.partition for tp in partitions),
                what,
                self.worker_id,
            )
        self._on_assigned(owned)
