"""ValkeyStore's operator views (``stores/_insight.py``): one script per shard for each view,
over the gate bookkeeping's keys (the ``locks`` zset and ``slot`` sets of the runs holding
Limit slots, the ``qb``/``q`` queue buckets, the ``toks`` set of Rate keys with a ``tok``
bucket, the ``tdue`` index of open trigger buffers), never the runs one by one. A sharded store
asks every shard and merges the answers. Worker records are namespace-wide (``wk``, ``wkx``)
and lapse on the store's clock."""

from __future__ import annotations

import json
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
from lockgate.stores.valkey._lifecycle import ValkeyLifecycle
from lockgate.stores.valkey._replies import as_text


def _triples(flat: list[Any]) -> list[tuple[str, str, str]]:
    texts = [as_text(value) for value in flat]
    return list(zip(texts[0::3], texts[1::3], texts[2::3], strict=True))


def _pairs(flat: list[Any]) -> list[tuple[str, int]]:
    return [(as_text(flat[i]), int(flat[i + 1])) for i in range(0, len(flat), 2)]


class ValkeyInsight(ValkeyLifecycle, InsightStore):
    """Operator views on Valkey."""

    def _policy(self, name: str) -> dict[str, Any] | None:
        policy = self._cmd("GET", self._key("policy", name))
        return json.loads(as_text(policy)) if policy is not None else None

    def limit_usage(self, name: str, *, limit: int = 50) -> list[LimitUsage]:
        """Cost per shard: the workflow's locked runs (their gate fields) and its queue
        buckets (their sizes)."""
        check_limit(limit)
        running: dict[str, tuple[int, int | None]] = {}
        buckets: list[tuple[str, int]] = []
        for shard in self._shards():
            held, queued = self._script("i_limits", name, shard=shard)
            for key, count, most in _triples(held):
                was, was_max = running.get(key, (0, None))
                cmax = int(most) if most else None
                if was_max is not None and (cmax is None or was_max > cmax):
                    cmax = was_max
                running[key] = (was + int(count), cmax)
            buckets.extend(_pairs(queued))
        return limit_usages(running, queued_gates(buckets), self._policy(name), limit)

    def rate_usage(self, name: str, *, limit: int = 50) -> list[RateUsage]:
        """Cost per shard: the workflow's Rate buckets and its queue buckets (their sizes)."""
        check_limit(limit)
        kept: dict[str, tuple[float, float]] = {}
        buckets: list[tuple[str, int]] = []
        now = 0.0
        for shard in self._shards():
            at, found, queued = self._script("i_rates", name, shard=shard)
            now = max(now, float(as_text(at)))
            for key, tokens, updated in _triples(found):
                # A key whose runs hash to two shards (their Limit keys differ) has a bucket
                # in each: the emptier one is the one holding runs back.
                bucket = (float(tokens), float(updated))
                if key not in kept or bucket[0] < kept[key][0]:
                    kept[key] = bucket
            buckets.extend(_pairs(queued))
        return rate_usages(kept, queued_gates(buckets), self._policy(name), now, limit)

    def open_buffers(self, name: str, *, limit: int = 100) -> list[BufferInfo]:
        """Cost per shard: ``limit`` entries of the workflow's due index, and each buffer's
        first time and length."""
        check_limit(limit)
        found: list[BufferInfo] = []
        for shard in self._shards():
            flat = [as_text(v) for v in self._script("i_buffers", name, str(limit), shard=shard)]
            for i in range(0, len(flat), 4):
                key, first_at, due_at, events = flat[i : i + 4]
                opened = float(first_at) if first_at else None
                found.append(BufferInfo(key, int(events), opened, float(due_at)))
        found.sort(key=lambda b: (b.due_at, b.key))
        return found[:limit]

    def record_worker(self, info: WorkerInfo, ttl: float) -> None:
        seconds = check_worker(info, ttl)
        self._script("i_record_worker", info.worker_id, info.to_json(), repr(seconds))

    def live_workers(self) -> list[WorkerInfo]:
        return [WorkerInfo.from_json(as_text(r)) for r in self._script("i_live_workers")]

    def drop_worker(self, worker_id: str) -> None:
        self._script("i_drop_worker", worker_id)
