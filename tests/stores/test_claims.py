"""The run queue, claims and leases: claim, heartbeat, release, requeue, recover, hand back."""

from __future__ import annotations

import pytest

from lockgate import (
    EventKind,
    LockLost,
    ManualClock,
    RunEvent,
    RunFinishedError,
    RunNotFoundError,
    RunOwnedError,
    RunStatus,
    Store,
    StoreUnavailable,
    WaitOutcome,
)
from lockgate.stores import WaitSpec

from ._support import NAME, claimed, event, kinds, status
from .conftest import HEARTBEAT_INTERVAL, LOCK_TTL, MAX_RETRIES, MAX_STORE_REQUEUES


def complete(store: Store, run_id: str, lease: str) -> None:
    store.append_event(NAME, run_id, event(EventKind.RUN_COMPLETE, run_id), fence=lease)


def park_sleeping(store: Store, clock: ManualClock, run_id: str, lease: str) -> None:
    wait = WaitSpec("sleep", "sleep:1", 1, due_at=clock() + 600)
    opening = event(EventKind.RUN_SLEEPING, run_id, call_index=1, wait_id="sleep:1")
    outcome = store.park_run(NAME, run_id, lease=lease, events=[opening], wait=wait)
    assert outcome == WaitOutcome.PARKED


# -- claim_next_run ----------------------------------------------------------------------------


def test_claim_next_run_on_an_empty_queue_returns_none(store: Store) -> None:
    assert store.claim_next_run(NAME, "lease-a") is None


def test_claim_next_run_takes_runs_first_in_first_out(store: Store) -> None:
    for run_id in ["c", "a", "b"]:
        store.submit_run(NAME, run_id, {})
    taken = [store.claim_next_run(NAME, f"lease-{i}") for i in range(4)]
    assert taken == ["c", "a", "b", None]


def test_claim_next_run_holds_the_run_under_its_lease(store: Store) -> None:
    store.submit_run(NAME, "r1", {})
    assert store.claim_next_run(NAME, "lease-a") == "r1"
    assert store.lock_holder(NAME, "r1") == "lease-a"
    assert status(store, "r1") == RunStatus.IN_PROGRESS
    assert store.get_pending_count(NAME) == 0


def test_claim_next_run_only_takes_runs_of_its_workflow(store: Store) -> None:
    store.submit_run("other", "r1", {})
    assert store.claim_next_run(NAME, "lease-a") is None
    assert store.claim_next_run("other", "lease-a") == "r1"


def test_pinned_run_is_only_claimed_by_a_worker_of_its_version(store: Store) -> None:
    store.submit_run(NAME, "r1", {}, version="v1", version_behavior="pinned")
    assert store.claim_next_run(NAME, "lease-a", worker_version="v2") is None
    assert store.get_pending_count(NAME) == 1
    assert store.claim_next_run(NAME, "lease-b", worker_version="v1") == "r1"


def test_pinned_run_is_claimed_by_a_worker_of_no_stated_version(store: Store) -> None:
    store.submit_run(NAME, "r1", {}, version="v1", version_behavior="pinned")
    assert store.claim_next_run(NAME, "lease-a", worker_version=None) == "r1"


def test_pinned_run_passed_over_keeps_its_place(store: Store) -> None:
    store.submit_run(NAME, "old", {}, version="v1", version_behavior="pinned")
    store.submit_run(NAME, "new", {}, version="v2", version_behavior="pinned")
    store.submit_run(NAME, "newer", {}, version="v1", version_behavior="pinned")
    assert store.claim_next_run(NAME, "lease-a", worker_version="v2") == "new"
    assert store.claim_next_run(NAME, "lease-b", worker_version="v1") == "old"
    assert store.claim_next_run(NAME, "lease-c", worker_version="v1") == "newer"


def test_auto_upgrade_run_is_claimed_by_any_version(store: Store) -> None:
    store.submit_run(NAME, "r1", {}, version="v1", version_behavior="auto_upgrade")
    assert store.claim_next_run(NAME, "lease-a", worker_version="v9") == "r1"


def test_claim_next_run_passes_over_a_queued_run_another_lease_holds(store: Store) -> None:
    # A paused run claimed directly, then resumed (queued) while that lease still holds it.
    claimed(store, "held", "lease-a")
    store.request_pause(NAME, "held")
    wait = WaitSpec("pause", "pause:1", 1)
    paused = event(EventKind.RUN_PAUSED, "held", wait_id="pause:1")
    assert (
        store.park_run(NAME, "held", lease="lease-a", events=[paused], wait=wait)
        == WaitOutcome.PARKED
    )
    store.claim_run(NAME, "held", "lease-b")
    store.resume_paused_run(NAME, "held")
    store.submit_run(NAME, "free", {})
    assert store.claim_next_run(NAME, "lease-c") == "free"
    assert store.lock_holder(NAME, "held") == "lease-b"
    store.release_run(NAME, "held", "lease-b")
    assert store.claim_next_run(NAME, "lease-d") == "held"


# -- claim_run ---------------------------------------------------------------------------------


def test_claim_run_takes_a_queued_run_off_the_queue(store: Store) -> None:
    store.submit_run(NAME, "r1", {})
    store.submit_run(NAME, "r2", {})
    store.claim_run(NAME, "r2", "lease-a")
    assert store.lock_holder(NAME, "r2") == "lease-a"
    assert store.get_pending_count(NAME) == 1
    assert store.claim_next_run(NAME, "lease-b") == "r1"
    assert store.claim_next_run(NAME, "lease-c") is None


def test_claim_run_by_the_holding_lease_succeeds(store: Store) -> None:
    claimed(store)
    store.claim_run(NAME, "r1", "lease-a")
    assert store.lock_holder(NAME, "r1") == "lease-a"


def test_claim_run_held_by_another_live_lease_raises_run_owned(store: Store) -> None:
    claimed(store, lease="lease-a")
    with pytest.raises(RunOwnedError):
        store.claim_run(NAME, "r1", "lease-b")
    assert store.lock_holder(NAME, "r1") == "lease-a"


def test_claim_run_takes_a_run_whose_lease_expired(store: Store, clock: ManualClock) -> None:
    claimed(store, lease="lease-a")
    clock.advance(LOCK_TTL + 1)
    store.claim_run(NAME, "r1", "lease-b")
    assert store.lock_holder(NAME, "r1") == "lease-b"


def test_claim_run_of_an_ended_run_raises_run_finished(store: Store) -> None:
    claimed(store)
    complete(store, "r1", "lease-a")
    with pytest.raises(RunFinishedError):
        store.claim_run(NAME, "r1", "lease-b")


def test_claim_run_of_an_unknown_run_raises_run_not_found(store: Store) -> None:
    with pytest.raises(RunNotFoundError):
        store.claim_run(NAME, "nope", "lease-a")


# -- heartbeat and lock_holder -----------------------------------------------------------------


def test_heartbeat_extends_the_lease(store: Store, clock: ManualClock) -> None:
    claimed(store)
    for _ in range(5):
        clock.advance(HEARTBEAT_INTERVAL * 2)
        assert store.heartbeat(NAME, "r1", "lease-a") == (None, None)
    clock.advance(LOCK_TTL - 1)
    assert store.lock_holder(NAME, "r1") == "lease-a"
    store.append_event(NAME, "r1", event(EventKind.STEP_DONE, "r1"), fence="lease-a")
    assert kinds(store, "r1")[-1] == EventKind.STEP_DONE


def test_heartbeat_returns_the_cancel_and_pause_latches(store: Store) -> None:
    claimed(store)
    cancel_at = store.request_cancel(NAME, "r1")
    pause_at = store.request_pause(NAME, "r1")
    assert store.heartbeat(NAME, "r1", "lease-a") == (cancel_at, pause_at)


def test_heartbeat_after_expiry_raises_lock_lost(store: Store, clock: ManualClock) -> None:
    claimed(store)
    clock.advance(LOCK_TTL + 1)
    with pytest.raises(LockLost):
        store.heartbeat(NAME, "r1", "lease-a")
    assert store.lock_holder(NAME, "r1") is None


def test_heartbeat_by_another_lease_raises_lock_lost(store: Store) -> None:
    claimed(store, lease="lease-a")
    with pytest.raises(LockLost):
        store.heartbeat(NAME, "r1", "lease-b")
    assert store.lock_holder(NAME, "r1") == "lease-a"


def test_heartbeat_after_release_raises_lock_lost(store: Store) -> None:
    claimed(store)
    store.release_run(NAME, "r1", "lease-a")
    with pytest.raises(LockLost):
        store.heartbeat(NAME, "r1", "lease-a")


def test_lock_holder_follows_the_lease(store: Store, clock: ManualClock) -> None:
    store.submit_run(NAME, "r1", {})
    assert store.lock_holder(NAME, "r1") is None
    store.claim_run(NAME, "r1", "lease-a")
    assert store.lock_holder(NAME, "r1") == "lease-a"
    clock.advance(LOCK_TTL + 1)
    assert store.lock_holder(NAME, "r1") is None
    store.claim_run(NAME, "r1", "lease-b")
    store.release_run(NAME, "r1", "lease-b")
    assert store.lock_holder(NAME, "r1") is None
    assert store.lock_holder(NAME, "nope") is None


# -- release_run and hand_back_run -------------------------------------------------------------


def test_release_run_puts_the_run_back_on_the_queue(store: Store) -> None:
    claimed(store)
    store.release_run(NAME, "r1", "lease-a")
    assert store.lock_holder(NAME, "r1") is None
    assert status(store, "r1") == RunStatus.PENDING
    assert store.claim_next_run(NAME, "lease-b") == "r1"


def test_release_run_without_a_lease_drops_any_lock(store: Store) -> None:
    claimed(store)
    store.release_run(NAME, "r1")
    assert store.lock_holder(NAME, "r1") is None
    assert store.get_pending_count(NAME) == 1


def test_release_run_by_another_lease_does_nothing(store: Store) -> None:
    claimed(store, lease="lease-a")
    store.release_run(NAME, "r1", "lease-b")
    assert store.lock_holder(NAME, "r1") == "lease-a"
    assert store.get_pending_count(NAME) == 0
    assert kinds(store, "r1") == [EventKind.RUN_INIT]


def test_release_run_of_an_ended_run_does_not_queue_it(store: Store) -> None:
    claimed(store)
    complete(store, "r1", "lease-a")
    store.release_run(NAME, "r1", "lease-a")
    assert store.lock_holder(NAME, "r1") is None
    assert store.get_pending_count(NAME) == 0
    assert status(store, "r1") == RunStatus.COMPLETE


def test_release_run_of_a_parked_run_leaves_it_parked(store: Store, clock: ManualClock) -> None:
    claimed(store)
    park_sleeping(store, clock, "r1", "lease-a")
    store.claim_run(NAME, "r1", "lease-b")
    store.release_run(NAME, "r1", "lease-b")
    assert status(store, "r1") == RunStatus.SLEEPING
    assert store.get_pending_count(NAME) == 0


def test_hand_back_queues_the_run_without_an_event_or_a_retry(store: Store) -> None:
    store.submit_run(NAME, "r1", {})
    for attempt in range(MAX_RETRIES + 2):
        assert store.claim_next_run(NAME, f"hand-{attempt}") == "r1"
        store.hand_back_run(NAME, "r1", f"hand-{attempt}")
        assert store.lock_holder(NAME, "r1") is None
    assert kinds(store, "r1") == [EventKind.RUN_INIT]
    for attempt in range(MAX_RETRIES):
        assert store.claim_next_run(NAME, f"lease-{attempt}") == "r1"
        store.requeue_run(NAME, "r1", f"lease-{attempt}")
    assert status(store, "r1") == RunStatus.PENDING


def test_hand_back_by_another_lease_does_nothing(store: Store) -> None:
    claimed(store, lease="lease-a")
    store.hand_back_run(NAME, "r1", "lease-b")
    assert store.lock_holder(NAME, "r1") == "lease-a"
    assert store.get_pending_count(NAME) == 0


# -- requeue_run -------------------------------------------------------------------------------


def requeue_once(store: Store, run_id: str, lease: str, reason: str = "owner_gone") -> None:
    assert store.claim_next_run(NAME, lease) == run_id
    store.requeue_run(NAME, run_id, lease, reason=reason)


def test_requeue_journals_the_reason_and_queues_the_run(store: Store) -> None:
    store.submit_run(NAME, "r1", {})
    requeue_once(store, "r1", "lease-a", reason="owner_gone")
    last = store.get_last_event(NAME, "r1")
    assert last is not None
    assert (last.kind, last.payload["reason"]) == (EventKind.RUN_REQUEUED, "owner_gone")
    assert store.lock_holder(NAME, "r1") is None
    assert status(store, "r1") == RunStatus.PENDING
    assert store.claim_next_run(NAME, "lease-b") == "r1"


def test_owner_gone_past_max_retries_ends_the_run(store: Store) -> None:
    store.submit_run(NAME, "r1", {})
    for attempt in range(MAX_RETRIES):
        requeue_once(store, "r1", f"lease-{attempt}")
        assert status(store, "r1") == RunStatus.PENDING
    requeue_once(store, "r1", "lease-last")
    last = store.get_last_event(NAME, "r1")
    assert last is not None
    assert (last.kind, last.payload["code"]) == (EventKind.RUN_ERROR, "max_retries")
    assert kinds(store, "r1").count(EventKind.RUN_REQUEUED) == MAX_RETRIES
    assert status(store, "r1") == RunStatus.ERROR
    assert store.get_pending_count(NAME) == 0
    assert store.claim_next_run(NAME, "lease-z") is None


def test_store_unavailable_counts_against_its_own_budget(store: Store) -> None:
    store.submit_run(NAME, "r1", {})
    for attempt in range(MAX_STORE_REQUEUES):
        requeue_once(store, "r1", f"lease-{attempt}", reason="store_unavailable")
    assert status(store, "r1") == RunStatus.PENDING
    assert kinds(store, "r1").count(EventKind.RUN_REQUEUED) == MAX_STORE_REQUEUES
    requeue_once(store, "r1", "lease-last", reason="store_unavailable")
    assert kinds(store, "r1")[-1] == EventKind.RUN_ERROR
    assert status(store, "r1") == RunStatus.ERROR
    assert store.get_pending_count(NAME) == 0


def test_budgets_do_not_share_a_count(store: Store) -> None:
    store.submit_run(NAME, "r1", {})
    for attempt in range(MAX_RETRIES):
        requeue_once(store, "r1", f"gone-{attempt}", reason="owner_gone")
        requeue_once(store, "r1", f"down-{attempt}", reason="store_unavailable")
    assert status(store, "r1") == RunStatus.PENDING
    assert EventKind.RUN_ERROR not in kinds(store, "r1")


@pytest.mark.parametrize("progress", [EventKind.STEP_DONE, EventKind.RUN_UPDATE_COMPLETED])
def test_progress_between_requeues_resets_the_budget(store: Store, progress: str) -> None:
    store.submit_run(NAME, "r1", {})
    for attempt in range(MAX_RETRIES):
        requeue_once(store, "r1", f"before-{attempt}")
    assert store.claim_next_run(NAME, "lease-progress") == "r1"
    store.append_event(NAME, "r1", event(progress, "r1", call_index=0), fence="lease-progress")
    store.requeue_run(NAME, "r1", "lease-progress")
    for attempt in range(MAX_RETRIES - 1):
        requeue_once(store, "r1", f"after-{attempt}")
    assert status(store, "r1") == RunStatus.PENDING
    requeue_once(store, "r1", "lease-last")
    assert status(store, "r1") == RunStatus.ERROR


def test_requeue_by_a_lease_not_holding_the_run_does_nothing(store: Store) -> None:
    claimed(store, lease="lease-a")
    store.requeue_run(NAME, "r1", "lease-b")
    assert kinds(store, "r1") == [EventKind.RUN_INIT]
    assert store.lock_holder(NAME, "r1") == "lease-a"
    assert store.get_pending_count(NAME) == 0


def test_requeue_by_a_lapsed_lease_no_one_took_over_counts_its_reason(
    store: Store, clock: ManualClock
) -> None:
    claimed(store, lease="lease-a")
    clock.advance(LOCK_TTL + 1)  # an outage: no heartbeat got through
    store.requeue_run(NAME, "r1", "lease-a", reason="store_unavailable")
    last = store.get_last_event(NAME, "r1")
    assert last is not None
    assert (last.kind, last.payload["reason"]) == (EventKind.RUN_REQUEUED, "store_unavailable")
    assert store.recover_pending_runs(NAME) == []  # nothing left for the orphan scan
    # Once recovered or claimed by another lease, the lapsed one no longer names the run.
    assert store.claim_next_run(NAME, "lease-b") == "r1"
    clock.advance(LOCK_TTL + 1)
    assert store.recover_pending_runs(NAME) == ["r1"]
    store.requeue_run(NAME, "r1", "lease-a", reason="store_unavailable")
    store.requeue_run(NAME, "r1", "lease-b", reason="store_unavailable")
    reasons = [
        e.payload["reason"] for e in store.load_run(NAME, "r1") if e.kind == EventKind.RUN_REQUEUED
    ]
    assert reasons == ["store_unavailable", "owner_gone"]


def test_requeue_of_an_ended_run_only_releases_it(store: Store) -> None:
    claimed(store)
    complete(store, "r1", "lease-a")
    before = store.load_run(NAME, "r1")
    store.requeue_run(NAME, "r1", "lease-a")
    assert store.load_run(NAME, "r1") == before
    assert store.lock_holder(NAME, "r1") is None
    assert store.get_pending_count(NAME) == 0
    assert status(store, "r1") == RunStatus.COMPLETE


# -- recover_pending_runs and the pending count ------------------------------------------------


def test_recover_pending_runs_requeues_runs_whose_lease_expired(
    store: Store, clock: ManualClock
) -> None:
    claimed(store, "stale", "lease-a")
    clock.advance(LOCK_TTL / 2)
    claimed(store, "live", "lease-b")
    assert store.recover_pending_runs(NAME) == []
    clock.advance(LOCK_TTL / 2 + 1)
    assert store.recover_pending_runs(NAME) == ["stale"]
    last = store.get_last_event(NAME, "stale")
    assert last is not None
    assert (last.kind, last.payload["reason"]) == (EventKind.RUN_REQUEUED, "owner_gone")
    assert store.lock_holder(NAME, "live") == "lease-b"
    assert store.claim_next_run(NAME, "lease-c") == "stale"
    assert store.recover_pending_runs(NAME) == []


def test_recover_pending_runs_leaves_other_workflows_alone(
    store: Store, clock: ManualClock
) -> None:
    store.submit_run("other", "r1", {})
    store.claim_run("other", "r1", "lease-a")
    clock.advance(LOCK_TTL + 1)
    assert store.recover_pending_runs(NAME) == []
    assert kinds(store, "r1") == []
    assert store.recover_pending_runs("other") == ["r1"]


def test_recover_pending_runs_does_not_requeue_an_ended_run(
    store: Store, clock: ManualClock
) -> None:
    claimed(store)
    complete(store, "r1", "lease-a")
    clock.advance(LOCK_TTL + 1)
    assert store.recover_pending_runs(NAME) == []
    assert kinds(store, "r1") == [EventKind.RUN_INIT, EventKind.RUN_COMPLETE]
    assert store.get_pending_count(NAME) == 0


def test_recovered_runs_count_against_max_retries(store: Store, clock: ManualClock) -> None:
    store.submit_run(NAME, "r1", {})
    for attempt in range(MAX_RETRIES + 1):
        assert store.claim_next_run(NAME, f"lease-{attempt}") == "r1"
        clock.advance(LOCK_TTL + 1)
        store.recover_pending_runs(NAME)
    assert status(store, "r1") == RunStatus.ERROR
    assert store.get_last_event(NAME, "r1").payload["code"] == "max_retries"  # type: ignore[union-attr]


def test_pending_count_counts_queued_runs_per_workflow(store: Store) -> None:
    for run_id in ["r1", "r2", "r3"]:
        store.submit_run(NAME, run_id, {})
    store.submit_run("other", "r1", {})
    store.claim_next_run(NAME, "lease-a")
    assert store.get_pending_count(NAME) == 2
    assert store.get_pending_count("other") == 1
    assert store.get_pending_count("nothing") == 0


# -- claims that read what the attempt starts from ---------------------------------------------


def test_claim_next_run_loaded_answers_the_journal_and_controls(store: Store) -> None:
    store.submit_run(NAME, "r1", {"n": 1})
    store.request_cancel(NAME, "r1")
    run = store.claim_next_run_loaded(NAME, "lease-a")
    assert run is not None
    assert run.run_id == "r1"
    assert run.events == store.load_run(NAME, "r1")
    assert run.events[0].kind == EventKind.RUN_INIT
    assert run.controls.cancel_requested_at is not None
    assert store.lock_holder(NAME, "r1") == "lease-a"
    assert store.claim_next_run_loaded(NAME, "lease-b") is None


def test_claim_next_runs_loaded_claims_one_run_per_lease_in_queue_order(store: Store) -> None:
    for run_id in ["c", "a", "b"]:
        store.submit_run(NAME, run_id, {})
    runs = store.claim_next_runs_loaded(NAME, ["lease-0", "lease-1"])
    assert [run.run_id for run in runs] == ["c", "a"]
    assert [store.lock_holder(NAME, run_id) for run_id in ["c", "a"]] == ["lease-0", "lease-1"]
    assert all(run.events == store.load_run(NAME, run.run_id) for run in runs)
    # Fewer runs than leases: the rest, then nothing.
    rest = store.claim_next_runs_loaded(NAME, ["lease-2", "lease-3", "lease-4"])
    assert [run.run_id for run in rest] == ["b"]
    assert store.lock_holder(NAME, "b") == "lease-2"
    assert store.claim_next_runs_loaded(NAME, ["lease-5"]) == []
    assert store.get_pending_count(NAME) == 0


def test_claim_next_runs_loaded_checks_the_gates_for_every_run(store: Store) -> None:
    for n in range(4):
        store.submit_run(NAME, f"k{n}", {}, concurrency_key="acme", concurrency_max=2)
    store.submit_run(NAME, "free", {})
    runs = store.claim_next_runs_loaded(NAME, [f"lease-{n}" for n in range(5)])
    # Two of acme's runs fill its Limit; the run behind them in no key is not blocked by them.
    assert sorted(run.run_id for run in runs) == ["free", "k0", "k1"]
    assert store.get_pending_count(NAME) == 2


def test_claim_next_runs_loaded_with_no_leases_claims_nothing(store: Store) -> None:
    store.submit_run(NAME, "r1", {})
    assert store.claim_next_runs_loaded(NAME, []) == []
    assert store.get_pending_count(NAME) == 1


def test_a_batch_claim_returns_every_run_it_claimed_even_when_reading_one_fails(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once a claim has committed, its runs are held under their leases: a journal read
    that fails afterwards must not lose them (they would sit locked, with no attempt, until
    the lease lapsed and an orphan scan charged them a retry)."""
    for run_id in ["r1", "r2", "r3"]:
        store.submit_run(NAME, run_id, {})
    read = store.load_run

    def load_run(name: str, run_id: str, **kwargs: object) -> list[RunEvent]:
        if run_id == "r2":
            raise StoreUnavailable("the journal read failed")
        return read(name, run_id, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(store, "load_run", load_run)
    leases = ["lease-1", "lease-2", "lease-3"]
    runs = store.claim_next_runs_loaded(NAME, leases)
    monkeypatch.undo()
    assert [run.run_id for run in runs] == ["r1", "r2", "r3"]
    for run, lease in zip(runs, leases, strict=True):
        assert store.lock_holder(NAME, run.run_id) == lease
        # The run the read failed for comes without its journal, for its attempt to load.
        if run.events is not None:
            assert run.events == store.load_run(NAME, run.run_id)
