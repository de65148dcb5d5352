"""The fold of a journal replay: which records of the topic to keep, and what they showed.

Folding, per run (workflow and run id): a ``run_seq`` already yielded is a duplicate (a
producer retry, or a second copy of the run's outbox) and is dropped; an event stamped with an
epoch below the highest one yielded for the run is stale and is dropped; nothing after the
run's terminal event (a higher ``run_seq``) is yielded; a late copy of an earlier one still is.
That is :func:`~lockgate.journal._replay.reconstruct_state`'s
rule, applied in topic order (the first copy of a ``run_seq`` stays, as a journal read keeps
it). A run's records are all in one partition, so partitions fold independently.

Records not believed. A record that carries a run's headers but does not decode (its value,
or a workflow or run id header that is not UTF-8), whose MAC does not verify (a journal key
given), or whose epoch is above the highest the lifecycle store issued for its run, or missing
on a kind lockgate always stamps (``issued`` given), is skipped and named in the summary, and
the fold goes on; a ``strict`` fold raises :class:`JournalRecordUndecodable` at it instead.

Memory. A run being folded costs a few integers: the range of ``run_seq`` yielded (with a set
only for numbers seen out of order), its highest epoch and status. Once a run's terminal is
yielded it keeps only that, and is forgotten when its partition has moved ``forget_after``
records (1,000,000 by default) past the terminal; a copy of its records arriving later than
that would be yielded again, as a run seen anew. Runs that never end are kept for the whole
replay.

Speed. The workflow and run filters compare the record headers before the value is touched,
and a duplicate is recognised by its ``lg-run-seq`` header, also before. The value's Avro is
walked by hand (the schema is six fields): that checks its structure and that it names the run
its headers name, and gives the kind and the payload's JSON text as bytes, parsed only when
someone asks for them. A run's first record is walked whole; its later ones, when laid out as
the store writes them, are checked by comparing what follows the payload with the run's own
encoding and with run_seq-and-headers encodings already walked (see ``Folder.fold``). The
headers are still read for every record: run ids are unique per workflow only, and the
workflow is only in the headers.
"""

from __future__ import annotations

import json
from collections import Counter, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from lockgate._errors import JournalRecordUndecodable
from lockgate.journal._events import RunEvent, RunStatus, terminal_status
from lockgate.stores.kafka._codec import (
    RECORD_EPOCH_HEADER,
    RUN_ID_HEADER,
    RUN_SEQ_HEADER,
    SCHEMA_HEADER,
    WIRE_MAJOR,
    WORKFLOW_HEADER,
    NotARunEvent,
    check_schema_version,
)
from lockgate.stores.kafka._journal import FENCED_KINDS

#: The ``lg-schema`` header of the records this runtime writes, as the fast path compares it.
_WIRE_VERSION = str(WIRE_MAJOR).encode()
#: A run whose terminal was yielded is forgotten once its partition moved this far past it.
FORGET_AFTER = 1_000_000
#: Records asked of the consumer at a time. Small enough that a batch's messages are still
#: in the CPU's caches when the fold and the output walk them: measured on a 500,000-event
#: topic, 10,000 cost about 7 µs of CPU a record and 250 to 1,000 about 4.5 (the fetching
#: ahead is the consumer's, ``queued.min.messages``, whatever this is).
BATCH = 1_000
#: The most run_seq-and-headers encodings a fold remembers as walked (see ``Folder.fold``).
_TAILS = 65_536

#: The status a run is in after its last folded event, when that event says (a terminal, a
#: wait); any other event leaves it pending (queued: its init, a requeue, a wake-up) or in
#: progress (an attempt is writing).
_WAIT_STATUS = {
    "run:sleeping": RunStatus.SLEEPING,
    "run:signal_waiting": RunStatus.SIGNAL_WAITING,
    "run:paused": RunStatus.PAUSED,
    "run:interrupted": RunStatus.INTERRUPTED,
}
_QUEUED_KINDS = frozenset(
    {
        "run:init",
        "run:requeued",
        "run:woken",
        "run:wait_timed_out",
        "run:signal_received",
        "run:resumed",
        "run:unpaused",
    }
)
_TERMINAL_KINDS = frozenset({b"run:complete", b"run:error", b"run:continued"})
#: The kinds lockgate always writes fenced (see ``_journal.FENCED_KINDS``), as bytes.
_FENCED_KINDS = frozenset(kind.encode() for kind in FENCED_KINDS)


def status_after(kind: str, payload: Callable[[], Mapping[str, Any]]) -> RunStatus:
    """The status a run's journal shows once its last event is of ``kind`` (``payload``
    gives that event's payload, read only for a ``run:error``). The journal alone cannot tell
    a queued run from one claimed but not yet written to: both are ``pending``."""
    if kind in ("run:complete", "run:error", "run:continued"):
        return terminal_status(RunEvent(kind, dict(payload()), ""))
    wait = _WAIT_STATUS.get(kind)
    if wait is not None:
        return wait
    if kind in _QUEUED_KINDS:
        return RunStatus.PENDING
    return RunStatus.IN_PROGRESS


@dataclass
class ReplaySummary:
    """What a replay read and folded, filled in as it goes.

    ``events`` were yielded; ``records`` were read in all; ``duplicates`` (a ``run_seq``
    already yielded), ``stale`` (an epoch below the run's highest) and ``after_terminal`` were
    folded away; ``filtered`` were other runs' (the workflow or run filter). ``skipped`` names
    each record that carries a run's headers but was not believed, as ``(partition, offset,
    reason)``: it does not decode, its MAC does not verify (with a journal key), or its epoch
    is above the highest the lifecycle store issued for its run (when one is asked).
    :attr:`runs` counts the runs seen by the status their last folded event gives (see
    :func:`status_after`)."""

    records: int = 0
    events: int = 0
    duplicates: int = 0
    stale: int = 0
    after_terminal: int = 0
    filtered: int = 0
    total: int = 0  # records between the replay's start and end offsets, for progress
    skipped: list[tuple[int, int, str]] = field(default_factory=list)
    _live: dict[Any, _RunFold] = field(default_factory=dict, repr=False)
    _forgotten: Counter[str] = field(default_factory=Counter, repr=False)

    @property
    def runs(self) -> dict[str, int]:
        """Runs seen, by status (most first)."""
        counts = Counter(self._forgotten)
        for run in self._live.values():
            counts[run.status] += 1
        return dict(sorted(counts.items(), key=lambda item: (-item[1], item[0])))

    @property
    def run_count(self) -> int:
        return len(self._live) + sum(self._forgotten.values())

    def to_dict(self) -> dict[str, Any]:
        return {
            "events": self.events,
            "runs": self.run_count,
            "by_status": self.runs,
            "records": self.records,
            "duplicates": self.duplicates,
            "stale": self.stale,
            "after_terminal": self.after_terminal,
            "filtered": self.filtered,
            "skipped": [{"partition": p, "offset": o, "reason": why} for p, o, why in self.skipped],
        }

    def line(self) -> str:
        """One sentence: ``replayed 1234 events of 56 runs (folded 3 duplicates): 50
        complete, 6 in_progress``."""
        folded = [f"folded {self.duplicates} duplicate{'s' * (self.duplicates != 1)}"]
        if self.stale:
            folded.append(f"dropped {self.stale} stale")
        if self.after_terminal:
            folded.append(f"dropped {self.after_terminal} after a terminal")
        if self.filtered:
            folded.append(f"skipped {self.filtered} of other runs")
        if self.skipped:
            bad = len(self.skipped)
            folded.append(f"skipped {bad} bad record{'s' * (bad != 1)}")
        statuses = ", ".join(f"{count} {status}" for status, count in self.runs.items())
        runs = self.run_count
        return (
            f"replayed {self.events} event{'s' * (self.events != 1)} of {runs} "
            f"run{'s' * (runs != 1)} ({', '.join(folded)})" + (f": {statuses}" if statuses else "")
        )


class _RunFold:
    """What folding one run needs: the ``run_seq`` yielded (``lo``..``hi``, and ``extra`` for
    any seen outside that range), its highest epoch, its status, and its terminal's
    ``run_seq`` once it ended (0 before)."""

    __slots__ = (
        "ended",
        "epoch",
        "extra",
        "hi",
        "lo",
        "names",
        "next",
        "prefix",
        "status",
        "tail",
        "top",
    )

    def __init__(self, seq: int, run_id: bytes) -> None:
        self.lo = self.hi = seq
        # The run_seq that is neither yielded nor after the terminal for sure (``hi + 1``;
        # None once the run ended): the fold's one comparison for a run's next record.
        self.next: int | None = seq + 1
        self.top = 0  # the highest run_seq yielded
        self.extra: set[int] | None = None
        self.epoch = -1
        self.status = RunStatus.IN_PROGRESS.value
        self.ended = 0  # the terminal's run_seq, once yielded
        self.prefix: bytes | None = None  # the CLI's cached start of a JSON line
        self.names: tuple[str, str] | None = None  # workflow and run id text, for records
        # What follows the payload in a value the store wrote for this run: the run id, the
        # schema version "1" and run_seq's union branch (the fold's fast path compares it).
        self.tail = _avro_string(run_id) + b"\x021\x02"

    def seen(self, seq: int) -> bool:
        return self.lo <= seq <= self.hi or (self.extra is not None and seq in self.extra)

    def add(self, seq: int) -> None:
        if seq == self.hi + 1:
            self.hi = seq
        elif seq == self.lo - 1:
            self.lo = seq
        else:
            if self.extra is None:
                self.extra = set()
            self.extra.add(seq)
        extra = self.extra
        while extra:  # absorb numbers that now touch the range
            if self.hi + 1 in extra:
                self.hi += 1
                extra.discard(self.hi)
            elif self.lo - 1 in extra:
                self.lo -= 1
                extra.discard(self.lo)
            else:
                break
        self.next = self.hi + 1 if not self.ended else None


#: One folded record as the internal fold yields it: its run's fold, workflow and run id (as
#: the headers' bytes), run_seq, kind and payload (bytes), partition, offset, timestamp in
#: milliseconds (or None), epoch (or None) and the whole value.
Folded = tuple[_RunFold, bytes, bytes, int, bytes, bytes, int, int, int | None, int | None, bytes]


class Folder:
    """The fold of a replay: fed Kafka messages, it yields the ones to keep (see the module
    docstring) and keeps the :class:`ReplaySummary`."""

    def __init__(
        self,
        topic: str,
        *,
        workflow: str | None = None,
        run_id: str | None = None,
        forget_after: int = FORGET_AFTER,
        strict: bool = False,
        verify: Callable[[Any], str | None] | None = None,
        issued: Callable[[bytes, bytes], int | None] | None = None,
    ) -> None:
        self.topic = topic
        self.summary = ReplaySummary()
        #: Stop at the first record not believed (:class:`JournalRecordUndecodable`) rather
        #: than skip it and name it in ``summary.skipped``.
        self.strict = strict
        #: Why a message's MAC does not verify, or None when it does (a journal key is set).
        self._verify = verify
        #: The highest epoch the lifecycle store issued for a run, or None when it does not
        #: know the run (then the run's records are believed as the topic holds them).
        self._issued = issued
        self._workflow = workflow.encode() if workflow is not None else None
        self._run_id = run_id.encode() if run_id is not None else None
        self._forget_after = forget_after
        self._ended: dict[int, deque[tuple[int, tuple[bytes, bytes]]]] = {}
        # run_seq and headers-map encodings walked whole, each with the run_seq it encodes:
        # they repeat across runs (the same numbers, the same epochs), so most values need
        # no walk past their payload. Bounded: past _TAILS, the rest are walked.
        self._tails: dict[bytes, int] = {}

    def fold(self, batch: list[Any], stops: dict[int, int]) -> list[Folded]:
        """The records of ``batch`` to keep, in order. ``stops`` holds each partition still
        being read and its end offset; a partition reaching it is removed. (One loop with its
        common cases inline: it runs once per record of the topic.)"""
        from confluent_kafka import Message

        summary, runs = self.summary, self.summary._live
        want_wf, want_run, topic = self._workflow, self._run_id, self.topic
        tails, verify, issued = self._tails, self._verify, self._issued
        kept: list[Folded] = []
        filtered = duplicates = after_terminal = stale = 0
        # Per batch, in C: each partition's last offset in it, and whether any message is an
        # error. Only a batch that holds an error or reaches a partition's end offset (or
        # holds one no longer read) needs the checks per message.
        last: dict[Any, Any] = dict(
            zip(map(Message.partition, batch), map(Message.offset, batch), strict=True)
        )
        ends = any(map(Message.error, batch)) or any(
            offset + 1 >= stops.get(partition, -1) for partition, offset in last.items()
        )
        records = len(batch)
        try:
            for msg in batch:
                partition, offset = msg.partition(), msg.offset()
                if ends:
                    stop = stops.get(partition)
                    if msg.error() is not None or stop is None or offset >= stop:
                        records -= 1
                        if msg.error() is not None:
                            _raise_error(msg)
                        continue  # an end-of-partition event, or past the end asked for
                    if offset + 1 >= stop:
                        del stops[partition]
                headers = msg.headers()
                # The store writes workflow, run id, run_seq, schema and the epoch (when the
                # write was fenced), in that order; anything else is read by name.
                count = len(headers) if headers is not None else 0
                if count == 5:
                    (
                        (wf_h, workflow),
                        (run_h, run_id),
                        (seq_h, raw_seq),
                        (_, version),
                        (
                            epoch_h,
                            raw_epoch,
                        ),
                    ) = headers
                elif count == 4:
                    (wf_h, workflow), (run_h, run_id), (seq_h, raw_seq), (_, version) = headers
                    epoch_h, raw_epoch = RECORD_EPOCH_HEADER, None
                if (
                    count in (4, 5)
                    and wf_h == WORKFLOW_HEADER
                    and run_h == RUN_ID_HEADER
                    and seq_h == RUN_SEQ_HEADER
                    and version == _WIRE_VERSION
                    and epoch_h == RECORD_EPOCH_HEADER
                ):
                    try:
                        seq = int(raw_seq)
                        epoch = int(raw_epoch) if raw_epoch is not None else None
                    except (TypeError, ValueError):
                        named = self._named(headers, partition, offset)
                        if named is None:
                            continue
                        workflow, run_id, seq, epoch = named
                else:
                    named = self._named(headers, partition, offset)
                    if named is None:
                        continue
                    workflow, run_id, seq, epoch = named
                if (want_wf is not None and workflow != want_wf) or (
                    want_run is not None and run_id != want_run
                ):
                    filtered += 1
                    continue
                if verify is not None:
                    why = verify(msg)
                    if why is not None:
                        self._skip(partition, offset, why)
                        continue
                if issued is not None and epoch is not None:
                    top = issued(workflow, run_id)
                    if top is not None and epoch > top:
                        self._skip(
                            partition,
                            offset,
                            f"its epoch {epoch} is above the highest the lifecycle store "
                            f"issued for run {run_id.decode(errors='replace')!r} ({top})",
                        )
                        continue
                key = (workflow, run_id)
                run = runs.get(key)
                if run is None and not _is_text(workflow, run_id):
                    self._skip(
                        partition, offset, "its lg-workflow or lg-run-id header is not UTF-8"
                    )
                    continue
                if run is not None:
                    if seq != run.next:  # not the live run's next record: which is it?
                        if run.lo <= seq <= run.hi or (run.extra is not None and seq in run.extra):
                            duplicates += 1
                            continue
                        if run.ended and seq > run.ended:
                            after_terminal += 1
                            continue
                    if epoch is not None and epoch < run.epoch:
                        stale += 1
                        continue
                value = msg.value()
                # The fast path: a value laid out as this run's earlier ones were (see
                # _walk for the whole grammar): one length byte for the kind, one or two for
                # the payload, then the run's tail, then run_seq and the headers map in a
                # layout already walked (``tails``), naming this record's run_seq, of a kind
                # already met. Anything else, a bad value too, takes the whole walk.
                try:
                    byte = value[0]
                    kind_end = (byte >> 1) + 1
                    length = value[kind_end]
                    at = kind_end + 1
                    if length & 0x80:
                        length = (length & 0x7F) | (value[at] << 7)
                        at += 1
                    end = at + (length >> 1)
                    fast = (
                        run is not None
                        and not byte & 0x81
                        and not length & 1
                        and value[at - 1] < 0x80
                        and value.startswith(run.tail, end)
                        and tails.get(value[end + len(run.tail) :]) == seq
                    )
                except (IndexError, TypeError):
                    fast = False
                if fast:
                    kind = value[1:kind_end]
                    status = _STATUS.get(kind)
                    fast = status is not None
                if fast:
                    payload = value[at:end]
                else:
                    try:
                        kind, payload, end = _walk(value, run_id, seq, topic, partition, offset)
                    except JournalRecordUndecodable as exc:
                        self._skip(partition, offset, exc.reason)
                        continue
                    status = _STATUS.get(kind)
                if (
                    epoch is None
                    and issued is not None
                    and kind in _FENCED_KINDS
                    and (issued(workflow, run_id) or 0) >= 1
                ):
                    self._skip(
                        partition,
                        offset,
                        f"it is a {kind.decode(errors='replace')} with no epoch, which "
                        "lockgate always stamps on one",
                    )
                    continue
                if run is None:
                    run = runs[key] = _RunFold(seq, run_id)
                elif seq == run.next and run.extra is None:
                    run.hi, run.next = seq, seq + 1
                else:
                    run.add(seq)
                if epoch is not None:
                    run.epoch = epoch
                if not run.ended and seq >= run.top:  # the run's last event so far
                    run.top = seq
                    run.status = status if status is not None else _status(kind, payload)
                    if kind in _TERMINAL_KINDS:
                        run.ended, run.next = seq, None
                        self._ended.setdefault(partition, deque()).append((offset, key))
                if not fast and len(tails) < _TAILS and value.startswith(run.tail, end):
                    tails[value[end + len(run.tail) :]] = seq
                stamp = msg.timestamp()
                kept.append(
                    (
                        run,
                        workflow,
                        run_id,
                        seq,
                        kind,
                        payload,
                        partition,
                        offset,
                        stamp[1] if stamp[0] else None,
                        epoch,
                        value,
                    )
                )
        finally:
            summary.records += records
            summary.filtered += filtered
            summary.duplicates += duplicates
            summary.after_terminal += after_terminal
            summary.stale += stale
            summary.events += len(kept)
        self._forget(last)
        return kept

    def _skip(self, partition: int, offset: int, reason: str) -> None:
        """A record not believed: named in the summary, or, ``strict``, the end of the fold."""
        if self.strict:
            raise JournalRecordUndecodable(self.topic, partition, offset, reason)
        self.summary.skipped.append((partition, offset, reason))

    def _named(
        self, headers: Any, partition: int, offset: int
    ) -> tuple[bytes, bytes, int, int | None] | None:
        """Workflow, run id, run_seq and epoch from headers in another order or layout (a
        record some other tool wrote); None when they do not say (the record is skipped)."""
        named = {k: v for k, v in headers or () if v is not None}
        version = named.get(SCHEMA_HEADER)
        if version is not None:
            try:
                check_schema_version(version.decode(errors="replace"))
            except NotARunEvent as exc:
                self._skip(partition, offset, str(exc))
                return None
        missing = [h for h in (WORKFLOW_HEADER, RUN_ID_HEADER, RUN_SEQ_HEADER) if h not in named]
        if missing:
            self._skip(partition, offset, f"it has no {', '.join(missing)} header")
            return None
        try:
            raw_epoch = named.get(RECORD_EPOCH_HEADER)
            epoch = int(raw_epoch) if raw_epoch is not None else None
            return named[WORKFLOW_HEADER], named[RUN_ID_HEADER], int(named[RUN_SEQ_HEADER]), epoch
        except ValueError as exc:
            self._skip(partition, offset, f"a header is not a number: {exc}")
            return None

    def _forget(self, last: dict[Any, Any]) -> None:
        """Drop the runs that ended more than ``forget_after`` records behind the ``last``
        offset a batch read of their partition."""
        if not self._ended:
            return
        runs, forgotten = self.summary._live, self.summary._forgotten
        for partition, ended in self._ended.items():
            read = last.get(partition)
            horizon = (read if read is not None else -1) - self._forget_after
            while ended and ended[0][0] < horizon:
                _offset, key = ended.popleft()
                run = runs.pop(key, None)
                if run is not None:
                    forgotten[run.status] += 1


#: The status each kind of event leaves a run in, as the fold has met them (a ``run:error``'s
#: depends on its payload and is never kept here).
_STATUS: dict[bytes, str] = {}


def _status(kind: bytes, payload: bytes) -> str:
    text = kind.decode()
    status = status_after(text, lambda: _parsed(payload)).value
    if text != "run:error":
        _STATUS[kind] = status
    return status


def _parsed(payload: bytes) -> Mapping[str, Any]:
    """A payload as the status it gives reads it: one that is not a JSON object (not UTF-8,
    say: a record lockgate did not write) says nothing, and the replay goes on; its
    ``JournalRecord.event`` is where it is refused."""
    try:
        found = json.loads(payload)
    except ValueError:
        return {}
    return found if isinstance(found, dict) else {}


def _is_text(*parts: Any) -> bool:
    """Whether each of ``parts`` is UTF-8 bytes (a run's names are text; a record is shown as
    text)."""
    try:
        for part in parts:
            if not isinstance(part, bytes):
                return False
            part.decode()
    except UnicodeDecodeError:
        return False
    return True


def _raise_error(msg: Any) -> None:
    from confluent_kafka import KafkaError, KafkaException

    if msg.error().code() == KafkaError._PARTITION_EOF:
        return
    raise KafkaException(msg.error())


def _varint(value: bytes, at: int) -> tuple[int, int]:
    """The zig-zag long at ``at`` and the position after it."""
    shift = n = 0
    while True:
        byte = value[at]
        at += 1
        n |= (byte & 0x7F) << shift
        if byte < 0x80:
            return (n >> 1) ^ -(n & 1), at
        shift += 7
        if shift > 63:
            raise ValueError("a long longer than 10 bytes")


def _walk(
    value: bytes | None, run_id: bytes, seq: int, topic: str, partition: int, offset: int
) -> tuple[bytes, bytes, int]:
    """Kind, payload (bytes) and where the payload ends in an Avro ``RunEvent`` value, having
    walked all of it: it
    must be whole, and name the run and ``run_seq`` its headers name. (Lengths below 64 are
    one byte, read inline; longer ones go through :func:`_varint`.)"""
    try:
        if value is None:
            raise ValueError("it has no value")
        size = len(value)
        byte = value[0]
        length, kind_at = (byte >> 1, 1) if byte < 0x80 and not byte & 1 else _varint(value, 0)
        kind_end = kind_at + length
        byte = value[kind_end]
        length, at = (
            (byte >> 1, kind_end + 1) if byte < 0x80 and not byte & 1 else _varint(value, kind_end)
        )
        payload_at, payload_end = at, at + length
        byte = value[payload_end]
        length, at = (
            (byte >> 1, payload_end + 1)
            if byte < 0x80 and not byte & 1
            else _varint(value, payload_end)
        )
        named_run = value[at : at + length]
        at += length
        byte = value[at]  # schema_version
        length, at = (byte >> 1, at + 1) if byte < 0x80 and not byte & 1 else _varint(value, at)
        at += length
        if value[at] == 2:  # run_seq's union: the long branch
            value_seq, at = _varint(value, at + 1)
        elif value[at] == 0:
            value_seq, at = None, at + 1
        else:
            raise ValueError(f"run_seq's union has no branch {value[at]}")
        at = at + 1 if value[at] == 0 else _skip_map(value, at)
        if at != size or length < 0 or kind_end <= kind_at or payload_end < payload_at:
            raise ValueError("its fields do not fill it exactly")
        kind = value[kind_at:kind_end]
        kind.decode()
    except (IndexError, ValueError) as exc:
        raise JournalRecordUndecodable(topic, partition, offset, f"its value: {exc}") from None
    if named_run != run_id or value_seq != seq:
        raise JournalRecordUndecodable(
            topic,
            partition,
            offset,
            f"its headers name run {run_id.decode(errors='replace')!r} #{seq} but its value "
            f"run {named_run.decode(errors='replace')!r} #{value_seq}",
        )
    return kind, value[payload_at:payload_end], payload_end


def _avro_string(text: bytes) -> bytes:
    """``text`` as Avro writes a string: its zig-zag length, then its bytes."""
    n, out = len(text) << 1, bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out) + text


def _skip_map(value: bytes, at: int) -> int:
    """The position after an Avro map of strings starting at ``at``."""
    while True:
        count, at = _varint(value, at)
        if count == 0:
            return at
        if count < 0:  # a block with its byte size
            count = -count
            _size, at = _varint(value, at)
        for _ in range(2 * count):
            length, at = _varint(value, at)
            at += length
            if length < 0 or at > len(value):
                raise ValueError("a header runs past the value's end")
