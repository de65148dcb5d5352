"""What an operator's console asks a store: which ``Limit`` and ``Rate`` keys are hot, which
``Collect``/``Debounce`` buffers are open, and which workers are alive.

Every query reads the bookkeeping the claim path keeps already (the slots each Limit key
holds, the queue split by fairness bucket, the token buckets, the trigger buffers' due index),
never the runs one by one: its cost is bounded by the runs holding slots, the fairness buckets
queued, a workflow's token buckets and open buffers, whatever the store holds in all. Each
backend gathers that material its own way; the functions here make the answers from it, so
every backend answers alike.

A fairness bucket (``_gates.fair_bucket``) names the gates of the runs queued in it, so the
``max`` of a Limit key, and the rate and burst of a Rate key, come from the runs queued behind
it; for a key with none queued, from the runs holding its slots (Limit) or from the policy the
workers recorded (``PolicyStore``). A Rate key whose rate no run nor policy tells is reported
with its tokens as last kept, and ``per_second`` None.

Workers publish a :class:`WorkerInfo` every second or so with a short time to live
(``record_worker``), so one that stops or dies drops out of :meth:`InsightStore.live_workers`
once it lapses; a clean stop drops it at once (``drop_worker``). A lapsed record is remembered
for the store's ``lock_ttl`` more (not listed as live): that is how ``recover_lapsed_holders``
tells a worker that died from one that never published a record.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from lockgate._errors import CapabilityMissing, ConfigurationError
from lockgate._names import check_name
from lockgate.stores._gates import Gates, refill


@dataclass(frozen=True)
class LimitUsage:
    """A ``Limit`` key in use: its ``max`` (None when no run tells it), the slots its runs hold
    (``running``), and the runs queued with it (``queued``)."""

    key: str
    max: int | None
    running: int
    queued: int


@dataclass(frozen=True)
class RateUsage:
    """A ``Rate`` key's bucket: its rate and burst (None when unknown), its ``tokens`` now
    (refilled as a claim would), when the next whole token comes (epoch seconds; None when the
    bucket is full or never refills), and the runs queued with it."""

    key: str
    per_second: float | None
    burst: int | None
    tokens: float
    next_token_at: float | None
    queued: int


@dataclass(frozen=True)
class BufferInfo:
    """An open ``Collect`` or ``Debounce`` buffer: its key, the events it holds, when its first
    event came (``opened_at``) and when it fires (``due_at``)."""

    key: str
    events: int
    opened_at: float | None
    due_at: float | None


@dataclass(frozen=True)
class WorkerInfo:
    """What a live worker publishes of itself: who and where it is, the workflows it serves,
    its attempt slots in use of its slots, the shards or partitions it owns (as text, such as
    ``shard:3`` or ``orders:2``), when it started and when it last said so (epoch seconds)."""

    worker_id: str
    host: str
    pid: int
    version: str
    workflows: tuple[str, ...] = ()
    slots_in_use: int = 0
    slots: int = 0
    owned: tuple[str, ...] = ()
    started_at: float = 0.0
    heartbeat_at: float = 0.0

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"), allow_nan=False)

    @classmethod
    def from_json(cls, text: str | bytes) -> WorkerInfo:
        data: dict[str, Any] = json.loads(text)
        data["workflows"] = tuple(data.get("workflows") or ())
        data["owned"] = tuple(data.get("owned") or ())
        # A newer worker may say more: what this release does not know is left out.
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


class InsightStore:
    """Read-only views for operators (groups ``insight`` and ``workers``); see the module's
    docstring for what each costs and where its numbers come from."""

    def limit_usage(self, name: str, *, limit: int = 50) -> list[LimitUsage]:
        """Each ``Limit`` key of ``name`` with runs holding its slots or queued with it, the
        most queued first, then the most running; at most ``limit``."""
        raise CapabilityMissing.of(self, "insight")

    def rate_usage(self, name: str, *, limit: int = 50) -> list[RateUsage]:
        """Each ``Rate`` key of ``name`` with a token bucket or runs queued with it, the most
        queued first, then the fewest tokens; at most ``limit``."""
        raise CapabilityMissing.of(self, "insight")

    def open_buffers(self, name: str, *, limit: int = 100) -> list[BufferInfo]:
        """The open ``Collect``/``Debounce`` buffers of ``name`` this store holds, the soonest
        due first; at most ``limit``. (Buffers a Kafka trigger topic's consumers hold in their
        own memory are not the store's.)"""
        raise CapabilityMissing.of(self, "insight")

    def record_worker(self, info: WorkerInfo, ttl: float) -> None:
        """Publish ``info`` for ``ttl`` seconds on the store's clock, replacing the worker's
        last record."""
        raise CapabilityMissing.of(self, "workers")

    def live_workers(self) -> list[WorkerInfo]:
        """The workers whose record has not lapsed, by worker id."""
        raise CapabilityMissing.of(self, "workers")

    def drop_worker(self, worker_id: str) -> None:
        """Drop the worker's record (a clean stop). Idempotent."""
        raise CapabilityMissing.of(self, "workers")


#: The groups :class:`InsightStore` adds to ``stores._base.CAPABILITY_GROUPS``.
INSIGHT_GROUPS: dict[str, tuple[type, tuple[str, ...]]] = {
    "insight": (InsightStore, ("limit_usage", "rate_usage", "open_buffers")),
    "workers": (InsightStore, ("record_worker", "live_workers", "drop_worker")),
}


def lease_worker(lease: str | None) -> str | None:
    """The worker a lease names (the text before its first ``/``), or None for a lease that
    names none: only such leases are judged by their worker's presence."""
    if not lease or "/" not in lease:
        return None
    return lease.split("/", 1)[0] or None


def lapsed_workers(
    records: Iterable[tuple[str, float]], now: float, remembered: float, keep: Iterable[str]
) -> set[str]:
    """The workers of ``records`` (worker id, when its record lapses) whose record lapsed by
    ``now`` but no more than ``remembered`` seconds before, less those in ``keep``."""
    kept = set(keep)
    return {w for w, until in records if now - remembered < until <= now and w not in kept}


def check_limit(limit: int) -> int:
    """``limit`` if it is a positive int; else :class:`ConfigurationError`."""
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ConfigurationError(f"limit must be a positive integer, got {limit!r}")
    return limit


def check_worker(info: WorkerInfo, ttl: float) -> float:
    """``ttl`` as a float, once ``info`` and it are fit to record; else
    :class:`ConfigurationError` (or :class:`InvalidNameError` for the worker id)."""
    if not isinstance(info, WorkerInfo):
        raise ConfigurationError(f"record_worker takes a WorkerInfo, not {type(info).__name__}")
    check_name("worker id", info.worker_id)
    if isinstance(ttl, bool) or not isinstance(ttl, int | float) or not 0 < ttl < math.inf:
        raise ConfigurationError(f"ttl must be a positive, finite number of seconds, got {ttl!r}")
    return float(ttl)


def bucket_gates(bucket: str) -> Gates | None:
    """The gates a fairness bucket names (``_gates.fair_bucket``), or None for text it did
    not write."""
    try:
        parts = json.loads(bucket)
    except ValueError:
        return None
    if not isinstance(parts, list) or len(parts) != 6:
        return None
    _, ckey, cmax, rkey, rps, rburst = parts
    return Gates(ckey, cmax, rkey, rps, rburst)


def queued_gates(buckets: Iterable[tuple[str, int]]) -> list[tuple[Gates, int]]:
    """Each queued fairness bucket (its text, its runs) as the gates it names."""
    found = []
    for bucket, count in buckets:
        gates = bucket_gates(bucket)
        if gates is not None and count:
            found.append((gates, count))
    return found


def limit_usages(
    running: Mapping[str, tuple[int, int | None]],
    queued: Iterable[tuple[Gates, int]],
    policy: Mapping[str, Any] | None,
    limit: int,
) -> list[LimitUsage]:
    """The answer of ``limit_usage`` from ``running`` (per Limit key, the slots held and the
    max of a run holding one) and the queued buckets' gates."""
    queued_by: dict[str, int] = {}
    max_by: dict[str, int] = {}
    for gates, count in queued:
        if gates.concurrency_key is None:
            continue
        key = gates.concurrency_key
        queued_by[key] = queued_by.get(key, 0) + count
        if gates.concurrency_max is not None:
            max_by[key] = max(max_by.get(key, 0), gates.concurrency_max)
    declared = (policy or {}).get("concurrency") or {}
    found = []
    for key in set(running) | set(queued_by):
        held, held_max = running.get(key, (0, None))
        most = max_by.get(key, held_max)
        if most is None and isinstance(declared.get("max"), int):
            most = declared["max"]
        found.append(LimitUsage(key, most, held, queued_by.get(key, 0)))
    found.sort(key=lambda u: (-u.queued, -u.running, u.key))
    return found[:limit]


def rate_usages(
    buckets: Mapping[str, tuple[float, float]],
    queued: Iterable[tuple[Gates, int]],
    policy: Mapping[str, Any] | None,
    now: float,
    limit: int,
) -> list[RateUsage]:
    """The answer of ``rate_usage`` from ``buckets`` (per Rate key, its tokens and when they
    were kept) and the queued buckets' gates, at ``now``."""
    queued_by: dict[str, int] = {}
    gates_by: dict[str, Gates] = {}
    for gates, count in queued:
        if gates.rate_key is None or gates.rate_per_second is None:
            continue
        queued_by[gates.rate_key] = queued_by.get(gates.rate_key, 0) + count
        gates_by.setdefault(gates.rate_key, gates)
    declared = (policy or {}).get("rate") or {}
    found = []
    for key in set(buckets) | set(queued_by):
        known = gates_by.get(key) or _declared_rate(key, declared)
        found.append(_rate_usage(key, known, buckets.get(key), queued_by.get(key, 0), now))
    found.sort(key=lambda u: (-u.queued, u.tokens, u.key))
    return found[:limit]


def _declared_rate(key: str, declared: Mapping[str, Any]) -> Gates | None:
    rps = declared.get("per_second")
    if not isinstance(rps, int | float):
        return None
    burst = declared.get("burst")
    return Gates(rate_key=key, rate_per_second=float(rps), rate_burst=burst)


def _rate_usage(
    key: str, gates: Gates | None, kept: tuple[float, float] | None, queued: int, now: float
) -> RateUsage:
    if gates is None:
        tokens = kept[0] if kept is not None else 0.0
        return RateUsage(key, None, None, tokens, None, queued)
    assert gates.rate_per_second is not None
    capacity = float(gates.rate_burst or 1)
    # As the claim path computes it: a bucket never written starts full.
    tokens = capacity if kept is None else refill(kept[0], kept[1], now, gates)
    next_at = None
    if tokens < capacity and gates.rate_per_second > 0:
        next_at = now + (math.floor(tokens) + 1 - tokens) / gates.rate_per_second
    return RateUsage(key, gates.rate_per_second, gates.rate_burst, tokens, next_at, queued)
