"""MemoryStore's operator views (``stores/_insight.py``): Limit and Rate keys in use, open
trigger buffers, live workers. Each reads the gate bookkeeping (slots, queue buckets, token
buckets) and the buffers, never the runs one by one."""

from __future__ import annotations

from typing import Any

from lockgate.stores._insight import (
    BufferInfo,
    InsightStore,
    LimitUsage,
    RateUsage,
    WorkerInfo,
    check_limit,
    check_worker,
    limit_usages,
    queued_gates,
    rate_usages,
)
from lockgate.stores.memory._state import MemoryState, locked


class MemoryInsight(MemoryState, InsightStore):
    """Operator views over a MemoryStore's state."""

    _policies: dict[str, dict[str, Any]]
    #: Each worker's last record and when it lapses (store clock).
    _workers: dict[str, tuple[WorkerInfo, float]]
    lock_ttl: float

    def _queued_buckets(self, name: str) -> list[tuple[str, int]]:
        return [(bucket, len(runs)) for bucket, runs in self._queues.get(name, {}).items()]

    @locked
    def limit_usage(self, name: str, *, limit: int = 50) -> list[LimitUsage]:
        """Cost: the workflow's Limit keys holding slots and its queue buckets."""
        check_limit(limit)
        running: dict[str, tuple[int, int | None]] = {}
        for (held_name, key), holders in self._slots.items():
            if held_name != name or not holders:
                continue
            maxes = [self._runs[(name, r)].gates.concurrency_max for r in holders]
            running[key] = (len(holders), max((m for m in maxes if m is not None), default=None))
        queued = queued_gates(self._queued_buckets(name))
        return limit_usages(running, queued, self._policies.get(name), limit)

    @locked
    def rate_usage(self, name: str, *, limit: int = 50) -> list[RateUsage]:
        """Cost: the token buckets kept and the workflow's queue buckets."""
        check_limit(limit)
        buckets = {
            key: kept for (kept_name, key), kept in self._tokens.items() if kept_name == name
        }
        queued = queued_gates(self._queued_buckets(name))
        return rate_usages(buckets, queued, self._policies.get(name), self._clock(), limit)

    @locked
    def open_buffers(self, name: str, *, limit: int = 100) -> list[BufferInfo]:
        """Cost: the trigger buffers kept."""
        check_limit(limit)
        found = [
            BufferInfo(key, len(buffer.events), buffer.first_at, buffer.due_at)
            for (buffer_name, key), buffer in self._buffers.items()
            if buffer_name == name and buffer.events
        ]
        found.sort(key=lambda b: (b.due_at if b.due_at is not None else float("inf"), b.key))
        return found[:limit]

    @locked
    def record_worker(self, info: WorkerInfo, ttl: float) -> None:
        seconds = check_worker(info, ttl)
        self._workers[info.worker_id] = (info, self._clock() + seconds)

    @locked
    def live_workers(self) -> list[WorkerInfo]:
        now = self._clock()
        self._forget_workers(now)
        return [info for w, (info, until) in sorted(self._workers.items()) if until > now]

    @locked
    def drop_worker(self, worker_id: str) -> None:
        self._workers.pop(worker_id, None)

    def _forget_workers(self, now: float) -> None:
        """Forget the records lapsed more than ``lock_ttl`` ago (see ``_insight.py``)."""
        for worker_id in [
            w for w, (_, until) in self._workers.items() if until <= now - self.lock_ttl
        ]:
            del self._workers[worker_id]
