"""MemoryStore's state and the changes its operations share: reading a run, fenced
appends, the queue split by fairness bucket, slots and tokens, creating a run."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import wraps
from typing import Any, ParamSpec, TypeVar

from lockgate._errors import (
    DuplicateRunError,
    EventAfterTerminal,
    LockLost,
    RunNotFoundError,
)
from lockgate.journal._events import (
    EPOCH_HEADER,
    EventKind,
    RunEvent,
    RunStatus,
    terminal_status,
)
from lockgate.stores._gates import Gates, Refusal, fair_bucket, refill, token_wait
from lockgate.stores._records import (
    PROGRESS_KINDS,
    Submit,
    derive_status,
    with_payload,
)
from lockgate.stores._types import (
    RunInfo,
    WaitSpec,
)

P = ParamSpec("P")
R = TypeVar("R")


def locked(method: Callable[P, R]) -> Callable[P, R]:
    @wraps(method)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        with args[0]._mutex:  # type: ignore[attr-defined]
            return method(*args, **kwargs)

    return wrapper


@dataclass
class MemoryRun:
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
    #: Counted crashes (store clock times), and the lease whose loop was seen blocked with
    #: the lock expiry it had then (see ``stores/_poison.py``).
    crashes: list[float] = field(default_factory=list)
    blocked: tuple[str, float] | None = None
    signals: list[dict[str, Any]] = field(default_factory=list)
    signal_keys: dict[str, str] = field(default_factory=dict)
    updates: dict[str, dict[str, Any]] = field(default_factory=dict)
    update_results: dict[str, dict[str, Any]] = field(default_factory=dict)
    gates: Gates = field(default_factory=Gates)
    bucket: str = ""
    ended_at: float | None = None

    @property
    def ended(self) -> bool:
        return bool(self.events) and self.events[-1].is_terminal


@dataclass
class MemoryBuffer:
    """One key's trigger events waiting for their batch to fire."""

    events: list[tuple[int, dict[str, Any]]] = field(default_factory=list)
    first_at: float | None = None
    due_at: float | None = None
    next_seq: int = 1


@dataclass
class HeldControls:
    expires_at: float
    cancel_at: str | None = None
    cancel_detail: dict[str, Any] = field(default_factory=dict)
    pause_at: str | None = None


@dataclass
class IdempotencyRecord:
    run_id: str
    body_hash: str | None
    expires_at: float


class MemoryState:
    """Everything a MemoryStore holds, and the helpers its operations share. Every helper runs
    under the store's lock, taken by the public method that calls it."""

    _mutex: threading.RLock
    _clock: Callable[[], float]
    _runs: dict[tuple[str, str], MemoryRun]
    _queues: dict[str, dict[str, dict[str, int]]]
    _queue_seq: int
    _order: int
    _held_controls: dict[tuple[str, str], HeldControls]
    _slots: dict[tuple[str, str], set[str]]
    _tokens: dict[tuple[str, str], tuple[float, float]]
    _buffers: dict[tuple[str, str], MemoryBuffer]
    #: Fired-through marks of batches buffered outside the store, per (name, source, key).
    _marks: dict[tuple[str, str, str], int]
    lock_ttl: float
    held_ttl: float

    def _run(self, name: str, run_id: str) -> MemoryRun:
        run = self._runs.get((name, run_id))
        if run is None:
            raise RunNotFoundError(name, run_id)
        return run

    def _held(self, run: MemoryRun) -> bool:
        return run.lock is not None and run.lock_expires > self._clock()

    def _check_fence(self, run: MemoryRun, lease: str) -> None:
        if run.ended:
            raise EventAfterTerminal(f"run {run.run_id!r} has ended; nothing more is journaled")
        if run.lock != lease or not self._held(run):
            raise LockLost(f"lease {lease!r} no longer holds run {run.run_id!r}")

    def _enqueue(self, run: MemoryRun) -> None:
        bucket = self._queues.setdefault(run.name, {}).setdefault(run.bucket, {})
        if not run.ended and run.run_id not in bucket:
            self._queue_seq += 1
            bucket[run.run_id] = self._queue_seq

    def _dequeue(self, run: MemoryRun) -> None:
        self._queues.get(run.name, {}).get(run.bucket, {}).pop(run.run_id, None)

    def _queued(self, run: MemoryRun) -> bool:
        return run.run_id in self._queues.get(run.name, {}).get(run.bucket, {})

    def _append(self, run: MemoryRun, events: Sequence[RunEvent], epoch: int | None) -> None:
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
            run.ended_at = self._clock()
            run.wait = None
            self._set_lock(run, None)
            self._dequeue(run)

    def _event(self, run: MemoryRun, kind: str, payload: dict[str, Any]) -> RunEvent:
        return RunEvent(kind=kind, payload=payload, run_id=run.run_id)

    def _close_wait(self, run: MemoryRun) -> None:
        run.wait = None

    def _set_lock(self, run: MemoryRun, lease: str | None) -> None:
        run.lock = lease
        key = run.gates.concurrency_key
        if key is not None:
            holders = self._slots.setdefault((run.name, key), set())
            if lease is None:
                holders.discard(run.run_id)
            else:
                holders.add(run.run_id)

    def _gated(self, run: MemoryRun) -> Refusal | None:
        """Why ``run`` cannot start now (its Limit is full, its Rate has no token), or None,
        having then spent the token. A Limit refusal spends nothing."""
        gates = run.gates
        if gates.limited:
            assert gates.concurrency_key is not None
            assert gates.concurrency_max is not None
            holders = self._slots.get((run.name, gates.concurrency_key), set())
            holding = len(holders) - (run.run_id in holders)
            if holding >= gates.concurrency_max:
                return Refusal(f"Limit {gates.concurrency_key!r} {holding}/{gates.concurrency_max}")
        if gates.rated:
            assert gates.rate_key is not None
            now = self._clock()
            tokens, updated = self._tokens.get(
                (run.name, gates.rate_key), (float(gates.rate_burst or 1), now)
            )
            tokens = refill(tokens, updated, now, gates)
            if tokens < 1:  # the bucket as kept refills to the same tokens later
                return Refusal(f"Rate {gates.rate_key!r}: no token", token_wait(tokens, gates))
            self._tokens[(run.name, gates.rate_key)] = (tokens - 1, now)
        return None

    def _claim(self, run: MemoryRun, lease: str) -> None:
        self._dequeue(run)
        if run.lock != lease or not self._held(run):
            run.epoch += 1
        self._set_lock(run, lease)
        run.lock_expires = self._clock() + self.lock_ttl

    def _status(self, run: MemoryRun) -> RunStatus:
        return derive_status(
            terminal=terminal_status(run.events[-1]) if run.ended else None,
            lock_live=self._held(run),
            lock_set=run.lock is not None,
            wait_kind=run.wait.kind if run.wait is not None else None,
            queued=self._queued(run),
        )

    def _info(self, run: MemoryRun) -> RunInfo:
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
            ended_at=run.ended_at,
        )

    def _insert_run(
        self, submit: Submit, run_id: str, headers: dict[str, str] | None, now: float
    ) -> None:
        """Create the run and journal its opening events; the caller checked idempotency."""
        name = submit.name
        if (name, run_id) in self._runs:
            raise DuplicateRunError(name, run_id)
        self._order += 1
        run = MemoryRun(
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

    def _latch_cancel(self, run: MemoryRun, at: str, detail: dict[str, Any]) -> None:
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

    def _latch_pause(self, run: MemoryRun, at: str) -> None:
        run.pause_at = at
        self._append(
            run, [self._event(run, EventKind.RUN_PAUSE_REQUESTED, {"requested_at": at})], None
        )

    def _hold(self, name: str, run_id: str) -> HeldControls:
        """A control for an id not submitted yet, kept for ``held_ttl`` seconds."""
        now = self._clock()
        held = self._held_controls.get((name, run_id))
        if held is None or held.expires_at <= now:
            held = self._held_controls[(name, run_id)] = HeldControls(
                expires_at=now + self.held_ttl
            )
        return held
