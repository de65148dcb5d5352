"""MemoryStore: the whole store interface in one process's memory, for tests and embedding."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import wraps
from typing import Any, ParamSpec, TypeVar

from lockgate._clock import iso
from lockgate._errors import (
    DuplicateRunError,
    EventAfterTerminal,
    IdempotencyConflict,
    LockLost,
    RunFinishedError,
    RunGatedError,
    RunNotFoundError,
    RunOwnedError,
)
from lockgate.journal._events import (
    EPOCH_HEADER,
    EventKind,
    RunEvent,
    RunStatus,
    terminal_status,
)
from lockgate.stores._base import Store
from lockgate.stores._gates import Gates, WaitReason, fair_bucket, refill, wait_reason
from lockgate.stores._records import (
    PROGRESS_KINDS,
    Submit,
    derive_status,
    requeue_outcome,
    terminated_payload,
    with_payload,
)
from lockgate.stores._triggers import TriggerPolicy
from lockgate.stores._types import (
    RunControls,
    RunInfo,
    TerminateOutcome,
    WaitOutcome,
    WaitSpec,
)

P = ParamSpec("P")
R = TypeVar("R")


def _locked(method: Callable[P, R]) -> Callable[P, R]:
    @wraps(method)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        with args[0]._mutex:  # type: ignore[attr-defined]
            return method(*args, **kwargs)

    return wrapper


@dataclass
class _Run:
    name: str
    run_id: str
    params: dict[str, Any]
    metadata: dict[str, Any]
    owner: str | None
    version: str
    version_behavior: str
    submitted_at: float
    order: int
    events: list[RunEvent] = field(default_factory=list)
    #: Each event's payload as JSON text: a load hands out fresh copies parsed from it.
    texts: list[str] = field(default_factory=list)
    lock: str | None = None
    lock_expires: float = 0.0
    epoch: int = 0
    wait: WaitSpec | None = None
    cancel_at: str | None = None
    pause_at: str | None = None
    owner_gone: int = 0
    store_requeues: int = 0
    signals: list[dict[str, Any]] = field(default_factory=list)
    signal_keys: dict[str, str] = field(default_factory=dict)
    updates: dict[str, dict[str, Any]] = field(default_factory=dict)
    update_results: dict[str, dict[str, Any]] = field(default_factory=dict)
    gates: Gates = field(default_factory=Gates)
    bucket: str = ""

    @property
    def ended(self) -> bool:
        return bool(self.events) and self.events[-1].is_terminal


@dataclass
class _Buffer:
    """One key's trigger events waiting for their batch to fire."""

    events: list[tuple[int, dict[str, Any]]] = field(default_factory=list)
    first_at: float | None = None
    due_at: float | None = None
    next_seq: int = 1


@dataclass
class _Held:
    expires_at: float
    cancel_at: str | None = None
    cancel_detail: dict[str, Any] = field(default_factory=dict)
    pause_at: str | None = None


@dataclass
class _Idempotency:
    run_id: str
    body_hash: str | None
    expires_at: float


class MemoryStore(Store):
    """Every store guarantee, held in this process's memory; nothing survives the process.

    For tests, demos and embedding. ``clock`` judges lease expiry and timers; pass the same
    clock the runner uses to move time in tests. ``max_replay_entries`` is the most events one
    run may hold: the engine ends a run with ``stream:overflow`` before it goes past it.
    ``max_retries`` and ``max_store_requeues`` are the requeue budgets of :meth:`requeue_run`.
    """

    blocking_io = False

    def __init__(
        self,
        *,
        heartbeat_interval: float = 10.0,
        lock_ttl: float = 30.0,
        held_ttl: float = 86_400.0,
        max_replay_entries: int = 200_000,
        max_retries: int = 3,
        max_store_requeues: int = 20,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.heartbeat_interval = heartbeat_interval
        self.lock_ttl = lock_ttl
        self.held_ttl = held_ttl
        self.max_replay_entries = max_replay_entries
        self.max_retries = max_retries
        self.max_store_requeues = max_store_requeues
        self._clock = clock
        self._mutex = threading.RLock()
        self._runs: dict[tuple[str, str], _Run] = {}
        # The queue of each workflow, split by fairness bucket; each bucket keeps its runs in
        # queue order (run id -> position), so a claim looks at bucket heads, not the whole queue.
        self._queues: dict[str, dict[str, dict[str, int]]] = {}
        self._queue_seq = 0
        self._idempotency: dict[tuple[str, str], _Idempotency] = {}
        self._versions: dict[str, dict[str, int]] = {}
        self._policies: dict[str, dict[str, Any]] = {}
        self._held_controls: dict[tuple[str, str], _Held] = {}
        # Gates: the runs holding each Limit key's slots (a run holds one while it is locked),
        # each Rate key's bucket (tokens, when counted), and when each fairness bucket was
        # last served.
        self._slots: dict[tuple[str, str], set[str]] = {}
        self._tokens: dict[tuple[str, str], tuple[float, float]] = {}
        self._served: dict[str, dict[str, int]] = {}
        self._buffers: dict[tuple[str, str], _Buffer] = {}
        self._serve_seq = 0
        self._order = 0

    # -- helpers -------------------------------------------------------------------------------

    def _run(self, name: str, run_id: str) -> _Run:
        run = self._runs.get((name, run_id))
        if run is None:
            raise RunNotFoundError(name, run_id)
        return run

    def _held(self, run: _Run) -> bool:
        return run.lock is not None and run.lock_expires > self._clock()

    def _check_fence(self, run: _Run, lease: str) -> None:
        if run.ended:
            raise EventAfterTerminal(f"run {run.run_id!r} has ended; nothing more is journaled")
        if run.lock != lease or not self._held(run):
            raise LockLost(f"lease {lease!r} no longer holds run {run.run_id!r}")

    def _enqueue(self, run: _Run) -> None:
        bucket = self._queues.setdefault(run.name, {}).setdefault(run.bucket, {})
        if not run.ended and run.run_id not in bucket:
            self._queue_seq += 1
            bucket[run.run_id] = self._queue_seq

    def _dequeue(self, run: _Run) -> None:
        self._queues.get(run.name, {}).get(run.bucket, {}).pop(run.run_id, None)

    def _queued(self, run: _Run) -> bool:
        return run.run_id in self._queues.get(run.name, {}).get(run.bucket, {})

    def _append(self, run: _Run, events: Sequence[RunEvent], epoch: int | None) -> None:
        """Append without checks other than the terminal rule; the caller checked the fence."""
        if run.ended or any(e.is_terminal for e in events[:-1]):
            raise EventAfterTerminal(f"run {run.run_id!r}: no event may follow a terminal one")
        seq = len(run.events)
        stamp = {EPOCH_HEADER: str(epoch)} if epoch is not None else {}
        for event in events:
            seq += 1
            # Keep a copy, as JSON, so the journal is what a durable store would hold: a caller
            # mutating its dict later cannot rewrite history.
            text = json.dumps(event.payload, allow_nan=False, separators=(",", ":"))
            run.texts.append(text)
            run.events.append(with_payload(event, json.loads(text)).with_seq(seq, **stamp))
            if event.kind in PROGRESS_KINDS:
                run.owner_gone = run.store_requeues = 0
        if run.ended:
            run.wait = None
            self._set_lock(run, None)
            self._dequeue(run)

    def _event(self, run: _Run, kind: str, payload: dict[str, Any]) -> RunEvent:
        return RunEvent(kind=kind, payload=payload, run_id=run.run_id)

    def _close_wait(self, run: _Run) -> None:
        run.wait = None

    def _set_lock(self, run: _Run, lease: str | None) -> None:
        run.lock = lease
        key = run.gates.concurrency_key
        if key is not None:
            holders = self._slots.setdefault((run.name, key), set())
            if lease is None:
                holders.discard(run.run_id)
            else:
                holders.add(run.run_id)

    def _gated(self, run: _Run) -> str | None:
        """Why ``run`` cannot start now (its Limit is full, its Rate has no token), or None,
        having then spent the token. A Limit refusal spends nothing."""
        gates = run.gates
        if gates.limited:
            assert gates.concurrency_key is not None
            assert gates.concurrency_max is not None
            holders = self._slots.get((run.name, gates.concurrency_key), set())
            holding = len(holders) - (run.run_id in holders)
            if holding >= gates.concurrency_max:
                return f"Limit {gates.concurrency_key!r} {holding}/{gates.concurrency_max}"
        if gates.rated:
            assert gates.rate_key is not None
            now = self._clock()
            tokens, updated = self._tokens.get(
                (run.name, gates.rate_key), (float(gates.rate_burst or 1), now)
            )
            tokens = refill(tokens, updated, now, gates)
            if tokens < 1:
                self._tokens[(run.name, gates.rate_key)] = (tokens, now)
                return f"Rate {gates.rate_key!r}: no token"
            self._tokens[(run.name, gates.rate_key)] = (tokens - 1, now)
        return None

    def _claim(self, run: _Run, lease: str) -> None:
        self._dequeue(run)
        if run.lock != lease or not self._held(run):
            run.epoch += 1
        self._set_lock(run, lease)
        run.lock_expires = self._clock() + self.lock_ttl

    def _status(self, run: _Run) -> RunStatus:
        return derive_status(
            terminal=terminal_status(run.events[-1]) if run.ended else None,
            lock_live=self._held(run),
            lock_set=run.lock is not None,
            wait_kind=run.wait.kind if run.wait is not None else None,
            queued=self._queued(run),
        )

    def _info(self, run: _Run) -> RunInfo:
        return RunInfo(
            name=run.name,
            run_id=run.run_id,
            status=self._status(run),
            submitted_at=run.submitted_at,
            params=run.params,
            owner=run.owner,
            metadata=run.metadata,
            version=run.version,
            version_behavior=run.version_behavior,
            lock_holder=run.lock if self._held(run) else None,
            wait=run.wait,
            cancel_requested_at=run.cancel_at,
        )

    # -- lifecycle -----------------------------------------------------------------------------

    @_locked
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
    ) -> str:
        now = self._clock()
        if idempotency_key is not None:
            record = self._idempotency.get((name, idempotency_key))
            if record is not None and record.expires_at > now:
                if (
                    idempotency_body_hash is not None
                    and record.body_hash is not None
                    and record.body_hash != idempotency_body_hash
                ):
                    raise IdempotencyConflict(
                        f"idempotency key {idempotency_key!r} of {name!r} was first used for a "
                        f"different request (run {record.run_id!r}); that run is unchanged"
                    )
                return record.run_id
        submit = Submit(
            name,
            params,
            metadata,
            owner,
            version,
            version_behavior,
            concurrency_key,
            concurrency_max,
            rate_key,
            rate_per_second,
            rate_burst,
            provenance,
            start_at,
        )
        self._insert_run(submit, run_id, headers, now)
        if idempotency_key is not None:
            delay = max(0.0, (start_at or now) - now)
            self._idempotency[(name, idempotency_key)] = _Idempotency(
                run_id, idempotency_body_hash, now + idempotency_ttl + delay
            )
        return run_id

    def _insert_run(
        self, submit: Submit, run_id: str, headers: dict[str, str] | None, now: float
    ) -> None:
        """Create the run and journal its opening events; the caller checked idempotency."""
        name = submit.name
        if (name, run_id) in self._runs:
            raise DuplicateRunError(name, run_id)
        self._order += 1
        run = _Run(
            name=name,
            run_id=run_id,
            params=dict(submit.params),
            metadata=dict(submit.metadata or {}),
            owner=submit.owner,
            version=submit.version,
            version_behavior=submit.version_behavior,
            submitted_at=now,
            order=self._order,
            gates=submit.gates,
        )
        run.bucket = fair_bucket(submit.owner, run.gates)
        if submit.delayed(now):
            assert submit.start_at is not None
            run.wait = WaitSpec(
                kind="start", wait_id="start", call_index=-1, due_at=submit.start_at
            )
        self._runs[(name, run_id)] = run
        self._append(run, submit.opening_events(run_id, now, headers), None)
        if run.wait is None:
            self._enqueue(run)
        held = self._held_controls.pop((name, run_id), None)
        if held is not None and held.expires_at > now:
            if held.pause_at is not None:
                self._latch_pause(run, held.pause_at)
            if held.cancel_at is not None:
                self._latch_cancel(run, held.cancel_at, held.cancel_detail)

    @_locked
    def claim_next_run(
        self,
        name: str,
        worker_id: str,
        worker_version: str | None = None,
        *,
        prefer: Sequence[int] = (),
    ) -> str | None:
        served = self._served.setdefault(name, {})
        heads = sorted(
            (served.get(bucket, 0), next(iter(runs.values())), bucket)
            for bucket, runs in self._queues.get(name, {}).items()
            if runs
        )
        for _, _, bucket_name in heads:
            # The claim returns right after it dequeues, so iterating the live dict is safe.
            for run_id in self._queues[name][bucket_name]:
                run = self._runs[(name, run_id)]
                if self._held(run) and run.lock != worker_id:
                    continue
                if (
                    worker_version is not None
                    and run.version_behavior == "pinned"
                    and run.version
                    and run.version != worker_version
                ):
                    continue
                if (run.lock != worker_id or not self._held(run)) and self._gated(run):
                    break  # the bucket shares its gate: none of its runs can start either
                self._claim(run, worker_id)
                self._serve_seq += 1
                served[run.bucket] = self._serve_seq
                return str(run.run_id)
        return None

    @_locked
    def claim_run(self, name: str, run_id: str, worker_id: str) -> None:
        run = self._run(name, run_id)
        if run.ended:
            raise RunFinishedError(f"run {run_id!r} of {name!r} has ended")
        if self._held(run) and run.lock != worker_id:
            raise RunOwnedError(f"run {run_id!r} is held by another lease")
        if run.lock is not None and run.lock != worker_id:
            # The last holder's lease lapsed: that attempt is gone, and counts as one.
            self.requeue_run(name, run_id, reason="owner_gone")
            if run.ended:
                raise RunFinishedError(f"run {run_id!r} of {name!r} ran out of retries")
        if run.lock != worker_id or not self._held(run):
            reason = self._gated(run)
            if reason is not None:
                raise RunGatedError(f"run {run_id!r} of {name!r} waits on its gate: {reason}")
        self._claim(run, worker_id)

    @_locked
    def release_run(self, name: str, run_id: str, worker_id: str | None = None) -> None:
        run = self._runs.get((name, run_id))
        if run is None or (worker_id is not None and run.lock != worker_id):
            return
        self._set_lock(run, None)
        if not run.ended and run.wait is None:
            self._enqueue(run)

    @_locked
    def requeue_run(
        self, name: str, run_id: str, worker_id: str | None = None, *, reason: str = "owner_gone"
    ) -> None:
        run = self._runs.get((name, run_id))
        if run is None or (worker_id is not None and run.lock != worker_id):
            return
        self._set_lock(run, None)
        if run.ended:
            return
        run.owner_gone, run.store_requeues, kind, payload = requeue_outcome(
            reason, run.owner_gone, run.store_requeues, self.max_retries, self.max_store_requeues
        )
        self._append(run, [self._event(run, kind, payload)], None)
        if kind == EventKind.RUN_REQUEUED:
            self._enqueue(run)

    @_locked
    def recover_pending_runs(self, name: str, now: float | None = None) -> list[str]:
        now = self._clock() if now is None else now
        recovered = []
        for (run_name, run_id), run in list(self._runs.items()):
            if run_name == name and run.lock is not None and run.lock_expires <= now:
                if not run.ended:
                    recovered.append(run_id)
                self.requeue_run(name, run_id, reason="owner_gone")
        return recovered

    @_locked
    def explain_wait(self, name: str, run_id: str) -> WaitReason | None:
        run = self._run(name, run_id)
        if not self._queued(run):
            return None
        bucket = self._queues[name][run.bucket]
        position = 1 + sum(1 for seq in bucket.values() if seq < bucket[run_id])
        gates = run.gates
        holding = len(self._slots.get((name, gates.concurrency_key or ""), set()))
        tokens = None
        if gates.rated:
            now = self._clock()
            held = self._tokens.get((name, gates.rate_key or ""))
            tokens = float(gates.rate_burst or 1) if held is None else refill(*held, now, gates)
        return wait_reason(gates, position, holding, tokens)

    @_locked
    def get_pending_count(self, name: str) -> int:
        return sum(len(runs) for runs in self._queues.get(name, {}).values())

    @_locked
    def heartbeat(self, name: str, run_id: str, worker_id: str) -> tuple[str | None, str | None]:
        run = self._run(name, run_id)
        if run.lock != worker_id or not self._held(run):
            raise LockLost(f"lease {worker_id!r} no longer holds run {run_id!r}")
        run.lock_expires = self._clock() + self.lock_ttl
        return run.cancel_at, run.pause_at

    @_locked
    def lock_holder(self, name: str, run_id: str) -> str | None:
        run = self._runs.get((name, run_id))
        return run.lock if run is not None and self._held(run) else None

    @_locked
    def request_cancel(
        self, name: str, run_id: str, *, detail: dict[str, Any] | None = None
    ) -> str:
        run = self._runs.get((name, run_id))
        if run is None:
            held = self._hold(name, run_id)
            if held.cancel_at is None:
                held.cancel_at, held.cancel_detail = iso(self._clock()), dict(detail or {})
            return held.cancel_at
        if run.cancel_at is not None or run.ended:
            return run.cancel_at or iso(self._clock())
        self._latch_cancel(run, iso(self._clock()), dict(detail or {}))
        return run.cancel_at or ""

    def _latch_cancel(self, run: _Run, at: str, detail: dict[str, Any]) -> None:
        run.cancel_at = at
        self._append(
            run,
            [
                self._event(
                    run,
                    EventKind.RUN_CANCEL,
                    {"requested_at": at, "detail": detail},
                )
            ],
            None,
        )
        if run.wait is not None and not self._held(run):
            self._enqueue(run)

    @_locked
    def get_run_controls(self, name: str, run_id: str) -> tuple[str | None, str | None]:
        run = self._run(name, run_id)
        return run.cancel_at, run.pause_at

    @_locked
    def poll_run(self, name: str, run_id: str) -> RunControls:
        run = self._run(name, run_id)
        return RunControls(run.cancel_at, run.pause_at, bool(run.updates))

    @_locked
    def get_run(self, name: str, run_id: str) -> RunInfo | None:
        run = self._runs.get((name, run_id))
        return self._info(run) if run is not None else None

    @_locked
    def list_runs(
        self, name: str, *, limit: int = 50, cursor: str | None = None, owner: str | None = None
    ) -> tuple[list[RunInfo], str | None]:
        runs = sorted(
            (
                r
                for (n, _), r in self._runs.items()
                if n == name and (owner is None or r.owner == owner)
            ),
            key=lambda r: -r.order,
        )
        if cursor:
            runs = [r for r in runs if r.order < int(cursor)]
        page = runs[:limit]
        more = len(runs) > limit
        return [self._info(r) for r in page], (str(page[-1].order) if more else None)

    @_locked
    def run_maintenance(self, now: float | None = None) -> int:
        """Drop expired idempotency records and held controls. Finished runs are kept: this
        store lives no longer than its process."""
        now = self._clock() if now is None else now
        expired = [k for k, r in self._idempotency.items() if r.expires_at <= now]
        held = [k for k, h in self._held_controls.items() if h.expires_at <= now]
        for key in expired:
            del self._idempotency[key]
        for key in held:
            del self._held_controls[key]
        return len(expired) + len(held)

    def ping(self) -> None:
        return None

    # -- event log -----------------------------------------------------------------------------

    @_locked
    def append_events(
        self, name: str, run_id: str, events: list[RunEvent], *, fence: str | None = None
    ) -> None:
        run = self._run(name, run_id)
        if not events:
            return
        if fence is not None:
            self._check_fence(run, fence)
        self._append(run, events, run.epoch if fence is not None else None)

    @_locked
    def load_run(self, name: str, run_id: str, *, max_events: int | None = None) -> list[RunEvent]:
        run = self._runs.get((name, run_id))
        if run is None:
            return []
        # The whole journal unless a page is asked for: a silently cut journal would replay
        # wrong. max_replay_entries bounds runs through the engine's event cap instead.
        cap = len(run.events) if max_events is None else max_events
        return [
            with_payload(event, json.loads(text))
            for event, text in zip(run.events[:cap], run.texts, strict=False)
        ]

    @_locked
    def get_last_event(self, name: str, run_id: str) -> RunEvent | None:
        run = self._runs.get((name, run_id))
        if run is None or not run.events:
            return None
        return with_payload(run.events[-1], json.loads(run.texts[-1]))

    # -- idempotency ---------------------------------------------------------------------------

    @_locked
    def get_idempotency_run(self, name: str, key: str) -> str | None:
        record = self._idempotency.get((name, key))
        return record.run_id if record and record.expires_at > self._clock() else None

    @_locked
    def set_idempotency_run(self, name: str, key: str, run_id: str, ttl: int = 86_400) -> bool:
        if self.get_idempotency_run(name, key) is not None:
            return False
        self._idempotency[(name, key)] = _Idempotency(run_id, None, self._clock() + ttl)
        return True

    @_locked
    def get_idempotency_body_hash(self, name: str, key: str) -> str | None:
        record = self._idempotency.get((name, key))
        return record.body_hash if record and record.expires_at > self._clock() else None

    # -- timers and waits ----------------------------------------------------------------------

    @_locked
    def park_run(
        self, name: str, run_id: str, *, lease: str, events: list[RunEvent], wait: WaitSpec
    ) -> WaitOutcome:
        run = self._run(name, run_id)
        self._check_fence(run, lease)
        if (
            run.cancel_at is not None
            or run.updates
            or (wait.kind == "signal" and any(s["name"] == wait.signal for s in run.signals))
        ):
            return WaitOutcome.SUPERSEDED
        if wait.kind == "pause" and run.pause_at is None:
            return WaitOutcome.SUPERSEDED
        self._append(run, events, run.epoch)
        run.wait = wait
        self._set_lock(run, None)
        self._dequeue(run)
        return WaitOutcome.PARKED

    @_locked
    def get_sleeping_runs(self, before: float, limit: int = 100) -> list[tuple[str, str]]:
        due = sorted(
            (
                (r.wait.due_at, r.order, r.name, r.run_id)
                for r in self._runs.values()
                if r.wait is not None
                and r.wait.due_at is not None
                and r.wait.due_at <= before
                and not r.ended
            ),
            key=lambda t: (t[0], t[1]),
        )
        return [(name, run_id) for _, _, name, run_id in due[:limit]]

    @_locked
    def wake_due(self, name: str, run_id: str, *, due_by: float) -> WaitOutcome:
        run = self._runs.get((name, run_id))
        wait = run.wait if run is not None else None
        if run is None or wait is None or wait.due_at is None or wait.due_at > due_by:
            return WaitOutcome.SUPERSEDED
        if wait.kind == "signal":
            if any(s["name"] == wait.signal for s in run.signals):
                return WaitOutcome.SUPERSEDED
            kind = EventKind.RUN_WAIT_TIMED_OUT
        elif wait.kind in ("sleep", "start"):
            kind = EventKind.RUN_WOKEN
        else:
            return WaitOutcome.SUPERSEDED
        self._append(
            run,
            [self._event(run, kind, {"call_index": wait.call_index, "wait_id": wait.wait_id})],
            None,
        )
        self._close_wait(run)
        if not self._held(run):
            self._enqueue(run)
        return WaitOutcome.RESOLVED

    def _end_wait(
        self, name: str, run_id: str, wait_id: str, kind: EventKind, lease: str | None
    ) -> WaitOutcome:
        run = self._run(name, run_id)
        if lease is not None:
            self._check_fence(run, lease)
        wait = run.wait
        kinds = ("signal",) if kind == EventKind.RUN_WAIT_TIMED_OUT else ("sleep", "start")
        if wait is None or wait.wait_id != wait_id or wait.kind not in kinds:
            journaled = any(
                e.kind == kind and e.payload.get("wait_id") == wait_id for e in run.events
            )
            return WaitOutcome.DUPLICATE if journaled else WaitOutcome.SUPERSEDED
        if kind == EventKind.RUN_WAIT_TIMED_OUT and any(
            s["name"] == wait.signal for s in run.signals
        ):
            return WaitOutcome.SUPERSEDED
        self._append(
            run,
            [self._event(run, kind, {"call_index": wait.call_index, "wait_id": wait_id})],
            run.epoch if lease is not None else None,
        )
        self._close_wait(run)
        if lease is None and not self._held(run):
            self._enqueue(run)
        return WaitOutcome.RESOLVED

    @_locked
    def wake_run(
        self,
        name: str,
        run_id: str,
        *,
        wait_id: str,
        lease: str | None = None,
    ) -> WaitOutcome:
        return self._end_wait(name, run_id, wait_id, EventKind.RUN_WOKEN, lease)

    @_locked
    def time_out_wait(
        self,
        name: str,
        run_id: str,
        *,
        wait_id: str,
        lease: str | None = None,
    ) -> WaitOutcome:
        return self._end_wait(name, run_id, wait_id, EventKind.RUN_WAIT_TIMED_OUT, lease)

    # -- signals -------------------------------------------------------------------------------

    @_locked
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
        run = self._run(name, run_id)
        if idempotency_key is not None and idempotency_key in run.signal_keys:
            return run.signal_keys[idempotency_key]
        if run.ended or run.cancel_at is not None:
            return "rejected"
        run.signals.append(
            {
                "signal_id": idempotency_key or uuid.uuid4().hex,
                "name": signal_name,
                "payload": payload,
                "sent_at": sent_at,
            }
        )
        result = "buffered"
        if run.wait is not None and run.wait.kind == "signal" and run.wait.signal == signal_name:
            self._close_wait(run)
            if not self._held(run):
                self._enqueue(run)
            result = "delivered"
        if idempotency_key is not None:
            run.signal_keys[idempotency_key] = result
        return result

    @_locked
    def peek_signal(self, name: str, run_id: str, signal_name: str) -> dict[str, Any] | None:
        run = self._run(name, run_id)
        return next((dict(s) for s in run.signals if s["name"] == signal_name), None)

    @_locked
    def pop_signal_match(self, name: str, run_id: str, signal_name: str, signal_id: str) -> bool:
        run = self._run(name, run_id)
        for index, signal in enumerate(run.signals):
            if signal["name"] == signal_name and signal["signal_id"] == signal_id:
                del run.signals[index]
                return True
        return False

    # -- updates -------------------------------------------------------------------------------

    @_locked
    def deliver_update(
        self,
        name: str,
        run_id: str,
        update_name: str,
        payload: dict[str, Any],
        update_id: str,
        sent_at: str,
    ) -> str:
        run = self._run(name, run_id)
        if update_id in run.update_results:
            return "settled"
        if update_id in run.updates:
            return "duplicate"
        if run.ended:
            return "rejected"
        run.updates[update_id] = {
            "update_id": update_id,
            "update": update_name,
            "payload": payload,
            "sent_at": sent_at,
        }
        if run.wait is not None and run.wait.kind != "start" and not self._held(run):
            self._enqueue(run)
        return "queued"

    @_locked
    def peek_pending_updates(self, name: str, run_id: str) -> list[dict[str, Any]]:
        return [dict(u) for u in self._run(name, run_id).updates.values()]

    @_locked
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
        run = self._run(name, run_id)
        if fence is not None:
            self._check_fence(run, fence)
        run.update_results[update_id] = dict(outcome)
        if ack:
            run.updates.pop(update_id, None)

    @_locked
    def read_update_result(self, name: str, run_id: str, update_id: str) -> dict[str, Any] | None:
        result = self._run(name, run_id).update_results.get(update_id)
        return dict(result) if result is not None else None

    # -- controls ------------------------------------------------------------------------------

    @_locked
    def request_pause(self, name: str, run_id: str) -> str:
        run = self._runs.get((name, run_id))
        if run is None:
            held = self._hold(name, run_id)
            held.pause_at = held.pause_at or iso(self._clock())
            return held.pause_at
        if run.pause_at is None and not run.ended:
            self._latch_pause(run, iso(self._clock()))
        return run.pause_at or iso(self._clock())

    def _latch_pause(self, run: _Run, at: str) -> None:
        run.pause_at = at
        self._append(
            run, [self._event(run, EventKind.RUN_PAUSE_REQUESTED, {"requested_at": at})], None
        )

    def _hold(self, name: str, run_id: str) -> _Held:
        """A control for an id not submitted yet, kept for ``held_ttl`` seconds."""
        now = self._clock()
        held = self._held_controls.get((name, run_id))
        if held is None or held.expires_at <= now:
            held = self._held_controls[(name, run_id)] = _Held(expires_at=now + self.held_ttl)
        return held

    @_locked
    def resume_paused_run(
        self,
        name: str,
        run_id: str,
        *,
        wait_id: str | None = None,
    ) -> WaitOutcome:
        run = self._run(name, run_id)
        if (
            run.wait is not None
            and run.wait.kind == "pause"
            and (wait_id is None or run.wait.wait_id == wait_id)
        ):
            self._append(
                run, [self._event(run, EventKind.RUN_UNPAUSED, {"wait_id": run.wait.wait_id})], None
            )
            run.pause_at = None
            self._close_wait(run)
            self._enqueue(run)
            return WaitOutcome.RESOLVED
        if run.pause_at is not None and wait_id is None:
            run.pause_at = None
            return WaitOutcome.RESOLVED
        return WaitOutcome.SUPERSEDED

    @_locked
    def terminate_run(
        self,
        name: str,
        run_id: str,
        *,
        reason: str | None = None,
        requested_by: str | None = None,
        cause: dict[str, Any] | None = None,
    ) -> TerminateOutcome:
        run = self._runs.get((name, run_id))
        if run is None:
            return TerminateOutcome.NOT_FOUND
        if run.ended:
            return TerminateOutcome.ALREADY_ENDED
        now = iso(self._clock())
        self._append(
            run,
            [
                self._event(
                    run, EventKind.RUN_ERROR, terminated_payload(now, reason, requested_by, cause)
                )
            ],
            None,
        )
        run.cancel_at = run.cancel_at or now
        self._set_lock(run, None)
        return TerminateOutcome.TERMINATED

    @_locked
    def hand_back_run(self, name: str, run_id: str, worker_id: str | None = None) -> None:
        run = self._runs.get((name, run_id))
        if run is None or (worker_id is not None and run.lock != worker_id):
            return
        self._set_lock(run, None)
        if not run.ended:
            self._enqueue(run)

    # -- versions ------------------------------------------------------------------------------

    @_locked
    def register_version(self, name: str, version: str) -> int:
        ranks = self._versions.setdefault(name, {})
        return ranks.setdefault(version, len(ranks) + 1)

    @_locked
    def version_rank(self, name: str, version: str) -> int | None:
        return self._versions.get(name, {}).get(version)

    # -- triggers ------------------------------------------------------------------------------

    @_locked
    def trigger_event(
        self, name: str, key: str, event: dict[str, Any], *, policy: TriggerPolicy
    ) -> str | None:
        buffer = self._buffers.setdefault((name, key), _Buffer())
        now = self._clock()
        buffer.events.append((buffer.next_seq, json.loads(json.dumps(event, allow_nan=False))))
        buffer.next_seq += 1
        buffer.first_at = now if buffer.first_at is None else buffer.first_at
        buffer.due_at = policy.due_at(buffer.first_at, now, buffer.due_at)
        if policy.full(len(buffer.events)):
            return self._fire(name, key, buffer, policy)
        return None

    @_locked
    def due_triggers(self, name: str, before: float, limit: int = 100) -> list[str]:
        due = sorted(
            (buffer.due_at, key)
            for (n, key), buffer in self._buffers.items()
            if n == name and buffer.events and buffer.due_at is not None and buffer.due_at <= before
        )
        return [key for _, key in due[:limit]]

    @_locked
    def fire_trigger(
        self, name: str, key: str, *, policy: TriggerPolicy, due_by: float
    ) -> str | None:
        buffer = self._buffers.get((name, key))
        if buffer is None or not buffer.events or buffer.due_at is None:
            return None
        if buffer.due_at > due_by:
            return None
        return self._fire(name, key, buffer, policy)

    def _fire(self, name: str, key: str, buffer: _Buffer, policy: TriggerPolicy) -> str:
        events = [event for _, event in buffer.events]
        run_id, submit = policy.submit(name, key, events, buffer.events[0][0], buffer.events[-1][0])
        buffer.events, buffer.first_at, buffer.due_at = [], None, None
        self._insert_run(submit, run_id, None, self._clock())
        return run_id

    # -- policies ------------------------------------------------------------------------------

    @_locked
    def record_workflow_policy(self, name: str, policy: dict[str, Any]) -> None:
        self._policies[name] = json.loads(json.dumps(policy, allow_nan=False))

    @_locked
    def get_workflow_policy(self, name: str) -> dict[str, Any] | None:
        policy = self._policies.get(name)
        return json.loads(json.dumps(policy)) if policy is not None else None

    @_locked
    def list_names(self) -> list[str]:
        return sorted({name for name, _ in self._runs})
