"""KafkaEventLogStore: run journals kept in one Kafka topic, a partition per lifecycle shard.

The topic is ``{topic_prefix}.journal``. At start the store creates it through the admin API
with one partition per shard, or checks that it has that many (another count is refused with
:class:`JournalTopicMismatch`: a topic is never repartitioned). A run's records all go to its
shard's partition (``_partition``), keyed by its gate key, Avro values and fencing headers
(``_codec``). The producer is idempotent with ``acks=all``, and an append returns only once
every record of it is acknowledged, so an acknowledged step is never lost with the lifecycle.

Copies, not appends: as the event log of a :class:`CompositeStore`, the store keeps copies of
events the lifecycle store already numbered and fenced. The same ``run_seq`` may be copied
twice (a producer retry, two processes copying one run); a read folds the run's records by
``run_seq``, keeping the first, and leaves stale epochs to the journal fold.

Reads. The store keeps, per process, the journals of the runs it wrote or read, with the offset
up to which their partition was read, and the partition and first offset of runs it has seen.
A read of a known run reads only its partition's records after that offset, and none when a
caller vouches for the run's last ``run_seq`` and the journal kept holds every event up to it
(``journal_through``: a composite's reads of the runs its worker holds, whose events it copied
itself). A read of a run this process never saw reads the run's partition (``locate``: the
lifecycle's shard) from the first offset the lifecycle store keeps for it
(``keep_journal_position``, told after the run's first copy is acknowledged; the lowest offset
told stays, and a read that finds a gap reads again from it), or, with no lifecycle bound, from
the partition's start.

Threads and the loop. The journals kept in memory have a lock of their own, never held across a
request to the broker (a read goes on in a copy, merged back), so an event-loop caller waits on
it no longer than a lookup. ``coroutine_for`` gives the loop a native append (records handed to
the producer, delivery reports awaited there) and memory-first ``held_through`` and
``journal_through``; only reads of the topic go to a store thread.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

try:
    import confluent_kafka
    from confluent_kafka import Consumer, KafkaException, Producer
    from confluent_kafka.admin import AdminClient
except ImportError:  # pragma: no cover - the extra is missing
    confluent_kafka = None  # type: ignore[assignment]

from lockgate._errors import (
    ConfigurationError,
    EventAfterTerminal,
    JournalTopicMismatch,
    StoreUnavailable,
)
from lockgate.journal._events import RunEvent
from lockgate.stores._base import EventLogStore
from lockgate.stores._calls import call_owned
from lockgate.stores._shards import shard_for
from lockgate.stores.kafka._codec import (
    MAC_HEADER,
    codec_available,
    encode,
    journal_secret,
    record_headers,
    record_mac,
)
from lockgate.stores.kafka._delivery import Delivery, inbox_of
from lockgate.stores.kafka._held import HeldReads
from lockgate.stores.kafka._journal import (
    Journal,
    Run,
    epoch_of,
    handed_out,
)
from lockgate.stores.kafka._partition import gate_key, is_init
from lockgate.stores.kafka._partition_reads import PartitionReads
from lockgate.stores.kafka._producer import release_producer, shared_producer
from lockgate.stores.kafka._replay import JournalReplay, replay_journal
from lockgate.stores.kafka._topic import (
    JOURNAL_TOPIC_CONFIG,
    TOPIC_PREFIX,
    existing_partitions,
    prepare_topic,
)
from lockgate.stores.kafka._trust import Doubts

#: Runs whose journal one process keeps in memory, at most (the least recently used go).
JOURNALS_KEPT = 10_000
#: Runs whose partition and first offset one process remembers; past it the memory starts over.
POSITIONS_KEPT = 100_000


#: The methods a store runs on the event loop, and their coroutines (see ``coroutine_for``).
_NATIVE = {
    "append_copies": "_append_copies_natively",
    "held_through": "_held_through_natively",
    "journal_through": "_journal_through_natively",
}


class KafkaEventLogStore(HeldReads, PartitionReads, EventLogStore):
    """Run journals in the Kafka topic ``{topic_prefix}.journal`` (see the module docstring).

    ``shard_count`` is the lifecycle store's: the topic's partition count. Left out (None),
    it is the topic's when the topic exists, else the lifecycle's a :class:`CompositeStore`
    binds (the topic is then made with that many partitions), else 1. ``locate`` names a
    run's shard (a :class:`CompositeStore` binds its lifecycle's ``shard_of``); without it a
    run's partition is its gate key's. ``config`` adds librdkafka settings to every client.
    ``delivery_timeout`` and ``read_timeout`` bound, in seconds, how long an append waits for
    its acknowledgements and a read for its records before :class:`StoreUnavailable`. A topic
    the store creates gets :data:`JOURNAL_TOPIC_CONFIG` with ``topic_config`` over it; an
    existing topic that compacts is refused (:class:`JournalTopicUnsafe`)."""

    blocking_io = True

    def __init__(
        self,
        bootstrap_servers: str,
        *,
        topic_prefix: str = "lockgate",
        shard_count: int | None = None,
        locate: Callable[[str, str], int] | None = None,
        replication_factor: int = -1,
        delivery_timeout: float = 30.0,
        read_timeout: float = 30.0,
        config: Mapping[str, Any] | None = None,
        topic_config: Mapping[str, str] | None = None,
        journal_key: str | None = None,
    ) -> None:
        if confluent_kafka is None or not codec_available():
            raise ConfigurationError(
                "KafkaEventLogStore needs confluent-kafka and fastavro: "
                "pip install 'lockgate[kafka]'"
            )
        if not TOPIC_PREFIX.fullmatch(topic_prefix):
            raise ConfigurationError(
                f"topic_prefix must be 1-200 of A-Z a-z 0-9 . _ -: {topic_prefix!r}"
            )
        if shard_count is not None and shard_count < 1:
            raise ConfigurationError(f"shard_count must be at least 1, not {shard_count}")
        self.bootstrap_servers = bootstrap_servers
        self.topic_prefix = topic_prefix
        self.topic = f"{topic_prefix}.journal"
        self.replication_factor = replication_factor
        #: The partition count: the one asked for, else the topic's, else the lifecycle's
        #: (``bind_lifecycle``), else 1 for a store used on its own.
        self.shard_count = 1 if shard_count is None else shard_count
        self._asked_shards = shard_count
        self.locate = locate
        self.delivery_timeout = delivery_timeout
        self.read_timeout = read_timeout
        #: The journal key records are signed and checked with (``journal_key``, else
        #: ``LOCKGATE_JOURNAL_KEY``), or None: no MAC written or asked for.
        self.journal_secret = journal_secret(journal_key)
        # librdkafka logs through Python's logging (served when a client polls), not
        # straight to stderr, where its reconnect noise would land even after the store closed.
        common = {
            "bootstrap.servers": bootstrap_servers,
            "logger": logging.getLogger("lockgate.kafka"),
            **(config or {}),
        }
        #: The librdkafka settings every client of the store starts from (a replay's too).
        self.client_config: Mapping[str, Any] = dict(common)
        self._topic_config = {**JOURNAL_TOPIC_CONFIG, **(topic_config or {})}
        #: Whether the topic was made or checked: not yet when no count was asked for and
        #: there is no topic, so that a lifecycle bound next makes it with its shard count.
        self._topic_ready = False
        if shard_count is None:
            found = existing_partitions(
                AdminClient(dict(common)),
                self.topic,
                bootstrap=bootstrap_servers,
                timeout=read_timeout,
            )
            if found is not None:
                self.shard_count = found
                self._prepare_topic()
        else:
            self._prepare_topic()
        self._producer = shared_producer(common, delivery_timeout)
        try:
            self._consumer = Consumer(
                {
                    **common,
                    "group.id": f"lockgate-journal-{uuid.uuid4().hex}",  # assigned, never joined
                    "enable.auto.commit": False,
                    "auto.offset.reset": "earliest",
                    "fetch.wait.max.ms": 20,
                }
            )
        except BaseException:
            release_producer(self._producer, 0)
            raise
        self._closed = False
        #: When a read of the topic last failed (monotonic), until one succeeds.
        self._read_failed_at: float | None = None
        #: Held while the consumer reads (for as long as a read takes).
        self._read_lock = threading.Lock()
        #: Held only while the journals and positions kept in memory are looked at or changed,
        #: never across a request to the broker, so an event-loop caller waits on it no longer
        #: than that.
        self._memory = threading.Lock()
        #: Requests this store made to the broker for a partition's offsets, which every read
        #: of the topic starts with: what a test or a benchmark counts to see reads answered
        #: from memory.
        self.topic_reads = 0
        self._journals: OrderedDict[Run, Journal] = OrderedDict()
        self._positions: dict[Run, tuple[int, int]] = {}
        #: Where a lifecycle store keeps each run's position (see ``bind_lifecycle``).
        self._stored_position: Callable[[str, str], tuple[int, int] | None] | None = None
        self._keep_position: Callable[[str, str, int, int], tuple[int, int] | None] | None = None
        #: A run's position and the highest epoch the lifecycle issued for it, in one read.
        self._stored_bounds: (
            Callable[[str, str], tuple[tuple[int, int] | None, int | None]] | None
        ) = None
        #: Records not believed: counted, and said once per run.
        self._doubts = Doubts(self.topic)

    def __repr__(self) -> str:
        return f"KafkaEventLogStore({self.bootstrap_servers!r}, topic={self.topic!r})"

    @property
    def topic_ready(self) -> bool:
        """Whether the topic is there, made or checked, with :attr:`shard_count` partitions:
        False only for a store asked no count that found no topic and has not made it yet."""
        return self._topic_ready

    def _prepare_topic(self) -> None:
        """Make the topic with :attr:`shard_count` partitions, or check the one there."""
        prepare_topic(
            AdminClient(dict(self.client_config)),
            self.topic,
            bootstrap=self.bootstrap_servers,
            partitions=self.shard_count,
            replication_factor=self.replication_factor,
            config=self._topic_config,
            timeout=self.read_timeout,
        )
        self._topic_ready = True

    def _ensure_topic(self) -> None:
        """A store used on its own, asked no count, where there was no topic: make it now,
        with one partition, before the first record goes to it or is looked for."""
        if not self._topic_ready:
            self._prepare_topic()

    def bind_lifecycle(self, lifecycle: object) -> None:
        """Take a lifecycle store's shards: its count must be the topic's partition count (a
        store asked no count, and finding no topic, makes it with that many now), and its
        ``shard_of`` (when it has one) locates runs. A :class:`CompositeStore` calls it."""
        shards = getattr(lifecycle, "shard_count", 1)
        if not self._topic_ready and self._asked_shards is None:
            self.shard_count = shards
            self._prepare_topic()
        if shards != self.shard_count:
            raise JournalTopicMismatch(self.topic, self.shard_count, shards)
        shard_of = getattr(lifecycle, "shard_of", None)
        if self.locate is None and callable(shard_of):
            self.locate = shard_of
        stored, keep = (
            getattr(lifecycle, "journal_position", None),
            getattr(lifecycle, "keep_journal_position", None),
        )
        if callable(stored) and callable(keep):
            self._stored_position, self._keep_position = stored, keep
        bounds = getattr(lifecycle, "journal_bounds", None)
        if callable(bounds):
            self._stored_bounds = bounds

    def coroutine_for(self, method: Callable[..., Any]) -> Callable[..., Awaitable[Any]] | None:
        """What ``append_copies``, ``held_through`` and ``journal_through`` do, on the running
        event loop (see ``LifecycleStore.coroutine_for``): an append awaits its delivery
        reports there, and the other two answer from memory there, leaving only reads of the
        topic to a store thread. None for every other method."""
        if getattr(method, "__self__", None) is not self:
            return None
        native = _NATIVE.get(method.__name__)
        found: Callable[..., Awaitable[Any]] | None = getattr(self, native) if native else None
        return found

    # -- writing -------------------------------------------------------------------------------

    def append_copies(self, name: str, run_id: str, events: Sequence[RunEvent]) -> None:
        """Keep copies of events another store numbered (each with its ``run_seq`` and
        headers), returning once Kafka has acknowledged every one; a copy already kept is
        folded away on read. :class:`StoreUnavailable` when any is not acknowledged."""
        if not events:
            return
        run, partition, key = self._aim(name, run_id, events)
        delivery = Delivery(len(events))
        sent = self._send(name, partition, key, events, 0, delivery)
        while sent < len(events):
            time.sleep(0.01)  # the local queue is full: the reports thread drains it
            sent = self._send(name, partition, key, events, sent, delivery)
        # The producer's own thread serves the reports (see _producer).
        if not delivery.wait(self.delivery_timeout + 5.0):
            raise self._unacknowledged(delivery)
        offsets = self._acknowledged(delivery)
        kept = None
        if events[0].run_seq == 1 and self._keep_position is not None:
            # Where any process finds the run's records from: the lowest such offset stays.
            kept = self._keep_position(name, run_id, partition, min(offsets))
        self._kept(run, partition, events, offsets, kept)

    async def _append_copies_natively(
        self, name: str, run_id: str, events: Sequence[RunEvent]
    ) -> None:
        """:meth:`append_copies` on the running event loop: the records are handed to the
        producer and their delivery reports awaited, holding no thread, so the appends of
        every run in flight share the producer's batches however many there are."""
        if not events:
            return
        run, partition, key = await self._aim_natively(name, run_id, events)
        delivery = inbox_of(asyncio.get_running_loop()).delivery(
            len(events), self.delivery_timeout + 5.0, self._unacknowledged
        )
        sent = self._send(name, partition, key, events, 0, delivery)
        while sent < len(events):
            await asyncio.sleep(0.01)  # the local queue is full: it drains on its own
            sent = self._send(name, partition, key, events, sent, delivery)
        assert delivery.settled is not None
        await delivery.settled
        offsets = self._acknowledged(delivery)
        kept = None
        if events[0].run_seq == 1 and self._keep_position is not None:
            kept = await call_owned(self._keep_position, name, run_id, partition, min(offsets))
        self._kept(run, partition, events, offsets, kept)

    async def _aim_natively(
        self, name: str, run_id: str, events: Sequence[RunEvent]
    ) -> tuple[Run, int, str]:
        """:meth:`_aim` on the loop: a run located by the lifecycle (which may ask its server)
        is located on a store thread."""
        run = (name, run_id)
        with self._memory:
            journal = self._journals.get(run)
            known = self._positions.get(run) if journal is None else None
        if journal is not None:
            return run, journal.partition, self._key_of(journal, events, run_id)
        if known is None and self.locate is not None and self.shard_count > 1:
            partition: int = await call_owned(self.locate, name, run_id)
            return run, partition, self._key_of(None, events, run_id)
        return self._aim(name, run_id, events)

    def _aim(self, name: str, run_id: str, events: Sequence[RunEvent]) -> tuple[Run, int, str]:
        """The run, and the partition and record key its copies go to."""
        run = (name, run_id)
        with self._memory:
            journal = self._journals.get(run)
        partition = journal.partition if journal is not None else self._partition_of(run, events)
        return run, partition, self._key_of(journal, events, run_id)

    def _kept(
        self,
        run: Run,
        partition: int,
        events: Sequence[RunEvent],
        offsets: Sequence[int],
        kept: tuple[int, int] | None,
    ) -> None:
        """Kafka acknowledged ``events`` at ``offsets``: this process holds them now.
        ``kept`` is the position the lifecycle keeps for the run (its lowest first offset)
        when this batch started the run's journal."""
        with self._memory:
            journal = self._journals.get(run)
            if journal is not None:
                if journal.bound is not None:
                    # Copies of the lifecycle's own outbox: their epoch (a newer claim's) was
                    # issued, so the bound rises to it rather than holding them aside.
                    journal.set_bound(max(epoch_of(event) for event in events))
                for event in events:
                    journal.keep(event)
                if kept is not None and journal.first is not None and kept[1] < journal.first:
                    # Copies of the run's start lie lower: read on from there next time.
                    journal.first = kept[1]
                    journal.next_offset = min(journal.next_offset, kept[1])
            elif events[0].run_seq == 1:
                # This batch starts the run's journal, but another process may have copied
                # its start (and events after it) first, at lower offsets: reading on starts
                # from the lowest first offset the lifecycle keeps, never from this copy's.
                start = min(offsets) if kept is None else min(min(offsets), kept[1])
                self._remember(run, Journal(partition, start, first=start), events)

    def append_events(
        self, name: str, run_id: str, events: list[RunEvent], *, fence: str | None = None
    ) -> None:
        """Number ``events`` after the run's journal and append them (the store on its own,
        with one writer per run). Fenced appends need a lifecycle store that holds leases:
        use a :class:`CompositeStore`."""
        if fence is not None:
            raise ConfigurationError(
                "KafkaEventLogStore holds no leases, so it cannot fence an append: use it as "
                "the event log of a CompositeStore"
            )
        if not events:
            return
        journal = self.load_run(name, run_id)
        if any(e.is_terminal for e in journal) or any(e.is_terminal for e in events[:-1]):
            raise EventAfterTerminal(f"run {run_id!r} of {name!r} has ended; nothing written")
        last = journal[-1].run_seq or 0 if journal else 0
        self.append_copies(
            name, run_id, [event.with_seq(last + i) for i, event in enumerate(events, 1)]
        )

    def _partition_of(self, run: Run, events: Sequence[RunEvent]) -> int:
        known = self._positions.get(run)
        if known is not None:
            return known[0]
        if self.locate is not None:
            return self.locate(*run)
        init = next((e for e in events if is_init(e)), None)
        return shard_for(gate_key(init) if init else run[1], self.shard_count)

    @staticmethod
    def _key_of(journal: Journal | None, events: Sequence[RunEvent], run_id: str) -> str:
        if journal is not None and journal.key is not None:
            return journal.key
        init = next((e for e in events if is_init(e)), None)
        return gate_key(init) if init is not None else run_id

    def _unacknowledged(self, delivery: Delivery) -> StoreUnavailable:
        return StoreUnavailable(
            f"Kafka did not acknowledge {delivery.left} journal record(s) of {self.topic!r} "
            f"within {self.delivery_timeout}s"
        )

    def _acknowledged(self, delivery: Delivery) -> list[int]:
        """The offsets of a delivery Kafka kept, or :class:`StoreUnavailable`."""
        if delivery.errors:
            raise StoreUnavailable(
                f"Kafka did not keep a journal record of {self.topic!r}: {delivery.errors[0]}"
            ) from KafkaException(delivery.errors[0])
        return delivery.offsets

    def _send(
        self,
        name: str,
        partition: int,
        key: str,
        events: Sequence[RunEvent],
        start: int,
        delivery: Delivery,
    ) -> int:
        """Hand ``events`` from ``start`` on to the producer, a record each, until its local
        queue is full: how many of ``events`` it then holds."""
        self._ensure_topic()
        produce, topic, report, record_key = (
            self._producer.produce,
            self.topic,
            delivery.report,
            key.encode(),
        )
        secret = self.journal_secret
        sent = start
        try:
            for event in events[start:]:
                value, headers = encode(event), record_headers(name, event)
                if secret is not None:
                    headers.append((MAC_HEADER, record_mac(secret, record_key, value, headers)))
                produce(
                    topic,
                    value=value,
                    key=record_key,
                    partition=partition,
                    headers=headers,
                    on_delivery=report,
                )
                sent += 1
        except BufferError:
            pass
        except KafkaException as exc:
            raise StoreUnavailable(f"Kafka refused a journal record: {exc}") from exc
        return sent

    @property
    def producer(self) -> Producer:
        """The process's idempotent ``acks=all`` producer this store holds, for other records
        sent through the same Kafka (trigger events); valid until the store is closed."""
        return self._producer

    # -- reading -------------------------------------------------------------------------------

    def load_run(self, name: str, run_id: str, *, max_events: int | None = None) -> list[RunEvent]:
        events = self._read(name, run_id)
        return events[:max_events] if max_events is not None else events

    def read_events_from(self, name: str, run_id: str, after_seq: int = 0) -> list[RunEvent]:
        """The run's events after ``run_seq`` ``after_seq``: a suffix read."""
        return [e for e in self._read(name, run_id) if (e.run_seq or 0) > after_seq]

    def get_last_event(self, name: str, run_id: str) -> RunEvent | None:
        events = self._read(name, run_id)
        return events[-1] if events else None

    def journal_through(self, name: str, run_id: str, last_seq: int) -> list[RunEvent]:
        """The run's journal, for a caller that knows the run has events up to ``run_seq``
        ``last_seq`` and none after (a :class:`CompositeStore`, from its lifecycle's outbox,
        just after copying it): from memory, with no request to the broker, when this process
        holds every event of the run from ``run_seq`` 1 up to there (the runs it holds, whose
        events it copied itself); else read as :meth:`load_run` reads."""
        held = self._journal_in_memory((name, run_id), last_seq)
        return held if held is not None else self._read(name, run_id)

    async def _journal_through_natively(
        self, name: str, run_id: str, last_seq: int
    ) -> list[RunEvent]:
        held = self._journal_in_memory((name, run_id), last_seq)
        if held is not None:
            return held
        read: list[RunEvent] = await call_owned(self._read, name, run_id)
        return read

    def _journal_in_memory(self, run: Run, last_seq: int) -> list[RunEvent] | None:
        with self._memory:
            journal = self._journals.get(run)
            if journal is None or not journal.holds_through(last_seq):
                return None
            self._journals.move_to_end(run)
            events = journal.ordered()
        return handed_out(events)

    def _read(self, name: str, run_id: str) -> list[RunEvent]:
        """The run's journal, folded by ``run_seq``: from memory when it has ended, else after
        reading its partition on from where this process last did (into a copy, merged back:
        the memory lock is never held across a request to the broker)."""
        run = (name, run_id)
        with self._memory:
            journal = self._journals.get(run)
            if journal is not None and journal.ended and journal.whole:
                self._journals.move_to_end(run)
                return handed_out(journal.ordered())
            fork = journal.fork() if journal is not None else None
        with self._read_lock:
            if fork is None:
                fork = self._find(run)
            else:
                self._read_from_kept(fork, run)
                self._read_on(fork, run)
        with self._memory:
            events = self._adopt(run, fork, always=False).ordered()
        return handed_out(events)

    def _read_from_kept(self, journal: Journal, run: Run) -> None:
        """Before a live run's journal is read on: when the lifecycle keeps a lower first
        offset than the one this process started the journal from (another process's copy of
        the run's start landed first, and events may have followed it before this process's
        copy), read the run from there too."""
        kept, issued = self._ask_bounds(run)
        self._bound(journal, run, issued)
        if kept is None or journal.first is None or kept[1] >= journal.first:
            return
        earlier = Journal(kept[0], kept[1], first=kept[1], bound=journal.bound)
        self._read_on(earlier, run)
        journal.merge(earlier)

    def _adopt(self, run: Run, fork: Journal, *, always: bool) -> Journal:
        """Merge a journal read outside the memory lock into the one kept (other copies may
        have landed meanwhile), keeping it when it has events (or ``always``)."""
        journal = self._journals.get(run)
        if journal is None:
            journal = fork
        else:
            journal.merge(fork)
        if always or journal.events:
            self._remember(run, journal, ())
        return journal

    def _find(self, run: Run) -> Journal:
        """A run this process holds no journal of: its partition read from the run's first
        offset when known (remembered here, else kept by the lifecycle store), else, with no
        lifecycle store bound, from the partition's start."""
        known = self._positions.get(run)
        issued = None
        if self._stored_position is not None:
            stored, issued = self._ask_bounds(run)
            if stored is not None and (known is None or stored[1] < known[1]):
                known = stored
            if known is None:
                # The lifecycle keeps a position once the run's first copy is acknowledged, and
                # keeps the outbox until a copy has its terminal: with no position, no copy
                # counts yet (one made just before a crash is copied again, with a position).
                return Journal(self.locate(*run) if self.locate is not None else 0, 0)
        if known is not None:
            journal = Journal(*known, bound=issued)
        else:
            partition = self.locate(*run) if self.locate is not None else None
            if partition is None:
                partition = self._search(run)
            journal = Journal(partition, self._low(partition), bound=issued)
        self._read_on(journal, run)
        return journal

    def _ask_bounds(self, run: Run) -> tuple[tuple[int, int] | None, int | None]:
        """Where the lifecycle keeps the run's journal starting, and the highest epoch it
        issued for the run (None when it does not say): one read of the lifecycle."""
        if self._stored_bounds is not None:
            return self._stored_bounds(*run)
        if self._stored_position is not None:
            return self._stored_position(*run), None
        return None, None

    def _bound(self, journal: Journal, run: Run, issued: int | None) -> None:
        """Tell ``journal`` the highest epoch issued for its run; say what that drops."""
        dropped = journal.set_bound(issued)
        if dropped:
            self._doubts.dropped(run, "epoch", dropped)

    def _remember(self, run: Run, journal: Journal, events: Sequence[RunEvent]) -> None:
        """Keep the run's journal (most recently used last) and its position."""
        for event in events:
            journal.keep(event)
        self._journals[run] = journal
        self._journals.move_to_end(run)
        while len(self._journals) > JOURNALS_KEPT:
            self._journals.popitem(last=False)
        known = self._positions.get(run)
        if journal.first is not None and (known is None or journal.first < known[1]):
            if known is None and len(self._positions) >= POSITIONS_KEPT:
                self._positions.clear()
            self._positions[run] = (journal.partition, journal.first)

    def replay(
        self,
        *,
        partition: int | None = None,
        from_offset: int | None = None,
        from_time: datetime | float | None = None,
        until_offset: int | None = None,
        workflow: str | None = None,
        run_id: str | None = None,
        strict: bool = False,
    ) -> JournalReplay:
        """Replay the journal topic: an iterator of folded :class:`JournalRecord` s across the
        partitions read, up to each one's end offset (``until_offset``, exclusive, else its
        high watermark now), with a :class:`ReplaySummary`. See :func:`replay_journal`; with
        a lifecycle store bound, records above the highest epoch it issued for their run are
        skipped too."""
        return replay_journal(
            self,
            partition=partition,
            from_offset=from_offset,
            from_time=from_time,
            until_offset=until_offset,
            workflow=workflow,
            run_id=run_id,
            strict=strict,
            issued=self._issued if self._stored_bounds is not None else None,
        )

    def _issued(self, name: str, run_id: str) -> int | None:
        return self._ask_bounds((name, run_id))[1]

    # -- the rest ------------------------------------------------------------------------------

    def info(self) -> dict[str, Any]:
        """The journal topic as an operator checks it: its name, the bootstrap servers, whether
        records are signed, and each partition's low watermark (the oldest record kept) and end
        offset (the next record's)."""
        with self._read_lock:
            marks = [self._watermarks(p) for p in range(self.shard_count)]
        offsets = {str(p): {"low": low, "end": end} for p, (low, end) in enumerate(marks)}
        return {
            "bootstrap_servers": self.bootstrap_servers,
            "topic": self.topic,
            "partitions": self.shard_count,
            "signed": self.journal_secret is not None,
            "records": sum(end - low for low, end in marks),
            "offsets": offsets,
        }

    def ping(self) -> None:
        self._watermarks(0)

    def close(self) -> None:
        """Flush and give back the producer, close the consumer; a second close does nothing."""
        if self._closed:
            return
        self._closed = True
        release_producer(self._producer, self.delivery_timeout)
        with self._read_lock:  # not under a read still going on a store thread
            self._consumer.close()
