"""Handing a claimed run on to a successor stamped with other gates, in one step."""

from __future__ import annotations

import pytest

from lockgate import (
    DuplicateRunError,
    EventAfterTerminal,
    EventKind,
    LockLost,
    ManualClock,
    RunStatus,
    Store,
)
from lockgate.stores import Gates

from ._support import NAME, event, kinds, status

NEW_GATES = Gates(concurrency_key="acme", concurrency_max=5)


def hand_on(store: Store, run_id: str = "r1", lease: str = "lease-a") -> str:
    return store.hand_on_run(
        NAME,
        run_id,
        lease,
        f"{run_id}.g",
        version="v2",
        version_behavior="auto_upgrade",
        gates=NEW_GATES,
    )


def stamped_run(store: Store, run_id: str = "r1") -> str:
    store.submit_run(
        NAME,
        run_id,
        {"tenant": "acme"},
        metadata={"team": "billing"},
        owner="acme",
        version="v1",
        version_behavior="auto_upgrade",
        concurrency_key="acme",
        concurrency_max=1,
    )
    store.claim_run(NAME, run_id, "lease-a")
    return run_id


def test_the_successor_takes_the_params_and_new_gates_and_the_run_ends_continued(
    store: Store,
) -> None:
    stamped_run(store)
    assert hand_on(store) == "r1.g"
    assert status(store, "r1") == RunStatus.CONTINUED
    last = store.get_last_event(NAME, "r1")
    assert last is not None
    assert last.kind == EventKind.RUN_CONTINUED
    assert last.payload["run_id"] == "r1.g"
    assert last.payload["gates"] == {"concurrency": {"key": "acme", "max": 5}}
    assert store.lock_holder(NAME, "r1") is None
    (init,) = store.load_run(NAME, "r1.g")
    assert init.kind == EventKind.RUN_INIT
    assert init.payload["params"] == {"tenant": "acme"}
    assert init.payload["metadata"] == {"team": "billing"}
    assert init.payload["owner"] == "acme"
    assert init.payload["version"] == "v2"
    assert init.payload["gates"] == {"concurrency": {"key": "acme", "max": 5}}
    assert init.payload["provenance"] == {
        "source": {
            "gated_from": "r1",
            # The successor takes the run's place: a chain it starts is keyed by the run.
            "chain_root_name": NAME,
            "chain_root_run_id": "r1",
            "chain_hop": 0,
        }
    }
    assert status(store, "r1.g") == RunStatus.PENDING
    assert store.claim_next_run(NAME, "lease-b") == "r1.g"


def test_the_successor_is_gated_by_its_own_gates_and_the_run_frees_its_slot(
    store: Store,
) -> None:
    stamped_run(store)
    # The old stamp allowed one run of "acme" at a time; the hand-on frees that slot.
    store.submit_run(NAME, "other", {}, concurrency_key="acme", concurrency_max=1)
    hand_on(store)
    assert store.claim_next_run(NAME, "lease-b") is not None
    assert store.claim_next_run(NAME, "lease-c") is not None


def test_undelivered_signals_updates_and_a_latched_pause_move_to_the_successor(
    store: Store,
) -> None:
    stamped_run(store)
    assert store.send_signal(NAME, "r1", "go", {"n": 1}, "t", idempotency_key="s1") == "buffered"
    assert store.deliver_update(NAME, "r1", "bump", {}, "u1", "t") == "queued"
    store.request_pause(NAME, "r1")
    hand_on(store)
    moved = store.peek_signal(NAME, "r1.g", "go")
    assert moved is not None
    assert moved["payload"] == {"n": 1}
    assert store.peek_signal(NAME, "r1", "go") is None
    # The send key moved with it: a retried send is recognised on the successor.
    assert store.send_signal(NAME, "r1.g", "go", {"n": 1}, "t", idempotency_key="s1") == (
        "duplicate"
    )
    assert [u["update_id"] for u in store.peek_pending_updates(NAME, "r1.g")] == ["u1"]
    assert store.peek_pending_updates(NAME, "r1") == []
    assert store.poll_run(NAME, "r1.g").pause_requested_at is not None
    assert EventKind.RUN_PAUSE_REQUESTED in kinds(store, "r1.g")


def test_a_latched_cancel_moves_with_its_detail(store: Store) -> None:
    stamped_run(store)
    store.request_cancel(NAME, "r1", detail={"reason": "typo"})
    hand_on(store)
    assert store.poll_run(NAME, "r1.g").cancel_requested_at is not None
    (cancel,) = [e for e in store.load_run(NAME, "r1.g") if e.kind == EventKind.RUN_CANCEL]
    assert cancel.payload["detail"] == {"reason": "typo"}


def test_a_repeat_after_the_hand_on_returns_the_same_successor(store: Store) -> None:
    stamped_run(store)
    hand_on(store)
    assert hand_on(store) == "r1.g"
    assert kinds(store, "r1") == [EventKind.RUN_INIT, EventKind.RUN_CONTINUED]
    assert kinds(store, "r1.g") == [EventKind.RUN_INIT]


def test_a_lease_that_does_not_hold_the_run_writes_nothing(
    store: Store, clock: ManualClock
) -> None:
    stamped_run(store)
    with pytest.raises(LockLost):
        hand_on(store, lease="lease-z")
    clock.advance(31.0)  # past the lease TTL: the holder's lease has lapsed
    with pytest.raises(LockLost):
        hand_on(store)
    assert kinds(store, "r1") == [EventKind.RUN_INIT]
    assert store.get_run(NAME, "r1.g") is None


def test_a_run_that_ended_another_way_is_not_handed_on(store: Store) -> None:
    stamped_run(store)
    store.append_event(NAME, "r1", event(EventKind.RUN_COMPLETE, "r1"), fence="lease-a")
    with pytest.raises(EventAfterTerminal):
        hand_on(store)
    assert store.get_run(NAME, "r1.g") is None


def test_a_taken_successor_id_writes_nothing(store: Store) -> None:
    stamped_run(store)
    store.submit_run(NAME, "r1.g", {"someone": "else"})
    store.send_signal(NAME, "r1", "go", {}, "t")
    with pytest.raises(DuplicateRunError):
        hand_on(store)
    assert kinds(store, "r1") == [EventKind.RUN_INIT]
    assert store.peek_signal(NAME, "r1", "go") is not None
    assert store.lock_holder(NAME, "r1") == "lease-a"


def test_a_run_submitted_with_unknown_gates_says_so_and_is_not_gated(store: Store) -> None:
    for run_id in ("a", "b"):
        store.submit_run(NAME, run_id, {}, gates_unknown=True)
    (init,) = store.load_run(NAME, "a")
    assert init.payload["gates"] == {"unknown": True}
    assert store.claim_next_run(NAME, "lease-a") == "a"
    assert store.claim_next_run(NAME, "lease-b") == "b"
