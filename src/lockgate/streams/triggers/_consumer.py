"""A worker's member of a triggered workflow's consumer group: it reads the partitions it is
assigned, keeps their keys' open windows (``_windows``), fires their runs through the store,
sends records that are no event to the dead-letter topic, and commits.

Exactly once, across crashes, rebalances and broker restarts, rests on two rules:

- a partition is committed only up to the oldest record still in an open window or in a
  batch not fired yet (and past a dead-lettered record only once Kafka acknowledged its
  copy), so whoever owns the partition next reads every record not yet in a run;
- a fire submits its run and moves its key's fired-through mark in one store step
  (``Store.fire_batch``), and a consumer learns a key's mark before it buffers the key's
  records, so the records it reads again that are in a run already are skipped. Two owners
  racing on one key (a member that froze past its session) are settled by the same step: the
  later fire is told the mark and fires only what is past it.

A fire's run id names the key, the partition and the offsets it covers, so a fire repeated
after a crash is the same idempotent submit. Windows close on the consumer's clock: a quiet key
fires with nothing more arriving on its partition.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from lockgate._clock import Clock
from lockgate._errors import StoreUnavailable, one_line
from lockgate.metrics import _hooks as metrics
from lockgate.stores._base import Store
from lockgate.stores._calls import call_store
from lockgate.stores._triggers import BatchToFire, FiredBatch, TriggerPolicy
from lockgate.stores.kafka import KafkaEventLogStore
from lockgate.streams._member import GroupMember
from lockgate.streams._topics import committed_offsets, dlq_topic, group_id, trigger_topic
from lockgate.streams.triggers._produce import prepare_trigger_topics
from lockgate.streams.triggers._records import (
    NO_KEY,
    UNFIREABLE,
    UNREADABLE,
    Event,
    Refused,
    read_record,
)
from lockgate.streams.triggers._windows import Batch, PartitionWindows
from lockgate.workflow._spec import WorkflowSpec, trigger_policy

with contextlib.suppress(ImportError):  # the extra may be missing: no journal is made then
    from confluent_kafka import Consumer, KafkaException, Message, TopicPartition

log = logging.getLogger("lockgate.triggers")

#: Records taken from the consumer at once.
CONSUME_BATCH = 2000
#: The consumer's fetch settings: records are fetched ahead while the last batch is handled,
#: and a fetch waits at most 10 ms for more (a window's fire waits on no fetch).
CONSUMER_FETCH = {"queued.min.messages": 200_000, "fetch.wait.max.ms": 10}
#: The longest one wait for records lasts, in seconds, with no window due sooner.
POLL_MOST = 0.1
#: Seconds a fire that found the store unavailable waits before it is tried again.
RETRY_AFTER = 0.5
#: A batch's events, in bytes, at most (or the workflow's cap, if smaller): its run's params
#: hold them, and its ``run:init`` is one journal record, which Kafka takes up to 1 MB of by
#: default.
BATCH_MOST_BYTES = 900_000
#: Batches fired in one store call at most, and their records' bytes at most (one Valkey
#: script holds the server while it runs, and carries each batch's events twice: the run's
#: params and its ``run:init``). A batch bigger than that is a call of its own.
FIRES_TOGETHER = 500
FIRE_BYTES_TOGETHER = 4_000_000
#: Seconds between two prunes of the marks no record can need any more (see ``_prune``).
PRUNE_EVERY = 600.0
#: Trigger policies kept per key; past it the memory starts over.
POLICIES_KEPT = 100_000


def fire_groups(batches: list[Batch]) -> list[list[Batch]]:
    """``batches`` cut into the groups fired in one store call each, in order: at most
    FIRES_TOGETHER batches and FIRE_BYTES_TOGETHER bytes of records a group (a bigger batch
    alone)."""
    groups: list[list[Batch]] = []
    group: list[Batch] = []
    size = 0
    for batch in batches:
        if group and (len(group) == FIRES_TOGETHER or size + batch.size > FIRE_BYTES_TOGETHER):
            groups.append(group)
            group, size = [], 0
        group.append(batch)
        size += batch.size
    if group:
        groups.append(group)
    return groups


def offset_of(message: Message) -> int:
    """A consumed record's offset (a record always has one; an error message has none)."""
    offset = message.offset()
    assert offset is not None
    return offset


def source_of(topic: str, partition: int) -> str:
    """The source a fire's mark and run id name: the topic partition its records came from."""
    return f"{topic}/{partition}"


class TriggerConsumer(GroupMember):
    """Serves ``spec``'s trigger topic for one worker (see the module docstring): call
    :meth:`serve` on a thread of its own; it returns once ``stop`` is set, after committing
    what it may and leaving the group.

    ``on_fired()`` is called after each fire (a claim loop may start the run at once) and
    ``on_assigned(partitions)`` whenever the partitions it owns change, both on its thread."""

    dead_letter_says = "is no event"

    def __init__(
        self,
        store: Store,
        journal: KafkaEventLogStore,
        spec: WorkflowSpec,
        *,
        worker_id: str,
        clock: Clock | None = None,
        on_fired: Callable[[], None] = lambda: None,
        on_assigned: Callable[[list[int]], None] = lambda partitions: None,
        config: Mapping[str, Any] | None = None,
    ) -> None:
        topic = trigger_topic(journal.topic_prefix, spec)
        super().__init__(
            store,
            journal,
            spec,
            topic=topic,
            dlq=dlq_topic(topic),
            group=group_id(topic),
            kind="trigger topic",
            worker_id=worker_id,
            clock=clock,
            log=log,
            on_assigned=on_assigned,
            config=config,
        )
        self._on_fired = on_fired
        self._windows: dict[int, PartitionWindows] = {}
        self._policies: dict[str, TriggerPolicy] = {}
        cap = spec.max_event_payload_bytes
        self._most_bytes = min(cap, BATCH_MOST_BYTES) if cap is not None else BATCH_MOST_BYTES
        #: Batches taken from their windows, in the order they are fired.
        self._to_fire: collections.deque[Batch] = collections.deque()
        self._next_prune = self.clock() + PRUNE_EVERY
        #: Whether reading is paused while fires wait for the store (see ``_hold``).
        self._holding = False
        #: Runs fired since it started.
        self.fires = 0

    # -- serving -------------------------------------------------------------------------------

    def open(self, partitions: list[int] | None = None) -> None:
        """Make the topics (or check them) and join the group; given ``partitions``, read
        those from their commits instead, outside the group's assignment (see
        :meth:`reassign`)."""
        prepare_trigger_topics(self.journal, self.topic)
        self._holding = False
        self._renew(**CONSUMER_FETCH)
        if partitions is None:
            self._subscribe()
        else:
            self.reassign(partitions)

    def step(self, timeout: float | None = None) -> None:
        """Take what records came (waiting up to ``timeout``, else until the soonest window is
        due, at most POLL_MOST), fire what is due, and commit when a commit is due."""
        consumer = self._consumer
        assert consumer is not None, "open() first"
        # A record's window starts when it is read: none waits for a whole batch.
        messages = self._consume(
            consumer, CONSUME_BATCH, lambda: self._wait() if timeout is None else timeout
        )
        if messages:
            self._take(consumer, messages)
        self._fire_due()
        if self.clock() >= self._next_commit:
            self._commit(consumer)
        if self.clock() >= self._next_prune:
            self._prune(consumer)

    def _settle(self, consumer: Consumer, partitions: list[int] | None = None) -> None:
        """Fire what is due, and commit (``partitions``, else all it owns) what may be."""
        self._fire_due()
        self._commit(consumer, partitions)

    def crash(self) -> None:
        """Stop as a killed process does: no fire, no commit, windows gone."""
        self._crashed = True
        consumer, self._consumer = self._consumer, None
        self._windows.clear()
        self._to_fire.clear()
        if consumer is not None:
            consumer.close()
        self._close_loop()

    def reassign(self, partitions: list[int]) -> None:
        """Outside the group: let go of the partitions not in ``partitions`` as a revoke does
        (fire what is due, commit, drop their windows), and read the new ones from their
        commits."""
        consumer = self._consumer
        assert consumer is not None, "open() first"
        gone = [TopicPartition(self.topic, p) for p in self._windows if p not in partitions]
        if gone:
            self._revoke(consumer, gone)
            consumer.incremental_unassign(gone)
        new = [TopicPartition(self.topic, p) for p in partitions if p not in self._windows]
        if new:
            committed = committed_offsets(consumer, new, self.journal.read_timeout)
            starts = [
                TopicPartition(self.topic, tp.partition, tp.offset if tp.offset >= 0 else 0)
                for tp in committed
            ]
            consumer.incremental_assign(starts)
            self._assign(consumer, starts)

    def _wait(self) -> float:
        """Seconds to wait for records: until the soonest window is due, at most POLL_MOST."""
        now = self.clock()
        soonest = min(
            (due for w in self._windows.values() if (due := w.next_due()) is not None),
            default=None,
        )
        if self._to_fire:
            soonest = min(soonest, self._retry_at) if soonest is not None else self._retry_at
        if soonest is None:
            return POLL_MOST
        return max(0.0, min(POLL_MOST, soonest - now))

    # -- records -------------------------------------------------------------------------------

    def _take(self, consumer: Consumer, messages: list[Message]) -> None:
        by_partition: dict[int, list[Message]] = {}
        for message in self._records(messages):
            partition = message.partition()
            assert partition is not None
            by_partition.setdefault(partition, []).append(message)
        for partition, records in by_partition.items():
            windows = self._windows.get(partition)
            if windows is None:
                continue  # revoked while these were in flight
            try:
                self._take_partition(windows, records)
            except StoreUnavailable as exc:
                # The marks could not be read: read these records again, after a pause (this
                # thread is the consumer's own; Kafka's heartbeats go on without it).
                log.debug("trigger topic %s: %s", self.topic, exc)
                try:
                    consumer.seek(TopicPartition(self.topic, partition, offset_of(records[0])))
                except KafkaException as failed:
                    raise StoreUnavailable(
                        f"trigger topic {self.topic}: no read again after an outage: {failed}"
                    ) from failed
                time.sleep(RETRY_AFTER)

    def _take_partition(self, windows: PartitionWindows, records: list[Message]) -> None:
        read = [(m, self._read(m)) for m in records]
        keys = [r.key for _, r in read if isinstance(r, Event)]
        unknown = windows.unknown(keys)
        if unknown:
            refused = self._learn_marks(windows, unknown)
            if refused:
                read = [
                    (m, refused[r.key] if isinstance(r, Event) and r.key in refused else r)
                    for m, r in read
                ]
        now = self.clock()
        for message, record in read:
            offset = offset_of(message)
            if isinstance(record, Refused):
                windows.skipped(offset)
                self._dead_letter(message, record.reason, record.detail)
                continue
            size = len(message.value() or b"")
            self._to_fire.extend(windows.add(offset, record.key, record.event, now, size))

    def _learn_marks(self, windows: PartitionWindows, keys: list[str]) -> dict[str, Refused]:
        """Learn the fired-through marks of ``keys`` from the store (StoreUnavailable when it
        is away). A call that fails otherwise is made again key by key, and each key whose
        own call fails has its records refused (returned), so no other key waits on it."""
        source = source_of(self.topic, windows.partition)
        policies = {key: self._policy(key) for key in keys}

        def marks_of(asked: dict[str, TriggerPolicy]) -> dict[str, int]:
            return self._run(
                call_store(self.store, self.store.fired_through, self.spec.name, source, asked)
            )

        try:
            windows.know(keys, marks_of(policies))
            return {}
        except StoreUnavailable:
            raise
        except Exception:  # told below, key by key
            pass
        refused: dict[str, Refused] = {}
        for key in keys:
            try:
                windows.know([key], marks_of({key: policies[key]}))
            except StoreUnavailable:
                raise
            except Exception as exc:
                detail = f"the store could not read key {key!r}'s fired-through mark: "
                refused[key] = Refused(UNFIREABLE, f"{detail}{type(exc).__name__}: {one_line(exc)}")
        return refused

    def _read(self, message: Message) -> Event | Refused:
        """The record as an event, refused as well when the workflow's gates cannot be
        resolved for its key (a gate key function that fails on it), or when reading it fails
        in any other way."""
        try:
            record = read_record(self.spec, message.value(), message.key())
        except Exception as exc:  # what else a record's bytes lead reading it to
            return Refused(UNREADABLE, f"{type(exc).__name__}: {one_line(exc)}")
        if isinstance(record, Event):
            try:
                self._policy(record.key)
            except Exception as exc:  # the declaration's function, failing on this key
                return Refused(NO_KEY, f"the workflow's gates fail on key {record.key!r}: {exc}")
        return record

    def _policy(self, key: str) -> TriggerPolicy:
        policy = self._policies.get(key)
        if policy is None:
            if len(self._policies) >= POLICIES_KEPT:
                self._policies.clear()
            policy = self._policies[key] = trigger_policy(self.spec, key)
        return policy

    # -- fires ---------------------------------------------------------------------------------

    def _fire_due(self) -> None:
        """Fire every batch that is ready: the keys side by side on the consumer's event loop
        (so a store that pipelines, as Valkey with a Kafka journal does, sends their fires
        together and their journal copies share produce batches), one key's batches one after
        another, in order. A key whose fire found the store unavailable keeps its batches for
        the next try."""
        now = self.clock()
        for windows in self._windows.values():
            batches = windows.due(now)
            for batch in batches:  # each window that fired on its time: how late
                if batch.due_at is not None:
                    metrics.fired_late(self.spec.name, now - batch.due_at)
            self._to_fire.extend(batches)
        metrics.buffers_open(
            self.spec.name, sum(len(w.windows) for w in self._windows.values()), source="topic"
        )
        if not self._to_fire or now < self._retry_at:
            return
        by_key: dict[tuple[int, str], list[Batch]] = {}
        for batch in self._to_fire:
            if batch.partition in self._windows:  # else revoked: its next owner fires them
                by_key.setdefault((batch.partition, batch.key), []).append(batch)
        self._to_fire.clear()
        left = self._run(self._fire_keys(list(by_key.values())))
        if left:
            self._to_fire.extend(left)
            self._retry_at = self.clock() + RETRY_AFTER
        self._hold(bool(left))

    def _hold(self, holding: bool) -> None:
        """While fires wait for the store, read nothing more (``pause``): the records would
        only pile up in memory as more batches to fire. Reading resumes after the next fire
        that goes through."""
        consumer = self._consumer
        if consumer is None or holding == self._holding:
            return
        assigned = [TopicPartition(self.topic, p) for p in self._windows]
        with contextlib.suppress(KafkaException):
            if holding:
                consumer.pause(assigned)
                log.warning("trigger topic %s: the store is away; reading paused", self.topic)
            else:
                consumer.resume(assigned)
                log.info("trigger topic %s: the store answers; reading again", self.topic)
            self._holding = holding

    async def _fire_keys(self, keys: list[list[Batch]]) -> list[Batch]:
        """Fire each key's batches; those left unfired, in order.

        The first batch of every key is fired in one store call per partition
        (``Store.fire_batches``: on Valkey one script per shard, and the journal copies of
        every run in one round of produces); what is left of a key after it (a later batch,
        or the part of the first that another owner's mark did not cover) is fired one batch
        after another, in order. A group call that failed is made again batch by batch: a
        batch the store refuses is set aside alone, and when a part of the store is away only
        the keys it holds wait for the next try."""
        heads: dict[int, list[Batch]] = {}
        for batches in keys:
            heads.setdefault(batches[0].partition, []).append(batches[0])
        groups = [group for partition in heads.values() for group in fire_groups(partition)]
        answers = await asyncio.gather(
            *(self._fire_together(group) for group in groups), return_exceptions=True
        )
        fired: dict[int, FiredBatch] = {}
        deferred: set[int] = set()  # heads whose store call found the store away
        for group, answer in zip(groups, answers, strict=True):
            if isinstance(answer, StoreUnavailable) and len(group) == 1:
                log.debug("trigger topic %s: fire deferred: %s", self.topic, answer)
                deferred.add(id(group[0]))
            elif isinstance(answer, Exception):
                # Fired one by one below, where each batch's own error is told, and where a
                # part of the store that is away (a shard, a journal write refused) holds
                # back only the keys it holds, not every key of the group.
                pass
            elif isinstance(answer, BaseException):
                raise answer
            else:
                fired.update((id(batch), one) for batch, one in zip(group, answer, strict=True))
        later: list[list[Batch]] = []
        left: list[Batch] = []
        for batches in keys:
            head = batches[0]
            owner = self._windows.get(head.partition)
            if owner is None:
                continue  # revoked meanwhile: its next owner fires them
            if id(head) in deferred:
                left.extend(batches)  # all of the key waits for the next try
                continue
            settled = fired.get(id(head))
            if settled is None:
                later.append(batches)
                continue
            rest = owner.fired(head, settled.fired_through)
            if settled.run_id is not None:
                self.fires += 1
                self._on_fired()
            remaining = ([rest] if rest is not None else []) + batches[1:]
            if remaining:
                later.append(remaining)
        unfired = await asyncio.gather(*(self._fire_in_order(batches) for batches in later))
        return left + [batch for batches in unfired for batch in batches]

    async def _fire_together(self, batches: list[Batch]) -> list[FiredBatch]:
        """``batches`` (of distinct keys) fired in one store call, their answers in order."""
        fires = [
            BatchToFire(
                batch.key,
                batch.events,
                self._policy(batch.key),
                source_of(self.topic, batch.partition),
                batch.first,
                batch.last,
            )
            for batch in batches
        ]
        answers: list[FiredBatch] = await call_store(
            self.store, self.store.fire_batches, self.spec.name, fires
        )
        return answers

    async def _fire_in_order(self, batches: list[Batch]) -> list[Batch]:
        """Fire one key's batches in order; those left when the store is unavailable."""
        pending = collections.deque(batches)
        while pending:
            batch = pending[0]
            owner = self._windows.get(batch.partition)
            if owner is None:
                return []
            try:
                fired = await call_store(
                    self.store,
                    self.store.fire_batch,
                    self.spec.name,
                    batch.key,
                    list(batch.events),
                    policy=self._policy(batch.key),
                    source=source_of(self.topic, batch.partition),
                    first=batch.first,
                    last=batch.last,
                )
            except StoreUnavailable as exc:
                log.debug("trigger topic %s: fire deferred: %s", self.topic, exc)
                return list(pending)
            except Exception as exc:  # not the store being away: firing it again cannot help
                pending.popleft()
                owner.fired(batch, batch.last)
                self._unfireable(batch, exc)
                continue
            pending.popleft()
            rest = owner.fired(batch, fired.fired_through)
            if rest is not None:
                pending.appendleft(rest)  # another owner fired part of it: fire the rest
            if fired.run_id is not None:
                self.fires += 1
                self._on_fired()
        return []

    def _unfireable(self, batch: Batch, error: Exception) -> None:
        """A batch the store refused (not for being away): its events go to the dead-letter
        topic, as their JSON, so the partition moves on."""
        detail = one_line(error)
        log.error(
            "trigger topic %s: the batch of key %r at offsets %d..%d could not be fired (%s); "
            "its events are sent to %s",
            self.topic,
            batch.key,
            batch.first,
            batch.last,
            detail,
            self.dlq,
        )
        for offset, event in zip(batch.offsets, batch.events, strict=True):
            value = json.dumps(event, separators=(",", ":")).encode()
            self._dead_letter_value(
                batch.partition, offset, batch.key.encode(), value, UNFIREABLE, detail, say=False
            )

    # -- commits -------------------------------------------------------------------------------

    def _owned(self) -> dict[int, PartitionWindows]:
        return self._windows

    def _prune(self, consumer: Consumer) -> None:
        """Forget, here and in the store, the marks of each owned partition below its oldest
        record still kept (retention deleted the records they cover: none can be read again),
        so marks do not pile up for keys that come and go."""
        self._next_prune = self.clock() + PRUNE_EVERY
        for partition, windows in list(self._windows.items()):
            try:
                low, _ = consumer.get_watermark_offsets(
                    TopicPartition(self.topic, partition),
                    timeout=self.journal.read_timeout,
                    cached=False,
                )
                source = source_of(self.topic, partition)
                gone = self._run(
                    call_store(self.store, self.store.forget_marks, self.spec.name, source, low)
                )
            except (KafkaException, StoreUnavailable) as exc:
                log.debug("trigger topic %s: marks not pruned: %s", self.topic, exc)
                return
            windows.forget_marks(low)
            if gone:
                log.info(
                    "trigger topic %s: %d mark(s) of partition %d forgotten, below offset %d",
                    self.topic,
                    gone,
                    partition,
                    low,
                )

    # -- rebalances ----------------------------------------------------------------------------

    def _take_on(self, assigned: TopicPartition) -> None:
        windows = self._windows[assigned.partition] = PartitionWindows(
            assigned.partition, self._policy, self._most_bytes
        )
        if assigned.offset >= 0:  # read from a known offset (reassign): it is where it stands
            windows.next_offset = assigned.offset

    def _drop(self, partitions: list[int]) -> None:
        for partition in partitions:
            self._windows.pop(partition, None)
            self._forget(partition)
        self._to_fire = collections.deque(b for b in self._to_fire if b.partition in self._windows)

    # -- visibility ----------------------------------------------------------------------------

    def open_windows(self) -> dict[int, list[tuple[str, int, float]]]:
        """Per owned partition, (key, count, due time) of each open window."""
        return {p: w.open_keys() for p, w in sorted(self._windows.items())}
