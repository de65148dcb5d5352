"""What lockgate's consumer-group members (a trigger topic's, a bound topic's) share besides
their records: what they are made of (the store, the journal, the workflow, the topic, its
dead-letter topic and group), serving until stopped and leaving, an event loop of their own
for the store's calls, reading what came, dead-letter copies with the log line saying why,
commits that never pass a dead-lettered record whose copy Kafka has not acknowledged, and the
log of their partitions."""

from __future__ import annotations

import abc
import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable, Coroutine, Iterator, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypeVar

from lockgate._clock import Clock, as_clock
from lockgate._errors import StoreUnavailable
from lockgate.metrics import _hooks as metrics
from lockgate.streams._dead_letters import DeadLetters, place_of

if TYPE_CHECKING:
    from lockgate.stores._base import Store
    from lockgate.stores.kafka import KafkaEventLogStore
    from lockgate.workflow._spec import WorkflowSpec

with contextlib.suppress(ImportError):  # the extra may be missing: no journal is made then
    from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

T = TypeVar("T")

#: Seconds between two commits of the partitions' progress.
COMMIT_EVERY = 0.5


class Progress(Protocol):
    """What a member keeps of one owned partition (a trigger's windows, a binding's flow)."""

    @property
    def next_offset(self) -> int | None: ...

    def committable(self) -> int | None: ...


class GroupMember(abc.ABC):
    """One worker's member of the consumer group ``group`` of ``topic``, serving ``spec``
    through ``store``, its dead-letter copies going to ``dlq`` through the journal's producer.
    ``kind`` names the topic in log lines (``"trigger topic"``), ``log`` is the logger they go
    to; ``config`` is added to the consumer's settings.

    A member says how it joins (``open``), what it does with records (``step``), what it keeps
    per partition (``_owned``, ``_take_on``, ``_drop``) and what it settles before it lets go
    of partitions (``_settle``)."""

    #: What a dead-lettered record is not, in the log line that says so (``"is no event"``).
    dead_letter_says: ClassVar[str]

    def __init__(
        self,
        store: Store,
        journal: KafkaEventLogStore,
        spec: WorkflowSpec,
        *,
        topic: str,
        dlq: str,
        group: str,
        kind: str,
        worker_id: str,
        clock: Clock | None,
        log: logging.Logger,
        on_assigned: Callable[[list[int]], None],
        config: Mapping[str, Any] | None,
    ) -> None:
        self.store = store
        self.journal = journal
        self.spec = spec
        self.topic = topic
        self.dlq = dlq
        self.group = group
        self.kind = kind
        self.worker_id = worker_id
        self.clock = as_clock(clock)
        self._log = log
        self._on_assigned = on_assigned
        self._config = dict(config or {})
        # Dead-letter copies go through the journal's producer: the journal outlives this.
        self._dead = DeadLetters(journal.producer, dlq)
        #: The offset each owned partition was last committed at.
        self._committed: dict[int, int] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._consumer: Any = None
        #: Set by a crash or a close: a revoke then has nothing more to do.
        self._crashed = False
        self._next_commit = 0.0
        #: When what found the store unavailable is tried again.
        self._retry_at = 0.0
        #: Set once the consumer has joined its group and been given its first assignment.
        self.assigned = threading.Event()
        #: Records sent to the dead-letter topic since it started.
        self.dead_lettered = 0

    # -- serving -------------------------------------------------------------------------------

    def serve(self, stop: threading.Event) -> None:
        """Join the group and serve until ``stop`` is set; then :meth:`close`."""
        try:
            self.open()
            while not stop.is_set():
                self.step()
        finally:
            self.close()

    @abc.abstractmethod
    def open(self) -> None:
        """Make the consumer and join the group (each consumer kind subscribes its own way)."""

    @abc.abstractmethod
    def step(self) -> None:
        """One pass: read what came, act on it, commit what may be."""

    def close(self) -> None:
        """Settle what it owns (``_settle``: commit what may be), and leave the group."""
        consumer, self._consumer = self._consumer, None
        if consumer is None:  # closed already, or open() failed part way
            self._close_loop()
            return
        try:
            self._settle(consumer)
        except (KafkaException, StoreUnavailable) as exc:
            self._log.warning(
                "%s %s: stopped without a last commit: %s", self.kind, self.topic, exc
            )
        finally:
            self._crashed = True  # the revoke of the close below has nothing more to do
            try:
                consumer.close()  # leaves the group: its partitions move at once
            finally:
                self._close_loop()

    def _settle(self, consumer: Consumer, partitions: list[int] | None = None) -> None:
        """Before letting go of ``partitions`` (None: all, when it leaves): commit what may be."""
        self._commit(consumer, partitions)

    def _renew(self, **fetch: Any) -> None:
        """Start afresh with a new consumer (``fetch`` its fetch settings, under the caller's
        ``config``): the dead-letter copies of the one before forgotten."""
        self._dead = DeadLetters(self.journal.producer, self.dlq)
        self._crashed = False
        self._consumer = self._new_consumer(**{**fetch, **self._config})

    def _subscribe(self) -> None:
        """Join the group: its rebalances call ``_assign``, ``_revoke`` and ``_lose``."""
        self._consumer.subscribe(
            [self.topic], on_assign=self._assign, on_revoke=self._revoke, on_lost=self._lose
        )

    def _new_consumer(self, **extra: Any) -> Any:
        """A consumer in the member's group, committing only by hand, reading a partition with
        no commit from its start, rebalancing cooperatively, found gone within seconds;
        ``extra`` is added (fetch settings, a caller's own)."""
        return Consumer(
            {
                **self.journal.client_config,
                "group.id": self.group,
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

    # -- records -------------------------------------------------------------------------------

    def _consume(
        self, consumer: Consumer, most: int, wait: Callable[[], float | None]
    ) -> list[Message]:
        """Up to ``most`` records: those that came, else (unless ``wait()`` is None) the first
        within ``wait()`` seconds and what came with it. consume() waits until it has a whole
        batch or its time is up, and a record must not wait that long. The consumer itself
        failing (not one record) is :class:`StoreUnavailable`: the worker joins again, with
        backoff, reading from the commits."""
        try:
            messages: list[Message] = consumer.consume(most, timeout=0)
            if not messages:
                timeout = wait()
                if timeout is not None:
                    first = consumer.poll(timeout)
                    if first is not None:
                        messages = [first, *consumer.consume(most - 1, timeout=0)]
        except KafkaException as exc:
            raise StoreUnavailable(f"{self.kind} {self.topic}: the read failed: {exc}") from exc
        return messages

    def _records(self, messages: list[Message]) -> Iterator[Message]:
        """The records of ``messages``, the errors among them logged (but a partition's end)."""
        for message in messages:
            error = message.error()
            if error is not None:
                if error.code() != KafkaError._PARTITION_EOF:
                    self._log.warning("%s %s: %s", self.kind, self.topic, error)
                continue
            yield message

    def _dead_letter(self, message: Message, reason: str, detail: str) -> None:
        """Copy the record ``message`` to the dead-letter topic, saying why."""
        partition, offset = place_of(message)
        self._dead_letter_value(partition, offset, message.key(), message.value(), reason, detail)

    def _dead_letter_value(
        self,
        partition: int,
        offset: int,
        key: bytes | None,
        value: bytes | None,
        reason: str,
        detail: str,
        *,
        say: bool = True,
    ) -> None:
        """Copy the record at ``offset`` of ``partition`` (``key`` and ``value``, its own or
        what stands for them) to the dead-letter topic, saying why in the log (unless not
        ``say``: the caller said it for many)."""
        source = f"{self.topic}/{partition}/{offset}"
        if say:
            self._log.warning(
                "%s %s: the record at %s %s (%s: %s); sent to %s",
                self.kind,
                self.topic,
                source,
                self.dead_letter_says,
                reason,
                detail,
                self.dlq,
            )
        self._dead.send_value(partition, offset, key, value, reason, detail, source)
        self.dead_lettered += 1

    # -- commits -------------------------------------------------------------------------------

    @abc.abstractmethod
    def _owned(self) -> Mapping[int, Progress]:
        """The partitions owned now, each with how far it may be committed."""

    def _commit(self, consumer: Consumer, partitions: list[int] | None = None) -> None:
        """Commit each partition (of ``partitions``, else all it owns) up to what it may."""
        self._next_commit = self.clock() + COMMIT_EVERY
        owned = self._owned()
        wanted = partitions if partitions is not None else list(owned)
        self._commit_at(
            consumer, {p: w.committable() if (w := owned.get(p)) else None for p in wanted}
        )

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
            metrics.consumer_lag(self.topic, partition, self.group, max(0, high - committed))

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
        metrics.consumer_lag(self.topic, partition, self.group, None)

    # -- rebalances ----------------------------------------------------------------------------

    @abc.abstractmethod
    def _take_on(self, assigned: TopicPartition) -> None:
        """Start tracking a partition just assigned."""

    @abc.abstractmethod
    def _drop(self, partitions: list[int]) -> None:
        """Forget partitions revoked or lost."""

    def _assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        for tp in partitions:
            self._take_on(tp)
            self._committed.pop(tp.partition, None)
        self._changed("assigned to", partitions)
        self.assigned.set()

    def _revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """Partitions going to another member: settle them, and let go of them (the next
        owner reads their records again from the commit)."""
        gone = [tp.partition for tp in partitions]
        if not self._crashed:
            with contextlib.suppress(KafkaException, StoreUnavailable):
                self._settle(consumer, gone)
        self._drop(gone)
        self._changed("revoked from", partitions)

    def _lose(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """Partitions taken away without a revoke (the session lapsed): no commit."""
        self._drop([tp.partition for tp in partitions])
        self._changed("lost by", partitions)

    def _changed(self, what: str, partitions: list[TopicPartition]) -> None:
        """Log that ``partitions`` were ``what`` (``"assigned to"``) this worker, and tell
        the worker the partitions it owns now."""
        if partitions:
            self._log.info(
                "%s %s: partition(s) %s %s %s",
                self.kind,
                self.topic,
                sorted(tp.partition for tp in partitions),
                what,
                self.worker_id,
            )
        self._on_assigned(sorted(self._owned()))

    # -- visibility ----------------------------------------------------------------------------

    def positions(self) -> dict[int, int | None]:
        """Per owned partition, the offset of the next record it reads (None: not known yet,
        before its first record)."""
        return {p: w.next_offset for p, w in sorted(self._owned().items())}
