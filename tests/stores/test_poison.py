"""Poison runs: lapsed leases counted as crashes against a worker's PoisonPolicy, quarantine,
and loop-blocked lapses (``recover_pending_runs``/``claim_run`` with ``poison``,
``note_loop_blocked``)."""

from __future__ import annotations

import pytest

from lockgate import EventKind, ManualClock, RunFinishedError, RunStatus, Store
from lockgate.stores import PoisonPolicy

from ._support import NAME, event, status
from .conftest import HEARTBEAT_INTERVAL, LOCK_TTL, MAX_RETRIES

#: Quarantines at the third crash: before the store's own max_retries (3) ends the run.
POLICY = PoisonPolicy(max_retries=2, retry_ttl_s=600.0)


def crash(store: Store, clock: ManualClock, run_id: str, lease: str, poison: PoisonPolicy) -> None:
    """Claim ``run_id`` under ``lease``, let the lease lapse, and have an orphan scan find it."""
    assert store.claim_next_run(NAME, lease) == run_id
    clock.advance(LOCK_TTL + 1)
    store.recover_pending_runs(NAME, poison=poison)


def last_payload(store: Store, run_id: str) -> dict[str, object]:
    last = store.get_last_event(NAME, run_id)
    assert last is not None
    return dict(last.payload)


def test_a_run_whose_owner_goes_past_the_policy_is_quarantined(
    store: Store, clock: ManualClock
) -> None:
    store.submit_run(NAME, "r1", {})
    for attempt in range(POLICY.max_retries):
        crash(store, clock, "r1", f"lease-{attempt}", POLICY)
        assert status(store, "r1") == RunStatus.PENDING
        payload = last_payload(store, "r1")
        assert payload["reason"] == "owner_gone"
        assert payload["crashes"] == attempt + 1
        assert payload["crash_at"] == clock()
    crash(store, clock, "r1", "lease-last", POLICY)
    assert status(store, "r1") == RunStatus.QUARANTINED
    last = store.get_last_event(NAME, "r1")
    assert last is not None
    assert last.kind == EventKind.RUN_ERROR
    assert last.payload["code"] == "quarantined"
    detail = last.payload["detail"]
    assert detail["crashes"] == POLICY.max_retries + 1
    assert detail["window_s"] == POLICY.retry_ttl_s
    assert detail["max_retries"] == POLICY.max_retries
    assert detail["last_crash_at"] == clock()
    assert detail["loop_blocked"] is False
    assert store.get_pending_count(NAME) == 0
    assert store.lock_holder(NAME, "r1") is None


def test_quarantine_frees_the_slot_and_leaves_other_runs_alone(
    store: Store, clock: ManualClock
) -> None:
    gates = {"concurrency_key": "k", "concurrency_max": 1}
    store.submit_run(NAME, "poison", {}, **gates)  # type: ignore[arg-type]
    for attempt in range(POLICY.max_retries + 1):
        crash(store, clock, "poison", f"lease-{attempt}", POLICY)
    assert status(store, "poison") == RunStatus.QUARANTINED
    store.submit_run(NAME, "other", {}, **gates)  # type: ignore[arg-type]
    assert store.claim_next_run(NAME, "lease-other") == "other"
    store.append_event(NAME, "other", event(EventKind.RUN_COMPLETE, "other"), fence="lease-other")
    assert status(store, "other") == RunStatus.COMPLETE


def test_each_run_counts_its_own_crashes(store: Store, clock: ManualClock) -> None:
    store.submit_run(NAME, "r1", {})
    store.submit_run(NAME, "r2", {})
    for attempt in range(POLICY.max_retries):
        for run_id in ("r1", "r2"):
            crash(store, clock, run_id, f"{run_id}-{attempt}", POLICY)
    crash(store, clock, "r1", "r1-last", POLICY)
    assert status(store, "r1") == RunStatus.QUARANTINED
    assert status(store, "r2") == RunStatus.PENDING


def test_crashes_spread_wider_than_the_ttl_are_forgotten(store: Store, clock: ManualClock) -> None:
    policy = PoisonPolicy(max_retries=1, retry_ttl_s=100.0)
    store.submit_run(NAME, "r1", {})
    for attempt in range(MAX_RETRIES):  # within the store's own budget of lapses
        crash(store, clock, "r1", f"lease-{attempt}", policy)
        assert status(store, "r1") == RunStatus.PENDING
        assert last_payload(store, "r1")["crashes"] == 1
        clock.advance(policy.retry_ttl_s)


def test_progress_does_not_reset_the_crash_count(store: Store, clock: ManualClock) -> None:
    policy = PoisonPolicy(max_retries=1, retry_ttl_s=600.0)
    store.submit_run(NAME, "r1", {})
    crash(store, clock, "r1", "lease-a", policy)
    assert store.claim_next_run(NAME, "lease-b") == "r1"
    done = event(EventKind.STEP_DONE, "r1", call_index=0, name="s", result=1)
    store.append_event(NAME, "r1", done, fence="lease-b")
    clock.advance(LOCK_TTL + 1)
    store.recover_pending_runs(NAME, poison=policy)
    assert status(store, "r1") == RunStatus.QUARANTINED


def test_without_a_policy_no_crash_is_counted(store: Store, clock: ManualClock) -> None:
    store.submit_run(NAME, "r1", {})
    store.claim_next_run(NAME, "lease-a")
    clock.advance(LOCK_TTL + 1)
    assert store.recover_pending_runs(NAME) == ["r1"]
    payload = last_payload(store, "r1")
    assert "crash_at" not in payload
    assert payload["reason"] == "owner_gone"
    # A policy met later counts from then on.
    crash(store, clock, "r1", "lease-b", PoisonPolicy(max_retries=0))
    assert status(store, "r1") == RunStatus.QUARANTINED


def test_claim_run_taking_over_a_lapsed_lease_counts_a_crash(
    store: Store, clock: ManualClock
) -> None:
    policy = PoisonPolicy(max_retries=1, retry_ttl_s=600.0)
    store.submit_run(NAME, "r1", {})
    store.claim_run(NAME, "r1", "lease-a", poison=policy)
    clock.advance(LOCK_TTL + 1)
    store.claim_run(NAME, "r1", "lease-b", poison=policy)
    assert store.lock_holder(NAME, "r1") == "lease-b"
    clock.advance(LOCK_TTL + 1)
    with pytest.raises(RunFinishedError):
        store.claim_run(NAME, "r1", "lease-c", poison=policy)
    assert status(store, "r1") == RunStatus.QUARANTINED
    assert store.lock_holder(NAME, "r1") is None


@pytest.mark.parametrize("counts", [True, False])
def test_a_loop_blocked_lapse_counts_as_the_policy_says(
    store: Store, clock: ManualClock, counts: bool
) -> None:
    policy = PoisonPolicy(max_retries=0, retry_ttl_s=600.0, counts_loop_blocked=counts)
    store.submit_run(NAME, "r1", {})
    assert store.claim_next_run(NAME, "lease-a") == "r1"
    assert store.note_loop_blocked(NAME, "r1", "lease-a") is True
    clock.advance(LOCK_TTL + 1)
    store.recover_pending_runs(NAME, poison=policy)
    if counts:
        assert status(store, "r1") == RunStatus.QUARANTINED
        assert last_payload(store, "r1")["detail"]["loop_blocked"] is True  # type: ignore[index]
    else:
        assert status(store, "r1") == RunStatus.PENDING
        payload = last_payload(store, "r1")
        assert payload["loop_blocked"] is True
        assert "crash_at" not in payload
        # The note went with that lapse: the next lapse of the run is a crash.
        crash(store, clock, "r1", "lease-b", policy)
        assert status(store, "r1") == RunStatus.QUARANTINED


def test_a_heartbeat_after_the_note_makes_a_later_lapse_a_crash(
    store: Store, clock: ManualClock
) -> None:
    policy = PoisonPolicy(max_retries=0, counts_loop_blocked=False)
    store.submit_run(NAME, "r1", {})
    assert store.claim_next_run(NAME, "lease-a") == "r1"
    assert store.note_loop_blocked(NAME, "r1", "lease-a") is True
    clock.advance(HEARTBEAT_INTERVAL)
    store.heartbeat(NAME, "r1", "lease-a")  # the loop came back
    clock.advance(LOCK_TTL + 1)
    store.recover_pending_runs(NAME, poison=policy)
    assert status(store, "r1") == RunStatus.QUARANTINED
    assert last_payload(store, "r1")["detail"]["loop_blocked"] is False  # type: ignore[index]


def test_note_loop_blocked_needs_the_lease_that_holds_the_run(store: Store) -> None:
    store.submit_run(NAME, "r1", {})
    assert store.note_loop_blocked(NAME, "r1", "lease-a") is False
    assert store.note_loop_blocked(NAME, "missing", "lease-a") is False
    assert store.claim_next_run(NAME, "lease-a") == "r1"
    assert store.note_loop_blocked(NAME, "r1", "lease-b") is False
    store.append_event(NAME, "r1", event(EventKind.RUN_COMPLETE, "r1"), fence="lease-a")
    assert store.note_loop_blocked(NAME, "r1", "lease-a") is False
