"""Continuing a claimed run as new (``continue_run``), and chains' tail records."""

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
from lockgate.stores import ChainLink, Continuation, Gates

from ._support import NAME, event, kinds, status

ROOT = ChainLink.root(NAME, "r1")


def continuation(
    hop: int = 1, gates: Gates | None = None, params: dict[str, object] | None = None
) -> Continuation:
    successor = ChainLink(NAME, f"r1.c{hop}", NAME, "r1", hop)
    return Continuation(
        params=params if params is not None else {"total": hop},
        version="v2",
        version_behavior="auto_upgrade",
        gates=gates or Gates(),
        provenance={"source": {"continued_from": "r1", **successor.provenance_source()}},
        continued=successor.continued_payload(),
        shard_key="r1",
    )


def claimed(store: Store, run_id: str = "r1") -> None:
    store.submit_run(
        NAME, run_id, {"total": 0}, metadata={"team": "ops"}, owner="acme", version="v1"
    )
    store.claim_run(NAME, run_id, "lease-a")


def continue_r1(store: Store, lease: str = "lease-a", **kwargs: object) -> str:
    return store.continue_run(NAME, "r1", lease, "r1.c1", continuation(**kwargs))  # type: ignore[arg-type]


def test_the_run_ends_continued_and_its_successor_starts_with_its_own_params(
    store: Store,
) -> None:
    claimed(store)
    assert continue_r1(store) == "r1.c1"
    assert status(store, "r1") == RunStatus.CONTINUED
    assert store.lock_holder(NAME, "r1") is None
    last = store.get_last_event(NAME, "r1")
    assert last is not None
    assert last.kind == EventKind.RUN_CONTINUED
    assert ChainLink.from_continued_payload(last.payload) == ChainLink(NAME, "r1.c1", NAME, "r1", 1)
    (init,) = store.load_run(NAME, "r1.c1")
    assert init.payload["params"] == {"total": 1}
    assert init.payload["metadata"] == {"team": "ops"}
    assert init.payload["owner"] == "acme"
    assert init.payload["version"] == "v2"
    assert init.payload["provenance"]["source"]["chain_hop"] == 1
    assert status(store, "r1.c1") == RunStatus.PENDING
    assert store.claim_next_run(NAME, "lease-b") == "r1.c1"


def test_a_successor_with_gates_is_gated_by_them(store: Store) -> None:
    claimed(store)
    store.submit_run(NAME, "holder", {}, concurrency_key="k", concurrency_max=1)
    store.claim_run(NAME, "holder", "lease-h")
    continue_r1(store, gates=Gates(concurrency_key="k", concurrency_max=1))
    (init,) = store.load_run(NAME, "r1.c1")
    assert init.payload["gates"] == {"concurrency": {"key": "k", "max": 1}}
    assert store.claim_next_run(NAME, "lease-b") is None  # "k" is full
    store.append_event(NAME, "holder", event(EventKind.RUN_COMPLETE, "holder"), fence="lease-h")
    assert store.claim_next_run(NAME, "lease-b") == "r1.c1"


def test_the_inbox_and_controls_move_to_the_successor(store: Store) -> None:
    claimed(store)
    assert store.send_signal(NAME, "r1", "add", {"n": 1}, "t", idempotency_key="s1") == "buffered"
    assert store.deliver_update(NAME, "r1", "bump", {}, "u1", "t") == "queued"
    store.request_pause(NAME, "r1")
    store.request_cancel(NAME, "r1", detail={"reason": "enough"})
    continue_r1(store)
    moved = store.peek_signal(NAME, "r1.c1", "add")
    assert moved is not None
    assert moved["payload"] == {"n": 1}
    assert store.peek_signal(NAME, "r1", "add") is None
    assert store.send_signal(NAME, "r1.c1", "add", {"n": 1}, "t", idempotency_key="s1") == (
        "duplicate"
    )
    assert [u["update_id"] for u in store.peek_pending_updates(NAME, "r1.c1")] == ["u1"]
    controls = store.poll_run(NAME, "r1.c1")
    assert controls.pause_requested_at is not None
    assert controls.cancel_requested_at is not None
    (cancel,) = [e for e in store.load_run(NAME, "r1.c1") if e.kind == EventKind.RUN_CANCEL]
    assert cancel.payload["detail"] == {"reason": "enough"}
    # The run has ended: it takes no more signals; the chain's live run does.
    assert store.send_signal(NAME, "r1", "add", {}, "t") == "rejected"


def test_a_repeat_returns_the_same_successor_and_writes_nothing(store: Store) -> None:
    claimed(store)
    continue_r1(store)
    assert continue_r1(store) == "r1.c1"
    assert kinds(store, "r1") == [EventKind.RUN_INIT, EventKind.RUN_CONTINUED]
    assert kinds(store, "r1.c1") == [EventKind.RUN_INIT]


def test_a_lease_that_lost_the_run_writes_nothing(store: Store, clock: ManualClock) -> None:
    claimed(store)
    with pytest.raises(LockLost):
        continue_r1(store, lease="lease-z")
    clock.advance(31.0)
    with pytest.raises(LockLost):
        continue_r1(store)
    assert kinds(store, "r1") == [EventKind.RUN_INIT]
    assert store.get_run(NAME, "r1.c1") is None


def test_a_run_that_ended_another_way_does_not_continue(store: Store) -> None:
    claimed(store)
    store.append_event(NAME, "r1", event(EventKind.RUN_COMPLETE, "r1"), fence="lease-a")
    with pytest.raises(EventAfterTerminal):
        continue_r1(store)
    assert store.get_run(NAME, "r1.c1") is None


def test_a_taken_successor_id_writes_nothing(store: Store) -> None:
    claimed(store)
    store.submit_run(NAME, "r1.c1", {"someone": "else"})
    store.send_signal(NAME, "r1", "add", {}, "t")
    with pytest.raises(DuplicateRunError):
        continue_r1(store)
    assert kinds(store, "r1") == [EventKind.RUN_INIT]
    assert store.peek_signal(NAME, "r1", "add") is not None
    assert store.lock_holder(NAME, "r1") == "lease-a"


def test_the_tail_record_only_moves_forward(store: Store) -> None:
    assert store.get_chain_tail(NAME, "r1") is None
    assert not store.chain_closed(NAME, "r1")
    third = ChainLink(NAME, "r1.c3", NAME, "r1", 3)
    store.advance_chain_tail(ROOT.successor(NAME, "r1.c1"))
    store.advance_chain_tail(third)
    store.advance_chain_tail(ROOT.successor(NAME, "r1.c1"))  # late: ignored
    store.close_chain(ROOT.successor(NAME, "r1.c1"))  # late: ignored
    assert store.get_chain_tail(NAME, "r1") == third
    assert not store.chain_closed(NAME, "r1")
    store.close_chain(third)
    store.advance_chain_tail(third)  # a repeat does not reopen it
    assert store.chain_closed(NAME, "r1")
    assert store.get_chain_tail(NAME, "r1") == third
    # Chains are keyed by their root: another root's record is its own.
    assert store.get_chain_tail(NAME, "r2") is None


def test_the_seal_and_adoption_read_back_from_the_hand_over(store: Store) -> None:
    claimed(store)
    assert store.read_inbox_seal(NAME, "r1") is None
    assert not store.chain_adopted(NAME, "r1.c1")
    continue_r1(store)
    assert store.read_inbox_seal(NAME, "r1") == ChainLink(NAME, "r1.c1", NAME, "r1", 1)
    assert store.chain_adopted(NAME, "r1.c1")


@pytest.mark.parametrize("gates", [None, Gates(concurrency_key="elsewhere", concurrency_max=3)])
def test_settled_update_outcomes_are_kept_for_the_successor(
    store: Store, gates: Gates | None
) -> None:
    """A sender that retries an update id after the run continued finds it settled on the
    successor, and it is not applied again (with gates, on a sharded store, the successor
    may live in another shard)."""
    claimed(store)
    assert store.deliver_update(NAME, "r1", "bump", {}, "u1", "t") == "queued"
    store.settle_update(NAME, "r1", "u1", {"status": "completed", "result": 7}, fence="lease-a")
    continue_r1(store, gates=gates)
    assert store.read_update_result(NAME, "r1.c1", "u1") == {"status": "completed", "result": 7}
    assert store.deliver_update(NAME, "r1.c1", "bump", {}, "u1", "t") == "settled"
    assert store.peek_pending_updates(NAME, "r1.c1") == []
    assert store.read_update_result(NAME, "r1", "u1") == {"status": "completed", "result": 7}
