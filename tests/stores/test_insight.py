"""The operator views every store serves (``InsightStore``): Limit keys in use against their
max with the runs queued behind them, Rate buckets' tokens and next token, open trigger
buffers, and worker records that lapse."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from lockgate import ConfigurationError, EventKind, InvalidNameError, ManualClock, Store
from lockgate.stores import (
    BufferInfo,
    LimitUsage,
    RateUsage,
    TriggerPolicy,
    ValkeyStore,
    WorkerInfo,
)

from ._support import NAME, event


def limited(store: Store, run_id: str, key: str, most: int = 2, **more: Any) -> None:
    store.submit_run(NAME, run_id, {}, concurrency_key=key, concurrency_max=most, **more)


def rated(store: Store, run_id: str, key: str, per_second: float = 0.5, burst: int = 2) -> None:
    store.submit_run(NAME, run_id, {}, rate_key=key, rate_per_second=per_second, rate_burst=burst)


def claim(store: Store, lease: str) -> str | None:
    return store.claim_next_run(NAME, lease)


def test_every_store_serves_the_insight_and_workers_groups(store: Store) -> None:
    assert {"insight", "workers"} <= store.capabilities()


def test_limit_usage_counts_slots_held_and_runs_queued_hottest_first(store: Store) -> None:
    for n in range(5):
        limited(store, f"a{n}", "acme")
    limited(store, "g0", "globex")
    limited(store, "g1", "globex")
    claimed = {claim(store, f"l{n}") for n in range(4)}
    assert claimed == {"a0", "a1", "g0", "g1"}
    assert claim(store, "l9") is None  # acme's two slots are taken, globex's too
    assert store.limit_usage(NAME) == [
        LimitUsage("acme", 2, running=2, queued=3),
        LimitUsage("globex", 2, running=2, queued=0),
    ]
    assert store.limit_usage(NAME, limit=1) == [LimitUsage("acme", 2, running=2, queued=3)]
    store.append_events(NAME, "a0", [event(EventKind.RUN_COMPLETE, "a0")], fence="l0")
    assert claim(store, "l5") == "a2"
    assert store.limit_usage(NAME)[0] == LimitUsage("acme", 2, running=2, queued=2)


def test_limit_usage_is_empty_for_a_workflow_with_no_limited_runs(store: Store) -> None:
    store.submit_run(NAME, "free", {})
    claim(store, "l0")
    assert store.limit_usage(NAME) == []
    assert store.limit_usage("other") == []


def test_rate_usage_shows_spent_tokens_the_next_token_and_runs_queued(
    store: Store, clock: ManualClock
) -> None:
    for n in range(4):
        rated(store, f"r{n}", "api")  # 0.5 tokens a second, a burst of 2
    assert claim(store, "l0") is not None
    assert claim(store, "l1") is not None
    assert claim(store, "l2") is None  # the bucket is empty
    [usage] = store.rate_usage(NAME)
    assert (usage.key, usage.per_second, usage.burst, usage.queued) == ("api", 0.5, 2, 2)
    assert usage.tokens == pytest.approx(0.0, abs=1e-6)
    assert usage.next_token_at == pytest.approx(clock() + 2.0, abs=1e-3)
    clock.advance(1.0)
    [usage] = store.rate_usage(NAME)
    assert usage.tokens == pytest.approx(0.5, abs=1e-3)  # refilled to now, as a claim sees it
    assert usage.next_token_at == pytest.approx(clock() + 1.0, abs=1e-3)
    clock.advance(10.0)
    [usage] = store.rate_usage(NAME)
    assert usage.tokens == pytest.approx(2.0)
    assert usage.next_token_at is None  # full


def test_rate_usage_takes_the_rate_from_the_recorded_policy_when_nothing_queues(
    store: Store, clock: ManualClock
) -> None:
    store.record_workflow_policy(NAME, {"rate": {"key": "tenant", "per_second": 4.0, "burst": 1}})
    store.submit_run(NAME, "r0", {}, rate_key="t1", rate_per_second=4.0, rate_burst=1)
    assert claim(store, "l0") == "r0"
    [usage] = store.rate_usage(NAME)
    assert usage == RateUsage("t1", 4.0, 1, usage.tokens, usage.next_token_at, 0)
    assert usage.tokens == pytest.approx(0.0, abs=1e-6)
    assert usage.next_token_at == pytest.approx(clock() + 0.25, abs=1e-3)


def test_hot_rate_keys_come_first(store: Store) -> None:
    rated(store, "a0", "quiet", burst=1)
    for n in range(3):
        rated(store, f"b{n}", "hot", burst=1)
    while claim(store, f"l{uuid.uuid4().hex[:6]}") is not None:
        pass
    assert [(u.key, u.queued) for u in store.rate_usage(NAME)] == [("hot", 2), ("quiet", 0)]


COLLECT = TriggerPolicy("collect", window_seconds=60, max_events=10)


def test_open_buffers_show_events_held_and_due_time_soonest_first(
    store: Store, clock: ManualClock
) -> None:
    opened = clock()
    store.trigger_event(NAME, "u1", {"n": 1}, policy=COLLECT)
    clock.advance(5)
    store.trigger_event(NAME, "u2", {"n": 1}, policy=COLLECT)
    store.trigger_event(NAME, "u1", {"n": 2}, policy=COLLECT)
    store.trigger_event(NAME, "u1", {"n": 3}, policy=COLLECT)
    found = store.open_buffers(NAME)
    assert [(b.key, b.events) for b in found] == [("u1", 3), ("u2", 1)]
    assert found[0].opened_at == pytest.approx(opened)
    assert found[0].due_at == pytest.approx(opened + 60)
    assert found[1].due_at == pytest.approx(opened + 65)
    assert store.open_buffers(NAME, limit=1) == [found[0]]
    clock.advance(55)
    assert store.fire_trigger(NAME, "u1", policy=COLLECT, due_by=clock()) is not None
    assert store.open_buffers(NAME) == [BufferInfo("u2", 1, found[1].opened_at, found[1].due_at)]


def worker(worker_id: str, **more: Any) -> WorkerInfo:
    return WorkerInfo(
        worker_id,
        host="h1",
        pid=4242,
        version="0.1.0",
        workflows=(NAME,),
        slots_in_use=1,
        slots=8,
        owned=("shard:0",),
        started_at=1.0,
        heartbeat_at=2.0,
        **more,
    )


def test_a_worker_record_lives_for_its_ttl_and_a_fresh_one_extends_it(
    store: Store, clock: ManualClock
) -> None:
    store.record_worker(worker("w1"), ttl=30)
    store.record_worker(worker("w2"), ttl=10)
    assert [w.worker_id for w in store.live_workers()] == ["w1", "w2"]
    assert store.live_workers()[0] == worker("w1")
    clock.advance(11)
    assert [w.worker_id for w in store.live_workers()] == ["w1"]  # w2 lapsed
    store.record_worker(worker("w1"), ttl=30)
    clock.advance(25)
    assert [w.worker_id for w in store.live_workers()] == ["w1"]
    clock.advance(6)
    assert store.live_workers() == []


def test_a_dropped_worker_disappears_at_once(store: Store) -> None:
    store.record_worker(worker("w1"), ttl=30)
    store.drop_worker("w1")
    store.drop_worker("w1")  # idempotent
    assert store.live_workers() == []


def test_bad_arguments_are_refused_with_typed_errors(store: Store) -> None:
    with pytest.raises(ConfigurationError):
        store.limit_usage(NAME, limit=0)
    with pytest.raises(ConfigurationError):
        store.open_buffers(NAME, limit=-1)
    with pytest.raises(ConfigurationError):
        store.record_worker(worker("w1"), ttl=0)
    with pytest.raises(InvalidNameError):
        store.record_worker(worker("w\x1f1"), ttl=5)
    assert store.live_workers() == []


def test_a_sharded_valkey_store_merges_every_shard(clock: ManualClock) -> None:
    from valkey_server import shared_url

    store = ValkeyStore(
        shared_url(), namespace=f"i{uuid.uuid4().hex[:12]}", shard_count=4, clock=clock
    )
    try:
        keys = [f"k{n}" for n in range(8)]
        for key in keys:
            for n in range(2):
                limited(store, f"{key}-{n}", key, most=1)
            store.trigger_event(NAME, key, {"n": 1}, policy=COLLECT)
        while claim(store, f"l{uuid.uuid4().hex[:6]}") is not None:
            pass
        assert {store.shard_of(NAME, f"{key}-0") for key in keys} != {0}
        usage = store.limit_usage(NAME)
        assert sorted(usage, key=lambda u: u.key) == [LimitUsage(k, 1, 1, 1) for k in keys]
        assert sorted(b.key for b in store.open_buffers(NAME)) == keys
        assert len(store.open_buffers(NAME, limit=3)) == 3
    finally:
        store.close()
