"""Parked runs: park_run, the timer path (get_sleeping_runs, wake_due), wake_run, time_out_wait."""

from __future__ import annotations

import pytest

from lockgate import EventKind, LockLost, ManualClock, RunEvent, RunStatus, Store, WaitOutcome
from lockgate.journal._events import EPOCH_HEADER
from lockgate.stores import WaitSpec

from ._support import NAME, claimed, event, kinds, status
from .conftest import LOCK_TTL


def sleep_wait(clock: ManualClock, due_in: float = 60.0, index: int = 1) -> WaitSpec:
    return WaitSpec("sleep", f"sleep:{index}", index, due_at=clock() + due_in)


def signal_wait(
    clock: ManualClock | None = None, signal: str = "approve", due_in: float = 60.0
) -> WaitSpec:
    due_at = clock() + due_in if clock is not None else None
    return WaitSpec("signal", "signal:2", 2, due_at=due_at, signal=signal)


def opening(run_id: str, wait: WaitSpec) -> RunEvent:
    kind = EventKind.RUN_SIGNAL_WAITING if wait.kind == "signal" else EventKind.RUN_SLEEPING
    return event(kind, run_id, call_index=wait.call_index, wait_id=wait.wait_id)


def park(store: Store, run_id: str, wait: WaitSpec, lease: str = "lease-a") -> WaitOutcome:
    return store.park_run(NAME, run_id, lease=lease, events=[opening(run_id, wait)], wait=wait)


def parked(store: Store, wait: WaitSpec, run_id: str = "r1") -> str:
    claimed(store, run_id)
    assert park(store, run_id, wait) == WaitOutcome.PARKED
    return run_id


# -- park_run ----------------------------------------------------------------------------------


def test_park_run_appends_its_events_fenced_and_parks(store: Store, clock: ManualClock) -> None:
    wait = sleep_wait(clock)
    parked(store, wait)
    last = store.get_last_event(NAME, "r1")
    assert last is not None
    assert (last.kind, last.run_seq) == (EventKind.RUN_SLEEPING, 2)
    assert EPOCH_HEADER in last.headers
    info = store.get_run(NAME, "r1")
    assert info is not None
    assert (info.status, info.wait, info.lock_holder) == (RunStatus.SLEEPING, wait, None)


def test_a_parked_run_holds_no_lock_and_is_not_queued(store: Store, clock: ManualClock) -> None:
    parked(store, sleep_wait(clock))
    assert store.lock_holder(NAME, "r1") is None
    assert store.get_pending_count(NAME) == 0
    assert store.claim_next_run(NAME, "lease-b") is None
    with pytest.raises(LockLost):
        store.heartbeat(NAME, "r1", "lease-a")


def test_park_run_on_a_signal_wait_is_signal_waiting(store: Store) -> None:
    parked(store, signal_wait())
    assert status(store, "r1") == RunStatus.SIGNAL_WAITING


def test_park_run_by_another_lease_raises_lock_lost_and_writes_nothing(
    store: Store, clock: ManualClock
) -> None:
    claimed(store, lease="lease-a")
    with pytest.raises(LockLost):
        park(store, "r1", sleep_wait(clock), lease="lease-b")
    assert kinds(store, "r1") == [EventKind.RUN_INIT]
    assert store.lock_holder(NAME, "r1") == "lease-a"
    assert status(store, "r1") == RunStatus.IN_PROGRESS


def test_park_run_by_an_expired_lease_raises_lock_lost(store: Store, clock: ManualClock) -> None:
    claimed(store)
    clock.advance(LOCK_TTL + 1)
    with pytest.raises(LockLost):
        park(store, "r1", sleep_wait(clock))
    assert kinds(store, "r1") == [EventKind.RUN_INIT]
    assert store.get_run(NAME, "r1").wait is None  # type: ignore[union-attr]


def assert_superseded_and_untouched(store: Store, wait: WaitSpec) -> None:
    before = store.load_run(NAME, "r1")
    assert park(store, "r1", wait) == WaitOutcome.SUPERSEDED
    assert store.load_run(NAME, "r1") == before
    assert store.lock_holder(NAME, "r1") == "lease-a"
    assert store.get_run(NAME, "r1").wait is None  # type: ignore[union-attr]


def test_park_on_a_signal_already_buffered_is_superseded(store: Store) -> None:
    claimed(store)
    assert store.send_signal(NAME, "r1", "approve", {"ok": True}, "t") == "buffered"
    assert_superseded_and_untouched(store, signal_wait(signal="approve"))


def test_park_on_a_signal_is_not_superseded_by_another_signals_buffer(store: Store) -> None:
    claimed(store)
    store.send_signal(NAME, "r1", "reject", {}, "t")
    assert park(store, "r1", signal_wait(signal="approve")) == WaitOutcome.PARKED


def test_park_with_a_cancel_latched_is_superseded(store: Store, clock: ManualClock) -> None:
    claimed(store)
    store.request_cancel(NAME, "r1")
    assert_superseded_and_untouched(store, sleep_wait(clock))


def test_park_with_an_update_pending_is_superseded(store: Store, clock: ManualClock) -> None:
    claimed(store)
    assert store.deliver_update(NAME, "r1", "set", {"v": 1}, "u1", "t") == "queued"
    assert_superseded_and_untouched(store, sleep_wait(clock))


# -- the timer path ----------------------------------------------------------------------------


def test_get_sleeping_runs_lists_waits_due_at_or_before(store: Store, clock: ManualClock) -> None:
    parked(store, sleep_wait(clock, due_in=10), "soon")
    parked(store, sleep_wait(clock, due_in=100), "later")
    parked(store, signal_wait(clock, due_in=20), "deadline")
    parked(store, signal_wait(), "forever")
    assert store.get_sleeping_runs(clock()) == []
    assert store.get_sleeping_runs(clock() + 10) == [(NAME, "soon")]
    assert set(store.get_sleeping_runs(clock() + 50)) == {(NAME, "soon"), (NAME, "deadline")}
    assert len(store.get_sleeping_runs(clock() + 1000, limit=2)) == 2
    assert len(store.get_sleeping_runs(clock() + 1000)) == 3


def test_next_wait_due_is_the_soonest_armed_timer_after_a_time(
    store: Store, clock: ManualClock
) -> None:
    now = clock()
    assert store.next_wait_due(now) is None
    parked(store, signal_wait(), "forever")  # no deadline: no timer
    assert store.next_wait_due(now) is None
    parked(store, sleep_wait(clock, due_in=100), "later")
    parked(store, signal_wait(clock, due_in=20), "deadline")
    parked(store, sleep_wait(clock, due_in=10), "soon")
    assert store.next_wait_due(now) == pytest.approx(now + 10)
    # A loop that has ended what was due by now + 10 asks what comes after it.
    assert store.next_wait_due(now + 10) == pytest.approx(now + 20)
    assert store.next_wait_due(now + 100) is None
    clock.advance(10)
    assert store.wake_due(NAME, "soon", due_by=clock()) == WaitOutcome.RESOLVED
    assert store.next_wait_due(now) == pytest.approx(now + 20)  # the woken one is gone
    assert store.send_signal(NAME, "deadline", "approve", {}, "t") == "delivered"
    store.claim_run(NAME, "deadline", "lease-b")
    store.append_events(
        NAME, "deadline", [event(EventKind.RUN_COMPLETE, "deadline")], fence="lease-b"
    )
    assert store.next_wait_due(now) == pytest.approx(now + 100)  # an ended run has no timer


def test_wake_due_before_the_wait_is_due_is_superseded(store: Store, clock: ManualClock) -> None:
    parked(store, sleep_wait(clock, due_in=60))
    before = store.load_run(NAME, "r1")
    assert store.wake_due(NAME, "r1", due_by=clock() + 59) == WaitOutcome.SUPERSEDED
    assert store.load_run(NAME, "r1") == before
    assert status(store, "r1") == RunStatus.SLEEPING


def test_wake_due_ends_a_due_sleep_and_queues_the_run(store: Store, clock: ManualClock) -> None:
    wait = sleep_wait(clock, due_in=60, index=4)
    parked(store, wait)
    clock.advance(60)
    assert store.wake_due(NAME, "r1", due_by=clock()) == WaitOutcome.RESOLVED
    woken = store.get_last_event(NAME, "r1")
    assert woken is not None
    assert woken.kind == EventKind.RUN_WOKEN
    assert (woken.payload["call_index"], woken.payload["wait_id"]) == (4, "sleep:4")
    assert EPOCH_HEADER not in woken.headers
    info = store.get_run(NAME, "r1")
    assert info is not None
    assert (info.status, info.wait) == (RunStatus.PENDING, None)
    assert store.get_sleeping_runs(clock()) == []
    assert store.claim_next_run(NAME, "lease-b") == "r1"


def test_wake_due_times_out_a_due_signal_wait(store: Store, clock: ManualClock) -> None:
    wait = signal_wait(clock, due_in=30)
    parked(store, wait)
    clock.advance(30)
    assert store.wake_due(NAME, "r1", due_by=clock()) == WaitOutcome.RESOLVED
    timed_out = store.get_last_event(NAME, "r1")
    assert timed_out is not None
    assert timed_out.kind == EventKind.RUN_WAIT_TIMED_OUT
    assert (timed_out.payload["call_index"], timed_out.payload["wait_id"]) == (2, "signal:2")
    assert store.claim_next_run(NAME, "lease-b") == "r1"


def test_wake_due_of_an_ended_wait_is_superseded(store: Store, clock: ManualClock) -> None:
    parked(store, sleep_wait(clock, due_in=10))
    clock.advance(10)
    assert store.wake_due(NAME, "r1", due_by=clock()) == WaitOutcome.RESOLVED
    journal = store.load_run(NAME, "r1")
    assert store.wake_due(NAME, "r1", due_by=clock()) == WaitOutcome.SUPERSEDED
    assert store.load_run(NAME, "r1") == journal
    assert store.get_pending_count(NAME) == 1


def test_wake_due_of_an_unknown_or_running_run_is_superseded(
    store: Store, clock: ManualClock
) -> None:
    claimed(store)
    assert store.wake_due(NAME, "r1", due_by=clock() + 1000) == WaitOutcome.SUPERSEDED
    assert store.wake_due(NAME, "nope", due_by=clock() + 1000) == WaitOutcome.SUPERSEDED
    assert kinds(store, "r1") == [EventKind.RUN_INIT]


# -- wake_run and time_out_wait ----------------------------------------------------------------


def test_wake_run_without_a_lease_ends_the_sleep_and_queues_the_run(
    store: Store, clock: ManualClock
) -> None:
    wait = sleep_wait(clock)
    parked(store, wait)
    assert store.wake_run(NAME, "r1", wait_id=wait.wait_id) == WaitOutcome.RESOLVED
    woken = store.get_last_event(NAME, "r1")
    assert woken is not None
    assert (woken.kind, woken.payload["wait_id"]) == (EventKind.RUN_WOKEN, wait.wait_id)
    assert status(store, "r1") == RunStatus.PENDING
    assert store.claim_next_run(NAME, "lease-b") == "r1"


def test_a_repeated_wake_is_a_duplicate(store: Store, clock: ManualClock) -> None:
    wait = sleep_wait(clock)
    parked(store, wait)
    assert store.wake_run(NAME, "r1", wait_id=wait.wait_id) == WaitOutcome.RESOLVED
    journal = store.load_run(NAME, "r1")
    assert store.wake_run(NAME, "r1", wait_id=wait.wait_id) == WaitOutcome.DUPLICATE
    assert store.load_run(NAME, "r1") == journal
    assert store.get_pending_count(NAME) == 1


def test_wake_run_after_the_timer_woke_it_is_a_duplicate(store: Store, clock: ManualClock) -> None:
    wait = sleep_wait(clock, due_in=5)
    parked(store, wait)
    clock.advance(5)
    assert store.wake_due(NAME, "r1", due_by=clock()) == WaitOutcome.RESOLVED
    assert store.wake_run(NAME, "r1", wait_id=wait.wait_id) == WaitOutcome.DUPLICATE
    assert kinds(store, "r1").count(EventKind.RUN_WOKEN) == 1


def test_wake_run_of_a_wait_never_opened_writes_nothing(store: Store) -> None:
    claimed(store)
    outcome = store.wake_run(NAME, "r1", wait_id="sleep:9")
    assert outcome in (WaitOutcome.SUPERSEDED, WaitOutcome.DUPLICATE)
    assert kinds(store, "r1") == [EventKind.RUN_INIT]


def test_wake_run_with_a_lease_is_fenced_and_does_not_queue(
    store: Store, clock: ManualClock
) -> None:
    wait = sleep_wait(clock, due_in=5)
    parked(store, wait)
    clock.advance(5)
    store.claim_run(NAME, "r1", "lease-b")
    outcome = store.wake_run(NAME, "r1", wait_id=wait.wait_id, lease="lease-b")
    assert outcome == WaitOutcome.RESOLVED
    woken = store.get_last_event(NAME, "r1")
    assert woken is not None
    assert woken.kind == EventKind.RUN_WOKEN
    opened = store.load_run(NAME, "r1")[1]  # run:sleeping, journaled under lease-a
    assert int(woken.headers[EPOCH_HEADER]) > int(opened.headers[EPOCH_HEADER])
    assert store.get_pending_count(NAME) == 0
    assert store.lock_holder(NAME, "r1") == "lease-b"
    assert status(store, "r1") == RunStatus.IN_PROGRESS


def test_wake_run_with_a_lease_not_holding_the_run_raises_lock_lost(
    store: Store, clock: ManualClock
) -> None:
    wait = sleep_wait(clock)
    parked(store, wait)
    store.claim_run(NAME, "r1", "lease-b")
    journal = store.load_run(NAME, "r1")
    with pytest.raises(LockLost):
        store.wake_run(NAME, "r1", wait_id=wait.wait_id, lease="lease-a")
    assert store.load_run(NAME, "r1") == journal
    assert store.get_run(NAME, "r1").wait == wait  # type: ignore[union-attr]


def test_time_out_wait_ends_the_signal_wait_and_queues_the_run(store: Store) -> None:
    wait = signal_wait()
    parked(store, wait)
    assert store.time_out_wait(NAME, "r1", wait_id=wait.wait_id) == WaitOutcome.RESOLVED
    last = store.get_last_event(NAME, "r1")
    assert last is not None
    assert (last.kind, last.payload["wait_id"]) == (EventKind.RUN_WAIT_TIMED_OUT, wait.wait_id)
    assert store.claim_next_run(NAME, "lease-b") == "r1"
    assert store.time_out_wait(NAME, "r1", wait_id=wait.wait_id) == WaitOutcome.DUPLICATE
    assert kinds(store, "r1").count(EventKind.RUN_WAIT_TIMED_OUT) == 1


def test_time_out_wait_with_a_lease_is_fenced(store: Store) -> None:
    wait = signal_wait()
    parked(store, wait)
    store.claim_run(NAME, "r1", "lease-b")
    with pytest.raises(LockLost):
        store.time_out_wait(NAME, "r1", wait_id=wait.wait_id, lease="lease-a")
    assert store.time_out_wait(NAME, "r1", wait_id=wait.wait_id, lease="lease-b") == (
        WaitOutcome.RESOLVED
    )
    last = store.get_last_event(NAME, "r1")
    assert last is not None
    assert EPOCH_HEADER in last.headers
    assert store.get_pending_count(NAME) == 0


def test_a_deadline_after_the_signal_arrived_is_superseded(
    store: Store, clock: ManualClock
) -> None:
    wait = signal_wait(clock, due_in=30)
    parked(store, wait)
    assert store.send_signal(NAME, "r1", "approve", {"ok": True}, "t") == "delivered"
    journal = store.load_run(NAME, "r1")
    clock.advance(30)
    assert store.get_sleeping_runs(clock()) == []
    assert store.wake_due(NAME, "r1", due_by=clock()) == WaitOutcome.SUPERSEDED
    assert store.time_out_wait(NAME, "r1", wait_id=wait.wait_id) == WaitOutcome.SUPERSEDED
    assert store.load_run(NAME, "r1") == journal
    assert store.get_pending_count(NAME) == 1


def test_wake_run_leaves_a_signal_wait_alone(store: Store) -> None:
    wait = signal_wait()
    parked(store, wait)
    journal = store.load_run(NAME, "r1")
    assert store.wake_run(NAME, "r1", wait_id=wait.wait_id) == WaitOutcome.SUPERSEDED
    assert store.load_run(NAME, "r1") == journal
    assert status(store, "r1") == RunStatus.SIGNAL_WAITING


def test_time_out_wait_leaves_a_sleep_alone(store: Store, clock: ManualClock) -> None:
    wait = sleep_wait(clock)
    parked(store, wait)
    journal = store.load_run(NAME, "r1")
    assert store.time_out_wait(NAME, "r1", wait_id=wait.wait_id) == WaitOutcome.SUPERSEDED
    assert store.load_run(NAME, "r1") == journal
    assert status(store, "r1") == RunStatus.SLEEPING
