"""What one process keeps of a run's Kafka journal: the events it has read or copied, folded by
``run_seq`` (the first copy of each stays), with where in the run's partition it has read up
to and where the run's records start."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field

from lockgate.journal._events import RunEvent, as_stored
from lockgate.stores.kafka._partition import gate_key, is_init

Run = tuple[str, str]


@dataclass
class Journal:
    """A run's journal as far as this process has read its partition."""

    partition: int
    next_offset: int  # the partition's offset to read on from
    key: str | None = None  # the record key (gate key), once its run:init is seen
    first: int | None = None  # the offset of the run's first record seen
    events: dict[int, RunEvent] = field(default_factory=dict)

    def keep(self, event: RunEvent) -> None:
        """Fold one copy in: the first copy of a ``run_seq`` stays."""
        if event.run_seq is not None:
            self.events.setdefault(event.run_seq, event)
            if self.key is None and is_init(event):
                self.key = gate_key(event)

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
        return Journal(self.partition, self.next_offset, self.key, self.first, dict(self.events))

    def merge(self, other: Journal) -> None:
        """Take in what ``other`` (a fork of this journal, read on) found."""
        for event in other.events.values():
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
