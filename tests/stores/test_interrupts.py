"""Interrupts (``ctx.interrupt``) as a store keeps them: a wait of kind ``interrupt``, answered
by the signal named after its wait id, timed out at its deadline like a signal wait, and
reported ``interrupted`` by ``get_run`` and ``list_runs``."""

from __future__ import annotations

import pytest

from lockgate import EventKind, ManualClock, RunEvent, RunStatus, Store, WaitOutcome
from lockgate.stores import WaitSpec
from lockgate.stores._types import interrupt_signal

from ._support import NAME, claimed, event, kinds, status

WAIT_ID = "interrupt:2@0a1b2c3d"
ANSWER = interrupt_signal(WAIT_ID)


def interrupt_wait(
    clock: ManualClock | None = None, due_in: float = 60.0, wait_id: str = WAIT_ID
) -> WaitSpec:
    due_at = clock() + due_in if clock is not None else None
    return WaitSpec("interrupt", wait_id, 2, due_at=due_at, signal=interrupt_signal(wait_id))


def opening(run_id: str, wait: WaitSpec) -> RunEvent:
    return event(
        EventKind.RUN_INTERRUPTED,
        run_id,
        call_index=wait.call_index,
        wait_id=wait.wait_id,
        payload={"question": "ship it?"},
        expects="approval",
        deadline=wait.due_at,
    )


def park(store: Store, run_id: str, wait: WaitSpec, lease: str = "lease-a") -> WaitOutcome:
    return store.park_run(NAME, run_id, lease=lease, events=[opening(run_id, wait)], wait=wait)


def parked(store: Store, wait: WaitSpec, run_id: str = "r1") -> str:
    claimed(store, run_id)
    assert park(store, run_id, wait) == WaitOutcome.PARKED
    return run_id


def answer(store: Store, run_id: str = "r1", signal: str = ANSWER) -> str:
    return store.send_signal(
        NAME,
        run_id,
        signal,
        {"action": "approve", "value": None},
        "t",
        idempotency_key=f"resume:{signal}",
    )


def test_a_run_parked_on_an_interrupt_reads_interrupted(store: Store) -> None:
    wait = interrupt_wait()
    parked(store, wait)
    info = store.get_run(NAME, "r1")
    assert info is not None
    assert (info.status, info.wait, info.lock_holder) == (RunStatus.INTERRUPTED, wait, None)
    listed, _ = store.list_runs(NAME)
    assert [(i.run_id, i.status) for i in listed] == [("r1", RunStatus.INTERRUPTED)]
    assert store.get_pending_count(NAME) == 0
    assert store.claim_next_run(NAME, "lease-b") is None


def test_an_answer_sent_before_the_run_parks_is_buffered_and_the_park_superseded(
    store: Store,
) -> None:
    claimed(store)
    assert answer(store) == "buffered"
    before = store.load_run(NAME, "r1")
    assert park(store, "r1", interrupt_wait()) == WaitOutcome.SUPERSEDED
    assert store.load_run(NAME, "r1") == before
    assert store.lock_holder(NAME, "r1") == "lease-a"
    buffered = store.peek_signal(NAME, "r1", ANSWER)
    assert buffered is not None
    assert (buffered["signal_id"], buffered["payload"]["action"]) == (
        f"resume:{ANSWER}",
        "approve",
    )


def test_the_answer_to_a_parked_interrupt_is_delivered_and_queues_the_run(store: Store) -> None:
    parked(store, interrupt_wait())
    assert answer(store) == "delivered"
    info = store.get_run(NAME, "r1")
    assert info is not None
    assert (info.status, info.wait) == (RunStatus.PENDING, None)
    assert store.claim_next_run(NAME, "lease-b") == "r1"
    assert store.peek_signal(NAME, "r1", ANSWER) is not None  # for the attempt to journal


def test_an_answer_to_another_interrupt_leaves_the_run_parked(store: Store) -> None:
    parked(store, interrupt_wait())
    assert answer(store, signal=interrupt_signal("interrupt:1@0a1b2c3d")) == "buffered"
    assert status(store, "r1") == RunStatus.INTERRUPTED
    # Nor does a plain signal wait take an interrupt's answer, or the other way round.
    parked(store, WaitSpec("signal", "signal:2", 2, signal="approve"), "r2")
    assert answer(store, "r2") == "buffered"
    assert status(store, "r2") == RunStatus.SIGNAL_WAITING


def test_a_second_answer_to_one_interrupt_is_a_duplicate_and_keeps_nothing(store: Store) -> None:
    parked(store, interrupt_wait())
    assert answer(store) == "delivered"
    assert answer(store) == "duplicate"
    store.claim_run(NAME, "r1", "lease-b")
    signal = store.peek_signal(NAME, "r1", ANSWER)
    assert signal is not None
    assert store.pop_signal_match(NAME, "r1", ANSWER, signal["signal_id"])
    assert store.peek_signal(NAME, "r1", ANSWER) is None
    assert answer(store) == "duplicate"  # taken and gone, the key still stands
    assert store.peek_signal(NAME, "r1", ANSWER) is None


def test_the_timer_times_out_a_due_interrupt_and_queues_the_run(
    store: Store, clock: ManualClock
) -> None:
    parked(store, interrupt_wait(clock, due_in=30))
    assert store.next_wait_due(clock()) == pytest.approx(clock() + 30)
    assert store.get_sleeping_runs(clock() + 29) == []
    clock.advance(30)
    assert store.get_sleeping_runs(clock()) == [(NAME, "r1")]
    assert store.wake_due(NAME, "r1", due_by=clock()) == WaitOutcome.RESOLVED
    timed_out = store.get_last_event(NAME, "r1")
    assert timed_out is not None
    assert timed_out.kind == EventKind.RUN_WAIT_TIMED_OUT
    assert (timed_out.payload["call_index"], timed_out.payload["wait_id"]) == (2, WAIT_ID)
    assert status(store, "r1") == RunStatus.PENDING
    assert answer(store) == "buffered"  # too late: nothing waits on it any more
    assert store.claim_next_run(NAME, "lease-b") == "r1"


def test_a_deadline_after_the_answer_arrived_is_superseded(
    store: Store, clock: ManualClock
) -> None:
    wait = interrupt_wait(clock, due_in=30)
    parked(store, wait)
    assert answer(store) == "delivered"
    journal = store.load_run(NAME, "r1")
    clock.advance(30)
    assert store.get_sleeping_runs(clock()) == []
    assert store.wake_due(NAME, "r1", due_by=clock()) == WaitOutcome.SUPERSEDED
    assert store.time_out_wait(NAME, "r1", wait_id=WAIT_ID) == WaitOutcome.SUPERSEDED
    assert store.load_run(NAME, "r1") == journal
    assert store.get_pending_count(NAME) == 1


def test_time_out_wait_ends_an_interrupt_by_its_wait_id(store: Store) -> None:
    parked(store, interrupt_wait())
    assert store.time_out_wait(NAME, "r1", wait_id=WAIT_ID) == WaitOutcome.RESOLVED
    assert kinds(store, "r1")[-1] == EventKind.RUN_WAIT_TIMED_OUT
    assert status(store, "r1") == RunStatus.PENDING
    assert store.time_out_wait(NAME, "r1", wait_id=WAIT_ID) == WaitOutcome.DUPLICATE


def test_time_out_wait_of_an_interrupt_by_its_holder_is_fenced_and_does_not_queue(
    store: Store,
) -> None:
    parked(store, interrupt_wait())
    store.deliver_update(NAME, "r1", "note", {}, "u1", "t")  # queued, still on the interrupt
    store.claim_run(NAME, "r1", "lease-b")
    outcome = store.time_out_wait(NAME, "r1", wait_id=WAIT_ID, lease="lease-b")
    assert outcome == WaitOutcome.RESOLVED
    assert kinds(store, "r1")[-1] == EventKind.RUN_WAIT_TIMED_OUT
    assert store.lock_holder(NAME, "r1") == "lease-b"
    assert store.get_pending_count(NAME) == 0


def test_wake_run_leaves_an_interrupt_alone(store: Store) -> None:
    parked(store, interrupt_wait())
    assert store.wake_run(NAME, "r1", wait_id=WAIT_ID) == WaitOutcome.SUPERSEDED
    assert status(store, "r1") == RunStatus.INTERRUPTED


def test_an_update_or_a_cancel_queues_an_interrupted_run(store: Store) -> None:
    parked(store, interrupt_wait(), "r1")
    assert store.deliver_update(NAME, "r1", "note", {}, "u1", "t") == "queued"
    assert status(store, "r1") == RunStatus.PENDING
    parked(store, interrupt_wait(), "r2")
    store.request_cancel(NAME, "r2")
    assert status(store, "r2") == RunStatus.PENDING
    assert answer(store, "r2") == "rejected"  # a run being cancelled takes no answer


def test_an_ended_run_takes_no_answer(store: Store) -> None:
    parked(store, interrupt_wait())
    store.terminate_run(NAME, "r1", reason="gone")
    assert status(store, "r1") == RunStatus.TERMINATED
    assert answer(store) == "rejected"
