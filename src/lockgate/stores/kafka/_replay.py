"""Replaying the journal topic from offsets: every folded event, with where it is.

:func:`replay_journal` (and :meth:`KafkaEventLogStore.replay`) reads ``{prefix}.journal`` from
a position and yields each event the way a journal read folds it (see ``_fold``), as a
:class:`JournalRecord`, across every partition read. The position:

- ``partition``: one partition; by default every partition of the topic;
- ``from_offset``: the offset to start at, in each partition read (below a partition's low
  watermark, the oldest record retention kept, is :class:`JournalPositionError`); or
  ``from_time``: the first record at or after that time, through Kafka's ``offsets_for_times``;
  by default each partition's low watermark;
- ``until_offset``: the END offset, exclusive, as Kafka's end offsets are: the record at
  ``until_offset`` is not read. By default, and never beyond, each partition's high watermark
  taken when the replay starts: the iterator ends there and does not follow the topic;
- ``workflow``, ``run_id``: only that workflow's or that run's events (the others are skipped
  by their headers, before their values are decoded).

A record that carries a run's headers but is not believed (its value does not decode, its
headers disagree with it, its MAC does not verify with a journal key set, or its epoch is above
the highest the lifecycle store issued, when ``issued`` is given) is skipped and named in
``summary.skipped``; with ``strict=True`` it ends the replay instead
(:class:`JournalRecordUndecodable`).

Records of different partitions come in the order Kafka hands them over; a partition's come in
offset order. A consumer of its own reads the topic (assigned, never a group member, committing
nothing), so a replay never disturbs a store's reads or any consumer group.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cached_property
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlsplit

from lockgate._errors import (
    ConfigurationError,
    JournalPositionError,
    JournalRecordUndecodable,
    StoreUnavailable,
)
from lockgate.journal._events import RunEvent
from lockgate.stores.kafka._codec import decode, journal_secret, mac_problem
from lockgate.stores.kafka._fold import BATCH, FORGET_AFTER, Folded, Folder, ReplaySummary
from lockgate.stores.kafka._redact import redacted_journal_url
from lockgate.stores.kafka._topic import TOPIC_PREFIX, watermarks

if TYPE_CHECKING:
    from lockgate.stores.kafka._store import KafkaEventLogStore
#: Options a ``kafka://`` URL may hold: a replay uses ``topic_prefix`` and ``read_timeout``
#: and accepts the store's other options (they are about writing), so one URL serves both.
_URL_OPTIONS = frozenset(
    {"topic_prefix", "read_timeout", "replication_factor", "delivery_timeout", "journal_key"}
)
#: Seconds a replay opened from a URL waits for Kafka to answer (``?read_timeout=`` changes it).
READ_TIMEOUT = 10.0


@dataclass(frozen=True)
class JournalRecord:
    """One folded journal event and where it is in the topic.

    ``run_seq`` is the event's place in its run's journal, ``partition`` and ``offset`` the
    record's, ``timestamp`` the record's time (UTC) when Kafka has one, ``epoch`` the fencing
    epoch of the claim that wrote it (None for an unfenced write). ``payload_json`` is the
    payload as the record keeps it (compact JSON); :attr:`payload` is it parsed and
    :attr:`event` the whole :class:`RunEvent`, both decoded on first use
    (:class:`JournalRecordUndecodable` if they do not decode)."""

    workflow: str
    run_id: str
    run_seq: int
    kind: str
    partition: int
    offset: int
    timestamp: datetime | None
    epoch: int | None
    payload_json: str
    value: bytes = field(repr=False, compare=False)
    topic: str = field(default="", repr=False, compare=False)

    @cached_property
    def event(self) -> RunEvent:
        """The event, as every store's ``load_run`` returns it."""
        try:
            return decode(self.value)
        except Exception as exc:
            raise JournalRecordUndecodable(
                self.topic, self.partition, self.offset, str(exc)
            ) from exc

    @cached_property
    def payload(self) -> Any:
        """The event's payload, parsed."""
        try:
            return json.loads(self.payload_json)
        except ValueError as exc:
            raise JournalRecordUndecodable(
                self.topic, self.partition, self.offset, f"its payload is not JSON: {exc}"
            ) from exc

    def to_dict(self) -> dict[str, Any]:
        """The record as ``lockgate journal replay --json`` prints it: ``payload`` parsed,
        ``timestamp`` ISO 8601 text (UTC, to the millisecond) or None."""
        return {
            "workflow": self.workflow,
            "run_id": self.run_id,
            "run_seq": self.run_seq,
            "kind": self.kind,
            "partition": self.partition,
            "offset": self.offset,
            "timestamp": iso_stamp(self.timestamp),
            "epoch": self.epoch,
            "payload": self.payload,
        }

    def to_json(self) -> str:
        """:meth:`to_dict` as one line of compact JSON."""
        return json.dumps(self.to_dict(), separators=(",", ":"))


def iso_stamp(stamp: datetime | None) -> str | None:
    if stamp is None:
        return None
    return stamp.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def to_records(batch: list[Folded], topic: str) -> list[JournalRecord]:
    """The public :class:`JournalRecord` s of a batch of folded records. What repeats is made
    once: a run's workflow and run id text (kept on the run's fold), a kind's text, the
    timestamp of the last millisecond seen. Each record is filled in with its field dict
    whole, not field by field through the frozen dataclass's ``__init__`` (eleven
    ``object.__setattr__`` calls), which cost more than the rest together."""
    made: list[JournalRecord] = []
    add, new, set_field = made.append, object.__new__, object.__setattr__
    kinds = _KIND_TEXT
    last_millis: int | None = -1
    stamp: datetime | None = None
    for run, workflow, run_id, seq, kind, payload, partition, offset, millis, epoch, value in batch:
        names = run.names
        if names is None:
            names = run.names = (workflow.decode(), run_id.decode())
        kind_text = kinds.get(kind)
        if kind_text is None:
            kind_text = kinds[kind] = kind.decode()
        if millis != last_millis:
            last_millis = millis
            stamp = datetime.fromtimestamp(millis / 1000, UTC) if millis is not None else None
        record = new(JournalRecord)
        set_field(
            record,
            "__dict__",
            {
                "workflow": names[0],
                "run_id": names[1],
                "run_seq": seq,
                "kind": kind_text,
                "partition": partition,
                "offset": offset,
                "timestamp": stamp,
                "epoch": epoch,
                # Not UTF-8 only in a record lockgate did not write: shown with U+FFFD for
                # the bytes (its ``event`` does not decode), rather than the replay stopping.
                "payload_json": payload.decode(errors="replace"),
                "value": value,
                "topic": topic,
            },
        )
        add(record)
    return made


#: Kinds' text, as ``to_records`` has met them.
_KIND_TEXT: dict[bytes, str] = {}


@dataclass(frozen=True)
class Span:
    """One partition's part of a replay: records ``start`` up to ``stop`` (exclusive)."""

    partition: int
    start: int
    stop: int


class JournalReplay:
    """A replay of the journal topic: iterate it for :class:`JournalRecord` s (once), and read
    :attr:`summary` as it goes or after. :attr:`spans` is what it reads of each partition,
    fixed when it was made. Use it as a context manager, or :meth:`close` it, to let its
    consumer go before it ends."""

    def __init__(
        self,
        bootstrap_servers: str,
        topic: str,
        *,
        partition: int | None = None,
        from_offset: int | None = None,
        from_time: datetime | float | None = None,
        until_offset: int | None = None,
        workflow: str | None = None,
        run_id: str | None = None,
        read_timeout: float = READ_TIMEOUT,
        config: Mapping[str, Any] | None = None,
        forget_after: int = FORGET_AFTER,
        strict: bool = False,
        journal_key: bytes | None = None,
        issued: Callable[[str, str], int | None] | None = None,
    ) -> None:
        _check_position(partition, from_offset, from_time, until_offset)
        from confluent_kafka import Consumer

        self.topic = topic
        self.bootstrap_servers = bootstrap_servers
        self.read_timeout = read_timeout
        self._folder = Folder(
            topic,
            workflow=workflow,
            run_id=run_id,
            forget_after=forget_after,
            strict=strict,
            verify=_verifier(journal_key),
            issued=_issued_cache(issued),
        )
        self._consumer = Consumer(
            {
                "bootstrap.servers": bootstrap_servers,
                "logger": logging.getLogger("lockgate.kafka"),
                **(config or {}),
                "group.id": f"lockgate-replay-{uuid.uuid4().hex}",  # assigned, never joined
                "enable.auto.commit": False,
                "enable.partition.eof": False,
                "auto.offset.reset": "earliest",
                # Fetch ahead in big batches: a replay reads everything it asks for.
                "queued.min.messages": 200_000,
                "fetch.wait.max.ms": 10,
            }
        )
        self._iterator: Iterator[JournalRecord] | None = None
        try:
            self.spans = self._plan(partition, from_offset, from_time, until_offset)
        except BaseException:
            self._consumer.close()
            raise
        self.summary.total = sum(span.stop - span.start for span in self.spans)

    @property
    def summary(self) -> ReplaySummary:
        return self._folder.summary

    def __repr__(self) -> str:
        return f"JournalReplay({self.topic!r}, spans={self.spans!r})"

    def __iter__(self) -> Iterator[JournalRecord]:
        return self

    def __next__(self) -> JournalRecord:
        if self._iterator is None:
            topic = self.topic
            self._iterator = (
                record for batch in self.folded() for record in to_records(batch, topic)
            )
        return next(self._iterator)

    def __enter__(self) -> JournalReplay:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._consumer.close()

    # -- where to read -------------------------------------------------------------------------

    def _plan(
        self,
        partition: int | None,
        from_offset: int | None,
        from_time: datetime | float | None,
        until_offset: int | None,
    ) -> list[Span]:
        partitions = self._partitions()
        if partition is not None and partition not in partitions:
            raise JournalPositionError(
                f"the journal topic {self.topic!r} has no partition {partition} (it has "
                f"{_ranges(partitions)})",
                topic=self.topic,
                partition=partition,
            )
        chosen = [partition] if partition is not None else partitions
        starts = self._times(chosen, from_time) if from_time is not None else {}
        spans = []
        for number in chosen:
            low, high = self._watermarks(number)
            if from_offset is not None and from_offset < low:
                raise JournalPositionError(
                    f"offset {from_offset} of {self.topic!r} partition {number} is gone: its "
                    f"low watermark (the oldest record kept) is {low}",
                    topic=self.topic,
                    partition=number,
                    offset=from_offset,
                    low=low,
                )
            start = from_offset if from_offset is not None else starts.get(number, low)
            start = min(max(start, low), high)
            stop = high if until_offset is None else max(start, min(until_offset, high))
            spans.append(Span(number, start, stop))
        return spans

    def _partitions(self) -> list[int]:
        from confluent_kafka import KafkaException

        # The whole listing, never the one topic: asking for a missing topic's metadata may
        # have a broker with auto.create.topics.enable create it.
        try:
            topics = self._consumer.list_topics(timeout=self.read_timeout).topics
        except KafkaException as exc:
            raise StoreUnavailable(
                f"Kafka at {self.bootstrap_servers} did not answer within "
                f"{self.read_timeout:g}s: {exc}"
            ) from exc
        found = topics.get(self.topic)
        if found is None or found.error is not None or not found.partitions:
            raise JournalPositionError(
                f"there is no journal topic {self.topic!r} at {self.bootstrap_servers} (is "
                "the topic_prefix right?)",
                topic=self.topic,
            )
        return sorted(found.partitions)

    def _watermarks(self, partition: int) -> tuple[int, int]:
        return watermarks(self._consumer, self.topic, partition, self.read_timeout)

    def _times(self, partitions: list[int], when: datetime | float) -> dict[int, int]:
        """Each partition's first offset at or after ``when`` (its high watermark, as a start
        that reads nothing, when no record is that late)."""
        from confluent_kafka import KafkaException, TopicPartition

        millis = int(_seconds(when) * 1000)
        asked = [TopicPartition(self.topic, p, millis) for p in partitions]
        try:
            found = self._consumer.offsets_for_times(asked, timeout=self.read_timeout)
        except KafkaException as exc:
            raise StoreUnavailable(f"Kafka did not answer for {self.topic!r}: {exc}") from exc
        starts = {}
        for tp in found:
            starts[tp.partition] = (
                tp.offset if tp.offset >= 0 else self._watermarks(tp.partition)[1]
            )
        return starts

    # -- reading -------------------------------------------------------------------------------

    def folded(self) -> Iterator[list[Folded]]:
        """The fold's records as tuples, a batch at a time (the CLI's path, which formats them
        itself); iterating the replay wraps each in a :class:`JournalRecord`."""
        from confluent_kafka import KafkaException, TopicPartition

        stops = {s.partition: s.stop for s in self.spans if s.stop > s.start}
        if not stops:
            return
        consumer = self._consumer
        consumer.assign(
            [
                TopicPartition(self.topic, s.partition, s.start)
                for s in self.spans
                if s.partition in stops
            ]
        )
        fold = self._folder.fold
        quiet_since = time.monotonic()
        try:
            while stops:
                batch = consumer.consume(num_messages=BATCH, timeout=0.1)
                if batch:
                    quiet_since = time.monotonic()
                    yield fold(batch, stops)
                    continue
                self._skip_to_positions(stops)  # offsets with no record (control records)
                if stops and time.monotonic() - quiet_since > self.read_timeout:
                    left = ", ".join(f"{p} (to {stop})" for p, stop in sorted(stops.items()))
                    raise StoreUnavailable(
                        f"Kafka handed back nothing of {self.topic!r} partition(s) {left} "
                        f"within {self.read_timeout:g}s"
                    )
        except KafkaException as exc:
            raise StoreUnavailable(f"Kafka failed a journal replay: {exc}") from exc
        finally:
            consumer.unassign()

    def _skip_to_positions(self, stops: dict[int, int]) -> None:
        from confluent_kafka import TopicPartition

        positions = self._consumer.position([TopicPartition(self.topic, p) for p in stops])
        for tp in positions:
            if tp.offset >= 0 and tp.offset >= stops.get(tp.partition, tp.offset + 1):
                del stops[tp.partition]


def _verifier(secret: bytes | None) -> Callable[[Any], str | None] | None:
    if secret is None:
        return None
    return lambda msg: mac_problem(secret, msg)


def _issued_cache(
    issued: Callable[[str, str], int | None] | None,
) -> Callable[[bytes, bytes], int | None] | None:
    """``issued`` asked once per run (by its header bytes) for the whole replay: a run's
    highest epoch only grows, and the records read were written before the replay began."""
    if issued is None:
        return None
    known: dict[tuple[bytes, bytes], int | None] = {}

    def ask(workflow: bytes, run_id: bytes) -> int | None:
        run = (workflow, run_id)
        if run not in known:
            known[run] = issued(workflow.decode(errors="replace"), run_id.decode(errors="replace"))
        return known[run]

    return ask


def _check_position(
    partition: int | None,
    from_offset: int | None,
    from_time: datetime | float | None,
    until_offset: int | None,
) -> None:
    for name, number in (
        ("partition", partition),
        ("from_offset", from_offset),
        ("until_offset", until_offset),
    ):
        if number is not None and (not isinstance(number, int) or number < 0):
            raise ConfigurationError(f"{name} must be a whole number >= 0, not {number!r}")
    if from_offset is not None and from_time is not None:
        raise ConfigurationError("give from_offset or from_time, not both")
    if from_offset is not None and until_offset is not None and until_offset < from_offset:
        raise ConfigurationError(
            f"until_offset {until_offset} is before from_offset {from_offset} (until_offset is "
            "the end offset, exclusive)"
        )


def _seconds(when: datetime | float) -> float:
    if isinstance(when, datetime):
        # A time without a zone is UTC: a journal's times are the broker's, not this host's.
        return (when if when.tzinfo is not None else when.replace(tzinfo=UTC)).timestamp()
    return float(when)


def _ranges(numbers: list[int]) -> str:
    if numbers == list(range(len(numbers))):
        return f"0-{len(numbers) - 1}" if len(numbers) > 1 else "0"
    return ", ".join(map(str, numbers))


def replay_journal(
    source: str | KafkaEventLogStore,
    *,
    partition: int | None = None,
    from_offset: int | None = None,
    from_time: datetime | float | None = None,
    until_offset: int | None = None,
    workflow: str | None = None,
    run_id: str | None = None,
    strict: bool = False,
    issued: Callable[[str, str], int | None] | None = None,
) -> JournalReplay:
    """Replay the journal topic of ``source``: a ``kafka://host:port[,host:port]
    [?topic_prefix=...][&journal_key=...]`` URL (the one ``open_store(journal=...)`` takes;
    without ``journal_key``, ``LOCKGATE_JOURNAL_KEY`` when set) or a
    :class:`KafkaEventLogStore` (its topic, bootstrap servers, client settings and journal
    key). See the module docstring for the position; ``from_time`` is a datetime (UTC when it
    has no zone) or epoch seconds. ``issued(workflow, run_id)`` gives the highest epoch the
    lifecycle store issued for a run (None: it does not know the run); records above it are
    skipped. Raises, before reading anything, :class:`JournalPositionError` (no such topic or
    partition, an offset past retention), :class:`ConfigurationError` (a bad URL or position)
    or :class:`StoreUnavailable` (Kafka does not answer); while reading, with ``strict``,
    :class:`JournalRecordUndecodable` for the first record not believed (without it, such a
    record is skipped and named in ``summary.skipped``)."""
    position: dict[str, Any] = {
        "partition": partition,
        "from_offset": from_offset,
        "from_time": from_time,
        "until_offset": until_offset,
        "workflow": workflow,
        "run_id": run_id,
        "strict": strict,
        "issued": issued,
    }
    if isinstance(source, str):
        bootstrap, topic, read_timeout = parse_journal_url(source)
        secret = journal_secret(dict(parse_qsl(urlsplit(source).query)).get("journal_key"))
        return JournalReplay(
            bootstrap, topic, read_timeout=read_timeout, journal_key=secret, **position
        )
    return JournalReplay(
        source.bootstrap_servers,
        source.topic,
        read_timeout=source.read_timeout,
        config=source.client_config,
        journal_key=source.journal_secret,
        **position,
    )


def parse_journal_url(url: str) -> tuple[str, str, float]:
    """``(bootstrap servers, topic, read timeout)`` of a ``kafka://`` journal URL."""
    shown = redacted_journal_url(url)  # what refusals quote: never the journal key
    try:
        parts = urlsplit(url)
        query = parse_qsl(parts.query, keep_blank_values=True, strict_parsing=bool(parts.query))
    except ValueError as exc:
        raise ConfigurationError(f"journal URL {shown!r} does not parse: {exc}") from None
    if parts.scheme.lower() != "kafka" or not parts.netloc or parts.path.strip("/"):
        raise ConfigurationError(
            f"journal URL {shown!r} is not kafka://host:port[,host:port][?topic_prefix=...]"
        )
    options = dict(query)
    unknown = sorted(set(options) - _URL_OPTIONS)
    if unknown:
        raise ConfigurationError(
            f"journal URL {shown!r}: no option {unknown[0]!r} (it takes: "
            f"{', '.join(sorted(_URL_OPTIONS))})"
        )
    prefix = options.get("topic_prefix", "lockgate")
    if not TOPIC_PREFIX.fullmatch(prefix):
        raise ConfigurationError(
            f"journal URL {shown!r}: topic_prefix must be 1-200 of A-Z a-z 0-9 . _ -"
        )
    try:
        read_timeout = float(options.get("read_timeout", READ_TIMEOUT))
    except ValueError:
        raise ConfigurationError(
            f"journal URL {shown!r}: read_timeout must be a number of seconds"
        ) from None
    if not read_timeout > 0:
        raise ConfigurationError(f"journal URL {shown!r}: read_timeout must be above 0")
    return parts.netloc, f"{prefix}.journal", read_timeout
