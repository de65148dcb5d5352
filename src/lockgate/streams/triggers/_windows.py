"""The open windows of one partition of a trigger topic: pure bookkeeping, no Kafka, no store.

A :class:`PartitionWindows` takes the partition's records in offset order and says which
batches are ready to fire (a ``Collect`` that reached ``max_events`` at once; any window whose
time came by :meth:`PartitionWindows.due`). It knows each key's fired-through mark (the last
offset of the key's records already in a fired run), skips the records a mark covers, and says
how far the partition may be committed: never past the oldest record still in an open window,
so a consumer that takes the partition over after a crash reads every unfired record again,
and the marks tell it which of the records it reads again were fired already.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from lockgate.stores._triggers import TriggerPolicy


@dataclass(frozen=True)
class Batch:
    """The events of one key, in offset order, that fire together; ``due_at``: when its
    window fell due, when it was taken for that (None: taken full, or before it got too big)."""

    partition: int
    key: str
    offsets: tuple[int, ...]
    events: tuple[dict[str, Any], ...]
    due_at: float | None = None
    #: The records' bytes, as read (their share of it in a batch's rest).
    size: int = 0

    @property
    def first(self) -> int:
        return self.offsets[0]

    @property
    def last(self) -> int:
        return self.offsets[-1]

    def after(self, mark: int) -> Batch | None:
        """The part of this batch past ``mark``, or None when the mark covers it all."""
        keep = [i for i, offset in enumerate(self.offsets) if offset > mark]
        if not keep:
            return None
        return Batch(
            self.partition,
            self.key,
            tuple(self.offsets[i] for i in keep),
            tuple(self.events[i] for i in keep),
            self.due_at,
            self.size * len(keep) // len(self.offsets),
        )


@dataclass
class Window:
    """One key's open window: its records, their size, when its first came, when it is due."""

    offsets: list[int] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    size: int = 0
    first_at: float = 0.0
    due_at: float = 0.0


class PartitionWindows:
    """The open windows of the keys of one partition (see the module docstring).

    ``policy_of(key)`` is the trigger policy a key's fires take. Marks must be known before a
    key's records are added: :meth:`unknown` names the keys to ask the store about, and
    :meth:`know` records the answers (a key with no mark has none, -1)."""

    def __init__(
        self,
        partition: int,
        policy_of: Callable[[str], TriggerPolicy],
        most_bytes: int | None = None,
    ) -> None:
        self.partition = partition
        self._policy_of = policy_of
        #: A window whose records would pass this many bytes fires first: a run's params
        #: hold its events, and one journal record holds its params.
        self.most_bytes = most_bytes
        self.windows: dict[str, Window] = {}
        self.marks: dict[str, int] = {}
        #: (due_at, key) of every open window, with stale entries skipped when popped.
        self._due: list[tuple[float, str]] = []
        #: One past the last offset added; None before any.
        self.next_offset: int | None = None
        #: Batches taken from their window and not yet fired (by identity): they hold the
        #: commit back too.
        self.in_flight: dict[int, Batch] = {}

    def unknown(self, keys: list[str]) -> list[str]:
        """Those of ``keys`` whose fired-through mark is not known yet."""
        return [key for key in dict.fromkeys(keys) if key not in self.marks]

    def know(self, keys: list[str], marks: dict[str, int]) -> None:
        for key in keys:
            self.marks[key] = max(self.marks.get(key, -1), marks.get(key, -1))

    def forget_marks(self, below: int) -> None:
        """Drop the marks below ``below``, the partition's oldest record kept: they cover
        records that can never be read again. A key that comes back has its mark asked of the
        store again (and the store dropped it too, or keeps a higher one)."""
        self.marks = {key: at for key, at in self.marks.items() if at >= below}

    def add(
        self, offset: int, key: str, event: dict[str, Any], now: float, size: int = 0
    ) -> list[Batch]:
        """Add a record of ``size`` bytes read at ``now``; the batches ready because of it: the
        window before it when the record would take it past ``most_bytes``, and the window it
        fills, for a ``Collect`` at ``max_events``."""
        self.next_offset = offset + 1
        if offset <= self.marks[key]:
            return []  # in a run already: read again after a takeover
        policy = self._policy_of(key)
        ready = []
        window = self.windows.get(key)
        if (
            window is not None
            and self.most_bytes is not None
            and window.size + size > self.most_bytes
        ):
            ready.append(self._take(key))
            window = None
        if window is None:
            window = self.windows[key] = Window(first_at=now)
            current = None
        else:
            current = window.due_at
        window.offsets.append(offset)
        window.events.append(event)
        window.size += size
        due = policy.due_at(window.first_at, now, current)
        if due != current:
            window.due_at = due
            heapq.heappush(self._due, (due, key))
        if policy.full(len(window.offsets)):
            ready.append(self._take(key))
        return ready

    def skipped(self, offset: int) -> None:
        """A record that is no event of this partition's windows (sent to the dead-letter
        topic) was read at ``offset``."""
        self.next_offset = offset + 1

    def due(self, now: float) -> list[Batch]:
        """Take the batches of every window due by ``now``, the earliest first."""
        batches = []
        while self._due and self._due[0][0] <= now:
            due, key = heapq.heappop(self._due)
            window = self.windows.get(key)
            if window is not None and window.due_at == due:
                batches.append(self._take(key, due))
        return batches

    def next_due(self) -> float | None:
        """When the soonest open window is due, or None."""
        while self._due:
            due, key = self._due[0]
            window = self.windows.get(key)
            if window is not None and window.due_at == due:
                return due
            heapq.heappop(self._due)
        return None

    def fired(self, batch: Batch, mark: int) -> Batch | None:
        """The store fired ``batch`` (or answered that ``mark`` covers some of it): record the
        mark; the rest of the batch still to fire (in flight now), if the mark did not cover
        it all."""
        self.marks[batch.key] = max(self.marks.get(batch.key, -1), mark)
        self.in_flight.pop(id(batch), None)
        rest = batch.after(mark)
        if rest is not None:
            self.in_flight[id(rest)] = rest
        return rest

    def committable(self) -> int | None:
        """The offset the partition may be committed at: the oldest record still in an open
        window, else one past the last read. None before any record."""
        held = [w.offsets[0] for w in self.windows.values()]
        held.extend(batch.first for batch in self.in_flight.values())
        return min(held) if held else self.next_offset

    def open_keys(self) -> list[tuple[str, int, float]]:
        """(key, count, due time) of each open window."""
        return [(key, len(w.offsets), w.due_at) for key, w in self.windows.items()]

    def _take(self, key: str, due_at: float | None = None) -> Batch:
        window = self.windows.pop(key)
        batch = Batch(
            self.partition, key, tuple(window.offsets), tuple(window.events), due_at, window.size
        )
        self.in_flight[id(batch)] = batch
        return batch
