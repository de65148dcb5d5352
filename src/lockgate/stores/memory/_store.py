"""MemoryStore: the whole store interface in one process's memory, for tests and embedding."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from lockgate._clock import iso
from lockgate._errors import (
    LockLost,
    RunFinishedError,
    RunGatedError,
    RunOwnedError,
)
from lockgate.journal._events import (
    EventKind,
    RunEvent,
)
from lockgate.stores._base import Store, loaded_claim
from lockgate.stores._chains import ChainLink, advance_record
from lockgate.stores._gates import WaitReason, refill, sooner, wait_reason
from lockgate.stores._insight import WorkerInfo, lapsed_workers, lease_worker
from lockgate.stores._poison import PoisonPolicy, judge_lapse
from lockgate.stores._records import (
    Submit,
    idempotency_conflict,
    requeue_outcome,
    with_payload,
)
from lockgate.stores._types import (
    Claims,
    RunControls,
    RunInfo,
    StoreMarker,
    list_cursor,
)
from lockgate.stores.memory._insight import MemoryInsight
from lockgate.stores.memory._state import (
    HeldControls,
    IdempotencyRecord,
    MemoryBuffer,
    MemoryRun,
    locked,
)
from lockgate.stores.memory._triggers import MemoryTriggers
from lockgate.stores.memory._waits import MemoryWaits


class MemoryStore(MemoryWaits, MemoryTriggers, MemoryInsight, Store):
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
        self._runs: dict[tuple[str, str], MemoryRun] = {}
        # The queue of each workflow, split by fairness bucket; each bucket keeps its runs in
        # queue order (run id -> position), so a claim looks at bucket heads, not the whole queue.
        self._queues: dict[str, dict[str, dict[str, int]]] = {}
        self._queue_seq = 0
        self._idempotency: dict[tuple[str, str], IdempotencyRecord] = {}
        self._versions: dict[str, dict[str, int]] = {}
        self._policies: dict[str, dict[str, Any]] = {}
        # Each chain's tail record, by its root: the newest link and whether the chain ended.
        self._chains: dict[tuple[str, str], tuple[ChainLink, bool]] = {}
        self._held_controls: dict[tuple[str, str], HeldControls] = {}
        # Gates: the runs holding each Limit key's slots (a run holds one while it is locked),
        # each Rate key's bucket (tokens, when counted), and when each fairness bucket was
        # last served.
        self._slots: dict[tuple[str, str], set[str]] = {}
        self._tokens: dict[tuple[str, str], tuple[float, float]] = {}
        self._served: dict[str, dict[str, int]] = {}
        self._buffers: dict[tuple[str, str], MemoryBuffer] = {}
        self._marks: dict[tuple[str, str, str], int] = {}
        self._workers: dict[str, tuple[WorkerInfo, float]] = {}
        self._serve_seq = 0
        self._order = 0
        # What a worker checks the store still holds (see ``ensure_marker``): lost only with
        # the process, so it never goes missing while a worker uses the store.
        self._marker: StoreMarker | None = None

    @locked
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
        now, name = self._clock(), submit.name
        if idempotency_key is not None:
            record = self._idempotency.get((name, idempotency_key))
            if record is not None and record.expires_at > now:
                if (
                    idempotency_body_hash is not None
                    and record.body_hash is not None
                    and record.body_hash != idempotency_body_hash
                ):
                    raise idempotency_conflict(name, idempotency_key, record.run_id)
                return record.run_id
        self._insert_run(submit, run_id, headers, now)
        if idempotency_key is not None:
            self._idempotency[(name, idempotency_key)] = IdempotencyRecord(
                run_id, idempotency_body_hash, now + submit.keep_key_for(idempotency_ttl, now)
            )
        return run_id

    @locked
    def claim_next_run(
        self,
        name: str,
        worker_id: str,
        worker_version: str | None = None,
        *,
        prefer: Sequence[int] = (),
    ) -> str | None:
        return self._claim_next(name, worker_id, worker_version)[0]

    @locked
    def claim_next_runs_loaded(
        self,
        name: str,
        leases: Sequence[str],
        worker_version: str | None = None,
        *,
        prefer: Sequence[int] = (),
    ) -> Claims:
        claimed = Claims()
        for lease in leases:
            run_id, claimed.next_token_in = self._claim_next(name, lease, worker_version)
            if run_id is None:
                break
            claimed.append(loaded_claim(self, name, run_id))
        return claimed

    def _claim_next(
        self, name: str, worker_id: str, worker_version: str | None
    ) -> tuple[str | None, float | None]:
        """:meth:`claim_next_run`'s claim, and when it took nothing, the seconds until the
        first token of a bucket its Rate refused (None if no Rate refused one)."""
        next_token_in: float | None = None
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
                if run.lock != worker_id or not self._held(run):
                    refused = self._gated(run)
                    if refused is not None:
                        next_token_in = sooner(next_token_in, refused.next_token_in)
                        break  # the bucket shares its gate: none of its runs can start either
                self._claim(run, worker_id)
                self._serve_seq += 1
                served[run.bucket] = self._serve_seq
                return str(run.run_id), None
        return None, next_token_in

    @locked
    def claim_run(
        self, name: str, run_id: str, worker_id: str, *, poison: PoisonPolicy | None = None
    ) -> None:
        run = self._run(name, run_id)
        if run.ended:
            raise RunFinishedError(f"run {run_id!r} of {name!r} has ended")
        if self._held(run) and run.lock != worker_id:
            raise RunOwnedError(f"run {run_id!r} is held by another lease")
        if run.lock is not None and run.lock != worker_id:
            # The last holder's lease lapsed: that attempt is gone, and counts as one.
            self._lapsed(run, poison)
            if run.ended:
                raise RunFinishedError(f"run {run_id!r} of {name!r} ran out of retries")
        if run.lock != worker_id or not self._held(run):
            refused = self._gated(run)
            if refused is not None:
                raise RunGatedError(
                    f"run {run_id!r} of {name!r} waits on its gate: {refused.reason}"
                )
        self._claim(run, worker_id)

    @locked
    def release_run(self, name: str, run_id: str, worker_id: str | None = None) -> None:
        run = self._runs.get((name, run_id))
        if run is None or (worker_id is not None and run.lock != worker_id):
            return
        self._set_lock(run, None)
        if not run.ended and run.wait is None:
            self._enqueue(run)

    @locked
    def requeue_run(
        self, name: str, run_id: str, worker_id: str | None = None, *, reason: str = "owner_gone"
    ) -> None:
        run = self._runs.get((name, run_id))
        if run is None or (worker_id is not None and run.lock != worker_id):
            return
        self._requeue(run, reason)

    def _requeue(self, run: MemoryRun, reason: str, extra: dict[str, Any] | None = None) -> None:
        self._set_lock(run, None)
        if run.ended:
            return
        run.owner_gone, run.store_requeues, kind, payload = requeue_outcome(
            reason,
            run.owner_gone,
            run.store_requeues,
            self.max_retries,
            self.max_store_requeues,
            extra,
        )
        self._append(run, [self._event(run, kind, payload)], None)
        if kind == EventKind.RUN_REQUEUED:
            self._enqueue(run)

    def _lapsed(self, run: MemoryRun, poison: PoisonPolicy | None) -> None:
        """Requeue (or quarantine) a run whose holder's lease lapsed: see ``_poison.py``."""
        if run.ended:
            self._set_lock(run, None)
            return
        blocked = run.lock is not None and run.blocked == (run.lock, run.lock_expires)
        lapse = judge_lapse(run.crashes, self._clock(), poison, loop_blocked=blocked)
        run.crashes, run.blocked = lapse.crashes, None
        if lapse.quarantine is None:
            self._requeue(run, "owner_gone", lapse.requeued)
            return
        self._set_lock(run, None)
        self._append(run, [self._event(run, EventKind.RUN_ERROR, lapse.quarantine)], None)

    @locked
    def recover_pending_runs(
        self, name: str, now: float | None = None, *, poison: PoisonPolicy | None = None
    ) -> list[str]:
        now = self._clock() if now is None else now
        recovered = []
        for (run_name, run_id), run in list(self._runs.items()):
            if run_name == name and run.lock is not None and run.lock_expires <= now:
                if not run.ended:
                    recovered.append(run_id)
                self._lapsed(run, poison)
        return recovered

    @locked
    def recover_lapsed_holders(
        self, name: str, *, keep: Sequence[str] = (), poison: PoisonPolicy | None = None
    ) -> list[str]:
        now = self._clock()
        self._forget_workers(now)
        records = ((w, until) for w, (_, until) in self._workers.items())
        lapsed = lapsed_workers(records, now, self.lock_ttl, keep)
        recovered: list[str] = []
        if not lapsed:
            return recovered
        for (run_name, run_id), run in list(self._runs.items()):
            if run_name == name and lease_worker(run.lock) in lapsed:
                if not run.ended:
                    recovered.append(run_id)
                self._lapsed(run, poison)
        return recovered

    @locked
    def note_loop_blocked(self, name: str, run_id: str, lease: str) -> bool:
        run = self._runs.get((name, run_id))
        if run is None or run.ended or run.lock != lease:
            return False
        run.blocked = (lease, run.lock_expires)
        return True

    @locked
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

    @locked
    def get_pending_count(self, name: str) -> int:
        return sum(len(runs) for runs in self._queues.get(name, {}).values())

    @locked
    def heartbeat(self, name: str, run_id: str, worker_id: str) -> tuple[str | None, str | None]:
        run = self._run(name, run_id)
        if run.lock != worker_id or not self._held(run):
            raise LockLost(f"lease {worker_id!r} no longer holds run {run_id!r}")
        run.lock_expires = self._clock() + self.lock_ttl
        return run.cancel_at, run.pause_at

    @locked
    def lock_holder(self, name: str, run_id: str) -> str | None:
        run = self._runs.get((name, run_id))
        return run.lock if run is not None and self._held(run) else None

    @locked
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

    @locked
    def get_run_controls(self, name: str, run_id: str) -> tuple[str | None, str | None]:
        run = self._run(name, run_id)
        return run.cancel_at, run.pause_at

    @locked
    def poll_run(self, name: str, run_id: str) -> RunControls:
        run = self._run(name, run_id)
        return RunControls(run.cancel_at, run.pause_at, bool(run.updates))

    @locked
    def get_run(self, name: str, run_id: str) -> RunInfo | None:
        run = self._runs.get((name, run_id))
        return self._info(run) if run is not None else None

    @locked
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
            below = list_cursor(cursor)
            runs = [r for r in runs if r.order < below]
        page = runs[:limit]
        more = len(runs) > limit
        return [self._info(r) for r in page], (str(page[-1].order) if more else None)

    @locked
    def get_chain_tail(self, root_name: str, root_run_id: str) -> ChainLink | None:
        record = self._chains.get((root_name, root_run_id))
        return record[0] if record is not None else None

    @locked
    def advance_chain_tail(self, link: ChainLink) -> None:
        self._move_tail(link, close=False)

    @locked
    def close_chain(self, link: ChainLink) -> None:
        self._move_tail(link, close=True)

    @locked
    def chain_closed(self, root_name: str, root_run_id: str) -> bool:
        record = self._chains.get((root_name, root_run_id))
        return record is not None and record[1]

    def _move_tail(self, link: ChainLink, *, close: bool) -> None:
        root = (link.root_name, link.root_run_id)
        recorded = self._chains.get(root)
        moved = advance_record(
            recorded[0] if recorded else None, bool(recorded and recorded[1]), link, close=close
        )
        if moved is not None:
            self._chains[root] = moved

    @locked
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

    @locked
    def ensure_marker(self) -> bool:
        if self._marker is not None:
            return False
        self._marker = StoreMarker(uuid.uuid4().hex, self._clock(), "memory")
        return True

    def read_marker(self) -> StoreMarker | None:
        return self._marker

    @locked
    def append_events(
        self, name: str, run_id: str, events: list[RunEvent], *, fence: str | None = None
    ) -> None:
        run = self._run(name, run_id)
        if not events:
            return
        if fence is not None:
            self._check_fence(run, fence)
        self._append(run, events, run.epoch if fence is not None else None)

    @locked
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

    @locked
    def get_last_event(self, name: str, run_id: str) -> RunEvent | None:
        run = self._runs.get((name, run_id))
        if run is None or not run.events:
            return None
        return with_payload(run.events[-1], json.loads(run.texts[-1]))

    @locked
    def get_idempotency_run(self, name: str, key: str) -> str | None:
        record = self._idempotency.get((name, key))
        return record.run_id if record and record.expires_at > self._clock() else None

    @locked
    def set_idempotency_run(self, name: str, key: str, run_id: str, ttl: int = 86_400) -> bool:
        if self.get_idempotency_run(name, key) is not None:
            return False
        self._idempotency[(name, key)] = IdempotencyRecord(run_id, None, self._clock() + ttl)
        return True

    @locked
    def get_idempotency_body_hash(self, name: str, key: str) -> str | None:
        record = self._idempotency.get((name, key))
        return record.body_hash if record and record.expires_at > self._clock() else None

    @locked
    def register_version(self, name: str, version: str) -> int:
        ranks = self._versions.setdefault(name, {})
        return ranks.setdefault(version, len(ranks) + 1)

    @locked
    def version_rank(self, name: str, version: str) -> int | None:
        return self._versions.get(name, {}).get(version)

    @locked
    def record_workflow_policy(self, name: str, policy: dict[str, Any]) -> None:
        self._policies[name] = json.loads(json.dumps(policy, allow_nan=False))

    @locked
    def get_workflow_policy(self, name: str) -> dict[str, Any] | None:
        policy = self._policies.get(name)
        return json.loads(json.dumps(policy)) if policy is not None else None

    @locked
    def list_names(self) -> list[str]:
        return sorted({name for name, _ in self._runs})
