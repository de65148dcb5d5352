"""Takeover of a dead worker's runs by its presence (``recover_lapsed_holders``): a run locked
under a lease of a worker whose presence record lapsed is requeued at once, live lease or
not; a run whose holder's record is live, or whose holder never recorded one, is left to its
lease."""

from __future__ import annotations

import itertools

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lockgate import EventKind, ManualClock, RunStatus, Store
from lockgate.stores import PoisonPolicy

from ._support import NAME, status
from .conftest import LOCK_TTL
from .test_insight import worker

POLICY = PoisonPolicy(max_retries=5, retry_ttl_s=600.0)
#: A presence record's time to live in these tests (a worker's default).
PRESENCE_TTL = 5.0

_ids = itertools.count()


def held(store: Store, worker_id: str) -> tuple[str, str]:
    """A fresh run claimed under a lease of ``worker_id``, as a worker makes them."""
    n = next(_ids)
    run_id, lease = f"r{n}", f"{worker_id}/nonce.{n}"
    store.submit_run(NAME, run_id, {})
    store.claim_run(NAME, run_id, lease)
    return run_id, lease


def test_a_lapsed_holders_run_is_requeued_as_a_crash_before_its_lease_lapses(
    store: Store, clock: ManualClock
) -> None:
    store.record_worker(worker("dead"), PRESENCE_TTL)
    store.record_worker(worker("alive"), PRESENCE_TTL)
    mine, _ = held(store, "dead")
    theirs, lease = held(store, "alive")
    clock.advance(PRESENCE_TTL + 0.5)
    store.record_worker(worker("alive"), PRESENCE_TTL)
    assert store.recover_lapsed_holders(NAME, poison=POLICY) == [mine]
    assert status(store, mine) == RunStatus.PENDING
    last = store.get_last_event(NAME, mine)
    assert last is not None
    assert last.kind == EventKind.RUN_REQUEUED
    assert last.payload["reason"] == "owner_gone"
    assert last.payload["crashes"] == 1  # a crash for the poison policy, as a lapse is
    assert store.lock_holder(NAME, mine) is None
    assert store.lock_holder(NAME, theirs) == lease  # its holder is alive
    assert store.recover_lapsed_holders(NAME, poison=POLICY) == []


def test_a_holder_that_never_recorded_presence_keeps_its_lease(
    store: Store, clock: ManualClock
) -> None:
    unnamed = "r-unnamed"
    store.submit_run(NAME, unnamed, {})
    store.claim_run(NAME, unnamed, "lease-without-a-worker")
    silent, lease = held(store, "burst")  # e.g. a burst-mode worker: no presence record
    store.record_worker(worker("other"), PRESENCE_TTL)
    clock.advance(PRESENCE_TTL + 1)
    assert store.recover_lapsed_holders(NAME, poison=POLICY) == []
    assert store.lock_holder(NAME, silent) == lease
    assert store.lock_holder(NAME, unnamed) == "lease-without-a-worker"


def test_the_caller_is_never_taken_as_lapsed(store: Store, clock: ManualClock) -> None:
    store.record_worker(worker("me"), PRESENCE_TTL)
    run_id, lease = held(store, "me")
    clock.advance(PRESENCE_TTL + 1)  # its own record lapsed (it could not write for a while)
    assert store.recover_lapsed_holders(NAME, keep=("me",), poison=POLICY) == []
    assert store.lock_holder(NAME, run_id) == lease


def test_a_cleanly_stopped_workers_record_is_forgotten(store: Store, clock: ManualClock) -> None:
    # A clean stop hands its runs back first: the passes need not look at its leases.
    store.record_worker(worker("stopped"), PRESENCE_TTL)
    run_id, lease = held(store, "stopped")
    store.drop_worker("stopped")
    clock.advance(PRESENCE_TTL + 1)
    assert store.recover_lapsed_holders(NAME) == []
    assert store.lock_holder(NAME, run_id) == lease


def test_a_record_lapsed_past_the_lock_ttl_is_forgotten(store: Store, clock: ManualClock) -> None:
    store.record_worker(worker("gone"), PRESENCE_TTL)
    run_id, _ = held(store, "gone")
    clock.advance(PRESENCE_TTL + LOCK_TTL + 1)
    store.record_worker(worker("other"), PRESENCE_TTL)  # which forgets the old records
    assert store.recover_lapsed_holders(NAME) == []
    # Its lease lapsed as well by then: the orphan scan takes it.
    assert store.recover_pending_runs(NAME) == [run_id]


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    refreshes=st.lists(st.floats(min_value=0.0, max_value=PRESENCE_TTL * 0.99), max_size=4),
    # Not within a hair of the TTL, where the manual clock's float sums decide.
    silence=st.floats(min_value=0.0, max_value=LOCK_TTL * 0.9).filter(
        lambda s: abs(s - PRESENCE_TTL) > 0.01
    ),
)
def test_only_a_holder_silent_past_its_presence_ttl_loses_its_run(
    store: Store, clock: ManualClock, refreshes: list[float], silence: float
) -> None:
    """However a holder refreshes its record (each time within its TTL), its run is never
    taken while the record lives; once it has been silent for the TTL, the pass takes it."""
    worker_id = f"w{next(_ids)}"
    store.record_worker(worker(worker_id), PRESENCE_TTL)
    run_id, lease = held(store, worker_id)
    for gap in refreshes:
        clock.advance(gap)
        assert store.recover_lapsed_holders(NAME, poison=POLICY) == []
        store.record_worker(worker(worker_id), PRESENCE_TTL)
    clock.advance(silence)
    taken = store.recover_lapsed_holders(NAME, poison=POLICY)
    if silence < PRESENCE_TTL:
        assert run_id not in taken
        assert store.lock_holder(NAME, run_id) == lease
    else:
        assert taken == [run_id]
        assert store.lock_holder(NAME, run_id) is None
    if store.lock_holder(NAME, run_id) == lease:
        store.release_run(NAME, run_id, lease)  # leave no run of this example locked
