"""CompositeStore: a lifecycle backend that coordinates, and an event log that keeps history.

The lifecycle backend decides everything that must be atomic (claims and gates, fenced
appends, waits, signals, terminals), and keeps each run's events as an outbox while the run
lives. After every operation the composite copies the run's new events, with their ``run_seq``
and epoch headers, to the event log, which then answers every journal read. A copy is
idempotent (the log keeps one event per ``run_seq``), so one lost to a crash is made by the next
operation or read of that run. Once a run's terminal has been copied, its outbox is dropped.

The methods a worker calls on its hot path are written once as operations (``_composed``):
called, they make their backend calls one by one; through :meth:`CompositeStore.coroutine_for`
the async runtime runs the same operations on the event loop, with each backend's own native
calls (a Valkey script on the loop's client, a Kafka copy awaiting its delivery reports).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from lockgate._errors import ConfigurationError, RunNotFoundError, StoreUnavailable
from lockgate.journal._events import RunEvent
from lockgate.stores._base import EventLogStore, Store
from lockgate.stores._gates import WaitReason
from lockgate.stores._poison import PoisonPolicy
from lockgate.stores._records import CreateOptions, Submit
from lockgate.stores._types import (
    ClaimedRun,
    Claims,
    RunControls,
    RunInfo,
    StoreMarker,
    Written,
)
from lockgate.stores.composite._composed import (
    Call,
    Op,
    Together,
    composed,
    composed_op,
    drive,
    drive_natively,
)
from lockgate.stores.composite._drops import OutboxDrops
from lockgate.stores.composite._groups import CompositeGroups
from lockgate.stores.composite._outbox import CopyingLog, Outbox, as_kept

_log = logging.getLogger("lockgate.stores")

#: Live runs whose last copied ``run_seq`` a composite remembers, at most.
COPIED_KEPT = 100_000

#: Writes whose events (their third argument) the lifecycle takes before the log's copy.
_COPIED_WRITES = frozenset({"append_events", "append_and_poll", "finish_if_quiet"})
#: The run-ending writes in flight, held so that none is lost with a cancelled caller.
_ENDING: set[asyncio.Task[Any]] = set()

T = TypeVar("T")


def _ends_run(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    events: Sequence[RunEvent] = args[2] if len(args) > 2 else kwargs.get("events", ())
    return bool(events) and events[-1].is_terminal


async def _to_its_end(write: Awaitable[T]) -> T:
    """Await ``write``, a write that ends a run, as a task of its own that a cancel of the
    caller does not stop. Once the lifecycle has taken a terminal, the run's lock is gone and
    no later operation of it copies its outbox: cut short between the two (an attempt's own
    heartbeat, finding the lock the terminal released, cancels the attempt), the run would be
    ended in the lifecycle with no terminal in the log as a raw read finds it. On a store
    thread a write runs to its end anyway; this makes the loop's the same."""
    task = asyncio.ensure_future(write)
    _ENDING.add(task)
    task.add_done_callback(_ENDING.discard)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        # The caller stopped waiting: no one else hears how the write ends. (A caller that
        # waited has its failure raised to it, and tells it itself.)
        task.add_done_callback(_ended_unheard)
        raise


def _ended_unheard(task: asyncio.Task[Any]) -> None:
    if task.cancelled():
        return
    failed = task.exception()
    if failed is not None:
        _log.warning("a run-ending write failed after its caller stopped waiting: %s", failed)


class CompositeStore(CompositeGroups):
    """``lifecycle`` (for example :class:`ValkeyLifecycleStore`) coordinates runs and serves
    every optional group; ``events`` (an event log that keeps copies, for example
    :class:`SQLiteStore`) holds each run's journal and answers journal reads."""

    blocking_io = True  # every call goes to at least one backend that does I/O

    def __init__(self, *, lifecycle: Store, events: EventLogStore) -> None:
        if not isinstance(lifecycle, Outbox):
            raise ConfigurationError(
                f"CompositeStore(lifecycle=...) needs a store that keeps an outbox of each "
                f"run's events (events_after, drop_outbox, and writes answering what they left "
                f"there: append_written, ...), such as ValkeyLifecycleStore; "
                f"{type(lifecycle).__name__} does not"
            )
        if not isinstance(events, CopyingLog):
            raise ConfigurationError(
                f"CompositeStore(events=...) needs an event log that keeps copies "
                f"(append_copies), such as SQLiteStore; {type(events).__name__} does not"
            )
        bind = getattr(events, "bind_lifecycle", None)
        if callable(bind):  # a log laid out by the lifecycle's shards (KafkaEventLogStore)
            bind(lifecycle)
        self.lifecycle = lifecycle
        self.events = events
        self._outbox: Outbox = lifecycle
        self._drops = OutboxDrops(lifecycle)
        self._log: CopyingLog = events
        self.heartbeat_interval = getattr(lifecycle, "heartbeat_interval", 10.0)
        self.lock_ttl = getattr(lifecycle, "lock_ttl", 30.0)
        self.max_replay_entries = getattr(lifecycle, "max_replay_entries", None)
        self.shard_count = getattr(lifecycle, "shard_count", 1)
        #: Whether the lifecycle runs its calls on the event loop: then so do composed methods.
        coroutine_for = getattr(lifecycle, "coroutine_for", None)
        self._natively = callable(coroutine_for) and (
            coroutine_for(lifecycle.append_and_poll) is not None
        )
        #: The last ``run_seq`` this process copied, per live run.
        self._copied: dict[tuple[str, str], int] = {}
        #: The event log failed a copy or a claimed run's read, and has not answered since.
        self._log_away = False

    def rebalance_shards(self, worker_id: str, ttl: float | None = None) -> list[int]:
        """The lifecycle backend's shard leases (see ``ValkeyStore.rebalance_shards``)."""
        leased: list[int] = self.lifecycle.rebalance_shards(worker_id, ttl)  # type: ignore[attr-defined]
        return leased

    def release_shards(self, worker_id: str) -> None:
        self.lifecycle.release_shards(worker_id)  # type: ignore[attr-defined]

    def __repr__(self) -> str:
        return f"CompositeStore(lifecycle={self.lifecycle!r}, events={self.events!r})"

    def capabilities(self) -> frozenset[str]:
        return self.lifecycle.capabilities()

    def info(self) -> dict[str, Any]:
        """Both halves, as ``lockgate store info`` shows them: ``lifecycle`` (the lifecycle
        store's own info) and ``events`` (the event log's: for Kafka, the journal topic's
        partitions and their offsets). A half with no ``info`` shows its name alone."""
        halves: dict[str, Any] = {}
        for role, half in (("lifecycle", self.lifecycle), ("events", self.events)):
            info = getattr(half, "info", None)
            halves[role] = info() if callable(info) else {"store": repr(half)}
        return halves

    def coroutine_for(self, method: Callable[..., Any]) -> Callable[..., Awaitable[Any]] | None:
        """``method``'s operation run on the event loop (``composite/_composed.py``), when it
        is one of this store's composed methods and the lifecycle backend runs its own calls
        there too (as :class:`ValkeyLifecycleStore` does); else None, and the runtime calls
        ``method`` on a store thread."""
        op = composed_op(method) if getattr(method, "__self__", None) is self else None
        if op is None or not self._natively:
            return None
        if op.__name__ in _COPIED_WRITES:

            def write(*args: Any, **kwargs: Any) -> Awaitable[Any]:
                run = drive_natively(op(self, *args, **kwargs))
                return _to_its_end(run) if _ends_run(args, kwargs) else run

            return write
        return lambda *args, **kwargs: drive_natively(op(self, *args, **kwargs))

    @property
    def read_events_from(self) -> Callable[..., list[RunEvent]]:
        """The event log's suffix read, after a copy, when the log has one; AttributeError
        otherwise, so callers can look for it with ``getattr``."""
        method = getattr(self.events, "read_events_from", None)
        if method is None:
            raise AttributeError(f"{type(self.events).__name__} has no read_events_from")

        def read(name: str, run_id: str, after_seq: int = 0) -> list[RunEvent]:
            events = drive(self._journal_op(name, run_id))
            if events is not None:
                return [event for event in events if (event.run_seq or 0) > after_seq]
            return method(name, run_id, after_seq)  # type: ignore[no-any-return]

        return read

    # -- copying -------------------------------------------------------------------------------

    def _copy(self, name: str, run_id: str | None, *, wrote: bool = False) -> int | None:
        """Copy the run's events the log does not have yet; drop the outbox once its terminal
        is copied. Returns the ``run_seq`` of the outbox's last event when the outbox vouches
        for the run (the log then holds every event of it up to there), or None when it
        cannot (no outbox: the run ended and its outbox was dropped, or there is no such run).

        The ``run_seq`` this process last copied is remembered, so an operation costs one read
        of the outbox, not a read of the log too. That read starts one event early: the outbox
        answering with the event last copied shows it still holds the run, where an empty
        answer could also mean another process copied the terminal and dropped it. Another
        process may have copied further since; the events it copied come again and the log
        keeps them once.

        ``wrote``: the operation just appended events. Finding no outbox is then right only
        while the lifecycle still holds the run (another process copied its terminal); if the
        run is gone (Valkey lost its keys between the append and this copy), the events never
        reached the log, and :class:`RunNotFoundError` says so instead of the append seeming
        to have been kept."""
        return drive(self._copy_op(name, run_id, wrote=wrote))

    def _copy_op(self, name: str, run_id: str | None, *, wrote: bool = False) -> Op[int | None]:
        """:meth:`_copy` as an operation."""
        if run_id is None:
            return None
        run = (name, run_id)
        have = self._copied.get(run)
        if have is None:
            return (yield from self._first_copy_op(name, run_id, wrote=wrote))
        fresh = yield Call(self._outbox.events_after, (name, run_id, max(have - 1, 0)))
        if have and (not fresh or fresh[0].run_seq != have):
            self._copied.pop(run, None)  # no outbox: the log alone knows the run now
            yield from self._check_kept_op(name, run_id, wrote)
            return None
        return (yield from self._copy_fresh_op(name, run_id, have, fresh))

    def _copy_written_op(
        self, name: str, run_id: str, events: list[RunEvent], written: Written
    ) -> Op[int | None]:
        """:meth:`_copy` after a write that answered what it left in the outbox: when this
        process had copied the outbox up to just before the write's events, those events are
        the fresh ones, as the outbox keeps them (numbered on, stamped with the write's epoch),
        and the outbox is not read. Otherwise (another writer came between, or a copy is
        owed) the outbox is read as after any operation."""
        have = self._copied.get((name, run_id))
        if have is None or written.last_seq != have + len(events):
            return (yield from self._copy_op(name, run_id, wrote=bool(events)))
        fresh = [as_kept(event, have + n, written.epoch) for n, event in enumerate(events, 1)]
        return (yield from self._copy_fresh_op(name, run_id, have, fresh))

    def _check_kept_op(self, name: str, run_id: str, wrote: bool) -> Op[None]:
        """After an append found no outbox to copy: :class:`RunNotFoundError` when the
        lifecycle no longer has the run either (see :meth:`_copy`)."""
        if wrote and (yield Call(self.lifecycle.get_run, (name, run_id))) is None:
            raise RunNotFoundError(name, run_id)

    def _first_copy_op(
        self,
        name: str,
        run_id: str,
        *,
        wrote: bool = False,
        claimed: ClaimedRun | None = None,
    ) -> Op[int | None]:
        """:meth:`_copy` of a run this process has not copied: what the log already holds is
        asked of the log, given the outbox when the log can use it (``held_through``: a
        Kafka log reads no further than the outbox's events), else by its last event.

        ``claimed``: the run as a claim just loaded it (its whole outbox, and where its journal
        starts in the log when the lifecycle keeps that): neither is read again."""
        if claimed is not None and claimed.events:
            outbox = claimed.events
        else:
            outbox = yield Call(self._outbox.events_after, (name, run_id, 0))
        held = getattr(self.events, "held_through", None)
        if outbox and outbox[0].run_seq == 1 and callable(held):
            at = claimed.journal_at if claimed is not None else None
            have: int = yield Call(held, (name, run_id, outbox), {"journal_at": at})
        else:
            last = yield Call(self.events.get_last_event, (name, run_id))
            if last is not None and last.is_terminal:
                yield Call(self._drops.drop, (name, run_id))
                return None
            have = last.run_seq or 0 if last is not None else 0
        if not outbox:
            yield from self._check_kept_op(name, run_id, wrote)
            return None
        return (yield from self._copy_fresh_op(name, run_id, have, outbox))

    def _copy_fresh_op(
        self, name: str, run_id: str, have: int, outbox: list[RunEvent]
    ) -> Op[int | None]:
        """Copy the outbox's events after ``have``; the outbox's last ``run_seq``."""
        run = (name, run_id)
        fresh = [event for event in outbox if (event.run_seq or 0) > have]
        if not fresh:
            if outbox and outbox[-1].is_terminal:
                # The log has the terminal, but the outbox was not dropped after it (a crash or a
                # cancellation between the two): drop it now.
                yield Call(self._drops.drop, (name, run_id))
                self._copied.pop(run, None)
                return outbox[-1].run_seq
            self._copied[run] = have
            return have or None
        yield Call(self._log.append_copies, (name, run_id, fresh))
        if fresh[-1].is_terminal:
            yield Call(self._drops.drop, (name, run_id))
            self._copied.pop(run, None)
        else:
            self._remember_copied(run, fresh[-1].run_seq or have)
        return fresh[-1].run_seq

    def _remember_copied(self, run: tuple[str, str], run_seq: int) -> None:
        if len(self._copied) >= COPIED_KEPT:
            self._copied.clear()  # runs another process ended linger here; start afresh
        self._copied[run] = run_seq

    def _journal_op(
        self, name: str, run_id: str, claimed: ClaimedRun | None = None
    ) -> Op[list[RunEvent] | None]:
        """The run's whole journal after a copy, when the event log can answer it from what
        it holds given the outbox's word on the last event (``journal_through``, as
        :class:`KafkaEventLogStore` does for runs this process holds); None when the log
        must be asked as any store is. ``claimed``: see :meth:`_first_copy_op`."""
        whole = claimed is not None and claimed.events and claimed.events[0].run_seq == 1
        if whole and (name, run_id) not in self._copied:
            last = yield from self._first_copy_op(name, run_id, claimed=claimed)
        else:
            last = yield from self._copy_op(name, run_id)
        through = getattr(self.events, "journal_through", None)
        if last is None or not callable(through):
            return None
        events: list[RunEvent] = yield Call(through, (name, run_id, last))
        return events

    def _copy_soon_op(self, name: str, run_id: str) -> Op[None]:
        """:meth:`_copy` after an operation that needs no acknowledged copy (a requeue): when
        the log is away, the events wait in the outbox for the next operation or read of the
        run to copy them, and the caller is not told the operation failed (it did not)."""
        if self._log_away:
            return  # the events wait in the outbox: copying now would wait out the log's timeout
        try:
            yield from self._copy_op(name, run_id)
        except StoreUnavailable:
            self._log_away = True

    # -- the lifecycle role ----------------------------------------------------------------------

    @composed
    def create_run(
        self,
        submit: Submit,
        run_id: str,
        *,
        headers: dict[str, str] | None = None,
        idempotency_key: str | None = None,
        idempotency_body_hash: str | None = None,
        idempotency_ttl: int = 86_400,
    ) -> Op[str]:
        options: CreateOptions = {
            "headers": headers,
            "idempotency_key": idempotency_key,
            "idempotency_body_hash": idempotency_body_hash,
            "idempotency_ttl": idempotency_ttl,
        }
        written = getattr(self._outbox, "create_run_written", None)
        if written is None:
            created: str = yield Call(self.lifecycle.create_run, (submit, run_id), options)
            yield from self._copy_op(submit.name, created)
            return created
        # The lifecycle answers the events it journaled when it made the run: those are the
        # copies, as the outbox keeps them, and the log holds none of a run made just now
        # (one another process copied first is copied again, and kept once).
        created, opening = yield Call(written, (submit, run_id), options)
        if opening is None or (submit.name, created) in self._copied:
            yield from self._copy_op(submit.name, created)
        else:
            fresh = [as_kept(event, n, None) for n, event in enumerate(opening, 1)]
            yield from self._copy_fresh_op(submit.name, created, 0, fresh)
        return created

    @composed
    def claim_next_run(
        self,
        name: str,
        worker_id: str,
        worker_version: str | None = None,
        *,
        prefer: Sequence[int] = (),
    ) -> Op[str | None]:
        claimed: str | None = yield Call(
            self.lifecycle.claim_next_run, (name, worker_id, worker_version), {"prefer": prefer}
        )
        yield from self._copy_op(name, claimed)
        return claimed

    @composed
    def claim_next_runs_loaded(
        self,
        name: str,
        leases: Sequence[str],
        worker_version: str | None = None,
        *,
        prefer: Sequence[int] = (),
    ) -> Op[Claims]:
        """The lifecycle's batch claim, with its word on the next token; each run's journal
        is read from the event log (which answers every journal read).

        Once the log has failed a claimed run's read or a copy, the next claim first asks it
        whether it answers again (:class:`StoreUnavailable` when not, with nothing claimed):
        a worker then backs off as in any outage, instead of claiming runs whose attempts can
        only put them back, each time spending their budget, or whose reads could outlast
        their leases."""
        ping = getattr(self.events, "ping", None)
        if self._log_away and callable(ping):
            yield Call(ping)
        self._log_away = False
        claimed = yield Call(
            self.lifecycle.claim_next_runs_loaded,
            (name, leases, worker_version),
            {"prefer": prefer},
        )
        taken = list(claimed)
        held = [self._claimed_in_memory(name, run) for run in taken]
        # The rest read side by side: on the loop, the reads of a batch share Valkey's pipeline.
        unheld = [run for run, journal in zip(taken, held, strict=True) if journal is None]
        read = iter((yield Together(tuple(self._claimed_events_op(name, r) for r in unheld))))
        runs = [
            ClaimedRun(run.run_id, journal if journal is not None else next(read), run.controls)
            for run, journal in zip(taken, held, strict=True)
        ]
        return Claims(runs, getattr(claimed, "next_token_in", None))

    def _claimed_in_memory(self, name: str, claimed: ClaimedRun) -> list[RunEvent] | None:
        """A claimed run's journal when the event log answers it from memory, with no request
        (``journal_if_held``: a Kafka log, given the claim's whole outbox and position, when
        it knows the topic holds every outbox event); None when it must be read and copied
        as any run is. Nothing waits on I/O here, so the claim's other runs need no task.

        A run this process copied before (a bound run its topic's consumer submitted here) is
        answered so too: the claim's outbox is as fresh as reading it again would be, and the
        log's word that the topic holds all of it does not rest on what this process copied."""
        answer = getattr(self.events, "journal_if_held", None)
        outbox, run = claimed.events, (name, claimed.run_id)
        if not callable(answer) or self._log_away or not outbox or outbox[0].run_seq != 1:
            return None
        try:
            journal: list[RunEvent] | None = answer(
                name, claimed.run_id, outbox, claimed.journal_at
            )
        except Exception:  # the claim has committed: the run is read as any run is
            return None
        if journal is not None:
            self._remember_copied(run, outbox[-1].run_seq or 0)
        return journal

    def _claimed_events_op(self, name: str, claimed: ClaimedRun) -> Op[list[RunEvent] | None]:
        """A claimed run's journal, or None when it cannot be read now (the claim has
        committed: the run is returned all the same, and its attempt loads the journal).
        Once the log failed, the claim's other runs are not read either: each read could
        wait out the log's timeout while the run's lease, with no attempt to renew it yet,
        runs down."""
        if self._log_away:
            return None
        try:
            return (yield from self._load_op(name, claimed.run_id, None, claimed))
        except StoreUnavailable:
            self._log_away = True
            return None
        except Exception:
            return None

    @composed
    def claim_run(
        self, name: str, run_id: str, worker_id: str, *, poison: PoisonPolicy | None = None
    ) -> Op[None]:
        # A lapsed lease taken over journals run:requeued: copied whether the claim is taken
        # or refused, and a refusal stays the caller's error even when the copy fails too.
        try:
            yield Call(self.lifecycle.claim_run, (name, run_id, worker_id), {"poison": poison})
        except Exception:
            with contextlib.suppress(Exception):
                yield from self._copy_op(name, run_id)
            raise
        yield from self._copy_op(name, run_id)

    @composed
    def release_run(self, name: str, run_id: str, worker_id: str | None = None) -> Op[None]:
        yield Call(self.lifecycle.release_run, (name, run_id, worker_id))

    @composed
    def requeue_run(
        self, name: str, run_id: str, worker_id: str | None = None, *, reason: str = "owner_gone"
    ) -> Op[None]:
        yield Call(self.lifecycle.requeue_run, (name, run_id, worker_id), {"reason": reason})
        yield from self._copy_soon_op(name, run_id)

    @composed
    def recover_pending_runs(
        self, name: str, now: float | None = None, *, poison: PoisonPolicy | None = None
    ) -> Op[list[str]]:
        recovered: list[str] = yield Call(
            self.lifecycle.recover_pending_runs, (name, now), {"poison": poison}
        )
        for run_id in recovered:
            yield from self._copy_soon_op(name, run_id)
        return recovered

    @composed
    def recover_lapsed_holders(
        self, name: str, *, keep: Sequence[str] = (), poison: PoisonPolicy | None = None
    ) -> Op[list[str]]:
        recovered: list[str] = yield Call(
            self.lifecycle.recover_lapsed_holders, (name,), {"keep": keep, "poison": poison}
        )
        for run_id in recovered:
            yield from self._copy_soon_op(name, run_id)
        return recovered

    def note_loop_blocked(self, name: str, run_id: str, lease: str) -> bool:
        return self.lifecycle.note_loop_blocked(name, run_id, lease)

    def explain_wait(self, name: str, run_id: str) -> WaitReason | None:
        return self.lifecycle.explain_wait(name, run_id)

    def get_pending_count(self, name: str) -> int:
        return self.lifecycle.get_pending_count(name)

    @composed
    def heartbeat(
        self, name: str, run_id: str, worker_id: str
    ) -> Op[tuple[str | None, str | None]]:
        answer: tuple[str | None, str | None] = yield Call(
            self.lifecycle.heartbeat, (name, run_id, worker_id)
        )
        return answer

    def lock_holder(self, name: str, run_id: str) -> str | None:
        return self.lifecycle.lock_holder(name, run_id)

    def request_cancel(
        self, name: str, run_id: str, *, detail: dict[str, Any] | None = None
    ) -> str:
        at = self.lifecycle.request_cancel(name, run_id, detail=detail)
        self._copy(name, run_id)
        return at

    @composed
    def get_run_controls(self, name: str, run_id: str) -> Op[tuple[str | None, str | None]]:
        answer: tuple[str | None, str | None] = yield Call(
            self.lifecycle.get_run_controls, (name, run_id)
        )
        return answer

    @composed
    def poll_run(self, name: str, run_id: str) -> Op[RunControls]:
        answer: RunControls = yield Call(self.lifecycle.poll_run, (name, run_id))
        return answer

    @composed
    def get_run(self, name: str, run_id: str) -> Op[RunInfo | None]:
        answer: RunInfo | None = yield Call(self.lifecycle.get_run, (name, run_id))
        return answer

    def list_runs(
        self, name: str, *, limit: int = 50, cursor: str | None = None, owner: str | None = None
    ) -> tuple[list[RunInfo], str | None]:
        return self.lifecycle.list_runs(name, limit=limit, cursor=cursor, owner=owner)

    def ping(self) -> None:
        self.lifecycle.ping()
        getattr(self.events, "ping", lambda: None)()

    def ensure_marker(self) -> bool:
        """The lifecycle backend's marker: what a loss of it (Valkey restarted empty) takes
        away, while the event log keeps the journals to rebuild it from."""
        return self.lifecycle.ensure_marker()

    def read_marker(self) -> StoreMarker | None:
        return self.lifecycle.read_marker()

    def close(self) -> None:
        self.lifecycle.close()
        getattr(self.events, "close", lambda: None)()

    def run_maintenance(self, now: float | None = None) -> int:
        return self.lifecycle.run_maintenance(now)

    # -- the event-log role ----------------------------------------------------------------------

    @composed
    def append_events(
        self, name: str, run_id: str, events: list[RunEvent], *, fence: str | None = None
    ) -> Op[None]:
        written = yield Call(self._outbox.append_written, (name, run_id, events), {"fence": fence})
        yield from self._copy_written_op(name, run_id, events, written)

    @composed
    def append_and_poll(
        self, name: str, run_id: str, events: list[RunEvent], *, fence: str
    ) -> Op[RunControls]:
        controls: RunControls
        controls, written = yield Call(
            self._outbox.append_and_poll_written, (name, run_id, events), {"fence": fence}
        )
        yield from self._copy_written_op(name, run_id, events, written)
        return controls

    @composed
    def finish_if_quiet(
        self, name: str, run_id: str, events: list[RunEvent], *, fence: str
    ) -> Op[RunControls | None]:
        controls: RunControls | None
        controls, written = yield Call(
            self._outbox.finish_if_quiet_written, (name, run_id, events), {"fence": fence}
        )
        kept = events if controls is None else events[:-1]  # the terminal waits, unwritten
        yield from self._copy_written_op(name, run_id, kept, written)
        return controls

    @composed
    def load_run(
        self, name: str, run_id: str, *, max_events: int | None = None
    ) -> Op[list[RunEvent]]:
        return (yield from self._load_op(name, run_id, max_events))

    def _load_op(
        self, name: str, run_id: str, max_events: int | None, claimed: ClaimedRun | None = None
    ) -> Op[list[RunEvent]]:
        events = yield from self._journal_op(name, run_id, claimed)
        if events is None:
            read: list[RunEvent] = yield Call(
                self.events.load_run, (name, run_id), {"max_events": max_events}
            )
            return read
        return events[:max_events] if max_events is not None else events

    @composed
    def replay_run(
        self, name: str, run_id: str, *, cursor: Any | None = None, count: int | None = None
    ) -> Op[tuple[list[RunEvent], Any | None]]:
        events = yield from self._journal_op(name, run_id)
        if events is None:
            page: tuple[list[RunEvent], Any | None] = yield Call(
                self.events.replay_run, (name, run_id), {"cursor": cursor, "count": count}
            )
            return page
        after = int(cursor) if cursor is not None else 0
        events = [event for event in events if (event.run_seq or 0) > after]
        first = events[:count] if count is not None else events
        more = count is not None and len(events) > count
        return first, (first[-1].run_seq if more and first else None)

    @composed
    def get_last_event(self, name: str, run_id: str) -> Op[RunEvent | None]:
        events = yield from self._journal_op(name, run_id)
        if events is None:
            last: RunEvent | None = yield Call(self.events.get_last_event, (name, run_id))
            return last
        return events[-1] if events else None
