"""One partition of a bound topic, as its owner tracks it: pure bookkeeping, no I/O.

A record is *waiting* once read, *submitting* while its run's submit is in flight, and *open*
from its submit until its run has finished. The partition may be committed up to its oldest
record not yet durably submitted (not yet finished, when ordered): whoever owns it next reads
every record from there, and a record read twice names the same run.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Pending:
    """A record read and decoded, whose run is still to be submitted."""

    offset: int
    run_id: str
    value: Any
    metadata: dict[str, Any]
    #: The record's key and value as read, for a dead-letter copy should its submit fail.
    raw_key: bytes | None = None
    raw_value: bytes | None = None


@dataclass
class PartitionFlow:
    """The records of one owned partition between their read and their commit."""

    partition: int
    ordered: bool
    #: The offset of the next record to read (None until the first record is read).
    next_offset: int | None = None
    waiting: collections.deque[Pending] = field(default_factory=collections.deque)
    submitting: set[int] = field(default_factory=set)
    #: Offset -> run id of each run submitted and not known to have finished.
    open: dict[int, str] = field(default_factory=dict)
    #: The open runs last found waiting (a sleep, a signal, a pause): they hold no slot.
    parked: set[int] = field(default_factory=set)

    def read(self, offset: int) -> None:
        """The record at ``offset`` was read (waiting, dead-lettered or skipped)."""
        self.next_offset = offset + 1

    def can_start(self) -> bool:
        """Whether a waiting record's run may be submitted now."""
        if self.ordered:
            return bool(self.waiting) and not self.open and not self.submitting
        return bool(self.waiting)

    def ready(self, room: int) -> list[Pending]:
        """Take up to ``room`` waiting records whose runs may be submitted now: in order, and
        when ordered only the next one, once the partition has no run open."""
        if not self.can_start() or room < 1:
            return []
        if self.ordered:
            room = 1
        taken: list[Pending] = []
        while self.waiting and len(taken) < room:
            pending = self.waiting.popleft()
            self.submitting.add(pending.offset)
            taken.append(pending)
        return taken

    def submitted(self, pending: Pending) -> None:
        """``pending``'s run is in the store (made now, or found made before)."""
        self.submitting.discard(pending.offset)
        self.open[pending.offset] = pending.run_id

    def put_back(self, pending: list[Pending]) -> None:
        """Submits that did not go through (the store away): waiting again, in offset order
        among the records still waiting."""
        for item in pending:
            self.submitting.discard(item.offset)
        self.waiting = collections.deque(sorted([*pending, *self.waiting], key=lambda p: p.offset))

    def dropped(self, pending: Pending) -> None:
        """``pending`` starts no run (its copy went to the dead-letter topic instead)."""
        self.submitting.discard(pending.offset)

    def finished(self, offset: int) -> None:
        self.open.pop(offset, None)
        self.parked.discard(offset)

    def parked_now(self, offset: int, parked: bool) -> None:
        """Whether the open run of ``offset`` was found waiting."""
        if parked and offset in self.open:
            self.parked.add(offset)
        else:
            self.parked.discard(offset)

    @property
    def in_flight(self) -> int:
        """Runs of this partition submitted, or being submitted, and not finished, less those
        found waiting (a sleep, a signal, a pause): they hold no slot."""
        return len(self.open) - len(self.parked) + len(self.submitting)

    def committable(self) -> int | None:
        """The offset the partition may be committed at: its oldest record not yet submitted
        (not yet finished, when ordered), else the next one to read."""
        candidates = [self.waiting[0].offset] if self.waiting else []
        candidates.extend(self.submitting)
        if self.ordered:
            candidates.extend(self.open)
        if candidates:
            return min(candidates)
        return self.next_offset


@dataclass
class AskPace:
    """When the owner asks the store about an open run that no worker here reported ended (one
    another worker ran): once it has been open ``floor`` seconds, or longer while this worker's
    own runs take longer than that from their submit to their end (``slack`` times their recent
    mean), but never later than ``ceiling`` seconds. A busy worker's runs wait in its queue
    longer than ``floor``; asking about each of them again and again cost more than the submits
    did, while a run another worker ran is still noticed within about twice the time the
    owner's own runs take, and within ``ceiling`` however long those take."""

    floor: float
    ceiling: float
    slack: float = 2.0
    #: How much one run's time moves the mean.
    weight: float = 0.1
    mean: float = 0.0

    def took(self, seconds: float) -> None:
        """A run this worker ran ended ``seconds`` after its submit. One run counts for no more
        than ``ceiling / slack``: a run that slept or waited for a signal took long without
        having waited in the queue, and must not hold the pace at the ceiling for the quick
        runs after it. (The owner learns nothing from a run an ask found parked.)"""
        sample = min(max(seconds, 0.0), self.ceiling / self.slack)
        self.mean += (sample - self.mean) * self.weight

    @property
    def after(self) -> float:
        """Seconds a run is open (or since it was last asked about) before it is asked about."""
        return min(max(self.floor, self.slack * self.mean), self.ceiling)
