"""What the journal topic holds of a live run, for a :class:`CompositeStore`'s first copy of
it: :class:`HeldReads`, the part of :class:`~lockgate.stores.kafka.KafkaEventLogStore` that
answers ``held_through`` and ``journal_if_held`` from memory, or by reading the run's partition
no further than the run's outbox asks."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from lockgate.journal._events import RunEvent
from lockgate.stores._calls import call_owned
from lockgate.stores.kafka._journal import Journal, Run, epoch_of, gapless, lower


class HeldReads:
    """``held_through`` and ``journal_if_held`` (see the store's module docstring, Reads)."""

    if TYPE_CHECKING:  # the store's, which this is a part of
        _memory: threading.Lock
        _read_lock: threading.Lock
        _journals: OrderedDict[Run, Journal]
        _positions: dict[Run, tuple[int, int]]
        _stored_position: Callable[[str, str], tuple[int, int] | None] | None

        def _read_on(self, journal: Journal, run: Run, *, until: int | None = None) -> None: ...
        def _remember(self, run: Run, journal: Journal, events: Sequence[RunEvent]) -> None: ...
        def _journal_in_memory(self, run: Run, last_seq: int) -> list[RunEvent] | None: ...
        def _adopt(self, run: Run, fork: Journal, *, always: bool) -> Journal: ...
        def _bound(self, journal: Journal, run: Run, issued: int | None) -> None: ...

    def held_through(
        self,
        name: str,
        run_id: str,
        outbox: Sequence[RunEvent],
        journal_at: tuple[int, int] | None = None,
    ) -> int:
        """The ``run_seq`` up to which the topic is known to hold the run's events with no
        gap, given its ``outbox`` (every event of the live run from ``run_seq`` 1, as a
        lifecycle store keeps them; a :class:`CompositeStore`'s first copy of a run asks).

        Known from memory, or from the position the lifecycle keeps: it is kept once a copy
        starting at ``run_seq`` 1 was acknowledged, so that event is there and this process
        keeps the outbox's copy of it. Past that the run's partition is read from the run's
        first offset only until every outbox event is found, or to the partition's end.

        ``journal_at``: the position the lifecycle keeps, when the caller has it already (a
        claim answers it): it is not asked for again."""
        run = (name, run_id)
        stored = journal_at
        if self._stored_position is not None and self._must_ask_position(run, journal_at):
            stored = self._stored_position(name, run_id)
        held = self._held_without_reading(run, outbox, stored)
        return held if held is not None else self._held_by_reading(run, outbox, stored)

    async def _held_through_natively(
        self,
        name: str,
        run_id: str,
        outbox: Sequence[RunEvent],
        journal_at: tuple[int, int] | None = None,
    ) -> int:
        run = (name, run_id)
        stored = journal_at
        if self._stored_position is not None and self._must_ask_position(run, journal_at):
            stored = await call_owned(self._stored_position, name, run_id)
        held = self._held_without_reading(run, outbox, stored)
        if held is not None:
            return held
        found: int = await call_owned(self._held_by_reading, run, outbox, stored)
        return found

    def journal_if_held(
        self,
        name: str,
        run_id: str,
        outbox: Sequence[RunEvent],
        journal_at: tuple[int, int] | None,
    ) -> list[RunEvent] | None:
        """The run's journal from memory, when this process can tell with no request that
        the topic holds every event of ``outbox`` (every event of the live run, as a claim
        loads it), given ``journal_at`` (the lifecycle's position of the run, as the claim
        answers it); else None, and the caller asks :meth:`held_through`. Safe on an event
        loop: it only looks at memory."""
        run = (name, run_id)
        if self._must_ask_position(run, journal_at):
            return None  # the lifecycle must be asked where the run starts
        last = outbox[-1].run_seq or 0
        if self._held_without_reading(run, outbox, journal_at) != last:
            return None
        return self._journal_in_memory(run, last)

    def _must_ask_position(self, run: Run, journal_at: tuple[int, int] | None) -> bool:
        """Whether the lifecycle is to be asked where the run starts in the topic: the caller
        was not told (``journal_at``) and this process knows nothing of the run."""
        return journal_at is None and self._knows_nothing_of(run)

    def _knows_nothing_of(self, run: Run) -> bool:
        with self._memory:
            return run not in self._journals and run not in self._positions

    def _held_without_reading(
        self, run: Run, outbox: Sequence[RunEvent], stored: tuple[int, int] | None
    ) -> int | None:
        """:meth:`held_through` from memory and ``stored`` (the lifecycle's position of a
        run this process knows nothing of), or None when the topic must be read."""
        with self._memory:
            journal = self._journals.get(run)
            if journal is None:
                known = self._positions.get(run) or stored
                if known is None:
                    return 0  # no copy counts yet (see _find)
                journal = Journal(*known, first=known[1])
                journal.keep(outbox[0])
            if not journal.holds_through(outbox[-1].run_seq or 0):
                return None
            self._remember(run, journal, ())
            return gapless(journal.events)

    def _held_by_reading(
        self, run: Run, outbox: Sequence[RunEvent], stored: tuple[int, int] | None
    ) -> int:
        """:meth:`held_through` by reading the run's partition, no further than it takes."""
        with self._memory:
            journal = self._journals.get(run)
            known = lower(self._positions.get(run), stored)
            if journal is not None:
                fork = journal.fork()
            elif known is not None:
                fork = Journal(*known, first=known[1])
                fork.keep(outbox[0])
            else:
                return 0
        # The outbox holds every event of the live run: no record lockgate wrote for it has
        # a higher epoch than the outbox's highest.
        self._bound(fork, run, max(epoch_of(event) for event in outbox))
        with self._read_lock:
            self._read_on(fork, run, until=outbox[-1].run_seq or 0)
        with self._memory:
            return gapless(self._adopt(run, fork, always=True).events)
