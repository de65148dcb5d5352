"""Run controls and what a run reports: cancel, pause, terminate, status, capabilities."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from lockgate import (
    CAPABILITY_GROUPS,
    CapabilityMissing,
    EventKind,
    EventLogStore,
    LifecycleStore,
    LockLost,
    ManualClock,
    RunFinishedError,
    RunNotFoundError,
    RunStatus,
    Store,
    TerminateOutcome,
    WaitOutcome,
)
from lockgate.stores import Continuation, Gates, SignalStore, WaitSpec

from ._support import NAME, claimed, event, kinds, status


def park(store: Store, wait: WaitSpec, run_id: str = "r1", lease: str = "lease-a") -> None:
    kinds_by_wait = {
        "sleep": EventKind.RUN_SLEEPING,
        "signal": EventKind.RUN_SIGNAL_WAITING,
        "pause": EventKind.RUN_PAUSED,
    }
    opening = event(kinds_by_wait[wait.kind], run_id, wait_id=wait.wait_id)
    outcome = store.park_run(NAME, run_id, lease=lease, events=[opening], wait=wait)
    assert outcome == WaitOutcome.PARKED


def paused(store: Store, run_id: str = "r1") -> WaitSpec:
    claimed(store, run_id)
    store.request_pause(NAME, run_id)
    wait = WaitSpec("pause", "pause:3", 3)
    park(store, wait, run_id)
    return wait


def sleeping(store: Store, clock: ManualClock, run_id: str = "r1", due_in: float = 60) -> None:
    claimed(store, run_id)
    park(store, WaitSpec("sleep", "sleep:1", 1, due_at=clock() + due_in), run_id)


# -- cancel ------------------------------------------------------------------------------------


def test_request_cancel_latches_once_with_one_event_carrying_its_detail(
    store: Store, clock: ManualClock
) -> None:
    claimed(store)
    first = store.request_cancel(NAME, "r1", detail={"reason": "user asked"})
    clock.advance(5)
    again = store.request_cancel(NAME, "r1", detail={"reason": "second"})
    assert first == again
    cancels = [e for e in store.load_run(NAME, "r1") if e.kind == EventKind.RUN_CANCEL]
    assert len(cancels) == 1
    assert cancels[0].payload["detail"] == {"reason": "user asked"}
    assert store.get_run_controls(NAME, "r1") == (first, None)
    assert store.get_cancel_requested_at(NAME, "r1") == first
    assert store.get_run(NAME, "r1").cancel_requested_at == first  # type: ignore[union-attr]


def test_request_cancel_of_a_running_run_leaves_it_with_its_holder(store: Store) -> None:
    claimed(store)
    cancel_at = store.request_cancel(NAME, "r1")
    assert store.lock_holder(NAME, "r1") == "lease-a"
    assert store.get_pending_count(NAME) == 0
    assert store.heartbeat(NAME, "r1", "lease-a") == (cancel_at, None)


def test_request_cancel_of_a_queued_run_keeps_it_queued_once(store: Store) -> None:
    store.submit_run(NAME, "r1", {})
    store.request_cancel(NAME, "r1")
    assert store.get_pending_count(NAME) == 1
    assert store.claim_next_run(NAME, "lease-a") == "r1"
    assert store.claim_next_run(NAME, "lease-b") is None


@pytest.mark.parametrize("wait_kind", ["sleep", "pause"])
def test_request_cancel_queues_a_parked_run(
    store: Store, clock: ManualClock, wait_kind: str
) -> None:
    if wait_kind == "pause":
        paused(store)
    else:
        sleeping(store, clock)
    store.request_cancel(NAME, "r1")
    assert status(store, "r1") == RunStatus.PENDING
    assert store.claim_next_run(NAME, "lease-b") == "r1"


def test_request_cancel_after_the_run_ended_writes_nothing(store: Store) -> None:
    claimed(store)
    store.append_event(NAME, "r1", event(EventKind.RUN_COMPLETE, "r1"), fence="lease-a")
    store.request_cancel(NAME, "r1", detail={"late": True})
    assert kinds(store, "r1") == [EventKind.RUN_INIT, EventKind.RUN_COMPLETE]
    assert status(store, "r1") == RunStatus.COMPLETE


def test_run_controls_of_an_untouched_run_are_unset(store: Store) -> None:
    store.submit_run(NAME, "r1", {})
    assert store.get_run_controls(NAME, "r1") == (None, None)
    assert store.get_cancel_requested_at(NAME, "r1") is None
    assert store.get_pause_requested_at(NAME, "r1") is None


# -- pause -------------------------------------------------------------------------------------


def test_request_pause_latches_once(store: Store, clock: ManualClock) -> None:
    claimed(store)
    first = store.request_pause(NAME, "r1")
    clock.advance(5)
    assert store.request_pause(NAME, "r1") == first
    assert store.get_run_controls(NAME, "r1") == (None, first)
    assert store.get_pause_requested_at(NAME, "r1") == first


def test_request_pause_after_the_run_ended_writes_nothing(store: Store) -> None:
    claimed(store)
    store.append_event(NAME, "r1", event(EventKind.RUN_COMPLETE, "r1"), fence="lease-a")
    store.request_pause(NAME, "r1")
    assert kinds(store, "r1") == [EventKind.RUN_INIT, EventKind.RUN_COMPLETE]
    assert status(store, "r1") == RunStatus.COMPLETE


def test_a_paused_run_resumes_onto_the_queue(store: Store) -> None:
    wait = paused(store)
    info = store.get_run(NAME, "r1")
    assert info is not None
    assert (info.status, info.wait, info.lock_holder) == (RunStatus.PAUSED, wait, None)
    assert store.claim_next_run(NAME, "lease-b") is None
    assert store.resume_paused_run(NAME, "r1") == WaitOutcome.RESOLVED
    assert kinds(store, "r1")[-1] == EventKind.RUN_UNPAUSED
    assert store.get_run_controls(NAME, "r1") == (None, None)
    assert status(store, "r1") == RunStatus.PENDING
    assert store.claim_next_run(NAME, "lease-b") == "r1"


def test_resume_names_the_pause_it_lifts(store: Store) -> None:
    wait = paused(store)
    assert store.resume_paused_run(NAME, "r1", wait_id="pause:99") != WaitOutcome.RESOLVED
    assert status(store, "r1") == RunStatus.PAUSED
    assert store.resume_paused_run(NAME, "r1", wait_id=wait.wait_id) == WaitOutcome.RESOLVED
    assert status(store, "r1") == RunStatus.PENDING


def test_resume_before_the_run_parked_lifts_the_latch(store: Store) -> None:
    claimed(store)
    store.request_pause(NAME, "r1")
    store.resume_paused_run(NAME, "r1")
    assert store.get_run_controls(NAME, "r1") == (None, None)
    assert store.heartbeat(NAME, "r1", "lease-a") == (None, None)


# -- terminate ---------------------------------------------------------------------------------


def test_terminate_ends_a_running_run_and_fences_out_its_holder(store: Store) -> None:
    claimed(store)
    outcome = store.terminate_run(NAME, "r1", reason="stuck", requested_by="ops")
    assert outcome == TerminateOutcome.TERMINATED
    last = store.get_last_event(NAME, "r1")
    assert last is not None
    assert (last.kind, last.payload["code"]) == (EventKind.RUN_ERROR, "terminated")
    assert last.payload["detail"]["reason"] == "stuck"
    assert last.payload["detail"]["requested_by"] == "ops"
    assert status(store, "r1") == RunStatus.TERMINATED
    assert store.lock_holder(NAME, "r1") is None
    assert store.get_cancel_requested_at(NAME, "r1") is not None
    with pytest.raises(LockLost):
        store.append_event(NAME, "r1", event(EventKind.STEP_DONE, "r1"), fence="lease-a")
    with pytest.raises(LockLost):
        store.heartbeat(NAME, "r1", "lease-a")
    with pytest.raises(RunFinishedError):
        store.claim_run(NAME, "r1", "lease-b")
    assert kinds(store, "r1") == [EventKind.RUN_INIT, EventKind.RUN_ERROR]


def test_terminate_takes_a_queued_run_off_the_queue(store: Store) -> None:
    store.submit_run(NAME, "r1", {})
    assert store.terminate_run(NAME, "r1") == TerminateOutcome.TERMINATED
    assert store.get_pending_count(NAME) == 0
    assert store.claim_next_run(NAME, "lease-a") is None


def test_terminate_ends_a_parked_runs_wait(store: Store, clock: ManualClock) -> None:
    sleeping(store, clock, due_in=10)
    assert store.terminate_run(NAME, "r1") == TerminateOutcome.TERMINATED
    clock.advance(10)
    assert store.get_sleeping_runs(clock()) == []
    assert store.wake_due(NAME, "r1", due_by=clock()) == WaitOutcome.SUPERSEDED
    info = store.get_run(NAME, "r1")
    assert info is not None
    assert (info.status, info.wait) == (RunStatus.TERMINATED, None)
    assert kinds(store, "r1")[-1] == EventKind.RUN_ERROR


def test_terminate_of_an_ended_run_is_already_ended(store: Store) -> None:
    store.submit_run(NAME, "r1", {})
    store.terminate_run(NAME, "r1")
    journal = store.load_run(NAME, "r1")
    assert store.terminate_run(NAME, "r1") == TerminateOutcome.ALREADY_ENDED
    assert store.load_run(NAME, "r1") == journal
    claimed(store, "r2")
    store.append_event(NAME, "r2", event(EventKind.RUN_COMPLETE, "r2"), fence="lease-a")
    assert store.terminate_run(NAME, "r2") == TerminateOutcome.ALREADY_ENDED
    assert status(store, "r2") == RunStatus.COMPLETE


def test_terminate_of_an_unknown_run_is_not_found(store: Store) -> None:
    assert store.terminate_run(NAME, "nope") == TerminateOutcome.NOT_FOUND
    assert store.get_run(NAME, "nope") is None


# -- status ------------------------------------------------------------------------------------


def to_pending(store: Store, clock: ManualClock) -> None:
    store.submit_run(NAME, "r1", {})


def to_in_progress(store: Store, clock: ManualClock) -> None:
    claimed(store)


def to_sleeping(store: Store, clock: ManualClock) -> None:
    sleeping(store, clock)


def to_signal_waiting(store: Store, clock: ManualClock) -> None:
    claimed(store)
    park(store, WaitSpec("signal", "signal:1", 1, signal="go"))


def to_paused(store: Store, clock: ManualClock) -> None:
    paused(store)


def ended_with(kind: str, **payload: Any) -> Callable[[Store, ManualClock], None]:
    def end(store: Store, clock: ManualClock) -> None:
        claimed(store)
        store.append_event(NAME, "r1", event(kind, "r1", **payload), fence="lease-a")

    return end


def to_terminated(store: Store, clock: ManualClock) -> None:
    store.submit_run(NAME, "r1", {})
    store.terminate_run(NAME, "r1")


STATUS_CASES: dict[RunStatus, Callable[[Store, ManualClock], None]] = {
    RunStatus.PENDING: to_pending,
    RunStatus.IN_PROGRESS: to_in_progress,
    RunStatus.SLEEPING: to_sleeping,
    RunStatus.SIGNAL_WAITING: to_signal_waiting,
    RunStatus.PAUSED: to_paused,
    RunStatus.COMPLETE: ended_with(EventKind.RUN_COMPLETE),
    RunStatus.ERROR: ended_with(EventKind.RUN_ERROR, code="user_error"),
    RunStatus.CANCELLED: ended_with(EventKind.RUN_ERROR, code="cancelled"),
    RunStatus.TERMINATED: to_terminated,
}


@pytest.mark.parametrize("expected", list(STATUS_CASES), ids=str)
def test_status_reports_where_the_run_is(
    store: Store, clock: ManualClock, expected: RunStatus
) -> None:
    STATUS_CASES[expected](store, clock)
    assert status(store, "r1") == expected
    (listed,), _ = store.list_runs(NAME)
    assert listed.status == expected


# -- capabilities ------------------------------------------------------------------------------


def test_a_full_store_provides_every_capability_group(store: Store) -> None:
    assert store.capabilities() >= frozenset(CAPABILITY_GROUPS)


def _forwarding(method: str) -> Callable[..., Any]:
    def forward(self: Any, *args: Any, **kwargs: Any) -> Any:
        return getattr(self.inner, method)(*args, **kwargs)

    forward.__name__ = method
    return forward


def forwarding_class(name: str, bases: tuple[type, ...], methods: set[str]) -> type:
    """A store class of ``bases`` that forwards ``methods`` to the store it wraps."""

    def __init__(self: Any, inner: Store) -> None:
        self.inner = inner

    namespace: dict[str, Any] = {"__init__": __init__}
    namespace.update({method: _forwarding(method) for method in methods})
    return type(name, bases, namespace)


CORE_METHODS = set(LifecycleStore.__abstractmethods__ | EventLogStore.__abstractmethods__)
MinimalStore = forwarding_class("MinimalStore", (LifecycleStore, EventLogStore), CORE_METHODS)
CoreOnlyStore = forwarding_class("CoreOnlyStore", (Store,), CORE_METHODS)

GROUP_CALLS: dict[str, Callable[[Any], object]] = {
    "idempotency": lambda s: s.get_idempotency_run(NAME, "k"),
    "timers": lambda s: s.get_sleeping_runs(0.0),
    "wait_timeout": lambda s: s.time_out_wait(NAME, "r1", wait_id="signal:1"),
    "wait_due": lambda s: s.next_wait_due(0.0),
    "signals": lambda s: s.peek_signal(NAME, "r1", "go"),
    "updates": lambda s: s.peek_pending_updates(NAME, "r1"),
    "pause": lambda s: s.request_pause(NAME, "r1"),
    "terminate": lambda s: s.terminate_run(NAME, "r1"),
    "hand_back": lambda s: s.hand_back_run(NAME, "r1"),
    "hand_on": lambda s: s.hand_on_run(
        NAME, "r1", "lease-a", "r1.g", version="", version_behavior="pinned", gates=Gates()
    ),
    "continue": lambda s: s.continue_run(
        NAME, "r1", "lease-a", "r1.c1", Continuation({}, "", "pinned", Gates(), {}, {})
    ),
    "chains": lambda s: s.get_chain_tail(NAME, "r1"),
    "versions": lambda s: s.version_rank(NAME, "v1"),
    "policies": lambda s: s.get_workflow_policy(NAME),
    "triggers": lambda s: s.due_triggers(NAME, 0.0),
    "trigger_due": lambda s: s.next_trigger_due(NAME, 0.0),
    "trigger_marks": lambda s: s.forget_marks(NAME, "t/0", 0),
    "insight": lambda s: s.limit_usage(NAME),
    "workers": lambda s: s.live_workers(),
    "takeover": lambda s: s.recover_lapsed_holders(NAME),
}


def test_a_minimal_store_reports_no_capability_and_still_runs(store: Store) -> None:
    minimal = MinimalStore(store)
    assert minimal.capabilities() == frozenset()
    minimal.submit_run(NAME, "r1", {})
    assert minimal.claim_next_run(NAME, "lease-a") == "r1"
    assert [e.kind for e in minimal.load_run(NAME, "r1")] == [EventKind.RUN_INIT]
    with pytest.raises(CapabilityMissing) as raised:
        SignalStore.send_signal(minimal, NAME, "r1", "go", {}, "t")
    assert (raised.value.store, raised.value.capability) == ("MinimalStore", "signals")


def test_every_capability_group_has_a_sample_call() -> None:
    assert set(GROUP_CALLS) == set(CAPABILITY_GROUPS)


@pytest.mark.parametrize("group", sorted(GROUP_CALLS))
def test_a_store_lacking_a_group_raises_capability_missing(store: Store, group: str) -> None:
    core_only = CoreOnlyStore(store)
    store.submit_run(NAME, "r1", {})
    assert core_only.capabilities() == frozenset()
    with pytest.raises(CapabilityMissing) as raised:
        GROUP_CALLS[group](core_only)
    assert (raised.value.store, raised.value.capability) == ("CoreOnlyStore", group)


def test_a_group_is_provided_only_when_every_method_is_overridden(store: Store) -> None:
    partial = forwarding_class(
        "PartialStore", (Store,), CORE_METHODS | {"send_signal", "peek_signal"}
    )
    whole = forwarding_class(
        "SignalsStore",
        (Store,),
        CORE_METHODS | {"send_signal", "peek_signal", "pop_signal_match"},
    )
    assert partial(store).capabilities() == frozenset()
    assert whole(store).capabilities() == frozenset({"signals"})


# -- controls held for an id not submitted yet --------------------------------------------------


def test_a_cancel_for_an_id_not_yet_submitted_is_held_until_its_submit(
    store: Store, clock: ManualClock
) -> None:
    at = store.request_cancel(NAME, "child", detail={"requested_by": "parent"})
    assert store.get_run(NAME, "child") is None
    assert store.request_cancel(NAME, "child", detail={"requested_by": "other"}) == at
    store.submit_run(NAME, "child", {})
    assert store.get_run_controls(NAME, "child")[0] == at
    cancels = [e for e in store.load_run(NAME, "child") if e.kind == EventKind.RUN_CANCEL]
    assert [e.payload["detail"] for e in cancels] == [{"requested_by": "parent"}]


def test_a_held_pause_applies_at_submit(store: Store) -> None:
    store.request_pause(NAME, "child")
    store.submit_run(NAME, "child", {})
    assert store.get_run_controls(NAME, "child")[1] is not None
    assert EventKind.RUN_PAUSE_REQUESTED in kinds(store, "child")


def test_a_held_control_expires_after_held_ttl(store: Store, clock: ManualClock) -> None:
    store.request_cancel(NAME, "late")
    clock.advance(86_400 + 1)
    assert store.run_maintenance() >= 1
    store.submit_run(NAME, "late", {})
    assert store.get_run_controls(NAME, "late") == (None, None)
    assert EventKind.RUN_CANCEL not in kinds(store, "late")


# -- poll_run ----------------------------------------------------------------------------------


def test_poll_run_reads_controls_and_pending_updates_in_one_answer(store: Store) -> None:
    claimed(store)
    first = store.poll_run(NAME, "r1")
    assert (first.cancel_requested_at, first.pause_requested_at) == (None, None)
    assert first.updates_pending in (False, None)
    store.deliver_update(NAME, "r1", "set", {"v": 1}, "u1", "t")
    assert store.poll_run(NAME, "r1").updates_pending in (True, None)
    store.settle_update(NAME, "r1", "u1", {"status": "completed", "result": 1})
    assert store.poll_run(NAME, "r1").updates_pending in (False, None)
    pause_at = store.request_pause(NAME, "r1")
    cancel_at = store.request_cancel(NAME, "r1")
    polled = store.poll_run(NAME, "r1")
    assert (polled.cancel_requested_at, polled.pause_requested_at) == (cancel_at, pause_at)
    assert store.get_run_controls(NAME, "r1") == (cancel_at, pause_at)
    with pytest.raises(RunNotFoundError):
        store.poll_run(NAME, "missing")
