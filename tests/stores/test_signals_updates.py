"""Signals (buffered, delivered, idempotent, rejected) and updates (queued, settled)."""

from __future__ import annotations

import pytest

from lockgate import (
    EventKind,
    LockLost,
    ManualClock,
    RunNotFoundError,
    RunStatus,
    Store,
    WaitOutcome,
)
from lockgate.stores import WaitSpec

from ._support import NAME, claimed, event, status


def parked(store: Store, wait: WaitSpec, run_id: str = "r1", lease: str = "lease-a") -> str:
    claimed(store, run_id, lease)
    kind = EventKind.RUN_SIGNAL_WAITING if wait.kind == "signal" else EventKind.RUN_SLEEPING
    opening = event(kind, run_id, call_index=wait.call_index, wait_id=wait.wait_id)
    outcome = store.park_run(NAME, run_id, lease=lease, events=[opening], wait=wait)
    assert outcome == WaitOutcome.PARKED
    return run_id


def waiting_for(signal: str) -> WaitSpec:
    return WaitSpec("signal", "signal:1", 1, signal=signal)


def ended(store: Store, run_id: str = "r1") -> str:
    claimed(store, run_id)
    store.append_event(NAME, run_id, event(EventKind.RUN_COMPLETE, run_id), fence="lease-a")
    return run_id


# -- signals -----------------------------------------------------------------------------------


def test_signal_to_a_running_run_is_buffered(store: Store) -> None:
    claimed(store)
    assert store.send_signal(NAME, "r1", "approve", {"by": "ann"}, "2024-01-01T00:00:00") == (
        "buffered"
    )
    buffered = store.peek_signal(NAME, "r1", "approve")
    assert buffered is not None
    assert buffered["payload"] == {"by": "ann"}
    assert buffered["sent_at"] == "2024-01-01T00:00:00"
    assert buffered["signal_id"]
    assert store.get_pending_count(NAME) == 0
    assert store.lock_holder(NAME, "r1") == "lease-a"


def test_signal_of_another_name_is_buffered_and_leaves_the_run_parked(store: Store) -> None:
    parked(store, waiting_for("approve"))
    assert store.send_signal(NAME, "r1", "reject", {}, "t") == "buffered"
    assert status(store, "r1") == RunStatus.SIGNAL_WAITING
    assert store.claim_next_run(NAME, "lease-b") is None


def test_signal_to_a_sleeping_run_is_buffered(store: Store, clock: ManualClock) -> None:
    parked(store, WaitSpec("sleep", "sleep:1", 1, due_at=clock() + 60))
    assert store.send_signal(NAME, "r1", "approve", {}, "t") == "buffered"
    assert status(store, "r1") == RunStatus.SLEEPING
    assert store.get_pending_count(NAME) == 0


def test_signal_the_run_waits_on_is_delivered_and_queues_the_run(store: Store) -> None:
    parked(store, waiting_for("approve"))
    assert store.send_signal(NAME, "r1", "approve", {"ok": True}, "t") == "delivered"
    assert status(store, "r1") == RunStatus.PENDING
    assert store.claim_next_run(NAME, "lease-b") == "r1"
    buffered = store.peek_signal(NAME, "r1", "approve")
    assert buffered is not None
    assert buffered["payload"] == {"ok": True}


def test_signal_idempotency_key_is_applied_once(store: Store) -> None:
    parked(store, waiting_for("approve"))
    first = store.send_signal(NAME, "r1", "approve", {"n": 1}, "t", idempotency_key="k1")
    again = store.send_signal(NAME, "r1", "approve", {"n": 2}, "t", idempotency_key="k1")
    assert (first, again) == ("delivered", "duplicate")
    buffered = store.peek_signal(NAME, "r1", "approve")
    assert buffered is not None
    assert buffered["payload"] == {"n": 1}
    assert store.pop_signal_match(NAME, "r1", "approve", buffered["signal_id"])
    assert store.peek_signal(NAME, "r1", "approve") is None


def test_a_repeated_signal_idempotency_key_is_a_duplicate(store: Store) -> None:
    claimed(store)
    assert store.send_signal(NAME, "r1", "go", {}, "t", idempotency_key="k1") == "buffered"
    assert store.send_signal(NAME, "r1", "go", {}, "t", idempotency_key="k1") == "duplicate"
    buffered = store.peek_signal(NAME, "r1", "go")
    assert buffered is not None
    store.pop_signal_match(NAME, "r1", "go", buffered["signal_id"])
    assert store.peek_signal(NAME, "r1", "go") is None


def test_signal_after_the_run_ended_is_rejected_and_not_kept(store: Store) -> None:
    ended(store)
    assert store.send_signal(NAME, "r1", "approve", {}, "t") == "rejected"
    assert store.peek_signal(NAME, "r1", "approve") is None


def test_signal_after_a_cancel_is_latched_is_rejected(store: Store) -> None:
    claimed(store)
    store.request_cancel(NAME, "r1")
    assert store.send_signal(NAME, "r1", "approve", {}, "t") == "rejected"
    assert store.peek_signal(NAME, "r1", "approve") is None


def test_signal_to_an_unknown_run_raises_run_not_found(store: Store) -> None:
    with pytest.raises(RunNotFoundError):
        store.send_signal(NAME, "nope", "approve", {}, "t")


def test_peek_signal_returns_the_oldest_of_that_name(store: Store) -> None:
    claimed(store)
    store.send_signal(NAME, "r1", "other", {"n": 0}, "t0")
    store.send_signal(NAME, "r1", "go", {"n": 1}, "t1")
    store.send_signal(NAME, "r1", "go", {"n": 2}, "t2")
    first = store.peek_signal(NAME, "r1", "go")
    assert first is not None
    assert (first["payload"], first["sent_at"]) == ({"n": 1}, "t1")
    assert store.peek_signal(NAME, "r1", "missing") is None


def test_pop_signal_match_removes_only_that_signal(store: Store) -> None:
    claimed(store)
    store.send_signal(NAME, "r1", "go", {"n": 1}, "t1")
    store.send_signal(NAME, "r1", "go", {"n": 2}, "t2")
    first = store.peek_signal(NAME, "r1", "go")
    assert first is not None
    assert store.pop_signal_match(NAME, "r1", "go", "no-such-id") is False
    assert store.pop_signal_match(NAME, "r1", "other", first["signal_id"]) is False
    assert store.pop_signal_match(NAME, "r1", "go", first["signal_id"]) is True
    assert store.pop_signal_match(NAME, "r1", "go", first["signal_id"]) is False
    second = store.peek_signal(NAME, "r1", "go")
    assert second is not None
    assert second["payload"] == {"n": 2}
    assert second["signal_id"] != first["signal_id"]


# -- updates -----------------------------------------------------------------------------------


def test_deliver_update_queues_it_oldest_first(store: Store) -> None:
    claimed(store)
    assert store.deliver_update(NAME, "r1", "set", {"v": 1}, "u1", "t1") == "queued"
    assert store.deliver_update(NAME, "r1", "add", {"v": 2}, "u2", "t2") == "queued"
    pending = store.peek_pending_updates(NAME, "r1")
    assert [{k: u[k] for k in ("update_id", "update", "payload", "sent_at")} for u in pending] == [
        {"update_id": "u1", "update": "set", "payload": {"v": 1}, "sent_at": "t1"},
        {"update_id": "u2", "update": "add", "payload": {"v": 2}, "sent_at": "t2"},
    ]


def test_deliver_update_with_a_queued_id_is_a_duplicate(store: Store) -> None:
    claimed(store)
    store.deliver_update(NAME, "r1", "set", {"v": 1}, "u1", "t1")
    assert store.deliver_update(NAME, "r1", "set", {"v": 9}, "u1", "t2") == "duplicate"
    pending = store.peek_pending_updates(NAME, "r1")
    assert [(u["update_id"], u["payload"]) for u in pending] == [("u1", {"v": 1})]


def test_settled_update_is_unqueued_and_its_outcome_readable(store: Store) -> None:
    claimed(store)
    store.deliver_update(NAME, "r1", "set", {"v": 1}, "u1", "t1")
    assert store.read_update_result(NAME, "r1", "u1") is None
    store.settle_update(NAME, "r1", "u1", {"ok": True, "result": 1}, fence="lease-a")
    assert store.peek_pending_updates(NAME, "r1") == []
    assert store.read_update_result(NAME, "r1", "u1") == {"ok": True, "result": 1}
    assert store.deliver_update(NAME, "r1", "set", {"v": 1}, "u1", "t2") == "settled"
    assert store.peek_pending_updates(NAME, "r1") == []


def test_settle_update_without_ack_keeps_it_queued(store: Store) -> None:
    claimed(store)
    store.deliver_update(NAME, "r1", "set", {"v": 1}, "u1", "t1")
    store.settle_update(NAME, "r1", "u1", {"ok": False}, ack=False)
    assert store.read_update_result(NAME, "r1", "u1") == {"ok": False}
    assert [u["update_id"] for u in store.peek_pending_updates(NAME, "r1")] == ["u1"]


def test_settle_update_fenced_by_a_lease_not_holding_the_run_raises_lock_lost(
    store: Store,
) -> None:
    claimed(store, lease="lease-a")
    store.deliver_update(NAME, "r1", "set", {"v": 1}, "u1", "t1")
    with pytest.raises(LockLost):
        store.settle_update(NAME, "r1", "u1", {"ok": True}, fence="lease-b")
    assert store.read_update_result(NAME, "r1", "u1") is None
    assert [u["update_id"] for u in store.peek_pending_updates(NAME, "r1")] == ["u1"]


def test_update_to_an_ended_run_is_rejected(store: Store) -> None:
    ended(store)
    assert store.deliver_update(NAME, "r1", "set", {}, "u1", "t") == "rejected"
    assert store.peek_pending_updates(NAME, "r1") == []


def test_update_to_a_parked_run_queues_the_run(store: Store, clock: ManualClock) -> None:
    parked(store, WaitSpec("sleep", "sleep:1", 1, due_at=clock() + 600))
    assert store.deliver_update(NAME, "r1", "set", {"v": 1}, "u1", "t") == "queued"
    assert status(store, "r1") == RunStatus.PENDING
    assert store.claim_next_run(NAME, "lease-b") == "r1"
    assert [u["update_id"] for u in store.peek_pending_updates(NAME, "r1")] == ["u1"]


def test_update_to_a_running_run_does_not_queue_it(store: Store) -> None:
    claimed(store)
    store.deliver_update(NAME, "r1", "set", {"v": 1}, "u1", "t")
    assert store.get_pending_count(NAME) == 0
    assert store.lock_holder(NAME, "r1") == "lease-a"
