"""What one process keeps of a run's Kafka journal: the events it has read or copied, folded by
``run_seq`` (the first copy of each stays), with where in the run's partition it has read up
to and where the run's records start.

The epoch bound. Once the highest epoch the lifecycle store issued for the run is known
(``bound``), a copy stamped with a higher epoch was not written by lockgate (no claim of the
run ever held that epoch): it is held aside (``aside``), never folded in, so it cannot hide
the real event at its ``run_seq``. The bound only grows (a claim raises the epoch); a copy held
aside that a higher bound covers is folded in then. The copies of one ``run_seq`` lockgate
writes all carry one epoch (the lifecycle store numbers and fences each event once), so a
``run_seq`` with copies of two epochs is a forgery or nothing: the first copy of each epoch is
kept, and the fold takes the first one the bound allows.

A copy with no epoch at all is held aside the same way, once the bound is known and the run was
claimed at least once (``bound`` 1 or more), when its kind is one only an attempt writes
(:data:`FENCED_KINDS`, ``run:complete``): lockgate writes it fenced, always, so one without an
epoch was not written by it. Events the store writes itself
(``run:init``, controls, requeues, a cancel's ``run:error``, a retry's seeded steps) may carry
none and are kept."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field

from lockgate.journal._events import EPOCH_HEADER, RunEvent, as_stored
from lockgate.stores.kafka._partition import gate_key, is_init

Run = tuple[str, str]

#: The kinds of event only a run's attempt writes, always through a fenced write, so always
#: stamped with its claim's epoch: ``run:complete``. Not the others: the store writes a
#: cancel's, a terminate's or a quarantine's ``run:error`` and a hand-on's ``run:continued``
#: itself, unfenced, and a retry's seed copies the failed run's step events into the new run
#: at submit, unfenced.
FENCED_KINDS = frozenset({"run:complete"})


@dataclass
class Journal:
    """A run's journal as far as this process has read its partition."""

    partition: int
    next_offset: int  # the partition's offset to read on from
    key: str | None = None  # the record key (gate key), once its run:init is seen
    first: int | None = None  # the offset of the run's first record seen
    events: dict[int, RunEvent] = field(default_factory=dict)
    #: The highest epoch the lifecycle store issued for the run, once known.
    bound: int | None = None
    #: Copies not folded in: above the bound, or of another epoch than the one kept.
    aside: dict[int, list[RunEvent]] = field(default_factory=dict)

    def keep(self, event: RunEvent) -> bool:
        """Fold one copy in: the first copy of a ``run_seq`` stays. False when the copy is
        held aside because its epoch is above the bound."""
        seq = event.run_seq
        if seq is None:
            return True
        if self.bound is not None and not allowed(event, self.bound):
            self._put_aside(seq, event)
            return False
        have = self.events.get(seq)
        if have is None:
            self.events[seq] = event
            if self.key is None and is_init(event):
                self.key = gate_key(event)
        elif have.headers.get(EPOCH_HEADER) != event.headers.get(EPOCH_HEADER):
            self._put_aside(seq, event)
        return True

    def _put_aside(self, seq: int, event: RunEvent) -> None:
        copies = self.aside.setdefault(seq, [])
        epoch = epoch_of(event)
        if all(epoch_of(copy) != epoch for copy in copies):
            copies.append(event)

    def set_bound(self, bound: int | None) -> int:
        """Learn the highest epoch issued for the run (it only grows): copies above it leave
        the fold, copies held aside that it covers come in. How many left the fold."""
        if bound is None or (self.bound is not None and bound <= self.bound):
            return 0
        self.bound = bound
        dropped = 0
        for seq, event in list(self.events.items()):
            if not allowed(event, bound):
                del self.events[seq]
                self._put_aside(seq, event)
                dropped += 1
        for seq, copies in list(self.aside.items()):
            if seq in self.events:
                continue
            for copy in copies:
                if allowed(copy, bound):
                    self.events[seq] = copy
                    copies.remove(copy)
                    break
            if not copies:
                del self.aside[seq]
        return dropped

    def ordered(self) -> list[RunEvent]:
        """The journal oldest first, the events kept (never changed in place): taken under
        the memory lock, then handed out with :func:`handed_out` outside it."""
        return [self.events[seq] for seq in sorted(self.events)]

    @property
    def whole(self) -> bool:
        """No event is missing before the last one kept."""
        return gapless(self.events) == max(self.events, default=0)

    def fork(self) -> Journal:
        """A copy to read into outside the memory lock (see ``_adopt``)."""
        return Journal(
            self.partition,
            self.next_offset,
            self.key,
            self.first,
            dict(self.events),
            self.bound,
            {seq: list(copies) for seq, copies in self.aside.items()},
        )

    def merge(self, other: Journal) -> None:
        """Take in what ``other`` (a fork of this journal, read on) found."""
        self.set_bound(other.bound)
        for event in other.events.values():
            self.keep(event)
        for copies in other.aside.values():
            for event in copies:
                self.keep(event)
        self.next_offset = max(self.next_offset, other.next_offset)
        if other.first is not None and (self.first is None or other.first < self.first):
            self.first = other.first

    def holds_through(self, last_seq: int) -> bool:
        """Every event from ``run_seq`` 1 up to at least ``last_seq`` is kept, none missing."""
        top = max(self.events, default=0)
        return top >= last_seq and len(self.events) == top

    @property
    def ended(self) -> bool:
        """A terminal is kept: no later copy can change the journal."""
        return any(event.is_terminal for event in self.events.values())


def epoch_of(event: RunEvent) -> int:
    """The epoch an event is stamped with (0 for an unfenced write)."""
    raw = event.headers.get(EPOCH_HEADER)
    return int(raw) if raw is not None and raw.isdigit() else 0


def allowed(event: RunEvent, bound: int) -> bool:
    """Whether a copy is one lockgate may have written, the highest epoch issued for its run
    being ``bound``: stamped no higher, and, once a claim was issued (``bound`` 1 or more),
    stamped at all when its kind is always fenced."""
    raw = event.headers.get(EPOCH_HEADER)
    if raw is None:
        # Before any claim (bound 0) no attempt ran, so nothing says how a terminal came.
        return bound < 1 or event.kind not in FENCED_KINDS
    return epoch_of(event) <= bound


def gapless(events: Mapping[int, RunEvent]) -> int:
    """The highest ``run_seq`` up to which ``events`` has every one from 1."""
    seq = 0
    while seq + 1 in events:
        seq += 1
    return seq


def _copied(event: RunEvent) -> RunEvent:
    return dataclasses.replace(event, payload=as_stored(event.payload))


def lower(one: tuple[int, int] | None, other: tuple[int, int] | None) -> tuple[int, int] | None:
    """The position with the lower first offset, of those known."""
    if one is None or (other is not None and other[1] < one[1]):
        return other
    return one


def handed_out(events: list[RunEvent]) -> list[RunEvent]:
    """Copies of kept events for a caller (changing a payload changes only its own), made
    outside the memory lock: a long journal's copy holds no one up."""
    return [_copied(event) for event in events]
