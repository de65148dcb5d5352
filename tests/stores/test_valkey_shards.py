"""ValkeyStore with several shards: where runs live, claims across shards, shard leases,
hand-ons across shards, and the key layout a cluster needs (one hash tag per shard)."""

from __future__ import annotations

import hashlib
import re
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from lockgate import EventKind, ManualClock, RunStatus, ShardCountMismatch
from lockgate.stores import Gates, ValkeyStore
from lockgate.stores._shards import shard_for
from lockgate.stores._triggers import TriggerPolicy
from lockgate.stores._types import WaitOutcome
from lockgate.stores.valkey._keys import parts_of
from valkey_server import shared_url

from ._support import NAME, event, kinds, status

SHARDS = 4
LOCK_TTL = 30.0


def make(clock: ManualClock, namespace: str, shards: int = SHARDS) -> ValkeyStore:
    return ValkeyStore(
        shared_url(),
        namespace=namespace,
        clock=clock,
        lock_ttl=LOCK_TTL,
        shard_count=shards,
        retry_attempts=0,
    )


@pytest.fixture
def namespace() -> str:
    return f"s{uuid.uuid4().hex[:12]}"


@pytest.fixture
def store(clock: ManualClock, namespace: str) -> Iterator[ValkeyStore]:
    sharded = make(clock, namespace)
    yield sharded
    sharded.close()


def key_in(shard: int, prefix: str = "k") -> str:
    """A key (or run id) that hashes to ``shard``."""
    return next(f"{prefix}{n}" for n in range(1000) if shard_for(f"{prefix}{n}", SHARDS) == shard)


def ids_in(shard: int, count: int, prefix: str = "r") -> list[str]:
    found = (f"{prefix}{n}" for n in range(10_000) if shard_for(f"{prefix}{n}", SHARDS) == shard)
    return [next(found) for _ in range(count)]


def limited(store: ValkeyStore, run_id: str, key: str, limit: int = 1) -> None:
    store.submit_run(NAME, run_id, {}, concurrency_key=key, concurrency_max=limit)


def drain(store: ValkeyStore, lease: str = "w", **kwargs: Any) -> list[str]:
    claimed: list[str] = []
    while (run_id := store.claim_next_run(NAME, f"{lease}-{len(claimed)}", **kwargs)) is not None:
        claimed.append(run_id)
    return claimed


# -- where a run lives ---------------------------------------------------------------------


def test_shard_for_is_the_documented_hash() -> None:
    for key in ["acme", "r1", "ünïcode", ""]:
        digest = hashlib.sha1(key.encode("utf-8")).digest()
        assert shard_for(key, SHARDS) == int.from_bytes(digest[:8], "big") % SHARDS
    assert {shard_for(f"k{n}", SHARDS) for n in range(100)} == set(range(SHARDS))


def test_a_runs_shard_is_its_gate_keys_else_its_ids(store: ValkeyStore) -> None:
    store.submit_run(NAME, "plain", {})
    limited(store, "gated", "acme")
    store.submit_run(NAME, "rated", {}, rate_key="api", rate_per_second=1.0)
    store.submit_run(
        NAME,
        "both",
        {},
        concurrency_key="acme",
        concurrency_max=1,
        rate_key="api",
        rate_per_second=1.0,
    )
    assert store.shard_of(NAME, "plain") == shard_for("plain", SHARDS)
    assert store.shard_of(NAME, "gated") == shard_for("acme", SHARDS)
    assert store.shard_of(NAME, "rated") == shard_for("api", SHARDS)
    assert store.shard_of(NAME, "both") == shard_for("acme", SHARDS)


def test_shard_of_is_stable_and_shared_by_every_store(
    store: ValkeyStore, clock: ManualClock, namespace: str
) -> None:
    gate = key_in(2)
    run_id = next(r for r in ids_in(0, 5) if shard_for(r, SHARDS) != 2)
    limited(store, run_id, gate)
    other = make(clock, namespace)
    assert store.shard_of(NAME, run_id) == other.shard_of(NAME, run_id) == 2
    info = other.get_run(NAME, run_id)
    assert info is not None
    assert info.status == RunStatus.PENDING
    other.close()


def test_every_store_of_a_namespace_needs_the_same_shard_count(
    store: ValkeyStore, clock: ManualClock, namespace: str
) -> None:
    with pytest.raises(ShardCountMismatch, match="shard_count=4, not 2"):
        make(clock, namespace, shards=2)


def test_a_store_given_no_shard_count_takes_the_namespaces(
    store: ValkeyStore, clock: ManualClock, namespace: str
) -> None:
    run_id = ids_in(3, 1)[0]
    store.submit_run(NAME, run_id, {})
    other = ValkeyStore(shared_url(), namespace=namespace, clock=clock, retry_attempts=0)
    try:
        assert other.shard_count == SHARDS
        assert other.shard_of(NAME, run_id) == 3
        assert other.claim_next_run(NAME, "lease-a") == run_id
    finally:
        other.close()


# -- claims across shards ------------------------------------------------------------------


def test_gated_and_ungated_runs_in_every_shard_are_all_claimed_once(store: ValkeyStore) -> None:
    plain = [f"p{n}" for n in range(20)]
    for run_id in plain:
        store.submit_run(NAME, run_id, {})
    gated = [f"g{n}" for n in range(12)]
    for n, run_id in enumerate(gated):
        limited(store, run_id, f"tenant{n % 3}", limit=10)
    assert {store.shard_of(NAME, r) for r in plain} == set(range(SHARDS))
    assert store.get_pending_count(NAME) == 32
    runs, cursor = store.list_runs(NAME, limit=100)
    assert cursor is None
    assert {r.run_id for r in runs} == set(plain + gated)
    claimed = drain(store)
    assert sorted(claimed) == sorted(plain + gated)
    assert store.get_pending_count(NAME) == 0


def test_a_limit_holds_across_shards(store: ValkeyStore) -> None:
    for n in range(6):
        limited(store, f"k{n}", "acme", limit=2)
        store.submit_run(NAME, f"free{n}", {})
    claimed = drain(store)
    assert sorted(r for r in claimed if r.startswith("k")) == ["k0", "k1"]
    assert len([r for r in claimed if r.startswith("free")]) == 6
    store.append_events(NAME, "k0", [event(EventKind.RUN_COMPLETE, "k0")], fence="w-0")
    assert drain(store, "again") == ["k2"]


def test_a_claim_tries_the_preferred_shards_first_in_their_order(store: ValkeyStore) -> None:
    for shard in range(SHARDS):
        for run_id in ids_in(shard, 2, prefix=f"s{shard}-"):
            store.submit_run(NAME, run_id, {})
    claimed = drain(store, prefer=[3, 1])
    shards = [store.shard_of(NAME, r) for r in claimed]
    assert shards[:4] == [3, 3, 1, 1]
    assert sorted(shards[4:]) == [0, 0, 2, 2]


def test_a_claim_reaches_shards_no_lease_prefers(store: ValkeyStore) -> None:
    leased = store.rebalance_shards("w1")
    assert leased == list(range(SHARDS))
    store.rebalance_shards("w2")
    leased = store.rebalance_shards("w1")
    assert len(leased) == 2
    others = [s for s in range(SHARDS) if s not in leased]
    run_ids = ids_in(others[0], 3)
    for run_id in run_ids:
        store.submit_run(NAME, run_id, {})
    assert sorted(drain(store, prefer=leased)) == sorted(run_ids)


def test_the_next_token_and_the_next_deadlines_are_the_soonest_over_the_shards(
    store: ValkeyStore, clock: ManualClock
) -> None:
    # A slow key in shard 1, a fast one in shard 2: the soonest token is the fast one's,
    # whichever shard a claim tries first.
    for key, per_second in ((key_in(1), 1.0), (key_in(2), 10.0)):
        for n in range(2):
            store.submit_run(
                NAME, f"{key}.{n}", {}, rate_key=key, rate_per_second=per_second, rate_burst=1
            )
    assert len(store.claim_next_runs_loaded(NAME, ["a", "b", "c"], prefer=[1])) == 2
    refused = store.claim_next_runs_loaded(NAME, ["d"], prefer=[1])
    assert list(refused) == []
    assert refused.next_token_in == pytest.approx(0.1, abs=1e-4)

    now = clock()
    for shard, due_in in ((3, 30.0), (0, 20.0)):
        store.submit_run(NAME, ids_in(shard, 1, prefix="z")[0], {}, start_at=now + due_in)
    policy = TriggerPolicy("debounce", window_seconds=5)
    store.trigger_event(NAME, key_in(3, "t"), {}, policy=policy)
    clock.advance(1)
    store.trigger_event(NAME, key_in(0, "t"), {}, policy=policy)
    assert store.next_wait_due(now) == pytest.approx(now + 20)
    assert store.next_wait_due(now + 20) == pytest.approx(now + 30)
    assert store.next_trigger_due(NAME, now) == pytest.approx(now + 5)
    assert store.next_trigger_due(NAME, now + 5) == pytest.approx(now + 6)


def test_timers_recovery_and_triggers_span_the_shards(
    store: ValkeyStore, clock: ManualClock
) -> None:
    sleepers = [ids_in(shard, 1, prefix="z")[0] for shard in range(SHARDS)]
    for run_id in sleepers:
        store.submit_run(NAME, run_id, {}, start_at=clock() + 10)
    clock.advance(11)
    due = store.get_sleeping_runs(clock())
    assert sorted(r for _, r in due) == sorted(sleepers)
    for _, run_id in due:
        assert store.wake_due(NAME, run_id, due_by=clock()) == WaitOutcome.RESOLVED
    assert len(drain(store)) == SHARDS
    clock.advance(LOCK_TTL + 1)
    assert sorted(store.recover_pending_runs(NAME)) == sorted(sleepers)

    policy = TriggerPolicy("debounce", window_seconds=5)
    keys = [key_in(shard, "t") for shard in range(SHARDS)]
    for key in keys:
        assert store.trigger_event(NAME, key, {"k": key}, policy=policy) is None
    clock.advance(6)
    assert sorted(store.due_triggers(NAME, clock())) == sorted(keys)
    for key in keys:
        fired = store.fire_trigger(NAME, key, policy=policy, due_by=clock())
        assert fired is not None
        assert store.shard_of(NAME, fired) == shard_for(key, SHARDS)


def test_a_gated_trigger_fires_its_run_into_its_gates_shard(store: ValkeyStore) -> None:
    gate = key_in(1)
    policy = TriggerPolicy(
        "collect",
        window_seconds=60,
        max_events=1,
        gates=Gates(concurrency_key=gate, concurrency_max=1),
    )
    fired = store.trigger_event(NAME, key_in(3, "t"), {"n": 1}, policy=policy)
    assert fired is not None
    assert store.shard_of(NAME, fired) == 1
    fresh = make(ManualClock(), store.namespace)
    assert fresh.shard_of(NAME, fired) == 1
    fresh.close()


# -- shard leases --------------------------------------------------------------------------


def test_leases_split_the_shards_fairly_and_move_when_a_worker_goes(
    store: ValkeyStore, clock: ManualClock
) -> None:
    assert store.rebalance_shards("w1", ttl=10) == [0, 1, 2, 3]
    assert store.rebalance_shards("w2", ttl=10) == []  # w1 still holds them all
    first = store.rebalance_shards("w1", ttl=10)  # two live workers: w1 gives two back
    second = store.rebalance_shards("w2", ttl=10)
    assert len(first) == len(second) == 2
    assert sorted(first + second) == [0, 1, 2, 3]
    store.release_shards("w1")
    assert store.rebalance_shards("w2", ttl=10) == [0, 1, 2, 3]
    clock.advance(11)  # w2 stopped renewing: its leases lapse
    assert store.rebalance_shards("w3", ttl=10) == [0, 1, 2, 3]


# -- hand-ons across shards ----------------------------------------------------------------


def across(store: ValkeyStore) -> tuple[str, Gates]:
    """A claimed ungated run and gates whose key maps its successor to another shard."""
    run_id = ids_in(0, 1)[0]
    store.submit_run(NAME, run_id, {"tenant": "acme"}, owner="acme")
    store.claim_run(NAME, run_id, "lease-a")
    return run_id, Gates(concurrency_key=key_in(2), concurrency_max=5)


def hand_on(store: ValkeyStore, run_id: str, gates: Gates, lease: str = "lease-a") -> str:
    return store.hand_on_run(
        NAME,
        run_id,
        lease,
        f"{run_id}.g",
        version="v2",
        version_behavior="auto_upgrade",
        gates=gates,
    )


def test_a_hand_on_across_shards_moves_what_the_run_holds(store: ValkeyStore) -> None:
    run_id, gates = across(store)
    store.send_signal(NAME, run_id, "go", {"n": 1}, "t", idempotency_key="s1")
    store.deliver_update(NAME, run_id, "bump", {}, "u1", "t")
    store.request_pause(NAME, run_id)
    store.request_cancel(NAME, run_id, detail={"reason": "typo"})
    successor = hand_on(store, run_id, gates)
    assert store.shard_of(NAME, successor) == 2 != store.shard_of(NAME, run_id)
    assert status(store, run_id) == RunStatus.CONTINUED
    assert store.peek_signal(NAME, run_id, "go") is None
    assert store.peek_pending_updates(NAME, run_id) == []
    moved = store.peek_signal(NAME, successor, "go")
    assert moved is not None
    assert moved["payload"] == {"n": 1}
    assert [u["update_id"] for u in store.peek_pending_updates(NAME, successor)] == ["u1"]
    controls = store.poll_run(NAME, successor)
    assert controls.pause_requested_at is not None
    assert controls.cancel_requested_at is not None
    assert hand_on(store, run_id, gates) == successor  # a repeat
    assert kinds(store, successor).count(EventKind.RUN_INIT) == 1
    assert drain(store) == [successor]


def test_a_hand_on_left_after_the_run_ended_is_finished_by_the_successors_timer(
    store: ValkeyStore, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_id, _ = across(store)
    store.send_signal(NAME, run_id, "go", {}, "t")
    crash_at(monkeypatch, store, "w_hand_on_adopt")
    successor = f"{run_id}.g"
    assert status(store, run_id) == RunStatus.CONTINUED
    assert store.claim_next_run(NAME, "w") is None  # set aside, not queued
    clock.advance(LOCK_TTL + 1)
    assert (NAME, successor) in store.get_sleeping_runs(clock())
    assert store.wake_due(NAME, successor, due_by=clock()) == WaitOutcome.RESOLVED
    assert store.peek_signal(NAME, successor, "go") is not None
    assert store.peek_signal(NAME, run_id, "go") is None
    assert drain(store) == [successor]


def test_a_successor_whose_run_ended_another_way_is_ended_by_its_timer(
    store: ValkeyStore, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_id, _ = across(store)
    crash_at(monkeypatch, store, "w_hand_off", step="hand")
    successor = f"{run_id}.g"
    clock.advance(LOCK_TTL + 1)
    assert store.wake_due(NAME, successor, due_by=clock()) == WaitOutcome.SUPERSEDED  # running
    store.recover_pending_runs(NAME)
    store.claim_run(NAME, run_id, "lease-b")
    store.append_events(NAME, run_id, [event(EventKind.RUN_COMPLETE, run_id)], fence="lease-b")
    clock.advance(LOCK_TTL + 1)
    assert store.wake_due(NAME, successor, due_by=clock()) == WaitOutcome.RESOLVED
    assert status(store, successor) == RunStatus.ERROR
    assert status(store, run_id) == RunStatus.COMPLETE


def crash_at(
    monkeypatch: pytest.MonkeyPatch, store: ValkeyStore, script: str, step: str | None = None
) -> None:
    """Hand the run on with the worker dying just before ``script`` (its ``step``)."""
    real = store._script

    def dying(name: str, *args: Any, shard: int | None = None) -> Any:
        if name == script and (step is None or step in args):
            raise RuntimeError("the worker died")
        return real(name, *args, shard=shard)

    monkeypatch.setattr(store, "_script", dying)
    run_id = ids_in(0, 1)[0]
    with pytest.raises(RuntimeError, match="died"):
        hand_on(store, run_id, Gates(concurrency_key=key_in(2), concurrency_max=5))
    monkeypatch.setattr(store, "_script", real)


# -- submits across shards -----------------------------------------------------------------


def test_an_idempotency_key_spans_the_shards(store: ValkeyStore) -> None:
    first, second = ids_in(0, 1)[0], ids_in(3, 1)[0]
    assert (
        store.submit_run(NAME, first, {}, idempotency_key="k", idempotency_body_hash="h") == first
    )
    assert (
        store.submit_run(NAME, second, {}, idempotency_key="k", idempotency_body_hash="h") == first
    )
    assert store.get_run(NAME, second) is None
    assert store.get_idempotency_run(NAME, "k") == first


def test_a_repeat_finishes_a_submit_that_kept_its_key_but_never_landed(store: ValkeyStore) -> None:
    first = ids_in(1, 1)[0]
    # g_route kept the key, then the process died before the submit
    store._run(store._route_op(NAME, first, shard_for(first, SHARDS), "k", "h", "60"))
    assert store.get_run(NAME, first) is None
    again = ids_in(2, 1)[0]
    assert (
        store.submit_run(NAME, again, {}, idempotency_key="k", idempotency_body_hash="h") == first
    )
    assert status(store, first) == RunStatus.PENDING


def test_a_taken_id_in_another_shard_is_a_duplicate(store: ValkeyStore) -> None:
    from lockgate import DuplicateRunError

    run_id = ids_in(0, 1)[0]
    store.submit_run(NAME, run_id, {})
    with pytest.raises(DuplicateRunError):
        limited(store, run_id, key_in(3))
    assert store.shard_of(NAME, run_id) == 0


def test_a_control_held_before_a_gated_submit_applies_in_its_shard(store: ValkeyStore) -> None:
    run_id = ids_in(0, 1)[0]
    store.request_cancel(NAME, run_id, detail={"why": "early"})
    store.request_pause(NAME, run_id)
    limited(store, run_id, key_in(3))
    controls = store.poll_run(NAME, run_id)
    assert controls.cancel_requested_at is not None
    assert controls.pause_requested_at is not None
    assert store.run_maintenance(now=1e12) == 0  # the held record went with the submit


# -- the key layout ------------------------------------------------------------------------


def test_every_key_carries_its_shards_hash_tag(store: ValkeyStore, clock: ManualClock) -> None:
    for n in range(8):
        store.submit_run(NAME, f"p{n}", {}, idempotency_key=f"i{n}")
        limited(store, f"g{n}", f"tenant{n % 3}")
    store.submit_run(NAME, "later", {}, start_at=clock() + 60)
    store.trigger_event(NAME, "tk", {}, policy=TriggerPolicy("debounce", window_seconds=5))
    run_id, gates = across(store)
    store.send_signal(NAME, run_id, "go", {}, "t")
    hand_on(store, run_id, gates)
    store.register_version(NAME, "v1")
    store.rebalance_shards("w1")
    drain(store)

    keys = [k.decode() for k in store._redis.scan_iter(match=f"lg:{{{store.namespace}*")]
    tags = {re.match(r"lg:\{([^}]*)\}:", key).group(1) for key in keys}  # type: ignore[union-attr]
    ns = store.namespace
    assert tags == {ns, *(f"{ns}:{i}" for i in range(SHARDS))}
    for key in keys:
        kind, colon, rest = key.split("}:", 1)[1].partition(":")
        parts = [kind, *(parts_of(colon + rest) if colon else [])]
        if parts[0] in ("r", "e", "sig", "sigk", "upd") and parts[1] == NAME:
            shard = store.shard_of(NAME, parts[2])
            assert key.startswith(f"lg:{{{ns}:{shard}}}:"), key
        if parts[0] in (
            "idem",
            "ver",
            "shardof",
            "shard_leases",
            "shard_workers",
            "shards",
            "layout",
        ):
            assert key.startswith(f"lg:{{{ns}}}:"), key


def test_a_batch_claim_gathers_runs_from_every_shard_its_own_first(store: ValkeyStore) -> None:
    ids = [*ids_in(0, 2), *ids_in(1, 1), *ids_in(3, 2)]
    for run_id in ids:
        store.submit_run(NAME, run_id, {})
    leases = [f"w.{n}" for n in range(7)]
    runs = store.claim_next_runs_loaded(NAME, leases, prefer=[3])
    # Shard 3's runs first, then the others; one run per lease, in the leases' order.
    assert [store.shard_of(NAME, run.run_id) for run in runs[:2]] == [3, 3]
    assert sorted(run.run_id for run in runs) == sorted(ids)
    assert [store.lock_holder(NAME, run.run_id) for run in runs] == leases[: len(ids)]
    assert store.claim_next_runs_loaded(NAME, leases) == []


def test_a_hand_on_across_shards_keeps_settled_updates_and_one_copy_of_a_resent_signal(
    store: ValkeyStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Across shards the successor is created set aside before the run ends and adopts what
    the run held after. A client that finds the run ended in between and sends its signal
    again to the successor (same key) leaves one copy, not two; and a settled update's
    outcome is there for a sender that retries its id."""
    run_id, gates = across(store)
    store.send_signal(NAME, run_id, "go", {"n": 1}, "t", idempotency_key="s1")
    store.deliver_update(NAME, run_id, "bump", {}, "u1", "t")
    store.settle_update(NAME, run_id, "u1", {"status": "completed", "result": 3}, fence="lease-a")
    script = store._script

    def resend_before_adopting(name: str, *args: Any, shard: int | None = None) -> Any:
        if name == "w_hand_on_adopt" and args[2] == "adopt":
            assert (
                store.send_signal(NAME, f"{run_id}.g", "go", {"n": 1}, "t", idempotency_key="s1")
                == "buffered"
            )
        return script(name, *args, shard=shard)

    monkeypatch.setattr(store, "_script", resend_before_adopting)
    successor = hand_on(store, run_id, gates)
    monkeypatch.undo()
    assert store.shard_of(NAME, successor) != store.shard_of(NAME, run_id)
    kept = store.peek_signal(NAME, successor, "go")
    assert kept is not None
    assert store.pop_signal_match(NAME, successor, "go", kept["signal_id"])
    assert store.peek_signal(NAME, successor, "go") is None  # one copy
    assert store.read_update_result(NAME, successor, "u1") == {"status": "completed", "result": 3}
    assert store.deliver_update(NAME, successor, "bump", {}, "u1", "t") == "settled"


def test_list_runs_reads_a_page_of_runs_in_one_round_trip_per_shard(
    store: ValkeyStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``list_runs`` reads the runs of a page of a shard's index together (one pipeline),
    not one command each: the commands the client sends one by one stay a few per shard
    however many runs are listed, and every run is listed once, newest first."""
    submitted = [f"run{n:03}" for n in range(60)]
    for run_id in submitted:
        store.submit_run(NAME, run_id, {})
    sent: list[str] = []
    execute = store._redis.execute_command

    def counted(*args: Any, **options: Any) -> Any:
        sent.append(str(args[0]))
        return execute(*args, **options)

    monkeypatch.setattr(store._redis, "execute_command", counted)
    runs, cursor = store.list_runs(NAME, limit=100)
    monkeypatch.undo()
    assert cursor is None
    assert sorted(info.run_id for info in runs) == submitted
    assert "HGETALL" not in sent
    assert len(sent) <= 3 * SHARDS, sent
