"""The store interface: two roles, optional groups, one definition of what a backend owes.

A backend is done when it passes ``tests/stores`` unchanged. The contracts below are what
that suite checks.

Vocabulary: a *lease* is the opaque token a worker claims a run under (one per attempt). A
*fenced* write names the lease and commits only while that lease holds the run's lock, the lock
has not expired on the store's clock, and the journal has not ended; otherwise it raises
:class:`LockLost` and writes nothing. Every claim of a run raises its *epoch*, and a fenced
append stamps it on each event (header ``lg-epoch``) so a reader can drop anything a stale holder
wrote, whatever the backend.
"""

from __future__ import annotations

import abc
import functools
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, ClassVar

from lockgate._errors import CapabilityMissing
from lockgate.journal._events import RunEvent
from lockgate.stores._batch import new_run
from lockgate.stores._chains import ChainStore
from lockgate.stores._controls import ControlStore
from lockgate.stores._gates import WaitReason
from lockgate.stores._insight import INSIGHT_GROUPS, InsightStore
from lockgate.stores._poison import PoisonPolicy
from lockgate.stores._records import Submit
from lockgate.stores._triggers import TriggerStore
from lockgate.stores._types import (
    ClaimedRun,
    Claims,
    RunControls,
    RunInfo,
    StoreMarker,
    WaitOutcome,
    WaitSpec,
)


class LifecycleStore(abc.ABC):
    """Run queue, claims and leases, cancellation, heartbeats and run listing.

    Every method is synchronous and atomic with respect to every other call on the same store,
    from any thread or process that shares it. ``blocking_io`` says whether a call may block on
    I/O: the async runtime calls such a store on a worker thread, never on the event loop.
    """

    blocking_io: ClassVar[bool] = True
    #: Seconds a lease lives without a heartbeat.
    lock_ttl: float = 30.0
    #: Seconds between the heartbeats of a running attempt.
    heartbeat_interval: float = 10.0

    def coroutine_for(self, method: Callable[..., Any]) -> Callable[..., Awaitable[Any]] | None:
        """A coroutine function doing what ``method`` (one of this store's methods) does with
        its I/O on the running event loop, or None when it has none: the async runtime then
        calls ``method`` on a store thread (see ``blocking_io``)."""
        return None

    def capabilities(self) -> frozenset[str]:
        """The optional groups this store provides: those whose every method the store's class
        overrides. A forwarding store overrides this to report what it can serve."""
        return _class_capabilities(type(self))

    def submit_run(
        self,
        name: str,
        run_id: str,
        params: dict[str, Any],
        *,
        metadata: dict[str, Any] | None = None,
        owner: str | None = None,
        idempotency_key: str | None = None,
        idempotency_body_hash: str | None = None,
        idempotency_ttl: int = 86_400,
        version: str = "",
        version_behavior: str = "pinned",
        concurrency_key: str | None = None,
        concurrency_max: int | None = None,
        rate_key: str | None = None,
        rate_per_second: float | None = None,
        rate_burst: int | None = None,
        provenance: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
        start_at: float | None = None,
        gates_unknown: bool = False,
        shard_key: str | None = None,
        seed: Sequence[RunEvent] = (),
    ) -> str:
        """Create the run and journal its ``run:init`` atomically; return its id.

        With ``idempotency_key`` a repeat returns the first run's id, or raises
        :class:`IdempotencyConflict` when ``idempotency_body_hash`` differs from the first
        request's. A ``run_id`` already taken otherwise raises :class:`DuplicateRunError`. With
        ``start_at`` in the future the run is parked on a ``start`` wait instead of queued. The
        ``concurrency_*`` and ``rate_*`` arguments are the gates the run was stamped with; they
        are journaled in ``run:init`` and enforced at every claim. ``gates_unknown`` stamps a
        submit by name made before any policy was recorded: no gate is enforced, ``run:init``
        says ``{"unknown": true}``, and the claiming worker hands the run on with its own.
        ``shard_key`` places a run without gates in a sharded store: the shard its key hashes
        to instead of its run id's (a bound run's: its topic partition's). ``seed`` is journaled
        right after ``run:init``, in the same step (a retry's copy of the failed run's calls).
        Nothing is written when it raises; a name, id or idempotency key the naming rules
        refuse (``lockgate._names``) raises :class:`InvalidNameError`.
        """
        run = new_run(
            name,
            run_id,
            params,
            metadata=metadata,
            owner=owner,
            idempotency_key=idempotency_key,
            idempotency_body_hash=idempotency_body_hash,
            idempotency_ttl=idempotency_ttl,
            version=version,
            version_behavior=version_behavior,
            concurrency_key=concurrency_key,
            concurrency_max=concurrency_max,
            rate_key=rate_key,
            rate_per_second=rate_per_second,
            rate_burst=rate_burst,
            provenance=provenance,
            headers=headers,
            start_at=start_at,
            gates_unknown=gates_unknown,
            shard_key=shard_key,
            seed=seed,
        )
        return self.create_run(
            run.submit,
            run_id,
            headers=headers,
            idempotency_key=idempotency_key,
            idempotency_body_hash=idempotency_body_hash,
            idempotency_ttl=idempotency_ttl,
        )

    @abc.abstractmethod
    def create_run(
        self,
        submit: Submit,
        run_id: str,
        *,
        headers: dict[str, str] | None = None,
        idempotency_key: str | None = None,
        idempotency_body_hash: str | None = None,
        idempotency_ttl: int = 86_400,
    ) -> str:
        """:meth:`submit_run` with the run's fields gathered in ``submit``: what a backend
        implements, under the same contract."""

    @abc.abstractmethod
    def claim_next_run(
        self,
        name: str,
        worker_id: str,
        worker_version: str | None = None,
        *,
        prefer: Sequence[int] = (),
    ) -> str | None:
        """Take the next eligible queued run of ``name`` under lease ``worker_id``.

        Queued runs are offered in fairness buckets (one per owner and set of gates), the least
        recently served bucket first, each bucket in queue order. A run passes its gates
        atomically with the claim: a free slot of its ``Limit`` key and a token of its ``Rate``
        key (spent only once the Limit passed); a refused run stays queued in its place and its
        bucket is skipped, so a full key never blocks the keys behind it. A queued run whose
        lock another live lease holds is passed over and keeps its place. A ``pinned`` run is
        only eligible for a worker of its version (any, if ``worker_version`` is None).
        ``prefer`` names shards to try first; a store without shards ignores it.
        """

    @abc.abstractmethod
    def claim_run(
        self, name: str, run_id: str, worker_id: str, *, poison: PoisonPolicy | None = None
    ) -> None:
        """Take the named run under lease ``worker_id``, out of the queue if it was queued.

        Succeeds when the lock is free or already this lease's. A lock whose lease lapsed is
        taken over, and the lapsed attempt counts as ``owner_gone`` exactly as
        :meth:`requeue_run` counts it (``run:requeued`` is journaled) and as a crash against
        ``poison`` as :meth:`recover_pending_runs` counts it; past ``max_retries`` (or
        quarantined) the run ends with ``run:error`` and this raises
        :class:`RunFinishedError`. Raises :class:`RunOwnedError` when another live lease holds
        it, :class:`RunFinishedError` when its journal has ended, :class:`RunGatedError`
        (leaving the run as it was) when its gates refuse it, and :class:`RunNotFoundError`
        for an unknown run. Re-asserting a claim the lease already holds takes no slot and
        spends no token.
        """

    @abc.abstractmethod
    def release_run(self, name: str, run_id: str, worker_id: str | None = None) -> None:
        """Drop the run's lock (only ``worker_id``'s, when given). A run that is neither ended
        nor parked goes back on the queue, so a release never strands it."""

    @abc.abstractmethod
    def requeue_run(
        self, name: str, run_id: str, worker_id: str | None = None, *, reason: str = "owner_gone"
    ) -> None:
        """Put a claimed run back on the queue, journaling ``run:requeued`` with ``reason``.

        ``owner_gone`` counts against ``max_retries``, ``store_unavailable`` against
        ``max_store_requeues``, each since the run last made progress (a ``step:done`` or an
        applied update). Past the budget the run ends with ``run:error`` instead. With
        ``worker_id`` it does nothing unless the run is locked under that lease, live or
        lapsed (a lapsed one no one took over still names it: an attempt cut off by an outage
        puts its run back once the store answers). A run whose journal has ended is only
        released.
        """

    @abc.abstractmethod
    def recover_pending_runs(
        self, name: str, now: float | None = None, *, poison: PoisonPolicy | None = None
    ) -> list[str]:
        """Requeue (as ``owner_gone``) every run of ``name`` whose lease expired; return them.

        With ``poison`` each lapse is also a crash of the run, at the store's time, unless it
        is loop-blocked (see :meth:`note_loop_blocked`) and the policy does not count those;
        crashes older than ``poison.retry_ttl_s`` are forgotten, progress resets none. The
        crash that brings the run past ``poison.max_retries`` of them ends it instead with
        ``run:error`` code ``quarantined`` (status ``quarantined``; ``detail`` says how many
        crashes in what window), freeing its slot. A requeue of a counted crash journals its
        time as ``crash_at`` in ``run:requeued`` (what a rebuild restores the count from), and
        a loop-blocked one says ``loop_blocked``. Without ``poison`` nothing is counted."""

    def recover_lapsed_holders(
        self, name: str, *, keep: Sequence[str] = (), poison: PoisonPolicy | None = None
    ) -> list[str]:
        """Requeue (as ``owner_gone``) every run of ``name`` locked under a lease whose
        worker's presence lapsed, live lease or not; return them (group ``takeover``).

        A lease names its worker as the text before its first ``/`` (the worker's
        ``Runtime.new_lease``). That worker's presence has lapsed when it recorded a record
        (``record_worker``) that was not refreshed within its TTL and lapsed no more than the
        store's ``lock_ttl`` ago. A lease without ``/``, or whose worker never recorded a
        record here, dropped it (``drop_worker``, a clean stop) or lapsed more than
        ``lock_ttl`` ago, is left to :meth:`recover_pending_runs` (its lease lapses by then).
        Workers named in ``keep`` (the caller) are never taken as lapsed. Each requeue counts
        as :meth:`recover_pending_runs` counts a lapse, ``poison`` included; a run
        whose journal ended is only released. Judged on the store's clock; atomic per shard.
        """
        raise CapabilityMissing(type(self).__name__, "takeover")

    def note_loop_blocked(self, name: str, run_id: str, lease: str) -> bool:
        """Note that the holder of ``lease`` saw its event loop blocked while holding the run:
        should the lease lapse before another heartbeat or claim of it, that lapse is
        loop-blocked. False (nothing noted) unless ``lease`` holds the run's lock. A store
        that cannot note it counts every lapse as a crash."""
        return False

    def explain_wait(self, name: str, run_id: str) -> WaitReason | None:
        """Why a queued run has not started (its gate, its place in line, when the next token
        comes), or None when it is not queued or the store cannot tell."""
        return None

    @abc.abstractmethod
    def get_pending_count(self, name: str) -> int:
        """How many runs of ``name`` are queued."""

    @abc.abstractmethod
    def heartbeat(self, name: str, run_id: str, worker_id: str) -> tuple[str | None, str | None]:
        """Extend the lease and return ``(cancel_requested_at, pause_requested_at)``.

        Raises :class:`LockLost` when ``worker_id`` no longer holds a live lock on the run."""

    @abc.abstractmethod
    def lock_holder(self, name: str, run_id: str) -> str | None:
        """The lease holding the run's lock, or None (never claimed, released or expired)."""

    @abc.abstractmethod
    def request_cancel(
        self, name: str, run_id: str, *, detail: dict[str, Any] | None = None
    ) -> str:
        """Latch a graceful cancel, journal ``run:cancel`` once with ``detail``, and queue a
        parked run so a worker writes its cancelled terminal. Returns the latch's ISO time;
        a repeat keeps the first request's detail."""

    @abc.abstractmethod
    def get_run_controls(self, name: str, run_id: str) -> tuple[str | None, str | None]:
        """``(cancel_requested_at, pause_requested_at)`` in one read."""

    def poll_run(self, name: str, run_id: str) -> RunControls:
        """The run's controls and whether updates wait for it, in one read where the store can:
        what a running attempt checks at every boundary."""
        cancel_at, pause_at = self.get_run_controls(name, run_id)
        return RunControls(cancel_at, pause_at)

    def get_cancel_requested_at(self, name: str, run_id: str) -> str | None:
        return self.get_run_controls(name, run_id)[0]

    def get_pause_requested_at(self, name: str, run_id: str) -> str | None:
        return self.get_run_controls(name, run_id)[1]

    @abc.abstractmethod
    def get_run(self, name: str, run_id: str) -> RunInfo | None:
        """The run as the store sees it now, or None for an unknown run.

        ``status`` is derived: a terminal journal gives its terminal status; a live lock gives
        ``in_progress``; a lock whose lease lapsed, not yet recovered, also reads
        ``in_progress`` with ``lock_holder`` None; an open wait not queued gives ``sleeping``,
        ``signal_waiting`` or ``paused``; anything else is ``pending``."""

    @abc.abstractmethod
    def list_runs(
        self, name: str, *, limit: int = 50, cursor: str | None = None, owner: str | None = None
    ) -> tuple[list[RunInfo], str | None]:
        """Runs of ``name``, newest first, and the cursor of the next page (None at the end)."""

    def submitted_at(self, name: str, run_id: str) -> float | None:
        info = self.get_run(name, run_id)
        return info.submitted_at if info else None

    def get_run_owner(self, name: str, run_id: str) -> str | None:
        info = self.get_run(name, run_id)
        return info.owner if info else None

    def get_run_version(self, name: str, run_id: str) -> tuple[str, str] | None:
        info = self.get_run(name, run_id)
        return (info.version, info.version_behavior) if info else None

    @abc.abstractmethod
    def ping(self) -> None:
        """Raise :class:`StoreUnavailable` unless the store answers."""

    @abc.abstractmethod
    def ensure_marker(self) -> bool:
        """Write the store's :class:`StoreMarker` unless it carries one: True when this call
        wrote it (a new store, or one that lost its data), False when it was there. Called
        where a store is created on purpose: ``lockgate store init``, a worker's start, a
        rebuild. Nothing else writes it, so a store whose marker is gone lost its data."""

    @abc.abstractmethod
    def read_marker(self) -> StoreMarker | None:
        """The store's marker, or None when it has none (never marked, or its data was lost).
        One cheap read: a worker asks it on its heartbeat cadence. Nothing a run does, nor
        :meth:`run_maintenance`, ever removes it."""

    def close(self) -> None:  # noqa: B027 - optional hook with nothing to do by default
        """Release connections and files. Idempotent."""

    def run_maintenance(self, now: float | None = None) -> int:
        """Housekeeping a worker calls now and then (retention of finished runs, expired
        idempotency records). Returns how many records it removed; a store with nothing to
        clean returns 0."""
        return 0


class EventLogStore(abc.ABC):
    """The run journal: ordered events with a per-run ``run_seq``, fenced and atomic appends."""

    def append_event(
        self, name: str, run_id: str, event: RunEvent, *, fence: str | None = None
    ) -> None:
        """Append one event; fenced as :meth:`append_events`."""
        self.append_events(name, run_id, [event], fence=fence)

    @abc.abstractmethod
    def append_events(
        self, name: str, run_id: str, events: list[RunEvent], *, fence: str | None = None
    ) -> None:
        """Append ``events`` in order, all or nothing.

        With ``fence`` the batch commits only while that lease holds the run's live lock, and
        each event is stamped with the claim's epoch; otherwise :class:`LockLost`. A batch that
        would put any event behind a terminal one (already journaled or earlier in the batch)
        raises :class:`EventAfterTerminal` and writes nothing. Writers that do not hold the run
        (signals, wakes, requeues) append unfenced. A batch ending in a terminal event ends the
        run in the same step: it leaves the queue and its waits and its lock is dropped.
        """

    @abc.abstractmethod
    def load_run(self, name: str, run_id: str, *, max_events: int | None = None) -> list[RunEvent]:
        """The run's journal, oldest first (at most ``max_events``); [] for an unknown run."""

    def replay_run(
        self, name: str, run_id: str, *, cursor: Any | None = None, count: int | None = None
    ) -> tuple[list[RunEvent], Any | None]:
        """A page of the journal from ``cursor`` (a ``run_seq`` to start after)."""
        after = int(cursor) if cursor is not None else 0
        events = [e for e in self.load_run(name, run_id) if (e.run_seq or 0) > after]
        page = events[:count] if count is not None else events
        more = count is not None and len(events) > count
        return page, (page[-1].run_seq if more and page else None)

    @abc.abstractmethod
    def get_last_event(self, name: str, run_id: str) -> RunEvent | None:
        """The newest event of the run's journal, or None."""

    def read_entries_from(
        self, name: str, run_id: str, cursor: str | None, count: int
    ) -> tuple[list[tuple[str, RunEvent]], str | None]:
        """Entries ``(entry_id, event)`` after ``cursor``, with the cursor to continue from."""
        events, next_cursor = self.replay_run(name, run_id, cursor=cursor, count=count)
        entries = [(str(e.run_seq), e) for e in events]
        return entries, (str(next_cursor) if next_cursor is not None else None)


class IdempotencyStore:
    """Idempotency records: which run a key started, and the request it was started with."""

    def get_idempotency_run(self, name: str, key: str) -> str | None:
        raise CapabilityMissing.of(self, "idempotency")

    def set_idempotency_run(self, name: str, key: str, run_id: str, ttl: int = 86_400) -> bool:
        """Record ``key -> run_id`` unless the key is taken; True when this call set it."""
        raise CapabilityMissing.of(self, "idempotency")

    def get_idempotency_body_hash(self, name: str, key: str) -> str | None:
        raise CapabilityMissing.of(self, "idempotency")


class TimerStore:
    """Parking runs on waits, and the timers and answers that end them."""

    def park_run(
        self, name: str, run_id: str, *, lease: str, events: list[RunEvent], wait: WaitSpec
    ) -> WaitOutcome:
        """Atomically, fenced by ``lease``: append ``events``, open ``wait`` (arming its timer
        when it has a ``due_at``), and release the run's lock, so the run holds no slot while
        it waits. Returns PARKED; or SUPERSEDED, writing nothing, when the wait could be
        answered at once: a signal of that name is buffered, a cancel is latched, or an update
        is pending."""
        raise CapabilityMissing.of(self, "timers")

    def get_sleeping_runs(self, before: float, limit: int = 100) -> list[tuple[str, str]]:
        """``(name, run_id)`` of runs whose open wait is due at or before ``before``."""
        raise CapabilityMissing.of(self, "timers")

    def next_wait_due(self, after: float) -> float | None:
        """The earliest ``due_at`` later than ``after`` of any open wait with a timer, of any
        workflow, or None when none is armed: when a timer loop that has ended every wait due
        by ``after`` next has work. A store may answer a time at which, on a closer look, there
        is nothing to end (a wait that ended meanwhile), never a time later than the first
        wait due after ``after``."""
        raise CapabilityMissing.of(self, "wait_due")

    def wake_due(self, name: str, run_id: str, *, due_by: float) -> WaitOutcome:
        """The timer's path: end the run's open wait if it is due by ``due_by`` (a sleep with
        ``run:woken``, a signal wait with ``run:wait_timed_out``) and queue the run. A wait not
        yet due, already ended, or whose signal is buffered answers SUPERSEDED."""
        raise CapabilityMissing.of(self, "timers")

    def wake_run(
        self,
        name: str,
        run_id: str,
        *,
        wait_id: str,
        lease: str | None = None,
    ) -> WaitOutcome:
        """End the sleep (or delayed start) ``wait_id`` if it is still open: RESOLVED, or
        DUPLICATE when it was already woken, SUPERSEDED when no such sleep is open (a signal
        wait or pause of that id is left alone). With ``lease`` (an attempt that reached a sleep
        already due) the write is fenced and the run is not queued: it is running."""
        raise CapabilityMissing.of(self, "timers")

    def time_out_wait(
        self,
        name: str,
        run_id: str,
        *,
        wait_id: str,
        lease: str | None = None,
    ) -> WaitOutcome:
        """End the signal wait ``wait_id`` at its deadline with ``run:wait_timed_out``, unless
        its signal is buffered (SUPERSEDED); fenced by ``lease`` as :meth:`wake_run`. A sleep or
        pause of that id is left alone."""
        raise CapabilityMissing.of(self, "wait_timeout")


class SignalStore:
    """Per-run signal buffers with idempotent sends."""

    def send_signal(
        self,
        name: str,
        run_id: str,
        signal_name: str,
        payload: dict[str, Any],
        sent_at: str,
        *,
        idempotency_key: str | None = None,
    ) -> str:
        """Buffer a signal; queue the run if it waits on this name. Returns ``"delivered"``,
        ``"buffered"``, or ``"rejected"`` (nothing kept) when the run has ended or a cancel is
        latched. A repeat of ``idempotency_key`` on the run returns ``"duplicate"`` and keeps
        nothing, whatever its payload: the first send stands."""
        raise CapabilityMissing.of(self, "signals")

    def peek_signal(self, name: str, run_id: str, signal_name: str) -> dict[str, Any] | None:
        """The oldest buffered signal of that name (``signal_id``, ``payload``, ``sent_at``)."""
        raise CapabilityMissing.of(self, "signals")

    def pop_signal_match(self, name: str, run_id: str, signal_name: str, signal_id: str) -> bool:
        """Remove the buffered signal ``signal_id``; False when it is no longer there."""
        raise CapabilityMissing.of(self, "signals")


class UpdateStore:
    """Queued updates and their settled outcomes."""

    def deliver_update(
        self,
        name: str,
        run_id: str,
        update_name: str,
        payload: dict[str, Any],
        update_id: str,
        sent_at: str,
    ) -> str:
        """Queue an update and queue a parked run so a worker applies it. Returns ``"queued"``,
        ``"duplicate"`` (this id is already queued), ``"settled"`` (already applied; read its
        outcome) or ``"rejected"`` (the run has ended)."""
        raise CapabilityMissing.of(self, "updates")

    def peek_pending_updates(self, name: str, run_id: str) -> list[dict[str, Any]]:
        """Queued updates, oldest first: ``update_id``, ``update``, ``payload``, ``sent_at``."""
        raise CapabilityMissing.of(self, "updates")

    def settle_update(
        self,
        name: str,
        run_id: str,
        update_id: str,
        outcome: dict[str, Any],
        *,
        fence: str | None = None,
        ack: bool = True,
    ) -> None:
        """Record the update's outcome for its sender and (with ``ack``) unqueue it."""
        raise CapabilityMissing.of(self, "updates")

    def read_update_result(self, name: str, run_id: str, update_id: str) -> dict[str, Any] | None:
        raise CapabilityMissing.of(self, "updates")


class VersionStore:
    """Per-workflow version ranks, so a rolling deploy can order its code."""

    def register_version(self, name: str, version: str) -> int:
        """The rank of ``version``, assigning the next one on first sight."""
        raise CapabilityMissing.of(self, "versions")

    def version_rank(self, name: str, version: str) -> int | None:
        raise CapabilityMissing.of(self, "versions")


@functools.cache
def _class_capabilities(cls: type) -> frozenset[str]:
    return frozenset(
        group
        for group, (base, methods) in CAPABILITY_GROUPS.items()
        if issubclass(cls, base)
        and all(getattr(cls, method) is not getattr(base, method) for method in methods)
    )


class PolicyStore:
    """What each worker serves, recorded by name at its start: the workflow's version and its
    flow-control policy, for processes that submit by name without importing the workflow."""

    def record_workflow_policy(self, name: str, policy: dict[str, Any]) -> None:
        """Record ``policy`` (the ``Limit`` and ``Rate`` of ``name``, as JSON data, with the
        version that declared it) as the current one for ``name``."""
        raise CapabilityMissing.of(self, "policies")

    def get_workflow_policy(self, name: str) -> dict[str, Any] | None:
        """The policy last recorded for ``name``, or None."""
        raise CapabilityMissing.of(self, "policies")


CAPABILITY_GROUPS: dict[str, tuple[type, tuple[str, ...]]] = {
    "idempotency": (
        IdempotencyStore,
        ("get_idempotency_run", "set_idempotency_run", "get_idempotency_body_hash"),
    ),
    "timers": (TimerStore, ("park_run", "get_sleeping_runs", "wake_due", "wake_run")),
    "wait_timeout": (TimerStore, ("time_out_wait",)),
    "wait_due": (TimerStore, ("next_wait_due",)),
    "signals": (SignalStore, ("send_signal", "peek_signal", "pop_signal_match")),
    "updates": (
        UpdateStore,
        ("deliver_update", "peek_pending_updates", "settle_update", "read_update_result"),
    ),
    "pause": (ControlStore, ("request_pause", "resume_paused_run")),
    "terminate": (ControlStore, ("terminate_run",)),
    "hand_back": (ControlStore, ("hand_back_run",)),
    "hand_on": (ControlStore, ("hand_on",)),
    "continue": (ControlStore, ("hand_on",)),
    "chains": (ChainStore, ("get_chain_tail", "advance_chain_tail", "close_chain", "chain_closed")),
    "versions": (VersionStore, ("register_version", "version_rank")),
    "policies": (PolicyStore, ("record_workflow_policy", "get_workflow_policy")),
    "triggers": (TriggerStore, ("trigger_event", "due_triggers", "fire_trigger")),
    "trigger_due": (TriggerStore, ("next_trigger_due",)),
    "trigger_marks": (TriggerStore, ("fire_batch", "fired_through", "forget_marks")),
    "takeover": (LifecycleStore, ("recover_lapsed_holders",)),
    **INSIGHT_GROUPS,
}


class Store(
    LifecycleStore,
    EventLogStore,
    IdempotencyStore,
    TimerStore,
    SignalStore,
    UpdateStore,
    ControlStore,
    VersionStore,
    PolicyStore,
    TriggerStore,
    ChainStore,
    InsightStore,
):
    """A full store: both roles and every optional group. MemoryStore implements it whole.

    Compositions of the roles' calls are here so a backend can make each one round trip:
    :meth:`claim_next_run_loaded` (and :meth:`claim_next_runs_loaded`, several at once),
    :meth:`append_and_poll` and :meth:`finish_if_quiet`. The defaults just make the calls
    one after the other."""

    def claim_next_run_loaded(
        self,
        name: str,
        worker_id: str,
        worker_version: str | None = None,
        *,
        prefer: Sequence[int] = (),
    ) -> ClaimedRun | None:
        """:meth:`claim_next_run`, returning the claimed run with its journal and controls
        (what its attempt starts from), or None when nothing was claimable."""
        run_id = self.claim_next_run(name, worker_id, worker_version, prefer=prefer)
        if run_id is None:
            return None
        return loaded_claim(self, name, run_id)

    def claim_next_runs_loaded(
        self,
        name: str,
        leases: Sequence[str],
        worker_version: str | None = None,
        *,
        prefer: Sequence[int] = (),
    ) -> Claims:
        """Claim up to ``len(leases)`` queued runs, as :meth:`claim_next_run_loaded` claims
        one: the ``i``-th run returned under ``leases[i]``. Fewer (none when nothing is
        claimable) when the queue or the gates allow fewer; then ``next_token_in`` says when
        the first token comes of a bucket a ``Rate`` refused, so a caller can wait for it
        rather than poll (see :class:`Claims`). This default cannot tell: it answers None."""
        claimed = Claims()
        for lease in leases:
            try:
                run = self.claim_next_run_loaded(name, lease, worker_version, prefer=prefer)
            except Exception:
                if not claimed:
                    raise
                break  # the runs already claimed are returned; the next claim meets the error
            if run is None:
                break
            claimed.append(run)
        return claimed

    def append_and_poll(
        self, name: str, run_id: str, events: list[RunEvent], *, fence: str
    ) -> RunControls:
        """A fenced :meth:`append_events`, then the run's controls as :meth:`poll_run` reads
        them, which the attempt's next boundary uses instead of reading them again."""
        self.append_events(name, run_id, events, fence=fence)
        return self.poll_run(name, run_id)

    def finish_if_quiet(
        self, name: str, run_id: str, events: list[RunEvent], *, fence: str
    ) -> RunControls | None:
        """End the run with ``events`` (the last one terminal), fenced, unless a cancel is
        latched or updates wait for it: then append all but the terminal and return the
        controls, for the attempt to deal with them first. None when the run ended."""
        controls = self.poll_run(name, run_id)
        if controls.cancel_requested_at is None and not controls.updates_pending:
            self.append_events(name, run_id, events, fence=fence)
            return None
        if events[:-1]:
            self.append_events(name, run_id, events[:-1], fence=fence)
        return controls


def loaded_claim(store: Store, name: str, run_id: str) -> ClaimedRun:
    """The run ``store`` just claimed, with its journal and controls when they can be read.
    The claim has committed, so a failed read must not lose the run: its part is left None
    and the attempt reads it itself (and meets the failure there, if it lasts)."""
    events: list[RunEvent] | None = None
    controls: RunControls | None = None
    try:
        events = store.load_run(name, run_id)
        controls = store.poll_run(name, run_id)
    except Exception as exc:
        import logging  # only here: a command that reads runs sets up no logging

        logging.getLogger("lockgate.stores").debug(
            "run %s of %s claimed, but reading it failed: %s", run_id, name, exc
        )
    return ClaimedRun(run_id, events, controls)
